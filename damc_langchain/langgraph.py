"""DAMC as the ``pre_model_hook`` and ``post_model_hook`` of langgraph's ``create_react_agent``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from damc_core import DecisionMemory, checked_budget

from ._recorder import conversations_of, state_messages, to_messages

logger = logging.getLogger("damc.langchain")


def damc_pre_model_hook(
    memory: DecisionMemory, *, budget: int | None = None, recall_tool: bool = False
) -> Callable[[Any], dict[str, Any]]:
    """A hook whose ``llm_input_messages`` are DAMC's context: the graph state is left untouched.

    The memory section comes as a system message; ``create_react_agent(prompt=...)`` puts its own
    system prompt before it. With a checkpointer, each ``thread_id`` is its own session of the
    memory's user (``memory.for_session(thread_id)``); runs without one use ``memory``.
    ``recall_tool``: the agent has DAMC's recall tool (``recall_tool(memory)``) among its tools:
    the memory section then tells the model it can recall a card.
    """
    budget = checked_budget(budget)
    conversations_of(memory)  # a wrong memory is refused here, not logged at every model call

    def hook(state: Any) -> dict[str, Any]:
        messages = state_messages(state)
        try:
            recorder = conversations_of(memory).current()  # the hook keeps the memory alive
            recorder.edited(messages)
            recorder.observe(messages)
            built = recorder.memory.build(budget=budget, recall_tool=recall_tool)
            return {"llm_input_messages": to_messages(built.messages)}
        except Exception:  # the agent keeps running on its own history rather than fail
            logger.exception("damc: building the context failed; the model gets the full history")
            return {"llm_input_messages": messages}

    return hook


def damc_post_model_hook(memory: DecisionMemory) -> Callable[[Any], dict[str, Any]]:
    """A hook that records the model's reply as it comes, with ``damc_pre_model_hook`` on the same
    ``memory``: a final answer is in memory even when nothing later in the thread (or no
    checkpointer) would send it again. The graph state is left untouched."""
    conversations_of(memory)  # a wrong memory is refused here, not logged at every model call

    def hook(state: Any) -> dict[str, Any]:
        try:
            messages = state_messages(state)
            if messages:
                conversations_of(memory).current().record_reply(messages[-1])
        except Exception:  # the agent goes on; the reply is recorded with the next model call
            logger.exception("damc: recording the model's reply failed; the agent goes on")
        return {}

    return hook
