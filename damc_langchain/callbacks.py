"""DAMC as a LangChain callback handler: record every tool run, compress rebuilt tool messages.

A callback handler cannot add or drop prompt messages: LangChain hands it a new list of the same
message objects. What it can do safely is edit message objects that are rebuilt for every call,
such as the ``ToolMessage`` scratchpad of a langchain-classic ``AgentExecutor`` (those have no
``id``): their content becomes the tool's memory card. Messages that carry an ``id`` belong to a
stored history or agent state and are never edited. To select which messages reach the model, use
:class:`~damc_langchain.DamcMiddleware`, :func:`~damc_langchain.damc_pre_model_hook` or
:class:`~damc_langchain.DAMCMemory`.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from damc_core import DecisionMemory

logger = logging.getLogger("damc.langchain")


class DamcCallbackHandler(BaseCallbackHandler):
    """Register with ``config={"callbacks": [handler]}`` or on the model."""

    raise_error = False

    def __init__(self, memory: DecisionMemory, *, compress_rebuilt_tool_messages: bool = True) -> None:
        self.memory = memory
        self.compress_rebuilt_tool_messages = compress_rebuilt_tool_messages
        self._running: dict[UUID, tuple[str, Any, str | None]] = {}
        self._cards: dict[str, str] = {}
        """tool_call_id -> id of the card recorded for its result."""
        self._turns: set[tuple[str, str]] = set()
        self._announced: list[tuple[str, str]] = []
        """(tool, call id) of agent actions about to run: AgentExecutor runs tools without the id."""

    def on_agent_action(self, action: Any, *, run_id: UUID, **kwargs: Any) -> None:
        call_id = getattr(action, "tool_call_id", None)
        if call_id:
            self._announced.append((str(action.tool), str(call_id)))

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        tool_call_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        name = str((serialized or {}).get("name") or kwargs.get("name") or "unknown_tool")
        if tool_call_id is None:
            announced = next((i for i, (tool, _) in enumerate(self._announced) if tool == name), None)
            if announced is not None:
                tool_call_id = self._announced.pop(announced)[1]
        self._running[run_id] = (name, inputs if inputs is not None else input_str, tool_call_id)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if isinstance(output, ToolMessage):
            self._record(run_id, output.content, error=output.status == "error")
        else:
            self._record(run_id, output, error=False)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._record(run_id, f"Error: {type(error).__name__}: {error}", error=True)

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        try:
            for prompt in messages:
                for message in prompt:
                    self._record_turn(message)
                    if self.compress_rebuilt_tool_messages:
                        self._compress(message)
        except Exception:
            logger.exception("damc: reading the prompt failed; the model call goes on unchanged")

    def on_llm_start(
        self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, **kwargs: Any
    ) -> None:
        """Plain text models get a fresh list of strings: the prompt is recorded, never changed."""
        try:
            for prompt in prompts:
                if prompt and ("user", prompt) not in self._turns:
                    self._turns.add(("user", prompt))
                    self.memory.observe({"role": "user", "content": prompt})
        except Exception:
            logger.exception("damc: recording the prompt failed; the model call goes on unchanged")

    def _record(self, run_id: UUID, content: Any, *, error: bool) -> None:
        name, arguments, call_id = self._running.pop(run_id, ("unknown_tool", None, None))
        try:
            card = self.memory.observe_tool(name, arguments, content, call_id=call_id, error=error)
        except Exception:
            logger.exception("damc: recording the %s result failed; the agent goes on", name)
            return
        if call_id:
            self._cards[call_id] = card.id

    def _record_turn(self, message: BaseMessage) -> None:
        """User turns and assistant text, once each (tool calls and results come from tool runs)."""
        if isinstance(message, HumanMessage) or (isinstance(message, AIMessage) and not message.tool_calls):
            role = "user" if isinstance(message, HumanMessage) else "assistant"
            key = (role, message.id or str(message.content))
            if key not in self._turns and message.content:
                self._turns.add(key)
                self.memory.observe({"role": role, "content": message.content})

    def _compress(self, message: BaseMessage) -> None:
        if isinstance(message, ToolMessage) and message.id is None and message.tool_call_id in self._cards:
            card = self.memory.card(self._cards[message.tool_call_id])
            if card is not None and card.tokens < card.raw_tokens:
                message.content = card.summary
