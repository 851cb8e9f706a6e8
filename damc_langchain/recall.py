"""The ``recall`` tool for LangChain agents: the model expands a compressed card to its raw record.

A card that leaves something out ends in ``(more)``, ``(cut)`` or ``(+N more rows)``; with this
tool the agent gets the record behind it, verbatim, instead of calling the original tool again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from langchain_core.tools import BaseTool, StructuredTool

from damc_core import RECALL_TOOL, DecisionMemory

from ._recorder import Conversations

logger = logging.getLogger("damc.langchain")


def recall_tool(memory: DecisionMemory) -> BaseTool:
    """``damc_core.RECALL_TOOL`` as a LangChain tool answered from ``memory``.

    Add it to the agent's tools (``create_react_agent``, an ``AgentExecutor``). Inside a graph run
    with a ``thread_id`` it reads that thread's session (``memory.for_session(thread_id)``), as
    ``damc_pre_model_hook`` and ``DamcMiddleware`` record it; ``DamcMiddleware(..., recall=True)``
    registers it by itself.
    """
    conversations = Conversations(memory)
    return tool_answered_by(lambda: conversations.current().memory)


def tool_answered_by(memory_of_run: Callable[[], DecisionMemory]) -> BaseTool:
    """The recall tool, answered from the memory ``memory_of_run`` returns for the running call."""
    spec = RECALL_TOOL["function"]

    def recall(card_id: str) -> str:
        try:
            return memory_of_run().handle_recall({"card_id": card_id})
        except Exception as exc:  # a store that cannot be read must not stop the agent
            logger.exception("damc: recall of %r failed", card_id)
            return f"Could not recall {card_id!r}: {type(exc).__name__}: {exc}"

    return StructuredTool.from_function(
        recall, name=spec["name"], description=spec["description"], args_schema=spec["parameters"]
    )
