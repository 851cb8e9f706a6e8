"""DAMC as a LangChain callback handler: record every tool run, compress rebuilt tool messages.

A callback handler cannot add or drop prompt messages: LangChain hands it a new list of the same
message objects. What it can do safely is edit message objects that are rebuilt for every call: the
``ToolMessage`` scratchpad a langchain-classic ``AgentExecutor`` builds from its intermediate steps
(the runs it announces with ``on_agent_action``); their content becomes the tool's memory card. A
``ToolMessage`` a tool returned belongs to whoever keeps it (a chat history, an agent state, a
tool loop's list) and is never edited. To select which messages reach the model, use
:class:`~damc_langchain.DamcMiddleware`, :func:`~damc_langchain.damc_pre_model_hook` or
:class:`~damc_langchain.DAMCMemory`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator
from typing import Any, TypeVar
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import LLMResult

from damc_core import Card, DecisionMemory, StoreClosedError, StoreError
from damc_core.events import tool_events

from ._recorder import PARSE_ERROR_TOOL, announcement, bubbles_up, error_result, tool_messages

logger = logging.getLogger("damc.langchain")
_RUNS_KEPT = 4096
_WAITING_KEPT = 1000
"""Events a store refuses (a file another process holds) that wait for it before DAMC gives up on
recording them."""
"""Runs remembered for finding a model call's top-level run; the oldest are forgotten."""
_INVALID_TOOL = "invalid_tool"
"""The tool a langchain-classic ``AgentExecutor`` runs (``InvalidTool``) to answer a call of a tool
it lacks, named as ``requested_tool_name``."""
_T = TypeVar("_T")
_MIDDLEWARE_HOOK = re.compile(r"\.(before|after)_(model|agent)$")
"""A graph node of ``create_agent`` middleware (``SummarizationMiddleware.before_model``)."""


def _remember(runs: OrderedDict[UUID, _T], run_id: UUID, value: _T) -> None:
    runs[run_id] = value
    runs.move_to_end(run_id)
    if len(runs) > _RUNS_KEPT:
        runs.popitem(last=False)


class DamcCallbackHandler(BaseCallbackHandler):
    """Register with ``config={"callbacks": [handler]}`` or on the model.

    A handler records one conversation, ``memory``'s session; for an agent serving several
    (checkpointer threads), give each its own handler on ``memory.for_session(thread_id)``. The
    turns that memory holds already (a handler made per run, a reopened store) are known when a
    prompt sends them again, not recorded a second time.

    A ``ToolException`` a tool's ``handle_tool_error`` turns into its output reaches callbacks as
    that output when the tool runs without a call id (under an ``AgentExecutor``): it becomes an
    error card only when its text reads as one (``"Error: ..."``)."""

    raise_error = False

    def __init__(self, memory: DecisionMemory, *, compress_rebuilt_tool_messages: bool = True) -> None:
        self.memory = memory
        self.compress_rebuilt_tool_messages = compress_rebuilt_tool_messages
        self._running: dict[UUID, tuple[str, Any, str | None, bool, bool]] = {}
        """run id -> (tool, arguments, call id, whether an AgentExecutor announced the run, whether
        the run answers the call with an error whatever it returns)."""
        self._cards: dict[str, list[str]] = {}
        """call id -> cards of the announced runs with that id, oldest first (ids may be reused)."""
        self._turns: Counter[tuple[str, str]] = Counter()
        """(role, id or content) -> how many such turns are recorded."""
        self._open_request: str | None = None
        """The newest user turn recorded, while no answer to it is: a run that failed before
        answering, run again, sends it again (the same request, not a new turn)."""
        self._announced: list[tuple[str, str, Any]] = []
        """(tool, call id, input) of agent actions about to run: AgentExecutor runs tools without
        the id, and an async one starts them in any order (sync handlers run in threads then)."""
        self._announced_lock = threading.Lock()
        self._parents: OrderedDict[UUID, UUID | None] = OrderedDict()
        """run id -> parent run id of the chains seen, the oldest forgotten."""
        self._prompted_roots: OrderedDict[UUID, None] = OrderedDict()
        """Top-level runs whose model has been called: the first call's prompt holds the run's input."""
        self._tool_runs: OrderedDict[UUID, None] = OrderedDict()
        """Tool runs seen: a model called under one is a sub-agent's, not this conversation's."""
        self._side_calls: OrderedDict[UUID, None] = OrderedDict()
        """Model calls a middleware made for itself (a summarizer): their answers are not turns."""
        self._waiting: list[dict[str, Any]] = []
        """Events the store refused, in order: each goes in before the next event recorded."""
        self._waiting_lock = threading.Lock()
        self._held: Counter[tuple[str, str]] = Counter()
        """(role, text) -> how many such turns the memory held when the handler was made: the
        history a prompt resends is known by them, not by this handler's counts."""
        for _, event in memory.history():
            role, content = event.get("role"), event.get("content")
            if role == "user" or (role == "assistant" and not event.get("tool_calls")):
                self._held[(role, str(content))] += 1
                self._open_request = str(content) if role == "user" else None

    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        _remember(self._parents, run_id, parent_run_id)
        if parent_run_id is None:  # a run starts (a caller may pass the same run id again)
            self._prompted_roots.pop(run_id, None)

    def on_agent_action(self, action: Any, *, run_id: UUID, **kwargs: Any) -> None:
        call_id = getattr(action, "tool_call_id", None)
        if call_id:
            with self._announced_lock:
                self._announced.append((str(action.tool), str(call_id), getattr(action, "tool_input", None)))

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
        _remember(self._parents, run_id, kwargs.get("parent_run_id"))
        _remember(self._tool_runs, run_id, None)
        name = str((serialized or {}).get("name") or kwargs.get("name") or "unknown_tool")
        arguments: Any = inputs if inputs is not None else input_str
        requested = (inputs or {}).get("requested_tool_name") if name == _INVALID_TOOL else None
        if requested:  # the executor's answer to a call of a tool it lacks: that call, failed
            name, arguments = str(requested), None
        announced = None
        if tool_call_id is None:
            with self._announced_lock:
                announced = announcement(self._announced, name, inputs, input_str)
                if announced is not None:
                    _, tool_call_id, called_with = self._announced.pop(announced)
                    arguments = called_with if requested else arguments
        failed = bool(requested) or name == PARSE_ERROR_TOOL
        self._running[run_id] = (name, arguments, tool_call_id, announced is not None, failed)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        answers = tool_messages(output)
        if answers:  # a Command's update holds the state's earlier results before its own answer
            running = self._running.get(run_id)
            call_id = running[2] if running else None
            output = next((m for m in answers if m.tool_call_id == call_id), answers[-1])
        if isinstance(output, ToolMessage):
            self._record(run_id, output.content, error=output.status == "error", artifact=output.artifact)
        else:
            self._record(run_id, output, error=False)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if bubbles_up(error):  # a pause for a human (interrupt) or a handoff: the call did not fail
            self._running.pop(run_id, None)
            return
        self._record(run_id, error_result(error), error=True)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            if self._in_tool(parent_run_id):  # a sub-agent run by a tool: its prompt is its own
                return
            if _MIDDLEWARE_HOOK.search(str((kwargs.get("metadata") or {}).get("langgraph_node") or "")):
                _remember(self._side_calls, run_id, None)  # a summarizer's prompt is not the user's
                return
            root = self._root(parent_run_id or run_id)
            new_run = root not in self._prompted_roots
            _remember(self._prompted_roots, root, None)
            for prompt in messages:
                in_prompt: Counter[tuple[str, str]] = Counter()
                recorded = [self._record_turn(message, in_prompt) for message in prompt]
                if (
                    new_run
                    and prompt
                    and isinstance(prompt[-1], HumanMessage)
                    and not recorded[-1]
                    and str(prompt[-1].content) != self._open_request  # not a failed run's retry
                ):
                    self._record_turn(prompt[-1], in_prompt, again=True)
                if self.compress_rebuilt_tool_messages:
                    self._compress(prompt)
        except Exception:
            logger.exception("damc: reading the prompt failed; the model call goes on unchanged")

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """The model's text answer (a run's final answer) is a turn now, not only once a later
        prompt resends it: a run without chat history never does."""
        try:
            if self._in_tool(kwargs.get("parent_run_id")) or run_id in self._side_calls:
                return  # a sub-agent's answer reaches this conversation as its tool's result
            for generations in response.generations:
                message = getattr(generations[0], "message", None) if generations else None
                if isinstance(message, AIMessage) and not message.tool_calls and message.content:
                    self._turns[("assistant", str(message.content))] += 1
                    if message.id:
                        self._turns[("assistant", message.id)] += 1
                    self._store({"role": "assistant", "content": message.content})
                    self._open_request = None
        except Exception:
            logger.exception("damc: recording the model's answer failed; the agent goes on")

    def on_llm_start(
        self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, **kwargs: Any
    ) -> None:
        """Plain text models get a fresh list of strings: the prompt is recorded, never changed."""
        try:
            for prompt in prompts:
                if prompt and not self._turns[("user", prompt)]:
                    self._turns[("user", prompt)] += 1
                    if not self._was_held("user", prompt):
                        self._store({"role": "user", "content": prompt})
        except Exception:
            logger.exception("damc: recording the prompt failed; the model call goes on unchanged")

    def _record(self, run_id: UUID, content: Any, *, error: bool, artifact: Any = None) -> None:
        name, arguments, call_id, announced, failed = self._running.pop(
            run_id, ("unknown_tool", None, None, False, False)
        )
        try:
            call, result = tool_events(
                name, arguments, content, call_id=call_id, error=error or failed, artifact=artifact
            )
            self._store(call)
            card = self._store(result)
        except Exception:
            logger.exception("damc: recording the %s result failed; the agent goes on", name)
            return
        if card is not None and call_id and announced:
            self._cards.setdefault(call_id, []).append(card.id)

    def _store(self, event: dict[str, Any]) -> Card | None:
        """Record ``event`` after the events waiting for the store, and return its card. While
        the store refuses them (a file another process holds), it waits with them, up to
        ``_WAITING_KEPT`` events, and this returns ``None``: a result keeps its place after its
        call, and goes in once the store takes it."""
        with self._waiting_lock:
            self._waiting.append(event)
            card = None
            while self._waiting:
                waiting = self._waiting[0]
                try:
                    card = self.memory.observe(waiting)
                except StoreError as exc:
                    if isinstance(exc, StoreClosedError) or len(self._waiting) > _WAITING_KEPT:
                        logger.error("damc: %s; %d events are not recorded", exc, len(self._waiting))
                        self._waiting.clear()
                    else:
                        logger.warning("damc: recording waits for the store: %s", exc)
                    return None
                except Exception:
                    logger.exception("damc: recording a %s event failed; it is left out", waiting.get("role"))
                    card = None
                self._waiting.pop(0)
            return card

    def _record_turn(
        self, message: BaseMessage, in_prompt: Counter[tuple[str, str]], *, again: bool = False
    ) -> bool:
        """User turns and assistant text, each occurrence once: every prompt resends the earlier
        turns, and a user may say "yes" twice (tool calls and results come from tool runs).
        ``again``: a new run's input, recorded even when an earlier run had the same input and
        this prompt carries no history that would count it twice. True if recorded."""
        if (
            not (
                isinstance(message, HumanMessage)
                or (isinstance(message, AIMessage) and not message.tool_calls)
            )
            or message.additional_kwargs.get("lc_source") == "summarization"
        ):
            return False  # (a summary stands in for turns recorded already)
        role = "user" if isinstance(message, HumanMessage) else "assistant"
        key = (role, message.id or str(message.content))
        if not again:
            in_prompt[key] += 1
        if (again or in_prompt[key] > self._turns[key]) and message.content:
            self._turns[key] += 1
            if not again and self._was_held(role, message.content):
                return False
            self._store({"role": role, "content": message.content})
            self._open_request = str(message.content) if role == "user" else None
            return True
        return False

    def _was_held(self, role: str, content: Any) -> bool:
        """Whether this turn is one the memory held when the handler was made, counted off now."""
        turn = (role, str(content))
        if not self._held[turn]:
            return False
        self._held[turn] -= 1
        return True

    def _lineage(self, run_id: UUID) -> Iterator[UUID]:
        """``run_id`` and the runs above it, as far as this handler saw their parents."""
        for _ in range(_RUNS_KEPT + 1):
            yield run_id
            parent = self._parents.get(run_id)
            if parent is None:
                return
            run_id = parent

    def _in_tool(self, run_id: UUID | None) -> bool:
        """Whether ``run_id`` or a run above it is a tool run."""
        return run_id is not None and any(run in self._tool_runs for run in self._lineage(run_id))

    def _root(self, run_id: UUID) -> UUID:
        """The top-level run ``run_id`` belongs to, as far as this handler saw its parents."""
        *_, root = self._lineage(run_id)
        return root

    def _compress(self, prompt: list[BaseMessage]) -> None:
        """The k-th of n scratchpad messages with a call id shows the k-th of the last n runs with
        that id (the steps of this run, in order); with more messages than runs, none is edited."""
        scratchpad: dict[str, list[ToolMessage]] = {}
        for message in prompt:
            if (
                isinstance(message, ToolMessage)
                and message.id is None
                and message.tool_call_id in self._cards
            ):
                scratchpad.setdefault(message.tool_call_id, []).append(message)
        for call_id, messages in scratchpad.items():
            cards = self._cards[call_id]
            if len(messages) > len(cards):
                continue
            for message, card_id in zip(messages, cards[len(cards) - len(messages) :], strict=True):
                card = self.memory.card(card_id)
                if card is not None and card.tokens < card.raw_tokens:
                    message.content = card.summary
