"""``DamcMemory``: a LlamaIndex ``BaseMemory`` whose history is DAMC's assembled context.

Workflow agents take memory only through ``agent.run(..., memory=memory)`` (a ``memory=`` given to
the agent's constructor is dropped by llama-index-core) and call only the async methods; both
forms are implemented. The user's own ``Memory`` / ``ChatMemoryBuffer`` can be wrapped: it still
receives every message verbatim, ``get_all`` reads from it, and what it holds when wrapped (a chat
store loaded back) is recorded as the conversation so far.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, Literal

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, field_validator
from llama_index.core.memory import BaseMemory, Memory

from damc_core import ConfigError, DecisionMemory, Namespace, StoreClosedError, StoreError

from ._recorder import CopyableLock, Recorder, recorder_for

logger = logging.getLogger("damc.llamaindex")

WAITING_KEPT = 1000
"""Messages put that wait for a store that refuses them (a locked file) before DAMC gives up on
recording them: the agent's verbatim history still holds them."""


class DamcMemory(BaseMemory):
    """``agent.run(user_msg, memory=DamcMemory(memory=DecisionMemory(...)))``.

    ``get`` returns the memory section (cards of earlier turns and tool results) followed by the
    recent dialogue. Tool calls of the running task, recorded as their tools return or by the LLM
    proxy, are left out until the agent hands them over, since the agent sends its scratchpad itself.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: DecisionMemory = Field(description="The DAMC memory that holds the cards.")
    chat_memory: BaseMemory | None = Field(
        default=None, description="The user's own memory; it keeps receiving every message verbatim."
    )
    budget: int | None = Field(
        default=None, gt=0, description="Token budget per get; the memory's own when None."
    )
    recall_tool: bool = Field(
        default=False,
        description="The agent has DAMC's recall tool (recall_tool(memory)) among its tools: the "
        "memory section then tells the model it can recall a card.",
    )
    section_role: Literal["user", "system"] = Field(
        default="user",
        description="Role of the memory section message. 'user' by default: ReActAgent drops a "
        "leading system message when it has no system prompt of its own.",
    )
    _recorder: Recorder = PrivateAttr()
    _all: list[ChatMessage] = PrivateAttr(default_factory=list)
    _unrecorded: list[ChatMessage] = PrivateAttr(default_factory=list)
    _lock: CopyableLock = PrivateAttr(default_factory=CopyableLock)
    """Puts and reads, one thread at a time: a server's requests of one session share its memory,
    and two recording the same waiting message would record it twice and drop the next one."""

    @field_validator("chat_memory")
    @classmethod
    def _blocks_are_not_dropped(cls, chat_memory: BaseMemory | None) -> BaseMemory | None:
        """A ``Memory`` renders its blocks into its own ``get``, which DAMC's context replaces."""
        if isinstance(chat_memory, Memory) and chat_memory.memory_blocks:
            names = ", ".join(repr(block.name) for block in chat_memory.memory_blocks)
            raise ConfigError(
                f"DamcMemory sends DAMC's context in place of its chat_memory's, so the memory blocks "
                f"of this Memory ({names}) would never reach the model. Put DamcMemoryBlock(memory=...) "
                "among its memory_blocks and pass the Memory itself as the agent's memory"
            )
        return chat_memory

    def model_post_init(self, context: Any, /) -> None:
        from .capture import follow_damc_runs  # capture imports this module

        self._recorder = recorder_for(self.memory)
        self._recorder.memory_created = True
        if self.chat_memory is None:  # a reopened store's conversation is this memory's history too
            self._all = self._recorder.to_chat_messages(self.memory.messages(since=0))
        else:  # and the conversation the user's memory holds already (a chat store loaded back)
            self._record_history(self.chat_memory.get_all)
        follow_damc_runs()

    @classmethod
    def class_name(cls) -> str:
        return "DamcMemory"

    def to_json(self, **kwargs: Any) -> str:
        """Refused with what to do instead: the cards live in the ``DecisionMemory``'s store, which
        JSON cannot carry; a memory on the same store and namespace reopens them."""
        raise TypeError(
            "DamcMemory is not JSON: its conversation lives in its DecisionMemory's store. Keep the "
            "store (DecisionMemory(store=SQLiteStore(path), namespace=...)) and make a DamcMemory on "
            "a DecisionMemory over the same store and namespace to reopen it"
        )

    @classmethod
    def from_defaults(
        cls,
        memory: DecisionMemory | None = None,
        chat_memory: BaseMemory | None = None,
        budget: int | None = None,
        section_role: Literal["user", "system"] = "user",
        recall_tool: bool = False,
        chat_history: list[ChatMessage] | None = None,
        token_limit: int | None = None,
        **decision_memory_options: Any,
    ) -> DamcMemory:
        """A memory over ``memory``, or a new ``DecisionMemory(**decision_memory_options)``.

        A new one without a ``namespace`` is a conversation of its own (a session named
        ``chat-<random>`` in the default store), as each ``ChatMemoryBuffer.from_defaults()`` is:
        chat engines made with ``memory_cls=DamcMemory`` do not read one another's turns.
        ``chat_history`` and ``token_limit`` are ``ChatMemoryBuffer.from_defaults``'s, which a chat
        engine given ``memory_cls=DamcMemory`` passes: the history is set, and without ``budget``
        the limit caps the memory's own (the engine's limit is the model's window, usually far
        more than DAMC's budget)."""
        if memory is not None and decision_memory_options:
            raise ValueError(
                f"DamcMemory.from_defaults got both memory= and {sorted(decision_memory_options)}; "
                "pass the options to DecisionMemory(...) instead"
            )
        if token_limit is not None and (
            not isinstance(token_limit, int) or isinstance(token_limit, bool) or token_limit <= 0
        ):
            raise ConfigError(f"token_limit must be a whole number of tokens > 0, got {token_limit!r}")
        if memory is None:
            new_chat = Namespace(session=f"chat-{uuid.uuid4().hex[:12]}")
            decision_memory_options.setdefault("namespace", new_chat)
            memory = DecisionMemory(**decision_memory_options)
        if budget is None and token_limit is not None:
            budget = min(token_limit, memory.settings.budget)
        made = cls(
            memory=memory,
            chat_memory=chat_memory,
            budget=budget,
            section_role=section_role,
            recall_tool=recall_tool,
        )
        if chat_history:
            made.set(chat_history)
        return made

    # -- read --------------------------------------------------------------------------------
    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        self._record_waiting()
        try:
            built = self.memory.build(
                query=input or None,
                budget=self.budget,
                exclude=self._recorder.pending,
                recall_tool=self.recall_tool,
            )
        except Exception:  # the agent keeps running on the verbatim history rather than fail
            logger.exception("damc: building the context failed; returning the verbatim history")
            return self.get_all()
        events = list(built.messages)
        head = str(events[0].get("content")) if events and events[0].get("role") == "system" else ""
        if self.section_role == "user" and built.memory and head.endswith(built.memory):
            at = len(head) - len(built.memory)  # the section closes the system message
            prompt = [{"role": "system", "content": head[:at].strip()}] if head[:at].strip() else []
            events = [*prompt, {"role": "user", "content": head[at:]}, *events[1:]]
        return self._recorder.to_chat_messages(events)

    def get_all(self) -> list[ChatMessage]:
        """Every message put, verbatim (from the wrapped memory when there is one); over a
        reopened store, the conversation it holds comes first, as DAMC recorded it."""
        if self.chat_memory is not None:
            return self.chat_memory.get_all()
        return list(self._all)

    # -- write -------------------------------------------------------------------------------
    def put(self, message: ChatMessage) -> None:
        with self._lock:
            if self.chat_memory is not None:
                self.chat_memory.put(message)
            else:
                self._all.append(message)
            self._unrecorded.append(message)
            self._record_waiting()

    def _record_waiting(self) -> None:
        """Record the messages put, in order; one the store refused (a locked file) waits, with
        those after it, for the next ``put`` or ``get``, up to ``WAITING_KEPT`` of them. A message
        that cannot be recorded at all is left out. Kept verbatim above, the agent goes on."""
        with self._lock:
            while self._unrecorded:
                message = self._unrecorded[0]
                try:
                    self._recorder.put(message)
                except StoreError as exc:
                    if isinstance(exc, StoreClosedError) or len(self._unrecorded) > WAITING_KEPT:
                        logger.error("damc: %s; %d messages put are not recorded", exc, len(self._unrecorded))
                        self._unrecorded.clear()
                    else:
                        logger.warning("damc: recording a %s message waits: %s", message.role.value, exc)
                    return
                except Exception:
                    logger.exception(
                        "damc: recording a %s message failed; it is left out", message.role.value
                    )
                self._unrecorded.pop(0)

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the verbatim history; DAMC records the messages it has not seen (its store
        keeps every record it ever received)."""
        if self.chat_memory is not None:
            self.chat_memory.set(messages)
        else:
            self._all = list(messages)
        if self._record_history(lambda: messages):
            self._recorder.pending.clear()

    def _record_history(self, read: Callable[[], list[ChatMessage]]) -> bool:
        """Record what DAMC has not seen of the history ``read`` gives; False, logged, when reading
        or recording it fails (the history itself is kept where it was)."""
        try:
            messages = read()
            for message in messages:  # a prompt passed with every run's history is one note
                if message.role == MessageRole.SYSTEM and not self._recorder.holds_text(message):
                    self._recorder.put(message)
            self._recorder.observe_view([m for m in messages if m.role != MessageRole.SYSTEM])
        except Exception:
            logger.exception("damc: recording the chat history failed")
            return False
        return True

    def reset(self) -> None:
        """Start the conversation over, here and in a memory reopened on the same store (the
        store keeps the records; see ``DecisionMemory.clear``)."""
        if self.chat_memory is not None:
            self.chat_memory.reset()
        self._all = []
        self._unrecorded = []
        self.memory.clear()
        self._recorder.reset()
