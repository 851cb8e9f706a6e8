"""Translation between LangChain messages and DAMC events, shared by every LangChain surface."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ToolCall,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.messages.tool import invalid_tool_call

from damc_core import ConfigError, DecisionMemory
from damc_core.tokens import call_function

logger = logging.getLogger("damc.langchain")
PARSE_ERROR_TOOL = "_Exception"
"""The tool a langchain-classic ``AgentExecutor`` with ``handle_parsing_errors`` runs
(``ExceptionTool``) to answer a reply it could not parse: its output is the error's text."""
_FAILED_GROUPS_KEPT = 64
_RETRY_ID = re.compile(r"(.+)~retry(\d+)")
"""The id ``record_retry`` records a call made again under: the call's id and the retry's number."""


class MessageRecorder:
    """Feeds one conversation's LangChain messages to a ``DecisionMemory`` exactly once each.

    A graph gives every message in its state an id, so messages are known by id (others by
    position), and the ids are stored with the events. A tool result is recorded when the tool
    returns, before the state gives it an id; it is matched later by its call id, one occurrence
    each, since some servers reuse call ids.

    ``resume``: the memory holds this same conversation from an earlier process (a checkpointed
    graph thread); what it already holds is not recorded again.

    ``resent``: every run starts from the history the caller sends (a graph without a
    checkpointer gives each message a new id at every run): a run's messages that repeat, in
    order, what was recorded are known by their content and not recorded again.

    ``weak``: the memory is held weakly (the recorder of a memory's own conversation, kept by the
    registry of ``conversations_of``, which must not keep the memory alive).
    """

    def __init__(
        self, memory: DecisionMemory, *, resume: bool = False, resent: bool = False, weak: bool = False
    ) -> None:
        self._memory: DecisionMemory | weakref.ref[DecisionMemory] = weakref.ref(memory) if weak else memory
        self._seen: set[str] = set()
        self._said: dict[str, str] = {}
        """The key of each user turn recorded under a message id -> its content key (see ``edited``)."""
        self._early_results: Counter[str] = Counter()
        """Call id -> tool results recorded as the tool returned, not yet seen in the state."""
        self._resent = resent
        self._recorded: list[str] = []
        """With ``resent``: the content key of every event recorded, in order."""
        self._matched = 0
        """How far into ``_recorded`` the running run's resent history has been matched."""
        self._held: dict[tuple[str, ...], dict[int, Any]] = {}
        """The call ids of one assistant message -> the results that came back so far, by the
        call's position: parallel calls finish in any order, and their results are recorded in
        the calls' order."""
        self._failed: OrderedDict[tuple[str, ...], None] = OrderedDict()
        """Call groups one of whose tools raised: their results are recorded as they come."""
        self._running: Counter[tuple[str, ...]] = Counter()
        """Call groups -> how many of their tools run now (as said by ``tool_started``)."""
        self._raised: set[tuple[str, ...]] = set()
        """Call groups one of whose tools raised while others ran: held until those are back."""
        self._started: OrderedDict[tuple[str, ...], set[object]] = OrderedDict()
        """Call groups -> which of their calls started (by place, or id), for ``wait_for_group``."""
        self._errored: OrderedDict[str, int] = OrderedDict()
        """Call ids answered with an error result -> how many times the call was made again since."""
        self._after: dict[tuple[str, ...], list[list[dict[str, Any]]]] = {}
        """Call groups still held -> calls made again, recorded once the group's results are."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.held_input: Sequence[BaseMessage] | None = None
        """A graph run's input as it came, held until the state's messages are recorded (see
        ``DamcMiddleware.before_agent``)."""
        self._open_request: str | None = None
        """With ``resent``: the newest user turn recorded, while no answer to it has been recorded
        nor lost (a run that fails before answering is retried with this request)."""
        self._learn(memory.messages() if resume else ())

    @property
    def memory(self) -> DecisionMemory:
        return _held(self._memory)

    def _learn(self, events: Sequence[dict[str, Any]]) -> None:
        """Know events recorded elsewhere (an earlier process, another worker) as recorded, and
        the calls of the newest step answered there with an error as such: a run resumed from its
        checkpoint makes them again, and the result is a retry (see ``retry_of``), not a second
        answer to the call the model would take the error for."""
        errored: dict[str, int] = {}
        for event in events:
            if event.get("id"):
                self._seen.add(f"id:{event['id']}")
                self._note_said(event)
                if event.get("tool_calls"):
                    errored.clear()  # a new step: only its calls can be made again
            elif event.get("role") == "tool":
                call_id = str(event.get("tool_call_id"))
                self._early_results[call_id] += 1
                if event.get("status") == "error":
                    errored.setdefault(call_id, 0)
            else:
                for call in event.get("tool_calls") or ():  # a call made again, recorded there
                    retried = _RETRY_ID.fullmatch(str(call.get("id")))
                    if retried and retried[1] in errored:
                        errored[retried[1]] = max(errored[retried[1]], int(retried[2]))
            if self._resent:
                self._note(event)
        with self._lock:
            for call_id, retries in errored.items():
                self._errored[call_id] = max(self._errored.get(call_id, 0), retries)

    def _note(self, event: dict[str, Any]) -> None:
        """Add a recorded event to the resent-history bookkeeping."""
        key = _content_key(event)
        self._recorded.append(key)
        if event.get("role") == "user":
            self._open_request = key
        elif event.get("role") == "assistant" and not event.get("tool_calls"):
            self._open_request = None  # answered: the same words again are a new turn

    def observe(self, messages: Sequence[BaseMessage]) -> None:
        """Record the messages not recorded yet (the agent resends its whole history each step).
        A message is seen once recorded: one the store failed to take is tried again next time.
        The newest user turn is the run's request, new even when it repeats an earlier turn's
        words (a second "yes"), unless it is the request recorded last and nothing answered it
        (nor was lost on the way): a run retried after it failed (a rate limit) sends its
        request again."""
        request = max((i for i, m in enumerate(messages) if m.type == "human"), default=-1)
        in_graph = any(m.id for m in messages)
        if any(m.id and f"id:{m.id}" not in self._seen for m in messages):  # a run's new input:
            mark = self.memory.event_count  # another worker may have served this thread meanwhile
            self.memory.refresh()
            self._learn(self.memory.messages(since=mark))
        for index, message in enumerate(messages):
            key = f"id:{message.id}" if message.id else f"at:{index}"  # outside a graph: by position
            if key in self._seen:
                continue
            if message.additional_kwargs.get("lc_source") == "summarization":
                pass  # SummarizationMiddleware's digest of turns DAMC holds whole: not a user turn
            elif isinstance(message, ToolMessage) and self._early_results[message.tool_call_id] > 0:
                self._early_results.subtract((message.tool_call_id,))
                if not self._early_results[message.tool_call_id]:
                    del self._early_results[message.tool_call_id]
            else:
                event = to_event(message)
                if not (self._resent and self._known(event, first=index == 0, request=index == request)):
                    self._record(event)
                if isinstance(message, ToolMessage):
                    self._forget_held(message.tool_call_id)  # recorded from the state instead
                    if in_graph and not message.id:
                        # the error result LangChain adds to a call for the request only: the
                        # state takes it later, with an id, and it is known then by its call id
                        self._early_results[message.tool_call_id] += 1
            self._seen.add(key)

    def _known(self, event: dict[str, Any], *, first: bool, request: bool) -> bool:
        """Whether a message of a resent history was recorded before: found in the recorded
        events after the ones the run's earlier messages matched (a run starts matching anew);
        the ``request`` only as the open request (see ``_open_request``)."""
        if first:
            self._matched = 0
        key = _content_key(event)
        if request:
            found = len(self._recorded) - 1 if key == self._open_request else -1
        else:
            try:
                found = self._recorded.index(key, self._matched)
            except ValueError:
                found = -1
        if found < 0:
            self._matched = len(self._recorded) + 1  # new from here on: nothing later repeats
            return False
        self._matched = found + 1
        return True

    def _record(self, event: dict[str, Any]) -> None:
        try:
            self.memory.observe(event)
        except Exception:
            self._open_request = None  # something after the request was lost: a repeat is new
            raise
        self._note_said(event)
        if self._resent:
            self._note(event)
            self._matched = len(self._recorded) + 1

    def _note_said(self, event: dict[str, Any]) -> None:
        if event.get("role") == "user" and event.get("id"):
            self._said[f"id:{event['id']}"] = _content_key(event)

    def edited(self, messages: Sequence[BaseMessage]) -> None:
        """Know a user turn that ``messages``, a checkpointed state's, hold with other words under
        an id recorded before as not recorded: the next ``observe`` records it as a turn of its own.
        A thread forked from an earlier checkpoint with the user's message edited, or a state
        edited with ``update_state``, keeps the message's id, and the model is to answer the
        words the state holds now."""
        for message in messages:
            key = f"id:{message.id}"
            said = self._said.get(key) if message.id and message.type == "human" else None
            if said is not None and said != _content_key(to_event(message)):
                self._seen.discard(key)

    def forked(self, messages: Sequence[BaseMessage]) -> None:
        """Know the user turn ``messages``, a checkpointed state's sent to the model, end with as
        not recorded when the memory holds a reply to it the state does not: the thread runs again
        from a checkpoint before the model answered (a chat app regenerating the answer). The next
        ``observe`` records the turn again, so the model is asked it anew, not sent its discarded
        reply as the last word."""
        last = messages[-1] if messages else None
        if self._resent or last is None or last.type != "human" or f"id:{last.id}" not in self._seen:
            return
        events = self.memory.messages()
        asked = max((i for i, event in enumerate(events) if event.get("id") == last.id), default=None)
        held = {m.id for m in messages if m.id}
        if asked is not None and any(
            event.get("role") == "assistant" and event.get("id") not in held for event in events[asked + 1 :]
        ):
            self._seen.discard(f"id:{last.id}")

    def assume_recorded(self, messages: Sequence[BaseMessage]) -> None:
        """Know ``messages`` as recorded without recording them (a retried run's request)."""
        for index, message in enumerate(messages):
            self._seen.add(f"id:{message.id}" if message.id else f"at:{index}")

    def record_reply(self, message: BaseMessage, *, at: int | None = None) -> None:
        """Record the model's reply as it comes, known by its id. A reply without one is known by
        ``at``, the position it will have in the messages ``observe`` is given next (a history
        resent whole at every step); without ``at`` it is recorded with the history it joins."""
        key = f"id:{message.id}" if message.id else None if at is None else f"at:{at}"
        if key is None or key in self._seen:
            return
        self._record(to_event(message))
        self._seen.add(key)

    def record_tool_result(self, result: Any, *, calls: Sequence[str] = (), place: int | None = None) -> None:
        """Record a tool's result as it returns (a ``ToolMessage``, or those of a ``Command``'s
        update); never raises into the agent. A handoff's update carries the state's messages
        with its own: those recorded are skipped.

        ``calls``: the ids of the calls the assistant message made with this one; the results of
        parallel calls are held until every one is back, then recorded in the calls' order. A
        result that never comes through here (a call a middleware answered) is recorded from the
        state at the next model call, with the others of its message. ``place``: this call's
        position among them, which tells apart calls that share an id (a server that names calls
        after their tool); without it, the first of its id not back yet."""
        call_id = next((m.tool_call_id for m in tool_messages(result)), None)
        if call_id is None or len(calls) < 2 or call_id not in calls:
            self._record_results(result)
            return
        group = tuple(calls)
        with self._lock:
            if group in self._failed:
                self._record_results(result)
                return
            held = self._held.setdefault(group, {})
            if place is None or not 0 <= place < len(group) or group[place] != call_id or place in held:
                place = next((i for i, c in enumerate(group) if c == call_id and i not in held), None)
            if place is None:  # more results of this id than calls: nothing to wait for
                self._record_results(result)
                return
            held[place] = result
            if len(held) == len(group):
                self._release(group)

    def tool_started(self, calls: Sequence[str], call: object = None) -> None:
        """A tool of these parallel calls starts (``call``: its place among them, or its id);
        ``tool_stopped`` says when it is back. A caller that says both has a step one of whose
        tools raised recorded in the calls' order."""
        group = tuple(calls)
        with self._changed:
            self._running[group] += 1
            if call is not None and len(group) > 1:
                started = self._started.pop(group, set())
                started.add(call)
                self._started[group] = started
                while len(self._started) > _FAILED_GROUPS_KEPT:
                    self._started.popitem(last=False)
                self._changed.notify_all()

    def wait_for_group(self, calls: Sequence[str], timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until every call of these parallel calls started: a
        tool that raised at once is back before the tools beside it start in their threads, and
        they would not be known to run when it stops (its results then recorded as they come, out
        of the calls' order). A call that never starts (its run ended) holds nothing longer."""
        group = tuple(calls)
        if len(group) < 2:
            return
        with self._changed:
            self._changed.wait_for(lambda: len(self._started.get(group, ())) >= len(group), timeout)

    def tool_stopped(self, calls: Sequence[str]) -> None:
        """A tool ``tool_started`` announced is back, its result (or error result) recorded."""
        group = tuple(calls)
        with self._lock:
            self._running[group] -= 1
            if self._running[group] <= 0:
                del self._running[group]
            self._settle(group)

    def tool_failed(self, calls: Sequence[str]) -> None:
        """A tool of these parallel calls raised (or paused the graph), its error result given
        before this. The run may end here, so nothing is held for calls that may never come back
        (a booking that went through is never lost for a lookup that failed): once no tool
        announced by ``tool_started`` runs (at once for a caller that announces none), what came
        back is recorded, in the calls' order, and what comes later as it comes."""
        group = tuple(calls)
        with self._lock:
            self._raised.add(group)
            self._settle(group)

    def answered_with_error(self, call_id: str) -> None:
        """The call ``call_id`` was answered with an error result: made again, it is a retry."""
        with self._lock:
            self._errored[call_id] = self._errored.pop(call_id, 0)
            while len(self._errored) > _FAILED_GROUPS_KEPT:
                self._errored.popitem(last=False)

    def retry_of(self, call_id: str) -> int | None:
        """How many times the call ``call_id``, answered with an error, was made again counting
        this time (``None``: it was not answered with an error)."""
        with self._lock:
            if call_id not in self._errored:
                return None
            self._errored[call_id] += 1
            return self._errored[call_id]

    def record_retry(self, calls: Sequence[str], call: ToolCall, retry_id: str, result: Any) -> None:
        """Record a call made again (a middleware retrying it) as a call of its own: an assistant
        message making it under ``retry_id``, then its result under that id, after the results of
        the calls it was made with. Never raises into the agent."""
        try:
            remade = AIMessage("", tool_calls=[{**call, "id": retry_id}])
            events = [to_event(remade)]
            for message in tool_messages(result):
                event = to_event(message)
                event["tool_call_id"] = retry_id
                events.append(event)
                if message.id:  # the state's answer to the call: already recorded
                    self._seen.add(f"id:{message.id}")
        except Exception:
            logger.exception("damc: recording a retried tool call failed; the agent goes on")
            return
        group = tuple(calls)
        with self._lock:
            if group in self._held and group not in self._failed:
                self._after.setdefault(group, []).append(events)
                return
            self._record_events(events)

    def _record_events(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            try:
                self._record(event)
            except Exception:
                logger.exception("damc: recording a retried tool call failed; the agent goes on")

    def _settle(self, group: tuple[str, ...]) -> None:
        """Record what a group one of whose tools raised holds once none of its tools runs (under
        the lock)."""
        if group not in self._raised or self._running[group]:
            return
        self._raised.discard(group)
        self._failed[group] = None
        while len(self._failed) > _FAILED_GROUPS_KEPT:
            self._failed.popitem(last=False)
        self._release(group)

    def _release(self, group: tuple[str, ...]) -> None:
        """Record the results held for a group of calls, in the calls' order (under the lock)."""
        held = self._held.pop(group, {})
        for place in sorted(held):
            self._record_results(held[place])
        for events in self._after.pop(group, ()):
            self._record_events(events)

    def _forget_held(self, call_id: str) -> None:
        with self._lock:
            for calls in [calls for calls in self._held if call_id in calls]:
                held = self._held[calls]
                place = next((i for i in sorted(held) if calls[i] == call_id), None)
                if place is not None:
                    del held[place]
                if not held:
                    del self._held[calls]

    def _record_results(self, result: Any) -> None:
        for message in tool_messages(result):
            if message.id and f"id:{message.id}" in self._seen:
                continue
            try:
                self._record(to_event(message))
                if message.id:
                    self._seen.add(f"id:{message.id}")
                else:
                    self._early_results[message.tool_call_id] += 1
            except Exception:
                logger.exception("damc: recording a tool result failed; the agent goes on")


def tool_messages(result: Any) -> list[ToolMessage]:
    """The tool messages a tool's result holds: the result itself, those of a langgraph
    ``Command``'s update, or those of each of several such a tool returns at once (a list)."""
    if isinstance(result, list):
        return [message for item in result for message in tool_messages(item)]
    update = getattr(result, "update", None)
    if not isinstance(update, dict):
        return [result] if isinstance(result, ToolMessage) else []
    messages = update.get("messages", ())
    if not isinstance(messages, (list, tuple)):
        return []
    return [m for m in map(_as_message, messages) if isinstance(m, ToolMessage)]


def _as_message(item: Any) -> BaseMessage | None:
    """A message of a ``Command``'s update as the state takes it: one in OpenAI's form (a dict)
    or a ``(role, content)`` pair is converted; ``None`` for what is no message."""
    if isinstance(item, BaseMessage):
        return item
    try:
        (message,) = convert_to_messages([item])
    except (ValueError, TypeError, NotImplementedError):
        return None
    return message


def announcement(
    announced: Sequence[tuple[str, Any, Any]], name: str, inputs: dict[str, Any] | None, input_str: str
) -> int | None:
    """Which announced action, (tool, call id, input), a tool run is: the oldest of its tool with
    its input, else the oldest of its tool (parallel calls of one tool start in any order)."""
    same_tool = [i for i, (tool, _, _) in enumerate(announced) if tool == name]
    for i in same_tool:
        given = announced[i][2]
        if given == inputs or str(given) == input_str:
            return i
    return same_tool[0] if same_tool else None


def bubbles_up(error: BaseException) -> bool:
    """Whether a tool's exception is langgraph's way to pause the graph (``interrupt()``, run
    again on resume) or hand off to a parent graph, not a failure of the call."""
    try:
        from langgraph.errors import GraphBubbleUp
    except ImportError:
        return False
    return isinstance(error, GraphBubbleUp)


def error_result(error: BaseException) -> str:
    """The result recorded for a call whose tool raised ``error``. A cancelled call's says that the
    run stopped, and that the tool may have acted (a sync tool runs on in its thread): a
    cancellation's message is what the canceller chose (none, or the object langgraph cancels a
    step's other calls with), nothing a model can read."""
    if isinstance(error, asyncio.CancelledError):
        return (
            "Error: CancelledError: the run stopped before the tool returned; "
            "whether it took effect is not known"
        )
    return f"Error: {type(error).__name__}: {error}"


class Conversations:
    """The recorder of the conversation a graph is running: one agent serves many checkpointer
    threads, and each ``thread_id`` is its own session of the memory's user, so one thread's
    records never reach another's prompt. Runs without a thread id use the memory given."""

    def __init__(self, memory: DecisionMemory, *, max_threads: int = 256) -> None:
        self._memory = weakref.ref(memory)
        """Held weakly: the registry of ``conversations_of`` keeps one ``Conversations`` per live
        memory, and one holding its memory would keep both, and every thread's recorder, alive
        for as long as the process runs. Whoever uses a ``Conversations`` holds its memory."""
        self.max_threads = max_threads
        """Threads whose recorders stay in process; an evicted thread is reopened from the store."""
        self._default: MessageRecorder | None = None
        """Made on first use: it reads the memory's stored events, which thread-only agents never need."""
        self._threads: OrderedDict[str, MessageRecorder] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def memory(self) -> DecisionMemory:
        return _held(self._memory)

    def current(self) -> MessageRecorder:
        # a thread id without a checkpointer names the session only: every run starts from the
        # history the caller sends, as one without a thread id does
        return self.recorder_for(self._running_id(), resent=not checkpointed())

    def is_open(self) -> bool:
        """Whether ``current`` has its recorder in process; else making it reads the stored events."""
        thread_id = self._running_id()
        with self._lock:
            return self._default is not None if thread_id in (None, "") else str(thread_id) in self._threads

    def _running_id(self) -> str | None:
        """The id of the conversation the graph runs, as ``recorder_for`` takes it."""
        thread_id, nested = running_conversation()
        if nested is None:
            return thread_id
        # an agent run inside a tool call (a sub-agent): a conversation of its own, so its turns
        # never become the calling agent's, which gets its answer as the tool's result
        return f"{thread_id or self.memory.namespace.session}|{nested}"

    def recorder_for(self, thread_id: object, *, resent: bool = False) -> MessageRecorder:
        """The recorder of a checkpointer thread (any id, as its text); ``None`` or an empty id:
        the memory given. ``resent``: a thread not made yet is of a graph without a checkpointer
        (see ``MessageRecorder``)."""
        thread_id = None if thread_id is None or thread_id == "" else str(thread_id)
        with self._lock:
            if thread_id is None:
                if self._default is None:
                    self._default = MessageRecorder(self.memory, resume=True, resent=True, weak=True)
                return self._default
            recorder = self._threads.pop(thread_id, None)
            if recorder is None:
                recorder = MessageRecorder(self.memory.for_session(thread_id), resume=True, resent=resent)
            self._threads[thread_id] = recorder
            while len(self._threads) > self.max_threads:
                self._threads.popitem(last=False)
            return recorder


def _held(memory: DecisionMemory | weakref.ref[DecisionMemory]) -> DecisionMemory:
    if isinstance(memory, DecisionMemory):
        return memory
    found = memory()
    if found is None:
        raise ReferenceError("the DecisionMemory of this recorder no longer exists")
    return found


_CONVERSATIONS: weakref.WeakKeyDictionary[DecisionMemory, Conversations] = weakref.WeakKeyDictionary()
_CONVERSATIONS_LOCK = threading.Lock()


def conversations_of(memory: DecisionMemory) -> Conversations:
    """The one ``Conversations`` of a memory in this process: two middlewares (or a middleware and
    a hook) on one memory then know what the other recorded, instead of recording it again.
    Anything else is refused where the middleware, hook or tool is made: a store given for the
    memory would leave every run without memory, each failure only logged."""
    if not isinstance(memory, DecisionMemory):
        raise ConfigError(
            f"DAMC needs a DecisionMemory, got {type(memory).__name__}: "
            "pass DecisionMemory(store=...) for a store"
        )
    with _CONVERSATIONS_LOCK:
        found = _CONVERSATIONS.get(memory)
        if found is None:
            found = _CONVERSATIONS[memory] = Conversations(memory)
        return found


def _content_key(event: dict[str, Any]) -> str:
    """What makes a resent message the same message: role, content, calls and the call answered."""
    calls = [
        (c.get("id"), (c.get("function") or {}).get("name"))
        for c in event.get("tool_calls") or ()
        if isinstance(c, dict)
    ]
    return json.dumps(
        [event.get("role"), event.get("content"), calls, event.get("tool_call_id")],
        default=str,
        sort_keys=True,
    )


def checkpointed() -> bool:
    """Whether the graph run this code is in keeps its state in a checkpointer (a run's state then
    holds the thread's earlier messages, with their ids)."""
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable", {})
    except (ImportError, RuntimeError):  # no langgraph, or not inside a graph run
        return False
    return configurable.get(_CHECKPOINTER_KEY) is not None


_CHECKPOINTER_KEY = "__pregel_checkpointer"
"""Where langgraph lends a run's nodes its checkpointer (``langgraph.constants.CONFIG_KEY_CHECKPOINTER``)."""


def running_conversation() -> tuple[str | None, str | None]:
    """The ``thread_id`` of the graph run this code is in, if any, and the path of the innermost
    tool call it runs inside (up to its ``tools:<id>`` of ``checkpoint_ns``), if it is a sub-agent's."""
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable", {})
    except (ImportError, RuntimeError):  # no langgraph, or not inside a graph run
        return None, None
    thread_id = configurable.get("thread_id")
    path = str(configurable.get("checkpoint_ns") or "").split("|")
    # the innermost tool call: an agent two tools down is the inner caller's sub-agent
    tool_call = max((i for i, part in enumerate(path[:-1]) if part.startswith("tools:")), default=None)
    nested = None if tool_call is None else "|".join(path[: tool_call + 1])
    return None if thread_id is None else str(thread_id), nested


def state_messages(state: Any) -> list[Any]:
    """The messages of an agent's graph state: a dict, or an object (``AgentStatePydantic``)."""
    messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    return list(messages or ())


def to_event(message: BaseMessage) -> dict[str, Any]:
    """The OpenAI-style message DAMC records for a LangChain message (errors flagged, id and a
    tool's artifact kept).

    A call whose arguments did not parse (``invalid_tool_calls``) stays a call, with its raw
    arguments, as LangChain's OpenAI model sends it: the error result the agent answers it with
    then has its call, and the model sees that the call failed and why."""
    converted = _openai_message(message)
    if isinstance(message, AIMessage) and message.invalid_tool_calls:
        converted["tool_calls"] = [
            *converted.get("tool_calls", ()),
            *(
                {
                    "type": "function",
                    "id": call.get("id"),
                    "function": {"name": call.get("name") or "", "arguments": call.get("args") or ""},
                }
                for call in message.invalid_tool_calls
            ),
        ]
    if isinstance(message, ToolMessage) and message.status == "error":
        converted["status"] = "error"
    if isinstance(message, ToolMessage) and message.artifact is not None:
        converted["artifact"] = message.artifact  # kept in the record for recall, never sent
    if message.id:
        converted["id"] = message.id
    return converted


def _openai_message(message: BaseMessage) -> dict[str, Any]:
    """``message`` as OpenAI's. A content block OpenAI's format has no form for (a file by URL,
    which Anthropic reads) is kept as it came, beside the others converted: the message is
    recorded, and goes back to the model with the block it had."""
    try:
        converted: dict[str, Any] = convert_to_openai_messages(message)
        return converted
    except (ValueError, KeyError, TypeError):
        if not isinstance(message.content, list):
            raise
    parts: list[Any] = []
    for block in message.content:
        try:
            part = convert_to_openai_messages(message.model_copy(update={"content": [block]}))["content"]
        except (ValueError, KeyError, TypeError):
            parts.append(block)
            continue
        parts.extend(part if isinstance(part, list) else [{"type": "text", "text": part}] if part else [])
    converted = convert_to_openai_messages(message.model_copy(update={"content": ""}))
    return {**converted, "content": parts}


def to_messages(events: Sequence[dict[str, Any]]) -> list[BaseMessage]:
    """LangChain messages for DAMC's OpenAI-style ones (what a model is sent): a call whose
    arguments do not parse goes back to ``invalid_tool_calls``, as :func:`to_event` took it, and
    a call with no arguments text takes none."""
    messages: list[BaseMessage] = []
    for event in events:
        calls = event.get("tool_calls") or ()
        if not calls:
            messages.extend(convert_to_messages([event]))
            continue
        parsed, broken = [], []
        for call in calls:
            function = call_function(call)  # a custom tool's call: its input as the arguments
            arguments = _arguments(function.get("arguments"))
            if arguments is None:
                broken.append(
                    invalid_tool_call(
                        name=function.get("name"),
                        args=function.get("arguments"),
                        id=call.get("id"),
                        error="arguments are not a JSON object",
                    )
                )
            else:
                parsed.append({**call, "function": {**function, "arguments": json.dumps(arguments)}})
        (message,) = convert_to_messages([{**event, "tool_calls": parsed}])
        if broken and isinstance(message, AIMessage):
            message.invalid_tool_calls = broken
        messages.append(message)
    return messages


def _arguments(text: Any) -> dict[str, Any] | None:
    """A call's arguments text as a dict (none given: no arguments), or ``None`` if it is not one."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None
