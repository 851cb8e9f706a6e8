"""The ``recall`` tool for LlamaIndex agents: the model expands a compressed card to its raw record.

A card that leaves something out ends in ``(more)``, ``(cut)`` or ``(+N more rows)``; with this
tool the agent gets the record behind it, verbatim, instead of calling the original tool again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.tools import BaseTool, FunctionTool

from damc_core import RECALL_TOOL, DecisionMemory

_SPEC = RECALL_TOOL["function"]
_FIELDS = _SPEC["parameters"]["properties"]


class RecallArguments(BaseModel):
    card_id: str = Field(description=_FIELDS["card_id"]["description"])
    match: str | None = Field(default=None, description=_FIELDS["match"]["description"])


def recall_tool(memory: DecisionMemory) -> FunctionTool:
    """``damc_core.RECALL_TOOL`` as a LlamaIndex tool answered from ``memory``: add it to the
    agent's tools beside ``DamcMemory`` / ``DamcLLM`` on the same memory."""

    def recall(card_id: str | None = None, match: str | None = None, **_: Any) -> str:
        # LlamaIndex calls this with the model's arguments as they came, unchecked: a call
        # without card_id gets the error that says what one is, and a field the model added
        # is ignored, as a LangChain tool's schema ignores it
        return memory.handle_recall({"card_id": card_id, "match": match})

    return FunctionTool.from_defaults(
        recall, name=_SPEC["name"], description=_SPEC["description"], fn_schema=RecallArguments
    )


def offers_recall(tools: Iterable[BaseTool]) -> bool:
    """Whether the model is given a tool named ``recall``: only then does the memory section tell
    it that a card can be recalled."""
    return any(tool.metadata.name == _SPEC["name"] for tool in tools)


def lists_recall(prompt: str) -> bool:
    """Whether a ReAct prompt describes the ``recall`` tool, as ``ReActAgent`` lists each of its
    tools (``> Tool Name: recall``): the model it calls gets the tools in no other way."""
    return f"> Tool Name: {_SPEC['name']}\n" in prompt
