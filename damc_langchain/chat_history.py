"""DAMC as the chat message history of an LCEL chain (``RunnableWithMessageHistory``)."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from damc_core import (
    ConfigError,
    DecisionMemory,
    StoreClosedError,
    StoreError,
    checked_budget,
    valid_sequence,
)

from ._recorder import conversations_of, to_event, to_messages

logger = logging.getLogger("damc.langchain")
WAITING_KEPT = 1000
"""Messages a store refuses (a file another process holds) that wait for it before DAMC gives up
on recording them."""
_WAITING: weakref.WeakKeyDictionary[DecisionMemory, list[dict[str, Any]]] = weakref.WeakKeyDictionary()
"""A session's messages the store refused, in order: kept by its memory, since a chain makes a
history per run."""
_WAITING_LOCK = threading.Lock()


class DamcChatMessageHistory(BaseChatMessageHistory):
    """A chat history that records every message and reads back DAMC's context for the next call.

    >>> chain = RunnableWithMessageHistory(
    ...     prompt | model,
    ...     lambda session_id: DamcChatMessageHistory(memory, session_id, budget=800),
    ...     input_messages_key="input",
    ...     history_messages_key="history",
    ... )

    ``add_messages`` records user turns, replies with their tool calls and tool results;
    ``messages`` is the memory section, then the recent dialogue (no tool result without its
    call), within ``budget``, and last the model's newest calls while no result answers them (the
    chain's next input is their results). The section comes as a user message: the history sits
    after the prompt's own system message, and a second system message there is rejected by
    providers that take one system message, first (Anthropic, Gemini). A system message added to
    the history is read back first, as any history gives it back. The history is read before the
    chain sees its new input: the context is chosen for the conversation so far.

    ``session_id``: a session of ``memory``'s user (``memory.for_session(session_id)``, kept open
    in this process from one run to the next, as ``DamcMiddleware`` keeps a thread's); ``None``,
    ``""`` or the memory's own session is ``memory``. ``recall_tool``: the chain's model has DAMC's
    recall tool, answered from this session (``recall_tool(memory.for_session(session_id))``: a
    card id is a position in its own session); the section then tells it that a card can be recalled.
    """

    def __init__(
        self,
        memory: DecisionMemory,
        session_id: str | None = None,
        *,
        budget: int | None = None,
        recall_tool: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(memory, DecisionMemory):
            raise ConfigError(f"DamcChatMessageHistory needs a DecisionMemory, got {type(memory).__name__}")
        self.budget = checked_budget(budget)
        self.recall_tool = recall_tool
        self.session_id = session_id
        own = session_id is None or str(session_id) in ("", memory.namespace.session)
        self.memory = memory if own else conversations_of(memory).recorder_for(session_id).memory
        self._read: tuple[int, list[BaseMessage]] | None = None
        """(event count, messages) of the newest read: ``RunnableWithMessageHistory`` reads the
        history again when the run ends and cuts that many messages off the chain's input, so an
        unchanged conversation reads back the very same messages."""

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        if self._read is None:  # a run's first read; a later one must read back the same messages
            self._record_waiting()
        count = self.memory.event_count
        if self._read is None or self._read[0] != count:
            self._read = (count, self._context())
        return list(self._read[1])

    def _context(self) -> list[BaseMessage]:
        """System prompt (if one was added), memory section as a user message, recent dialogue;
        the whole conversation if building fails, so the chain still runs."""
        newest = self.memory.history(since=self.memory.event_count - 1)
        # the model's newest calls go last, as made: the chain's next input is their results
        calling = {
            card_id: m for card_id, m in newest if m.get("role") == "assistant" and m.get("tool_calls")
        }
        try:
            # given no system prompt, a system message DAMC assembles holds the section alone
            built = self.memory.build(
                system="", budget=self.budget, recall_tool=self.recall_tool, exclude=list(calling)
            )
            context = [
                HumanMessage(m.content) if isinstance(m, SystemMessage) else m
                for m in to_messages(built.messages)
            ]
        except Exception:
            logger.exception("damc: building the context failed; the history is the whole conversation")
            dialogue = [message for card_id, message in self.memory.history() if card_id not in calling]
            context = to_messages(valid_sequence(dialogue))
        context += to_messages(list(calling.values()))
        prompt = self.memory.system_prompt
        return [SystemMessage(prompt), *context] if prompt else context

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Record each message, in order. Those a store refuses (a file another process holds)
        wait, logged, and go in first when the history is next read or added to, up to
        ``WAITING_KEPT`` of them; the chain returns its answer meanwhile."""
        events = [to_event(message) for message in messages]
        with _WAITING_LOCK:
            _WAITING.setdefault(self.memory, []).extend(events)
        self._record_waiting()

    def _record_waiting(self) -> None:
        """Record the session's waiting messages, in order, until the store refuses one."""
        with _WAITING_LOCK:
            waiting = _WAITING.get(self.memory)
            while waiting:
                try:
                    self.memory.observe(waiting[0])
                except StoreError as exc:
                    if isinstance(exc, StoreClosedError) or len(waiting) > WAITING_KEPT:
                        logger.error("damc: %s; %d messages of the chat are not recorded", exc, len(waiting))
                        waiting.clear()
                    else:
                        logger.warning("damc: recording the chat's messages waits for the store: %s", exc)
                    return
                except Exception:
                    logger.exception("damc: recording a chat message failed; it is left out")
                waiting.pop(0)

    def clear(self) -> None:
        """Start the conversation over: nothing before reaches the model again. The records stay in
        the store, where ``recall`` and ``memory.messages()`` still read them."""
        self.memory.clear()
