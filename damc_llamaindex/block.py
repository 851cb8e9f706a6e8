"""``DamcMemoryBlock``: DAMC as a memory block of llama-index-core's ``Memory``.

``Memory`` keeps the newest messages verbatim (its short-term queue), hands the ones it flushes to
its blocks, and at every ``get`` puts each block's text into the system message (or the newest
user message). This block makes every message a card and returns the cards worth most to the next
decision within its budget. The messages still in the queue are recorded too, so they set the
decision focus and the request, but they are never repeated in the section: ``Memory`` sends them.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.memory.memory import BaseMemoryBlock

from damc_core import DecisionMemory
from damc_core.assemble import MEMORY_CLOSE, MEMORY_OPEN, neutralise_tags

from ._recorder import CopyableLock, message_text, recorder_for

logger = logging.getLogger("damc.llamaindex")

KEPT_SESSIONS = 256
"""Sessions whose memories a block keeps open; the least recently used beyond this are reopened."""


class DamcMemoryBlock(BaseMemoryBlock[str]):
    """``Memory.from_defaults(memory_blocks=[DamcMemoryBlock(memory=DecisionMemory(...))])``.

    Each ``Memory`` session id is a session of ``memory``'s user (``memory.for_session(session_id)``;
    ``memory`` itself for its own session id), so a block shared by several memories never shows
    one conversation's cards to another, and a session reopened after a restart finds its own.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="damc", description="The block's name in the memory template.")
    memory: DecisionMemory = Field(description="The DAMC memory that holds the cards.")
    budget: int | None = Field(
        default=None, gt=0, description="Tokens of the memory section; the memory's own budget when None."
    )
    recall_tool: bool = Field(
        default=False,
        description="The agent has DAMC's recall tool (recall_tool(memory)) among its tools: the "
        "memory section then tells the model it can recall a card.",
    )
    _sessions: OrderedDict[str, DecisionMemory] = PrivateAttr(default_factory=OrderedDict)
    _built: OrderedDict[str, tuple[str | None, list[ChatMessage]] | None] = PrivateAttr(
        default_factory=OrderedDict
    )
    """Section text -> the session id and dialogue it was built for, which a truncation builds
    again (``atruncate`` is given the text only, and sessions share the block); ``None`` when two
    sessions built the same text."""
    _lock: CopyableLock = PrivateAttr(default_factory=CopyableLock)

    def memory_for(self, session_id: str | None) -> DecisionMemory:
        """The memory of one ``Memory`` session (``None``: ``memory``'s own). Give a
        ``DamcSpanHandler`` or ``DamcEventRecorder`` for that session this one: a memory of its
        own on the session (``memory.for_session``) records the tool results, and the block records
        them again from the messages."""
        if session_id is None or session_id == self.memory.namespace.session:
            return self.memory
        with self._lock:  # two runs of a session starting at once share one memory
            found = self._sessions.pop(session_id, None) or self.memory.for_session(session_id)
            self._sessions[session_id] = found
            if len(self._sessions) > KEPT_SESSIONS:
                self._sessions.popitem(last=False)  # reopened from the store when it comes back
            return found

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Messages flushed from the queue: recorded unless an earlier ``get`` recorded them."""
        session_id = next((m.additional_kwargs.get("session_id") for m in messages), None)
        try:
            recorder_for(self.memory_for(session_id)).observe_view(_dialogue(messages), confirm=True)
        except Exception:  # the messages stay in Memory's own store; the agent goes on
            logger.exception("damc: recording flushed messages failed")

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        session_id = block_kwargs.get("session_id")
        view = _dialogue(messages or [])
        section = self._section(session_id, view, self.budget)
        with self._lock:
            earlier = self._built.pop(section, (session_id, view))
            self._built[section] = (session_id, view) if earlier and earlier[0] == session_id else None
            if len(self._built) > KEPT_SESSIONS:
                self._built.popitem(last=False)
        return section

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """The section built again with ``tokens_to_truncate`` fewer tokens (least valuable cards
        out first), or None when nothing would be left. A section this block did not build for
        one session alone loses its last lines instead. ``Memory`` asks a block that gave nothing
        this time too, with ``[]``: there is nothing to cut."""
        if not isinstance(content, str) or not content:
            return None
        counter = self.memory.counter
        target = counter.count(content) - tokens_to_truncate
        if target <= 0:
            return None
        with self._lock:
            built_for = self._built.get(content)
        shorter = content if built_for is None else self._section(*built_for, target)
        lines = shorter.splitlines()
        while lines and counter.count("\n".join(lines)) > target:
            lines.pop()
        return "\n".join(lines) or None

    def _section(self, session_id: str | None, view: list[ChatMessage], budget: int | None) -> str:
        """The fenced memory section for the decision after ``view``; "" on any failure."""
        try:
            memory = self.memory_for(session_id)
            recorder = recorder_for(memory)
            recorder.observe_view(view, confirm=True)
            # the running task's results reach the model as messages: never in the section too
            exclude = recorder.cards_of(view) | recorder.pending
            built = memory.build(
                budget=budget, exclude=exclude, recent_messages=0, recall_tool=self.recall_tool
            )
            # Memory wraps the text in <memory><name>, DAMC's own fence would nest a second
            # <memory> in it; tool text must not close <name> either
            text = built.memory.removeprefix(f"{MEMORY_OPEN}\n").removesuffix(f"\n{MEMORY_CLOSE}")
            section = neutralise_tags(text, self.name) if text else ""
            if section:  # a DamcLLM on this memory that is sent the section leaves its cards out
                recorder.note_section(section, (d.card_id for d in built.decisions if d.kept and d.tokens))
            return section
        except Exception:  # the agent goes on with Memory's own queue
            logger.exception("damc: building the memory section failed")
            return ""


def _dialogue(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Copies of the conversation's turns: system messages are the agent's prompt (and the
    section's host). ``Memory`` goes on to put its blocks' text into the very message objects it
    gave the blocks (the newest user turn, with ``InsertMethod.USER``); a turn recorded must stay
    what was said, as a ``DamcLLM`` sends it back in later calls.

    ``Memory.aget(input=...)`` appends the input as a user turn to a history the agent has put it
    in already: a user turn repeated at the very end is that one turn. A workflow agent passes the
    text of the user's message, without the images or files it holds."""
    turns = [
        m.model_copy(update={"blocks": list(m.blocks)}) for m in messages if m.role != MessageRole.SYSTEM
    ]
    if (
        len(turns) >= 2
        and turns[-1].role == turns[-2].role == MessageRole.USER
        and message_text(turns[-1]) in (message_text(turns[-2]), _text_of(turns[-2]))
    ):
        turns.pop()
    return turns


def _text_of(message: ChatMessage) -> str:
    """The text blocks of ``message``, as a workflow agent gives them as its input."""
    return "\n".join(block.text for block in message.blocks if isinstance(block, TextBlock))
