"""DAMC as LangChain v1 agent middleware for ``langchain.agents.create_agent``.

Each model call gets DAMC's context through ``request.override`` (per call: the agent's state, and
so its stored history, is never edited). Tool results are recorded as soon as a tool returns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import (
    AnyMessage,
    BaseMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)

from damc_core import DecisionMemory

logger = logging.getLogger("damc.langchain")


class DamcMiddleware(AgentMiddleware):
    """Sends the model DAMC's assembled context instead of the whole message history.

    >>> agent = create_agent(model, tools, middleware=[DamcMiddleware(DecisionMemory())])
    """

    def __init__(self, memory: DecisionMemory, *, budget: int | None = None) -> None:
        super().__init__()
        self.memory = memory
        self.budget = budget
        self._seen: set[str] = set()

    # -- model calls -------------------------------------------------------------------------
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._with_memory(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        return await handler(self._with_memory(request))

    # -- tool calls --------------------------------------------------------------------------
    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        result = handler(request)
        self._record_tool_result(result)
        return result

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        result = await handler(request)
        self._record_tool_result(result)
        return result

    # -- translation -------------------------------------------------------------------------
    def _with_memory(self, request: ModelRequest) -> ModelRequest:
        """The same request with DAMC's messages; the request is left as it was on any failure."""
        try:
            self._observe(request.messages)
            built = self.memory.build(budget=self.budget)
        except Exception:  # the agent must keep running without memory rather than fail
            logger.exception("damc: building the context failed; sending the request unchanged")
            return request
        system, dialogue = _split_system(built.messages)
        prompt = request.system_message.content if request.system_message is not None else None
        parts = [part for part in (prompt if isinstance(prompt, str) else None, system) if part]
        return request.override(
            messages=convert_to_messages(dialogue),  # type: ignore[arg-type]
            system_message=SystemMessage("\n\n".join(parts)) if parts else request.system_message,
        )

    def _observe(self, messages: Sequence[AnyMessage]) -> None:
        for index, message in enumerate(messages):
            key = _key(message, index)
            if key not in self._seen:
                self._seen.add(key)
                self.memory.observe(_to_openai(message))

    def _record_tool_result(self, result: Any) -> None:
        if isinstance(result, ToolMessage):
            try:
                self._seen.add(_key(result, -1))
                self.memory.observe(_to_openai(result))
            except Exception:
                logger.exception("damc: recording a tool result failed; the agent goes on")


def _key(message: BaseMessage, index: int) -> str:
    """Identity of a message across model calls: tool results by call id (they are recorded when
    the tool returns, before the agent state gives them an id), others by id or position."""
    if isinstance(message, ToolMessage):
        return f"tool:{message.tool_call_id}"
    return f"id:{message.id}" if message.id else f"at:{index}"


def _to_openai(message: BaseMessage) -> dict[str, Any]:
    converted: dict[str, Any] = convert_to_openai_messages(message)
    if isinstance(message, ToolMessage) and message.status == "error":
        converted["status"] = "error"
    return converted


def _split_system(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    if messages and messages[0].get("role") == "system":
        return str(messages[0].get("content") or ""), messages[1:]
    return None, messages
