"""LlamaIndex adapter for DAMC: translate LlamaIndex messages and events, delegate to ``damc_core``.

* :class:`DamcMemory`: a ``BaseMemory`` for ``agent.run(..., memory=...)``.
* :class:`DamcMemoryBlock`: a block of llama-index-core's ``Memory`` (long-term memory in cards).
* :class:`DamcSpanHandler` / :class:`DamcEventRecorder`: tool results as they return.
* :class:`DamcLLM`: the user's LLM with DAMC's context per call (compresses the running task too).
* :func:`recall_tool`: the ``recall`` tool, for the agent to read the raw record behind a card.
* :func:`offline_tokenizer`: a tokenizer for LlamaIndex that never downloads.
"""

from .block import DamcMemoryBlock
from .capture import DamcEventRecorder, DamcSpanHandler
from .llm import DamcLLM
from .memory import DamcMemory
from .recall import recall_tool
from .tokens import offline_tokenizer

__all__ = [
    "DamcEventRecorder",
    "DamcLLM",
    "DamcMemory",
    "DamcMemoryBlock",
    "DamcSpanHandler",
    "offline_tokenizer",
    "recall_tool",
]
