"""Translation between LangChain messages and DAMC events, shared by every LangChain surface."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, ToolMessage, convert_to_openai_messages

from damc_core import DecisionMemory

logger = logging.getLogger("damc.langchain")


class MessageRecorder:
    """Feeds a conversation's LangChain messages to a ``DecisionMemory`` exactly once each."""

    def __init__(self, memory: DecisionMemory) -> None:
        self.memory = memory
        self._seen: set[str] = set()

    def observe(self, messages: Sequence[BaseMessage]) -> None:
        """Record the messages not recorded yet (the agent resends its whole history each step)."""
        for index, message in enumerate(messages):
            key = _key(message, index)
            if key not in self._seen:
                self._seen.add(key)
                self.memory.observe(to_event(message))

    def record_tool_result(self, result: Any) -> None:
        """Record a tool's result as it returns; never raises into the agent."""
        if not isinstance(result, ToolMessage):
            return
        try:
            self._seen.add(_key(result, -1))
            self.memory.observe(to_event(result))
        except Exception:
            logger.exception("damc: recording a tool result failed; the agent goes on")


def to_event(message: BaseMessage) -> dict[str, Any]:
    """The OpenAI-style message DAMC records for a LangChain message (errors flagged)."""
    converted: dict[str, Any] = convert_to_openai_messages(message)
    if isinstance(message, ToolMessage) and message.status == "error":
        converted["status"] = "error"
    return converted


def _key(message: BaseMessage, index: int) -> str:
    """Identity of a message across model calls: tool results by call id (they are recorded when
    the tool returns, before the agent state gives them an id), others by id or position."""
    if isinstance(message, ToolMessage):
        return f"tool:{message.tool_call_id}"
    return f"id:{message.id}" if message.id else f"at:{index}"
