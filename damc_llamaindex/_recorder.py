"""Translation between LlamaIndex chat messages and DAMC events, shared by every LlamaIndex surface.

One :class:`Recorder` per ``DecisionMemory`` (see :func:`recorder_for`) so that the memory, the
span capture and the LLM proxy, used together, record each event exactly once: tool outputs by
object, tool calls by (call id, name, arguments) and results by (call id, content), since some
providers give every call of a tool the same id, ReAct steps by (tool, arguments, observation), text
turns by occurrence.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import logging
import re
import threading
import uuid
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llama_index.core.base.llms.types import (
    ChatMessage,
    ContentBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import BaseModel
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.llms.utils import parse_partial_json
from llama_index.core.schema import BaseComponent
from llama_index.core.tools import ToolOutput

from damc_core import Card, DecisionMemory, StoreClosedError, StoreError
from damc_core.tokens import call_function, content_text

logger = logging.getLogger("damc.llamaindex")

_ROLES = {"chatbot": "assistant", "model": "assistant"}
_STEP = re.compile(r"^(Thought|Observation):", re.M)
_ACTION = re.compile(r"^Action:[ \t]*(.*?)[ \t]*\nAction Input:[ \t]*(.*)\Z", re.M | re.S)
_ANSWER = re.compile(r"^Answer(?: \(Starts With\))?:[ \t]*(.*)\Z", re.M | re.S)
_REPLIES_KEPT = 1024
"""Tool calls kept awaiting their result, the oldest forgotten past this many: a run stopped before
its calls returned leaves them behind."""
_WAITING_KEPT = 1024
"""Steps of tool outputs that wait for a store that refuses them before DAMC gives up on them."""
_ORIGINALS_KEPT = 1024
"""Messages kept to be handed back as the very objects the agent put (the newest ones: a view
holds the newest messages of the conversation)."""
_SECTIONS_KEPT = 16
"""Memory sections built by a ``DamcMemoryBlock`` that a ``DamcLLM`` recognises in its input."""


@dataclass(frozen=True, slots=True)
class ReactStep:
    """One step of a ReAct transcript: an action (tool call), an observation or an answer."""

    kind: str
    """``action``, ``observation`` or ``answer``."""
    text: str
    """The thought (action, answer) or the observed tool output (observation)."""
    tool: str = ""
    arguments: Mapping[str, Any] | None = None
    answer: str = ""


@dataclass(slots=True)
class _Reply:
    """A model reply that asked for tool calls, recorded as one message when the first returns."""

    event: dict[str, Any]
    given_ids: tuple[str, ...]
    """The calls' ids as the model gave them, where a missing or repeated one was replaced by a
    made-up id in ``event``: the same message handed over later carries them."""
    held_ids: tuple[str, ...] = ()
    """The ids the reply message itself holds, where they differ from ``given_ids`` (ollama's
    blocks have none, while its calls are named by their tool)."""
    card: str = ""
    """Its card id, once recorded."""


def message_text(message: ChatMessage) -> str:
    """The text of a message; media blocks are named, not dropped silently."""
    return _blocks_text(message.blocks)


def _blocks_text(blocks: Sequence[ContentBlock]) -> str:
    parts = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif not isinstance(block, (ToolCallBlock, ThinkingBlock)):
            parts.append(_named(block))
    return "\n".join(parts)


def _named(block: ContentBlock) -> str:
    """How a message's text names a media block it holds (``[image]``)."""
    return f"[{block.block_type}]"


def tool_calls(message: ChatMessage) -> list[dict[str, Any]]:
    """OpenAI-style tool calls of a message, from ``ToolCallBlock``s or ``additional_kwargs``."""
    calls = [
        _call(block.tool_call_id or "", block.tool_name, block.tool_kwargs)
        for block in message.blocks
        if isinstance(block, ToolCallBlock)
    ]
    if calls:
        return calls
    for raw in message.additional_kwargs.get("tool_calls") or ():
        if isinstance(raw, Mapping) and "function" not in raw and "input" in raw:
            # Anthropic's tool_use ({"id", "name", "input"}), Bedrock's ({"toolUseId", ...})
            call_id = raw.get("id", raw.get("toolUseId"))
            calls.append(_call(_id(call_id), str(raw.get("name") or ""), raw.get("input")))
        elif isinstance(raw, Mapping):
            function = raw.get("function") or {}
            calls.append(_call(_id(raw.get("id")), function.get("name", ""), function.get("arguments")))
        elif hasattr(raw, "tool_id"):  # a ToolSelection
            calls.append(_call(_id(raw.tool_id), raw.tool_name, raw.tool_kwargs))
        elif hasattr(raw, "function"):  # a provider SDK object
            calls.append(_call(_id(raw.id), raw.function.name, raw.function.arguments))
    return calls


def _id(call_id: object) -> str:
    """A call id as text; a missing one is empty, which no result pairs with (not ``"None"``)."""
    return "" if call_id is None else str(call_id)


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, default=str)
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name or "unknown_tool", "arguments": text},
    }


def to_event(message: ChatMessage) -> dict[str, Any]:
    """The OpenAI-style message DAMC records for a LlamaIndex message."""
    role = _ROLES.get(message.role.value, message.role.value)
    event: dict[str, Any] = {"role": role, "content": message_text(message)}
    calls = tool_calls(message) if role == "assistant" else []
    if calls:
        event["tool_calls"] = calls
        event["content"] = event["content"] or None
    if role == "tool":
        event["tool_call_id"] = _id(message.additional_kwargs.get("tool_call_id"))
        name = message.additional_kwargs.get("name") or message.additional_kwargs.get("tool_name")
        if name:
            event["name"] = str(name)
    return _with_blocks(event, message.blocks)


def _with_blocks(event: dict[str, Any], blocks: Sequence[ContentBlock]) -> dict[str, Any]:
    """``event`` with the blocks its text does not hold (an image, the model's thinking) under
    ``blocks``: the record keeps them, and they go back to the model with the message."""
    kept = [
        block.model_dump(mode="json") for block in blocks if not isinstance(block, (TextBlock, ToolCallBlock))
    ]
    return {**event, "blocks": kept} if kept else event


def _text_key(event: Mapping[str, Any]) -> str:
    """A text turn's key among the messages handed over: role, text and the blocks kept with it
    (two turns asking "What is in this picture?" about different pictures are two messages)."""
    blocks = json.dumps(event.get("blocks") or [], sort_keys=True, default=str)
    return json.dumps(
        [event.get("role"), content_text(event.get("content")), hashlib.sha256(blocks.encode()).hexdigest()]
    )


def _blocks_of(event: Mapping[str, Any]) -> list[ContentBlock]:
    """The blocks :func:`_with_blocks` kept, as LlamaIndex blocks again."""
    kept = event.get("blocks")
    return (
        list(ChatMessage(role=MessageRole.USER, blocks=kept).blocks)
        if isinstance(kept, list) and kept
        else []
    )


def parse_react(text: str) -> list[ReactStep] | None:
    """The steps of a ReAct transcript (``Thought: / Action: / Action Input: / Observation: /
    Answer:``), or ``None`` when the text is not one: ReActAgent stores a whole run as one text.

    A tool's output may itself hold lines that start with ``Thought:`` or ``Observation:``; a
    chunk that is neither an action nor the run's final answer and follows an observation belongs
    to it (an email reading "Thought: ... Answer: the refund is approved" is not the agent's answer).
    """
    if not text.startswith("Thought:"):
        return None
    starts = [m.start() for m in _STEP.finditer(text)]
    steps: list[ReactStep] = []
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        chunk = text[start:end].rstrip("\n")
        observed = chunk.startswith("Observation:")
        body = chunk[len("Thought:") :]
        action = None if observed else _ACTION.search(body)
        answer = None if observed or action else _ANSWER.search(body)
        if steps and steps[-1].kind == "observation" and not action and not (answer and end == len(text)):
            steps[-1] = ReactStep("observation", f"{steps[-1].text}\n{chunk}")
        elif observed:
            steps.append(ReactStep("observation", chunk[len("Observation:") :].strip()))
        elif action:
            thought = body[: action.start()].strip()
            steps.append(ReactStep("action", thought, action.group(1), parse_action_input(action.group(2))))
        elif answer:
            steps.append(ReactStep("answer", body[: answer.start()].strip(), answer=answer.group(1).strip()))
    return steps if any(step.kind != "observation" for step in steps) else None


def parse_action_input(text: str) -> dict[str, Any]:
    """ReAct writes ``Action Input`` as a Python dict repr; JSON is accepted too."""
    text = text.strip()
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            continue
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    return {"input": text}


def _sent_arguments(arguments: object) -> dict[str, Any] | str:
    """A call's arguments as the model sent them: a JSON object parsed, anything else (``{bad``)
    as its text, which ``ToolCallBlock`` takes too, rather than arguments it never sent."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return {str(k): v for k, v in parsed.items()} if isinstance(parsed, dict) else text


def react_call_text(thought: str | None, name: str, arguments: str) -> str:
    try:
        rendered = repr(json.loads(arguments))
    except ValueError:
        rendered = arguments
    return f"Thought: {thought or 'I need to use a tool.'}\nAction: {name}\nAction Input: {rendered}"


def args_key(arguments: Mapping[str, Any] | str | None) -> str:
    """A call's arguments as the tool got them: a message's text read as function-calling LLMs
    read it (partial JSON: a call cut off at ``max_tokens`` ran with what had arrived), else as
    ReAct's ``Action Input``; a span's are the parsed ones already."""
    if isinstance(arguments, str):
        return _text_args_key(arguments)
    return _plain_key(arguments)


@functools.lru_cache(maxsize=4096)
def _text_args_key(text: str) -> str:
    """``args_key`` of arguments as text, remembered: every view the agent hands over holds the
    calls of the whole conversation, each read again."""
    try:
        parsed = parse_partial_json(text)
    except (ValueError, RecursionError):
        parsed = None
    return _plain_key(parsed if isinstance(parsed, dict) else parse_action_input(text))


def _plain_key(arguments: Mapping[str, Any] | None) -> str:
    # keys as JSON has them (text): a ReAct ``Action Input`` may be a Python dict with 1 and "a" as keys
    plain = json.loads(json.dumps(arguments or {}, default=str, skipkeys=True))
    return json.dumps(plain, sort_keys=True)


def _text_turn(message: ChatMessage) -> tuple[str, str] | None:
    """(role, text) of a text turn (user, assistant without tool calls, system); None for any other
    message."""
    return _text_turn_of(to_event(message))


def _text_turn_of(event: Mapping[str, Any]) -> tuple[str, str] | None:
    if event["role"] in _TEXT_ROLES and not event.get("tool_calls"):
        return event["role"], event["content"] or ""
    return None


_TEXT_ROLES = frozenset({"user", "assistant", "system", "developer"})
"""Roles of turns known by their text: a view hands each back at every call (a system note put
in the history between runs too)."""


def _call_key(call: Mapping[str, Any]) -> str:
    """A tool call by id, name and arguments (a span and a message spell the arguments apart)."""
    function = call["function"]
    return json.dumps(["call", call["id"], function["name"], args_key(function["arguments"])])


def _result_key(call_id: str, blocks: Sequence[ContentBlock]) -> str:
    """A tool result by call id and content: some providers give every call of a tool one id."""
    return _result_key_of(call_id, _blocks_text(blocks))


def _result_key_of(call_id: str, text: str) -> str:
    digest = hashlib.blake2b(text.encode(errors="replace"), digest_size=16).hexdigest()
    return json.dumps(["result", call_id, digest])


class Recorder:
    """Feeds one conversation's LlamaIndex messages to a ``DecisionMemory`` exactly once each."""

    def __init__(self, memory: DecisionMemory) -> None:
        self._memory = weakref.ref(memory)
        self._lock = threading.RLock()
        self.memory_created = False
        """Whether a ``DamcMemory`` over this memory exists (runs without it are then warned about)."""
        self._start()
        self._resume(memory)

    def __deepcopy__(self, memo: dict[int, Any]) -> Recorder:
        """One recorder per memory (see :func:`recorder_for`): a copy of what holds it shares it."""
        return self

    @property
    def memory(self) -> DecisionMemory:
        """Held weakly: the registry keeps one recorder per live memory, and a recorder holding its
        memory would keep both alive forever. Whoever uses a recorder holds its memory."""
        memory = self._memory()
        if memory is None:
            raise ReferenceError("the DecisionMemory of this recorder no longer exists")
        return memory

    def _start(self) -> None:
        """Empty per-conversation state (a new recorder, or after ``reset``)."""
        self._seen: dict[str, list[str]] = {}
        """Key of a tool call or result (see :func:`_call_key`, :func:`_result_key`) -> its cards,
        one per occurrence: the agent resends its scratchpad with every model call."""
        self._outputs: weakref.WeakValueDictionary[int, ToolOutput] = weakref.WeakValueDictionary()
        """Tool outputs recorded, by identity: a span and the event stream report the same object."""
        self._texts: Counter[tuple[str, str]] = Counter()
        self._text_order: list[tuple[str, str]] = []
        """The (role, text) of every text turn recorded, in order: a view is lined up with its tail."""
        self._text_cards: dict[tuple[str, str], list[list[str]]] = {}
        """(role, text) of a turn -> its cards (a ReAct transcript has several), per occurrence."""
        self._steps: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
        """(tool, arguments, observation) of a ReAct step -> (call id, call card, result card) of
        each time it was taken; the result card is "" while the store has not taken the result."""
        self._claimed: set[str] = set()
        """Result cards of the steps a handed-over ReAct transcript holds: a step taken again with
        the same outcome (a second seat booked) is a step of its own."""
        self._react_ids: set[str] = set()
        self._originals: dict[str, ChatMessage] = {}
        """Tool calls, result call id or text key -> the LlamaIndex message it was recorded from."""
        self.pending: set[str] = set()
        """Card ids recorded while the agent ran but not yet handed to memory (its scratchpad)."""
        self._produced: deque[list[ChatMessage]] = deque(maxlen=8)
        self._replies: dict[str, list[tuple[_Reply, str]]] = {}
        """Key of a tool call as the agent runs it -> the reply that made it, and its id there; one
        per call a reply made with that key (ollama names two calls alike by their tool)."""
        self._resumed_results: Counter[str] = Counter()
        """Call id -> results a reopened memory held, matched by call id when the text differs."""
        self._answers: dict[tuple[str, str], list[str]] = {}
        """(role, text) of final answers recorded as their step ended, not yet handed to memory ->
        their cards. A ReAct answer is known by its answer text: the agent hands it over inside
        the run's whole transcript. A new user turn ends the wait: the run that answered is over."""
        self._answered: deque[ChatMessage] = deque(maxlen=32)
        """The latest answers recorded, and assistant messages handed to memory: the event stream
        may report one as the answer after the agent put it (an answer made when the run stops at
        its iteration limit). Held, not known by ``id``: a freed message's id is reused."""
        self._waiting: list[Callable[[], None]] = []
        """The steps of recording tool outputs (a call, a result) the store refused, in order."""
        self._sections: OrderedDict[str, frozenset[str]] = OrderedDict()
        """Memory sections a ``DamcMemoryBlock`` built lately -> the cards each shows."""

    def note_section(self, text: str, cards: Iterable[str]) -> None:
        """A ``DamcMemoryBlock`` returned ``text``, which shows ``cards``."""
        with self._lock:
            self._sections.pop(text, None)
            self._sections[text] = frozenset(cards)
            while len(self._sections) > _SECTIONS_KEPT:
                self._sections.popitem(last=False)

    def shown_in(self, texts: Iterable[str]) -> set[str]:
        """The cards that the block sections found in ``texts`` show."""
        joined = "\n".join(texts)
        with self._lock:
            return {card for text, cards in self._sections.items() if text in joined for card in cards}

    def _resume(self, memory: DecisionMemory, since: int = 0) -> None:
        """Know what a reopened memory holds, so a history handed over again (an app passing its
        saved chat back after a restart) is not recorded twice; from event ``since`` on, what
        another worker on the conversation stored."""
        try:
            for card_id, event in memory.history(since):
                role, text = event.get("role"), content_text(event.get("content"))
                if role == "tool":
                    call_id = str(event.get("tool_call_id"))
                    self._seen.setdefault(_result_key_of(call_id, text), []).append(card_id)
                    self._resumed_results[call_id] += 1  # a tool's data, handed back as its text
                elif event.get("tool_calls"):
                    for call in event["tool_calls"]:
                        if isinstance(call, dict) and isinstance(call.get("function"), dict):
                            self._seen.setdefault(_call_key(call), []).append(card_id)
                            if event.get("react"):
                                self._react_ids.add(str(call.get("id")))
                elif role in _TEXT_ROLES:
                    self._count_text((role, text))
                    self._text_cards.setdefault((role, text), []).append([card_id])
        except Exception:  # the conversation goes on; at worst a resent message is a card twice
            logger.exception("damc: reading what the reopened memory holds failed")

    def _catch_up(self) -> None:
        """Read in what another worker serving this conversation stored since (a new turn)."""
        mark = self.memory.event_count
        try:
            self.memory.refresh()
        except Exception:  # the store is out of reach: record on what this worker knows
            logger.exception("damc: reading what other workers stored failed")
        if self.memory.event_count > mark:
            self._resume(self.memory, since=mark)

    # -- recording -------------------------------------------------------------------------
    def put(self, message: ChatMessage) -> None:
        """A message the agent hands to memory: always a new turn, unless a tool call or result
        (or ReAct step) that a span, an event or the LLM proxy recorded already."""
        with self._lock:
            if message.role == MessageRole.USER:
                self.pending.clear()  # a new user turn: the previous run's scratchpad is history now
                self._answers.clear()
                self._catch_up()
            elif message.role == MessageRole.ASSISTANT:
                self._answered.append(message)
            self._record(message, confirm=True)

    def record_answer(self, reply: ChatMessage) -> None:
        """The agent's final answer, recorded as its step ends: a ``DamcLLM`` alone never sees it
        again (a new run starts from the next user turn), and a ``DamcMemory`` that is handed it
        afterwards does not record it twice. Never raises into the agent."""
        try:
            with self._lock:
                if not message_text(reply).strip() or any(reply is m for m in self._answered):
                    return  # (a span and the event stream report the same reply)
                self._answered.append(reply)
                self._record(reply, confirm=True, answer=True)
                role, text = to_event(reply)["role"], message_text(reply)
                steps = parse_react(text) if role == "assistant" else None
                answer = steps[-1].answer if steps and steps[-1].kind == "answer" else text
                card = self._text_cards[(role, text)][-1][-1]
                self._answers.setdefault((role, answer), []).append(card)
        except Exception:
            logger.exception("damc: recording the agent's answer failed; the agent goes on")

    def record_direct_answer(self, reply: ChatMessage) -> None:
        """The output of a ``return_direct`` tool, the answer of the run it stops: no model call
        follows to hand it over. The agent put it in its memory a moment before (a ``DamcMemory``
        recorded it then, in a ReAct transcript too): it is not recorded twice."""
        with self._lock:
            turn = _text_turn(reply)
            for key in reversed(self._text_order):
                if key == turn:
                    return
                if key[0] == "user":
                    break
            self.record_answer(reply)

    def holds_text(self, message: ChatMessage) -> bool:
        """Whether a message with this role and text was recorded already."""
        with self._lock:
            return self._texts[(to_event(message)["role"], message_text(message))] > 0

    def produced_ids(self) -> set[int]:
        """Identities of the messages DAMC returned lately (they are its output, not new input)."""
        with self._lock:
            return {id(m) for batch in self._produced for m in batch}

    def observe_view(self, messages: Sequence[ChatMessage], *, confirm: bool = False) -> None:
        """Messages the agent sends its model (history, then scratchpad): record what is new.

        Text turns count as new when this list holds more of them than were recorded; messages
        DAMC produced itself are skipped. A user turn that ends the list is the request, new unless
        it is what was recorded last: a run that starts from that turn alone (an agent without a
        memory) may repeat an earlier run's words ("yes"). ``confirm``: the messages are in the
        agent's memory already, not a scratchpad still to be handed over."""
        with self._lock:
            produced = self.produced_ids()
            own = [m for m in messages if id(m) not in produced]
            request = own[-1] if own and own[-1].role == MessageRole.USER else None
            if request is not None:
                self._catch_up()
            if request is not None and self._recorded_last(request):
                request = None
            if request is not None:  # a run starts: the previous run's scratchpad is history now,
                self.pending.clear()  # whether or not a DamcMemory was handed it
            events = [to_event(message) for message in own]
            keys = [_text_turn_of(event) for event in events]  # (None: a call or a result)
            recorded = self._recorded_within([key for key in keys if key is not None])
            seen: Counter[tuple[str, str]] = Counter()
            for message, event, key in zip(own, events, keys, strict=True):
                if key is not None:
                    seen[key] += 1
                    if seen[key] <= recorded[key] and message is not request:
                        if self._answers.get(key):  # an answer recorded as its step ended, back as
                            self._answers[key].pop(0)  # history: never handed over again
                        continue
                self._record(message, confirm=confirm, event=event)
            if request is not None:
                self._answers.clear()  # a run starts: an earlier run's answer was handed back, or never is

    def _count_text(self, key: tuple[str, str]) -> None:
        self._texts[key] += 1
        self._text_order.append(key)

    def _recorded_within(self, turns: list[tuple[str, str]]) -> Counter[tuple[str, str]]:
        """How often each text turn was recorded in the stretch of the conversation a view covers.

        A view may hold the newest messages only (``Memory``'s queue once it flushed, a
        ``ChatMemoryBuffer`` cut to its limit): its turns are lined up with the earliest place
        in the record from which they repeat it to its end, or to their own end; a "Done." said
        in every run is then new in the view's last run, though said before. A view that lines up
        nowhere is counted against the whole record."""
        order = self._text_order
        if turns:
            for start in (i for i, key in enumerate(order) if key == turns[0]):
                overlap = min(len(turns), len(order) - start)
                if order[start : start + overlap] == turns[:overlap]:
                    return self._texts if start == 0 else Counter(order[start:])
        return self._texts

    def _recorded_last(self, message: ChatMessage) -> bool:
        """Whether the newest turn of the conversation, tool calls and results aside (a span
        records them as the run goes), is this message's turn."""
        return bool(self._text_order) and self._text_order[-1] == _text_turn(message)

    def cards_of(self, messages: Sequence[ChatMessage]) -> set[str]:
        """Ids of the cards recorded for ``messages``, a repeated message matched to its newest
        occurrences: a view holds the newest messages of the conversation."""
        with self._lock:
            taken: Counter[str] = Counter()
            found: set[str] = set()
            for message in reversed(messages):
                event = to_event(message)
                occurrences: list[list[str]]
                if event["role"] == "tool":
                    key = _result_key(event["tool_call_id"], message.blocks)
                    occurrences = [[c] for c in self._seen.get(key, [])]
                elif event.get("tool_calls"):
                    key = _call_key(event["tool_calls"][0])
                    occurrences = [[c] for c in self._seen.get(key, [])]
                else:
                    key = json.dumps([event["role"], event["content"] or ""])
                    occurrences = self._text_cards.get((event["role"], event["content"] or ""), [])
                if taken[key] < len(occurrences):
                    found.update(occurrences[-1 - taken[key]])
                taken[key] += 1
            return found

    def expect_calls(self, reply: ChatMessage, calls: Sequence[ToolSelection]) -> None:
        """The model ``reply`` that asked for ``calls``: when the first of them returns, one assistant
        message holds them all with the reply's text (a ReAct reply's thought), as the model produced
        them; each result follows it. Never raises into the agent."""
        try:
            with self._lock:
                if not calls:
                    return
                text = message_text(reply)
                steps = parse_react(text)
                action = steps[-1] if steps and steps[-1].kind == "action" else None
                if action is not None:
                    text = action.text
                ids: list[str] = []
                for call in calls:  # an id missing or given twice (ollama names calls by tool): made up
                    ids.append(call.tool_id if call.tool_id and call.tool_id not in ids else self._new_id())
                made = [
                    _call(i, call.tool_name, call.tool_kwargs) for i, call in zip(ids, calls, strict=True)
                ]
                held = tuple(call["id"] for call in tool_calls(reply))
                event = {"role": "assistant", "content": text or None, "tool_calls": made}
                expected = _Reply(
                    _with_blocks({**event, "react": True} if action else event, reply.blocks),
                    given_ids=tuple(call.tool_id or "" for call in calls),
                    held_ids=held if len(held) == len(calls) else (),
                )
                waiting: dict[str, list[tuple[_Reply, str]]] = {}
                for call_id, call in zip(ids, calls, strict=True):
                    key = _call_key(_call(call.tool_id, call.tool_name, call.tool_kwargs))
                    waiting.setdefault(key, []).append((expected, call_id))
                for key, expecting in waiting.items():  # an earlier reply's call that never ran is forgotten
                    self._replies.pop(key, None)
                    self._replies[key] = expecting
                while len(self._replies) > _REPLIES_KEPT:
                    del self._replies[next(iter(self._replies))]
        except Exception:
            logger.exception("damc: noting the model's tool calls failed; the agent goes on")

    def record_tool_output(
        self, name: str, arguments: Mapping[str, Any] | None, output: ToolOutput, *, call_id: str | None
    ) -> None:
        """A tool's output as it returns, as a call and its result (an error when the tool failed),
        once per output object; never raises into the agent. One the store refuses (a file locked
        for a moment) waits for the next event recorded, and goes in before it."""
        try:
            with self._lock:
                if self._outputs.get(id(output)) is output:
                    return
                self._outputs[id(output)] = output
                given = call_id or ""
                key = _call_key(_call(given, name, arguments))
                expecting = self._replies.get(key)
                expected = expecting.pop(0) if expecting else None
                if expecting is not None and not expecting:
                    del self._replies[key]
                call_card = [""]
                if expected is not None:
                    reply, call_id = expected

                    def record_call() -> None:
                        call_card[0] = self._record_reply(reply)

                else:
                    call_id = call_id or self._new_id()
                    call = _call(call_id, name, arguments)

                    def record_call() -> None:
                        call_card[0] = self._observe(
                            _call_key(call), {"role": "assistant", "content": None, "tool_calls": [call]}
                        )

                answered = call_id
                self._waiting += [
                    record_call,
                    lambda: self._record_result(name, arguments, output, answered, given, call_card[0]),
                ]
                self._record_waiting()
        except StoreError as exc:
            logger.warning("damc: recording the %s result waits for the store: %s", name, exc)
        except Exception:
            logger.exception("damc: recording the %s result failed; the agent goes on", name)

    def _record_result(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        output: ToolOutput,
        call_id: str,
        given: str,
        call_card: str,
    ) -> None:
        """Record a tool's output as the result of its call, recorded as ``call_card``."""
        event: dict[str, Any] = _with_blocks(
            {"role": "tool", "tool_call_id": call_id, "name": name, "content": _tool_content(output)},
            output.blocks,
        )
        if output.is_error:
            event["status"] = "error"
        result_card = self._observe(_result_key(call_id, output.blocks), event)
        if given != call_id:  # the result message handed over later names the given id
            self._seen.setdefault(_result_key(given, output.blocks), []).append(result_card)
        self.pending.update((call_card, result_card))
        observation = str(output.content).strip()  # as a ReAct observation shows it
        step = (call_id, call_card, result_card)
        self._steps.setdefault((name, args_key(arguments), observation), []).append(step)

    def _record_waiting(self) -> None:
        """Record the tool outputs waiting, in order, before anything recorded after them: a
        result keeps its place right after its call. Raises the store's error while it refuses
        them (they wait, up to ``_WAITING_KEPT`` steps); a step that fails otherwise is left out."""
        while self._waiting:
            try:
                self._waiting[0]()
            except StoreError as exc:
                if isinstance(exc, StoreClosedError) or len(self._waiting) > _WAITING_KEPT:
                    logger.error(
                        "damc: %s; %d steps of tool outputs are not recorded", exc, len(self._waiting)
                    )
                    self._waiting.clear()
                raise
            except Exception:
                self._waiting.pop(0)
                raise
            self._waiting.pop(0)

    def _record_reply(self, reply: _Reply) -> str:
        """The card of ``reply``'s assistant message, recorded when its first call returns."""
        if not reply.card:
            reply.card = self.memory.observe(reply.event).id
            if reply.event.get("react"):  # sent back as the text ReAct wrote, as after a restart
                self._react_ids.update(call["id"] for call in reply.event["tool_calls"])
            held = reply.held_ids or reply.given_ids
            for call, given, own in zip(reply.event["tool_calls"], reply.given_ids, held, strict=True):
                self._seen.setdefault(_call_key(call), []).append(reply.card)
                for other in dict.fromkeys((given, own)):  # known by the ids the model gave it too
                    if other != call["id"]:
                        self._seen.setdefault(_call_key({**call, "id": other}), []).append(reply.card)
        return reply.card

    def _observe(self, key: str, event: Mapping[str, Any]) -> str:
        """Record ``event`` as one more occurrence of ``key``; return its card id."""
        card = self.memory.observe(event)
        self._seen.setdefault(key, []).append(card.id)
        return card.id

    def _confirm_if_known(self, key: str, confirm: bool) -> bool:
        """Whether ``key`` was recorded already (the message is sent again, or came from its tool);
        if so, its cards are confirmed as handed to memory when ``confirm``."""
        cards = self._seen.get(key)
        for card_id in cards or ():
            self._confirm(card_id, confirm)
        return cards is not None

    def _record(
        self,
        message: ChatMessage,
        *,
        confirm: bool,
        answer: bool = False,
        event: dict[str, Any] | None = None,
    ) -> None:
        """``answer``: the message is an answer as its step ends; any other may repeat one.
        ``event``: the message's ``to_event``, when the caller has it."""
        self._record_waiting()  # first: the message may be a waiting tool output handed over
        event = to_event(message) if event is None else event
        role = event["role"]
        if role == "tool":
            call_id = event["tool_call_id"]
            result = _result_key(call_id, message.blocks)
            known = self._confirm_if_known(result, confirm)
            if not known and self._resumed_results[call_id] > 0:
                self._resumed_results[call_id] -= 1
            elif not known:
                self._track(self._observe(result, event), confirm)
                self._keep_original(f"tool:{call_id}", message)
            return
        calls = event.get("tool_calls") or []
        if calls:
            fresh = [call for call in calls if not self._confirm_if_known(_call_key(call), confirm)]
            if not fresh:
                return
            card = self.memory.observe({**event, "tool_calls": fresh})
            for call in fresh:
                self._seen.setdefault(_call_key(call), []).append(card.id)
            if len(fresh) == len(calls):  # a message some of whose calls were known is not handed back
                self._keep_original(f"calls:{json.dumps(fresh)}", message)
            self._track(card.id, confirm)
            return
        key = (role, event["content"] or "")
        if not answer and self._answers.get(key):  # handed over after its step recorded it
            self._answers[key].pop(0)
            return
        if confirm and not answer:  # a text turn of the running task's scratchpad, handed over now
            waiting = next(
                (
                    cards
                    for cards in self._text_cards.get(key, ())
                    if cards and self.pending.issuperset(cards)
                ),
                None,
            )
            if waiting is not None:
                for card_id in waiting:
                    self._confirm(card_id, confirm)
                return
        steps = parse_react(key[1]) if role == "assistant" else None
        # a ReAct transcript: its actions and observations become calls and results; an answer
        # that only looks like an action (a model writing its call as text) is that text
        cards = self._record_react(steps, confirm=confirm, answer=answer) if steps is not None else []
        if not cards and (steps is None or answer):
            self._keep_original(_text_key(event), message)  # the newest: the request sent last
            cards = [self.memory.observe(event).id]
            self._track(cards[0], confirm)
        self._count_text(key)  # counted once recorded: a turn the store refused is recorded when seen again
        self._text_cards.setdefault(key, []).append(cards)

    def _keep_original(self, key: str, message: ChatMessage) -> None:
        """Keep the message a recorded event came from, to hand the agent its own object back;
        past ``_ORIGINALS_KEPT`` the oldest is rebuilt from its event instead (images included)."""
        self._originals.pop(key, None)
        self._originals[key] = message
        while len(self._originals) > _ORIGINALS_KEPT:
            del self._originals[next(iter(self._originals))]

    def record_react_tail(self, messages: Sequence[ChatMessage]) -> dict[int, Card]:
        """ReAct scratchpad messages (assistant actions, ``Observation:`` turns): record new steps,
        return the result card of each observation message by its position."""
        with self._lock:
            self._record_waiting()
            found: dict[int, Card] = {}
            action: ReactStep | None = None
            for index, message in enumerate(messages):
                text = message_text(message)
                steps = parse_react(text) or []
                if message.role == MessageRole.ASSISTANT and steps and steps[-1].kind == "action":
                    action = steps[-1]
                elif text.startswith("Observation:") and action is not None:
                    observation = text[len("Observation:") :].strip()
                    card = self.memory.card(self._react_step(action, observation, confirm=False)[2])
                    if card is not None:
                        found[index] = card
                    action = None
            return found

    def _record_react(self, steps: list[ReactStep], *, confirm: bool, answer: bool) -> list[str]:
        """Record the steps of a ReAct transcript; return the ids of their call, result and answer cards."""
        action: ReactStep | None = None
        cards = []
        claimed: set[str] = set()
        for step in steps:
            if step.kind == "action":
                action = step
            elif step.kind == "observation" and action is not None:
                _, call_card, result_card = self._react_step(
                    action, step.text, confirm=confirm, claimed=claimed
                )
                claimed.add(result_card)
                cards += [call_card, result_card]
                action = None
            elif step.kind == "answer" and not answer and self._answers.get(("assistant", step.answer)):
                cards.append(self._answers[("assistant", step.answer)].pop(0))  # recorded as it ended
            elif step.kind == "answer":
                cards.append(self.memory.observe({"role": "assistant", "content": step.answer}).id)
                self._count_text(("assistant", step.answer))
                self._track(cards[-1], confirm)
        self._claimed |= claimed  # once the whole transcript is recorded: a retry claims them again
        return cards

    def _react_step(
        self, action: ReactStep, observation: str, *, confirm: bool, claimed: set[str] | None = None
    ) -> tuple[str, str, str]:
        """Record one action and its observation unless already recorded; return (call id, call
        card, result card). ``claimed``: the step is one of a transcript's, which takes a recorded
        step no transcript took yet (none of those ``claimed`` from it so far); else the newest."""
        key = (action.tool, args_key(action.arguments), observation)
        taken = self._steps.setdefault(key, [])
        if claimed is None:
            index = len(taken) - 1
        else:
            unclaimed = (i for i, t in enumerate(taken) if t[2] not in self._claimed and t[2] not in claimed)
            index = next(unclaimed, -1)
        known = taken[index] if index >= 0 else None
        if known is not None and known[2]:
            call_id, call_card, _ = known
            self._react_ids.add(call_id)
            self._confirm(call_card, confirm)
            self._confirm(known[2], confirm)
            return known
        if known is None:  # else the call was recorded and the store refused its result: go on from there
            call_id = self._new_id()
            self._react_ids.add(call_id)
            arguments = json.dumps(action.arguments or {}, default=str)
            call = self.memory.observe(
                {
                    "role": "assistant",
                    "content": action.text or None,
                    "tool_calls": [_call(call_id, action.tool, arguments)],
                    "react": True,  # read back as a ReAct step after a restart
                }
            )
            self._track(call.id, confirm)
            known = (call_id, call.id, "")
            taken.append(known)
            index = len(taken) - 1
        call_id, call_card, _ = known
        result = self.memory.observe(
            {"role": "tool", "tool_call_id": call_id, "name": action.tool, "content": observation}
        )
        self._track(result.id, confirm)
        taken[index] = (call_id, call_card, result.id)
        return taken[index]

    def _track(self, card_id: str, confirm: bool) -> None:
        if not confirm:
            self.pending.add(card_id)

    def _confirm(self, card_id: str, confirm: bool) -> None:
        if confirm:
            self.pending.discard(card_id)

    @staticmethod
    def _new_id() -> str:
        """An id for a call the model gave none, unique across processes: a reopened conversation
        holds the earlier ones."""
        return f"damc_call_{uuid.uuid4().hex[:16]}"

    def reset(self) -> None:
        with self._lock:
            self._start()

    # -- converting back -------------------------------------------------------------------
    def to_chat_messages(self, events: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
        """LlamaIndex messages for DAMC's built context: the original objects where the event came
        from one, tool results with their card text, ReAct steps in ReAct's own text format."""
        with self._lock:
            out = [self._to_chat_message(event) for event in events]
            self._produced.append(out)
            return out

    def _to_chat_message(self, event: Mapping[str, Any]) -> ChatMessage:
        role = str(event.get("role"))
        content = event.get("content")
        text = content if isinstance(content, str) else "" if content is None else str(content)
        calls = list(event.get("tool_calls") or ())
        if calls:
            first = calls[0]["id"]
            if first in self._react_ids:
                function = call_function(calls[0])
                return ChatMessage(
                    role=MessageRole.ASSISTANT,
                    content=react_call_text(text, function["name"], function["arguments"]),
                )
            original = self._originals.get(f"calls:{json.dumps(calls)}")
            if original is not None:
                return original
            thinking = [b for b in _blocks_of(event) if isinstance(b, ThinkingBlock)]
            blocks: list[Any] = [*thinking, *([TextBlock(text=text)] if text else [])]
            for call in calls:
                function = call_function(call)  # a custom tool's call: its input as the arguments
                blocks.append(
                    ToolCallBlock(
                        tool_call_id=call["id"],
                        tool_name=function["name"],
                        tool_kwargs=_sent_arguments(function["arguments"]),
                    )
                )
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)
        if role == "tool":
            call_id = _id(event.get("tool_call_id"))
            if call_id in self._react_ids:
                return ChatMessage(role=MessageRole.USER, content=f"Observation: {text}")
            original = self._originals.get(f"tool:{call_id}")
            kwargs = dict(original.additional_kwargs) if original is not None else {}
            kwargs.setdefault("tool_call_id", call_id)
            if event.get("name"):
                kwargs.setdefault("name", event["name"])
            return ChatMessage(
                role=MessageRole.TOOL, blocks=_interleaved(text, event), additional_kwargs=kwargs
            )
        original = self._originals.get(_text_key(event))
        if original is not None:
            return original
        role_of = MessageRole(role) if role in _VALID_ROLES else MessageRole.USER
        return ChatMessage(role=role_of, blocks=_interleaved(text, event))


def _interleaved(text: str, event: Mapping[str, Any]) -> list[ContentBlock]:
    """The blocks of a message rebuilt from its record: its text with each media block back where
    :func:`message_text` named it (``[image]``), the rest after it."""
    blocks: list[ContentBlock] = []
    lines: list[str] = []
    waiting = _blocks_of(event)
    for line in text.split("\n") if text else ():
        media = next((b for b in waiting if not isinstance(b, ThinkingBlock)), None)
        if media is not None and line == _named(media):
            if lines:
                blocks.append(TextBlock(text="\n".join(lines)))
                lines = []
            blocks.append(media)
            waiting.remove(media)
        else:
            lines.append(line)
    if lines or not blocks:
        blocks.append(TextBlock(text="\n".join(lines)))
    return [*blocks, *waiting]


_VALID_ROLES = frozenset(r.value for r in MessageRole)


def _tool_content(output: ToolOutput) -> Any:
    """What a tool returned: its ``raw_output`` when that is JSON data (``ToolOutput.content`` is
    its Python repr), else its text, with the media blocks it holds named as a message's text names
    them (``ToolOutput.content`` leaves out a picture the tool returned). A pydantic model (or a
    list of them) is its data: ``ToolOutput.content`` is the model's ``str``, no repr of it. Bytes
    and a NumPy array are left to the memory, which reads them as text and as rows
    (``ToolOutput.content`` is ``b'...'`` and the array's printout, without commas)."""
    raw = _model_data(output.raw_output)
    if isinstance(raw, (bytes, bytearray, np.ndarray)):
        return raw
    if isinstance(raw, (dict, list)):
        try:
            json.dumps(raw)
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            return raw
    return _blocks_text(output.blocks)


def _model_data(raw: Any) -> Any:
    """A pydantic model, or a list of them, as JSON data; anything else as it is (content blocks,
    pydantic models too, are the output's blocks already). LlamaIndex's own objects (a
    ``RetrieverTool``'s nodes) are left as they are: their dump is the index's storage form
    (embedding, templates, relationships), and the tool gave the model their text."""
    models = raw if isinstance(raw, (list, tuple)) and raw else [raw]
    if not all(isinstance(m, BaseModel) and not _llama_index_own(m) for m in models):
        return raw
    try:
        data = [model.model_dump(mode="json") for model in models]
    except Exception:  # a model whose fields do not serialise: its text, as before
        return raw
    return data if isinstance(raw, (list, tuple)) else data[0]


def _llama_index_own(model: BaseModel) -> bool:
    """Whether ``model`` is one of LlamaIndex's objects (a node, a content block, a ``ToolOutput`` a
    ``FunctionTool``'s function returned, whose dump holds its pictures' base64)."""
    return isinstance(model, BaseComponent) or type(model).__module__.startswith("llama_index.")


class CopyableLock:
    """A reentrant lock a deep copy replaces with its own (a lock itself cannot be copied): a copy
    of a pydantic object holding it (a ``Memory`` cloned per request) has state of its own."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def __deepcopy__(self, memo: dict[int, Any]) -> CopyableLock:
        return CopyableLock()


_RECORDERS: weakref.WeakKeyDictionary[DecisionMemory, Recorder] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def recorder_for(memory: DecisionMemory) -> Recorder:
    """The one recorder of ``memory``, shared by every LlamaIndex surface that uses it."""
    with _REGISTRY_LOCK:
        recorder = _RECORDERS.get(memory)
        if recorder is None:
            recorder = _RECORDERS[memory] = Recorder(memory)
        return recorder
