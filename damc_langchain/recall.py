"""The ``recall`` tool for LangChain agents: the model expands a compressed card to its raw record.

A card that leaves something out ends in ``(more)``, ``(cut)`` or ``(+N more rows)``; with this
tool the agent gets the record behind it, verbatim, instead of calling the original tool again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from damc_core import RECALL_TOOL, DecisionMemory

from ._recorder import conversations_of, running_conversation


def recall_tool(memory: DecisionMemory) -> BaseTool:
    """``damc_core.RECALL_TOOL`` as a LangChain tool answered from ``memory``.

    Add it to the agent's tools (``create_react_agent``, an ``AgentExecutor``). Inside a graph run
    with a ``thread_id`` it reads that thread's session (``memory.for_session(thread_id)``), as
    ``damc_pre_model_hook`` and ``DamcMiddleware`` record it; ``DamcMiddleware(..., recall=True)``
    registers it by itself.
    """
    conversations = conversations_of(memory)

    def memory_of_run() -> DecisionMemory:
        if running_conversation() == (None, None):
            return memory
        return conversations.current().memory

    return tool_answered_by(memory_of_run)


_SPEC = RECALL_TOOL["function"]
_FIELDS = _SPEC["parameters"]["properties"]


def tool_name(tool: Any) -> str | None:
    """The name of a LangChain tool or of a tool spec (``{"name": ...}`` or OpenAI's
    ``{"function": {"name": ...}}``)."""
    if isinstance(tool, dict):
        function = tool.get("function")
        return tool.get("name") or (function.get("name") if isinstance(function, dict) else None)
    return getattr(tool, "name", None)


def offers_recall(tools: Iterable[Any] | None) -> bool:
    """Whether the model is given a tool named ``recall``: only then does the memory section tell
    it that a card can be recalled."""
    return any(tool_name(tool) == _SPEC["name"] for tool in tools or ())


class RecallArguments(BaseModel):
    """The recall tool's arguments, checked: a call without ``card_id`` gets an error the model can
    read and fix, instead of stopping the run (see ``_wrong_arguments``)."""

    card_id: str = Field(description=_FIELDS["card_id"]["description"])
    match: str | None = Field(default=None, description=_FIELDS["match"]["description"])


def tool_answered_by(memory_of_run: Callable[[], DecisionMemory]) -> BaseTool:
    """The recall tool, answered from the memory ``memory_of_run`` returns for the running call."""

    def recall(card_id: str, match: str | None = None) -> str:
        return memory_of_run().handle_recall({"card_id": card_id, "match": match})

    return StructuredTool.from_function(
        recall,
        name=_SPEC["name"],
        description=_SPEC["description"],
        args_schema=RecallArguments,
        handle_validation_error=_wrong_arguments,
    )


def _wrong_arguments(error: Any) -> str:
    """The answer to a recall call whose arguments do not fit (a pydantic ``ValidationError``):
    an ``AgentExecutor`` would stop the run on the exception, not show it to the model."""
    problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in error.errors())
    return f"Error: {problems}. recall needs a card_id: the id a memory card starts with, such as c12."
