"""``DecisionMemory``: observe events, build the context for the next decision, recall raw records.

The class wires the stages (encode, value, select, compress, assemble) and owns no policy of its
own: every stage is a constructor argument with a default implementation.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import inspect
import itertools
import json
import logging
import numbers
import re
import reprlib
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, ParamSpec, TypeVar

import numpy as np

from .assemble import Assembler, DefaultAssembler, fence_memory, more_calls, sendable_call
from .checks import finite_number, whole_number
from .compress import (
    Compressor,
    Detail,
    TemplateCompressor,
    identity_columns,
    left_out_values,
    mentions,
    row_identifiers,
    row_names,
    volatile_columns,
)
from .encode import (
    HOSTED_TOOL,
    DefaultEncoder,
    Encoder,
    ToolCall,
    argument_dates,
    argument_fields,
    argument_id_fields,
    argument_ids,
    argument_values,
    call_key,
    field_name,
    id_kind,
    parse_arguments,
    root_id,
)
from .errors import ConfigError, RecordExistsError, StoreError
from .events import FOREIGN_FORMATS, REASONING, foreign_format, normalize_event, tool_events, with_tool_calls
from .excerpt import excerpt
from .extract import (
    FUNCTION_WORDS,
    IDENTIFIER_TERM,
    changes_state,
    exact_terms,
    is_handle,
    is_identifier,
    names_in_text,
)
from .render import CardRenderer
from .select import (
    FAR_OVER_BUDGET,
    LEAN_TRIES,
    OVER_BUDGET,
    HybridSelector,
    Selector,
    Supersession,
    upgrade_detail,
)
from .stores import MemoryStore, SQLiteStore
from .tokens import (
    MESSAGE_OVERHEAD,
    TiktokenCounter,
    TokenCounter,
    call_function,
    content_text,
    count_messages,
    media_tokens,
    message_text,
)
from .types import (
    BuiltContext,
    Card,
    CardKind,
    Decision,
    DecisionFocus,
    Fact,
    Message,
    Namespace,
    RawRecord,
    ScoredCard,
    Table,
    updated,
)
from .value import (
    CandidateSource,
    DecisionRecorder,
    Emptying,
    Forgetting,
    ObservedDecision,
    ValuationContext,
    Valuator,
    heuristics_of,
    seq_of,
    topic_words,
)

logger = logging.getLogger("damc")

P = ParamSpec("P")
R = TypeVar("R")

KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
UNSENT_ROLES = frozenset({REASONING, HOSTED_TOOL})
"""Roles of the events that are cards but never messages of the dialogue."""
OPEN_DECISIONS_KEPT = 64
"""Tool calls awaiting their result to be learnt from; the oldest give way (a call whose result
never came would hold its context, the history up to it, for good)."""

SHORTLIST_BUDGETS = 4
"""Cards are rendered for a decision only while their standing cost, in value order, stays within
this many budgets (and at least ``SHORTLIST_MIN`` cards)."""
SHORTLIST_MIN = 32
LINK_FANOUT = 4
"""Newest cards per argument value that a call links to (the holders it most likely read)."""
FOCUS_WINDOW = 4
"""Dialogue turns (user or assistant text) that the decision focus is read from."""
WORDS_SCANNED = 20_000
"""Characters of a turn read for its words and for the decision focus: a pasted document's tail
is not what the next decision is about (it stays whole in the raw record and the card)."""
MENTION_FANOUT = 24
"""Newest cards per term that a mention or an argument refreshes; bounds the work per event."""
REQUEST_SHARE = 0.5
"""Most of the memory budget the user's newest turn takes: a longer one (a pasted document) is
sent at key detail, cut to its first lines with a hint to recall the rest if still too long, so
the request is never left out."""
LEAD_SHARE = 0.25
"""Most of the budget a user turn leading the recent window takes (see ``_user_before``): the
dialogue must open with the user, but the turn it opens with is usually the long task statement,
and the window's messages cannot give way to the cards as the memory section's lines do."""
NEWEST_YIELDS_TO = 0.6
"""Value from which a card's room is kept from the newest tool result. The newest result is cut
to ``newest_share`` only as far as such cards need the room: a greeting or a restated plan does
not push out the rows the agent is about to pick from."""
LEFT_OUT = "Not shown: "
"""How the memory section's last line starts: cards the budget left out, with their values."""
NAMED_LEFT_OUT = "named with its values in the left-out line"
"""The reason a dropped card that the left-out line names gives, after why it was dropped."""
LEFT_OUT_CANDIDATES = 24
"""The most valuable cards left out that the line considers: past them, it is full or their values
are all shown elsewhere, and each costs a scan."""
LEFT_OUT_MIN_TOKENS = 4
"""Room in which no card's id, tool and a value would fit: the left-out line stops there."""

RECALL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "recall",
        "description": "Return the full raw record behind a memory card, e.g. every row of a long "
        "search result. Use it when a card (it starts with its id, e.g. [c12]) ends in '(more)', '(cut)' "
        "or '(+N more rows)', or a needed detail is missing. For a long record, pass match to get only "
        "the rows (or lines) that contain a text, such as an id or a name.",
        "parameters": {
            "type": "object",
            "properties": {
                "card_id": {"type": "string", "description": "Card id such as c12."},
                "match": {
                    "type": "string",
                    "description": "Optional: only the rows or lines that contain this text (case-blind).",
                },
            },
            "required": ["card_id"],
        },
    },
}
"""OpenAI-style tool definition that lets an agent expand a compressed card. Its result, the newest
tool result, is sent as it is, within the whole budget rather than the newest result's share."""
RECALL_NAME: str = RECALL_TOOL["function"]["name"]


def _is_recall_answer(card: Card) -> bool:
    return card.kind is CardKind.TOOL_RESULT and card.tool_name == RECALL_NAME


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """Knobs of the context builder, validated when the memory is made."""

    budget: int = 1200
    """Tokens for the memory section plus the recent dialogue (the system prompt is not counted)."""
    budget_ratio: float | None = None
    """If set, the budget grows with the history: ``min_budget`` plus this share of what the
    history would cost verbatim, up to ``budget``. A long conversation holds more values its next
    calls take than a short one; at the same total cost, a budget that grows with it keeps more of
    them than a fixed one (0.975 of tool facts at a token ratio of 0.20, with ``min_budget=285,
    budget_ratio=0.074``, against 0.944 at 0.19 with a fixed budget of 425, on 100 tau-bench airline
    conversations; README, Measuring)."""
    min_budget: int = 200
    """The budget for an empty history when ``budget_ratio`` is set; it grows from there."""
    left_out_share: float = 0.08
    """Share of the memory budget held for the section's last line, which names the cards the
    budget left out with the values a next call may take from them (``Not shown: c7
    get_reservation_details: HAT028, HAT277``): a few tokens each where the card would cost a
    hundred, and the model can recall the card by its id. What the line does not use is not given
    back to the cards (handing it to their detail kept no more); ``0`` leaves the line out."""
    left_out_values: int = 6
    """Most values the left-out line gives for one card."""
    recent_messages: int = 2
    """Newest messages sent as they are (widened so no tool result loses its call)."""
    recent_share: float = 0.25
    """Most of the budget the recent window takes: past it, its older messages compete in the
    memory section as cards (an assistant's long recap costs a tight budget the facts it restates
    less well than their cards). The newest message, or call with its results, always stays."""
    newest_share: float = 0.4
    """Most of the memory budget the newest tool result takes, sent whole: a longer one is cut to
    that share, the rows the focus matches first, so the cards before it still fit (the agent
    may pick from it next, or go on to another lookup). It goes whole if they leave room; as a
    card, it yields room only to cards worth ``NEWEST_YIELDS_TO``. The
    share is of what the user's request (as sent) leaves, among the cards and in the recent
    window alike: a long request leaves less."""
    compress_recent_tool_results: bool = True
    """Send tool results inside the recent window as their card text instead of the raw output."""
    as_of_after: float = 300.0
    """Volatile cards older than this many seconds are shown with ``(as of <time> UTC)``."""
    max_candidates: int = 96
    """Past this many cards, only a shortlist (best prior x decay, focus matches, newest) is valued."""
    superseded: str = "drop"
    """``drop`` superseded cards, or ``mark`` them and let them compete for the budget."""

    def budget_for(self, history_tokens: int, budget: int | None = None) -> int:
        """The budget (``budget``, or this one's) for a history that costs ``history_tokens``
        verbatim: as it is, or with ``budget_ratio`` grown from ``min_budget`` up to it."""
        budget = self.budget if budget is None else budget
        if self.budget_ratio is None:
            return budget
        return min(budget, self.min_budget + int(self.budget_ratio * history_tokens))

    def __post_init__(self) -> None:
        for name, kind in _SETTING_KINDS.items():
            value = getattr(self, name)
            if not (value is None and name in _OPTIONAL_SETTINGS) and not _is_a(value, kind):
                expected = _KIND_NAMES.get(kind, "a string")
                raise ConfigError(f"MemorySettings.{name} must be {expected}, got {value!r}")
        if self.budget <= 0:
            raise ConfigError(f"MemorySettings.budget must be > 0 tokens, got {self.budget}")
        if self.recent_messages < 0:
            raise ConfigError(f"MemorySettings.recent_messages must be >= 0, got {self.recent_messages}")
        if not 0 < self.recent_share <= 1:
            raise ConfigError(f"MemorySettings.recent_share must be in (0, 1], got {self.recent_share}")
        if not 0 < self.newest_share <= 1:
            raise ConfigError(f"MemorySettings.newest_share must be in (0, 1], got {self.newest_share}")
        if self.budget_ratio is not None and not 0 < self.budget_ratio <= 1:
            raise ConfigError(f"MemorySettings.budget_ratio must be in (0, 1], got {self.budget_ratio}")
        if self.min_budget <= 0:
            raise ConfigError(f"MemorySettings.min_budget must be > 0 tokens, got {self.min_budget}")
        if self.budget_ratio is not None and self.min_budget > self.budget:
            raise ConfigError(
                f"MemorySettings.min_budget ({self.min_budget}) is above budget ({self.budget}): with "
                "budget_ratio the budget grows from min_budget up to budget"
            )
        if not 0 <= self.left_out_share < 1:
            raise ConfigError(f"MemorySettings.left_out_share must be in [0, 1), got {self.left_out_share}")
        if self.left_out_values <= 0:
            raise ConfigError(f"MemorySettings.left_out_values must be > 0, got {self.left_out_values}")
        if self.max_candidates <= 0:
            raise ConfigError(f"MemorySettings.max_candidates must be > 0, got {self.max_candidates}")
        if self.as_of_after < 0:
            raise ConfigError(f"MemorySettings.as_of_after must be >= 0 seconds, got {self.as_of_after}")
        if self.superseded not in ("drop", "mark"):
            raise ConfigError(f"MemorySettings.superseded must be 'drop' or 'mark', got {self.superseded!r}")


_SETTING_KINDS: dict[str, type] = {
    "budget": numbers.Integral,
    "budget_ratio": numbers.Real,
    "min_budget": numbers.Integral,
    "left_out_share": numbers.Real,
    "left_out_values": numbers.Integral,
    "recent_messages": numbers.Integral,
    "recent_share": numbers.Real,
    "newest_share": numbers.Real,
    "compress_recent_tool_results": bool,
    "as_of_after": numbers.Real,
    "max_candidates": numbers.Integral,
    "superseded": str,
}
_OPTIONAL_SETTINGS = frozenset({"budget_ratio"})
_KIND_NAMES = {numbers.Integral: "a whole number", numbers.Real: "a finite number", bool: "True or False"}


def _is_a(value: object, kind: type) -> bool:
    """Whether ``value`` is a ``kind`` a setting can hold: a bool is not a number, and a number
    must be finite (``nan`` passes every comparison a range check makes)."""
    if kind is numbers.Real:
        return finite_number(value)
    if kind is numbers.Integral:
        return whole_number(value)
    return isinstance(value, kind) and (kind is bool) == isinstance(value, bool)


@dataclass(slots=True)
class _Entry:
    message: Message
    card_id: str


@dataclass(slots=True)
class _Session:
    """In-process index of one namespace, rebuilt from the store when the memory is reopened."""

    cards: dict[str, Card] = field(default_factory=dict)
    history: list[_Entry] = field(default_factory=list)
    newest: dict[str, str] = field(default_factory=dict)
    """Role -> card id of the newest message from it (the request, the result to pick from)."""
    by_term: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Exact term -> ids of the cards holding it, oldest first."""
    by_entity: defaultdict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    pending: defaultdict[str, deque[ToolCall]] = field(default_factory=lambda: defaultdict(deque))
    """Call id -> calls still waiting for their result, oldest first (ids may repeat)."""
    goal_terms: frozenset[str] = frozenset()
    """Exact terms of every user turn so far (the user's goal)."""
    fields: frozenset[str] = frozenset()
    """Field names whose values calls took (see ``DecisionFocus.fields``)."""
    categories: frozenset[str] = frozenset()
    """Lower-case words tool results and calls hold, as values or field names (``economy``,
    ``round_trip``, ``prices.business``)."""
    said_by: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Word (or two words joined by ``_``) of a user turn -> ids of the user cards saying it."""
    system_prompt: str | None = None
    system_card: str | None = None
    """Id of the card whose text is ``system_prompt``: the newest system or developer message."""
    seq: int = 0
    raw_tokens: int = 0
    """Tokens of the dialogue history sent verbatim, kept as a running sum."""
    positions: dict[str, int] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    """Card ids by position in the arrays below."""
    last_used: dict[str, int] = field(default_factory=dict)
    """Card id -> seq of the newest event that mentioned it (see ``ValuationContext.last_used``)."""
    priors: np.ndarray = field(default_factory=lambda: np.zeros(1024))
    aside: np.ndarray = field(default_factory=lambda: np.zeros(1024, dtype=bool))
    """Whether the card at each position is superseded (left out of the shortlist when dropped)."""
    seqs: np.ndarray = field(default_factory=lambda: np.zeros(1024))

    def history_at(self, seq: int) -> int:
        """Position in ``history`` of the first dialogue event from sequence number ``seq`` on."""
        return bisect.bisect_left(self.history, seq, key=lambda entry: seq_of(entry.card_id))

    def message_of(self, card_id: str) -> Message | None:
        """The dialogue event behind a card, as observed, from memory (no store read)."""
        at = self.history_at(seq_of(card_id))
        return (
            self.history[at].message
            if at < len(self.history) and self.history[at].card_id == card_id
            else None
        )

    def put(self, card: Card) -> None:
        """Store the card and keep the arrays used to shortlist candidates at scale in step."""
        self.cards[card.id] = card
        position = self.positions.get(card.id)
        if position is None:
            position = self.positions[card.id] = len(self.order)
            self.order.append(card.id)
        if position >= len(self.priors):
            self.priors = np.concatenate([self.priors, np.zeros(len(self.priors))])
            self.seqs = np.concatenate([self.seqs, np.zeros(len(self.seqs))])
            self.aside = np.concatenate([self.aside, np.zeros(len(self.aside), dtype=bool)])
        self.priors[position] = card.prior
        self.aside[position] = bool(card.superseded_by)
        self.seqs[position] = max(card.seq, self.last_used.get(card.id, -1))

    def touch(self, card_id: str, seq: int) -> None:
        if self.last_used.get(card_id, -1) < seq:
            self.last_used[card_id] = seq
            self.seqs[self.positions[card_id]] = seq


def _synchronized(method: Callable[P, R]) -> Callable[P, R]:
    """Run a method under the instance lock: agents observe from callback threads and async tasks."""

    @functools.wraps(method)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with args[0]._lock:  # type: ignore[attr-defined]
            return method(*args, **kwargs)

    return run


def _to_thread(fn: Callable[P, R]) -> Callable[P, Any]:
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(fn, *args, **kwargs)

    run.__doc__ = f"Async form of ``{fn.__name__}`` (runs it in a worker thread)."
    return run


class DecisionMemory:
    """Decision-aware memory for one tenant's conversation (namespace).

    >>> memory = DecisionMemory(store=SQLiteStore(":memory:"))
    >>> memory.observe({"role": "user", "content": "Book flight HAT136 for me"})  # doctest: +ELLIPSIS
    Card(...)
    >>> context = memory.build(system="You are a travel agent.")
    """

    def __init__(
        self,
        *,
        namespace: Namespace | None = None,
        store: MemoryStore | None = None,
        encoder: Encoder | None = None,
        valuator: Valuator | None = None,
        selector: Selector | None = None,
        compressor: Compressor | None = None,
        assembler: Assembler | None = None,
        counter: TokenCounter | None = None,
        settings: MemorySettings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _require_kinds(namespace, store, settings, clock)
        _require_stages(
            encoder=encoder,
            valuator=valuator,
            selector=selector,
            compressor=compressor,
            assembler=assembler,
            counter=counter,
        )
        self.namespace = namespace or Namespace()
        self.store: MemoryStore = store if store is not None else SQLiteStore("damc-memory.sqlite3")
        self.encoder: Encoder = encoder or DefaultEncoder()
        self.heuristics = heuristics_of(valuator)
        self.valuator = valuator or self.heuristics
        self.selector: Selector = selector or HybridSelector()
        self._selector_takes_leaner = _accepts(self.selector.select, "leaner")
        self.compressor: Compressor = compressor or TemplateCompressor()
        self._renders_without_call = _accepts(self.compressor.render, "call")
        self.assembler: Assembler = assembler or DefaultAssembler()
        self.counter: TokenCounter = counter or TiktokenCounter()
        self.settings = settings or MemorySettings()
        self.supersession = Supersession()
        self.clock = clock
        self._clock_broken = False
        self._foreign_warned: set[str] = set()
        """The frameworks whose own messages were observed and said so (once each)."""
        self._session = _Session()
        self._renderer = CardRenderer(self.compressor, self.counter)
        self._lock = threading.RLock()
        self._built: tuple[int, str | None, BuiltContext] | None = None
        """(seq, system prompt, context) of the newest build: the context of the next call."""
        self._open_decisions: dict[str, ObservedDecision] = {}
        """Call id -> the decision that made it, until its result tells whether it succeeded."""
        self._reload()

    def __deepcopy__(self, memo: dict[int, Any]) -> DecisionMemory:
        """A memory is a handle on its store's conversation, like a client: a deep copy of what
        holds it (a framework's memory object) shares it."""
        return self

    @property
    def valuator(self) -> Valuator:
        return self._valuator

    @valuator.setter
    def valuator(self, valuator: Valuator) -> None:
        """Its optional roles are checked here, once: a protocol ``isinstance`` check costs tens of
        microseconds, and ``observe`` and ``build`` would ask at every event."""
        self._valuator = valuator
        self._recorder = valuator if isinstance(valuator, DecisionRecorder) else None
        self._source = valuator if isinstance(valuator, CandidateSource) else None
        self._forgetter = valuator if isinstance(valuator, Forgetting) else None
        self._emptier = valuator if isinstance(valuator, Emptying) else None

    # -- observe -------------------------------------------------------------------------------
    @_synchronized
    def observe(self, event: Mapping[str, Any] | Any) -> Card:
        """Record one event (an OpenAI-style message) and return its card.

        The raw event is persisted first; if encoding fails the card is a safe note pointing to
        the record, and the error is logged, never raised into the agent. When another memory on
        the same session (a second worker on the store) has taken the next sequence number, its
        records are read in first, so neither overwrites the other and both see every event.
        A system or developer message is the system prompt ``build`` sends; a newer one replaces
        it (an agent that rewrites its prompt does not send every version).
        """
        message, body = normalize_event(event)
        if (foreign := foreign_format(event, message)) and foreign not in self._foreign_warned:
            self._foreign_warned.add(foreign)
            logger.warning("damc: observe got %s; it is recorded as it came", FOREIGN_FORMATS[foreign])
        if body == _CLEARED:  # an event that reads as clear()'s mark is stored in another spelling
            body = json.dumps(message, separators=(",", ":"))
        record = self._append(body)
        card = self._process(record, message)
        if self._recorder is not None:
            self._note_decision(card, message, self._recorder)
        return card

    def _append(self, body: str) -> RawRecord:
        """Store a record under the next sequence number, reading in first what another writer
        on the session stored under it."""
        while True:
            seq = self._session.seq
            record = RawRecord(
                id=f"r{seq}", namespace=self.namespace, seq=seq, created_at=self._now(), body=body
            )
            try:
                self.store.append(record)
            except RecordExistsError:
                self._reload(since=seq)
                if self._session.seq <= seq:  # the store says taken but holds no such record
                    raise
                continue
            self._session.seq += 1
            return record

    def _now(self) -> float:
        """The clock's time, or wall time when the clock gives no finite number of seconds (NaN,
        ``None``, or a time past the calendar's years 1 to 9999: ``time.time_ns`` or a clock in
        milliseconds, whose times no ``as of`` tag can print): a broken clock must not cost an
        event its record. Said once per memory."""
        now = self.clock()
        if _is_a(now, numbers.Real) and _in_calendar(now):  # a finite number, not a bool
            return float(now)
        if not self._clock_broken:
            self._clock_broken = True
            logger.warning("damc: clock() gave %r, not seconds; wall time is used instead", now)
        return time.time()

    def _note_decision(self, card: Card, message: Message, recorder: DecisionRecorder) -> None:
        """Pair a call made right after a build with that context; report it once its result is clean.

        A failing recorder is logged, never raised: learning must not stop the agent.
        """
        if card.kind is CardKind.TOOL_CALL:
            if self._built is None or self._built[0] != card.seq:
                return  # no context was built for this call, so there is no decision to learn from
            _, system, built = self._built
            entries = self._session.history[:-1]
            history = tuple(e.message for e in entries)
            ids = tuple(e.card_id for e in entries)
            for raw in message.get("tool_calls") or ():
                call_id = str(raw.get("id", "")) if isinstance(raw, dict) else ""
                action = {**message, "tool_calls": [raw]}
                self._open_decisions[call_id] = ObservedDecision(
                    self.namespace, card.seq, system, history, ids, built, action
                )
            while len(self._open_decisions) > OPEN_DECISIONS_KEPT:  # calls whose result never came
                del self._open_decisions[next(iter(self._open_decisions))]
            return
        decision = self._open_decisions.pop(card.tool_call_id or "", None)
        if decision is None or card.kind is not CardKind.TOOL_RESULT:
            return
        try:
            recorder.record_decision(decision)
        except Exception as exc:
            logger.warning("damc: valuator could not record decision at seq %s (%s)", decision.seq, exc)

    def _process(self, record: RawRecord, message: Message) -> Card:
        """Encode a stored record into a card, derive what it changes, and store the card."""
        card_id = f"c{record.seq}"
        call = self._pending_call(message)
        try:
            card = self.encoder.encode(message, record=record, card_id=card_id, call=call)
            card = self._renderer.summarized(card, raw_tokens=count_messages([message], self.counter))
        except Exception as exc:  # bad input must never crash the agent
            logger.warning("damc: could not encode event %s (%s); kept as raw record", record.id, exc)
            card = _fallback_card(message, record, card_id, exc)
            card = self._renderer.summarized(card, raw_tokens=self.counter.count(record.body))
        try:
            self.store.put_cards(self.namespace, [card])
        except StoreError as exc:  # the record is stored: a reopened memory encodes its card again
            logger.warning("damc: card %s was not stored (%s); it is rebuilt from its record", card.id, exc)
        card = self._derive(card, message)
        if not self.compressor.depends_on_focus(card, detail="key"):
            # rendered alike for every focus: made now, a decision renders only what its focus changes
            self._renderer.render(card, None, "key")
        return card

    def _derive(self, card: Card, message: Message) -> Card:
        """Apply a new card to the in-memory state: links, last use, scores, the indexes, and the
        older values it supersedes or re-quotes.

        Everything here follows from the cards in order, so reopening a store replays it instead
        of storing it: one event costs one card write however many older cards it touches.
        """
        session = self._session
        if card.kind is CardKind.USER_INSTRUCTION:
            words = _words(card.text)
            for word in words:
                session.said_by[word].append(card.id)
            card = _with_categories(card, words & session.categories)
        self._link(card, message)
        card = self._score(card)
        for other_id, name, columns in self._refreshed(card):
            other = session.cards[other_id]
            if columns:  # re-quoted in part
                cells = (*other.stale_cells, *((name, column, card.id) for column in columns))
                session.put(updated(other, stale_cells=cells))
            else:
                session.put(updated(other, stale_rows=(*other.stale_rows, (name, card.id))))
        session.put(card)
        self._index(card)
        if message.get("role") in ("system", "developer"):  # the newest replaces the one before
            session.system_prompt = content_text(message.get("content"))
            session.system_card = card.id
        else:
            session.history.append(_Entry(message, card.id))
            session.newest[str(message.get("role"))] = card.id
            session.raw_tokens += card.raw_tokens
        self._supersede(card)
        self._learn_categories(card)
        return session.cards[card.id]

    def _learn_categories(self, card: Card) -> None:
        """Note the words a tool card holds as values or field names; user turns that say one of
        them gain it as an exact value, earlier ones too ("downgrade to economy" before a search
        showed ``prices.economy``)."""
        session = self._session
        if card.kind is CardKind.TOOL_CALL:
            values: Iterable[str] = argument_values(card.arguments)
        elif card.kind is CardKind.TOOL_RESULT:
            values = itertools.chain(
                (f.value for f in card.facts),
                (cell for t in card.tables for row in t.rows for cell in row),
                (field_name(c) for t in card.tables for c in t.columns),
                (field_name(f.path) for f in card.facts),
            )
        else:
            return
        known = session.categories
        new = dict.fromkeys(  # in the order the card holds them: a user card gains them in that order
            v for v in values if v not in known and _CATEGORY.fullmatch(v) and v not in FUNCTION_WORDS
        )
        if not new:
            return
        session.categories = known | new.keys()
        for word in new:
            for user_id in session.said_by.get(word, ()):
                user = session.cards[user_id]
                named = _with_categories(user, {word})
                if named is not user:
                    session.put(named)
                    bisect.insort(session.by_term[word], user_id, key=seq_of)  # oldest first
                    self._rescore(user_id)

    @_synchronized
    def observe_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None,
        result: object,
        *,
        call_id: str | None = None,
        error: bool = False,
        artifact: object = None,
    ) -> Card:
        """Record a tool call and its result in one go (for callers that do not keep messages).
        Without ``call_id`` the pair gets a random one: two workers on one conversation must not
        give their calls the same id. ``artifact``: what the tool returned for the application,
        not the model (a LangChain tool's artifact), kept in the record for ``recall``, never sent."""
        call, answer = tool_events(name, arguments, result, call_id=call_id, error=error, artifact=artifact)
        self.observe(call)
        return self.observe(answer)

    def _pending_call(self, message: Message) -> ToolCall | None:
        if message.get("role") != "tool":
            return None
        waiting = self._session.pending.get(str(message.get("tool_call_id") or ""))
        return waiting.popleft() if waiting else None

    def _register_calls(self, message: Message, card_id: str) -> list[ToolCall]:
        """Remember each call of an assistant message until its result arrives. An earlier
        message's call still waiting under a reused id (a provider that names calls after their
        tool) was never answered: the result that comes now is the new call's."""
        calls = []
        for raw in message.get("tool_calls") or ():
            call_id = str(raw.get("id", "")) if isinstance(raw, dict) else ""
            waiting = self._session.pending.get(call_id)
            if waiting and waiting[0].card_id != card_id:
                waiting.clear()
            function = call_function(raw)
            call = ToolCall(
                call_id,
                str(function.get("name") or "unknown_tool"),
                parse_arguments(function.get("arguments")),
                card_id,
            )
            self._session.pending[call_id].append(call)
            calls.append(call)
        return calls

    def _link(self, card: Card, message: Message) -> None:
        """Update the derived state a new card changes: goal terms, last use, pending calls and the
        decision links from earlier cards to the calls that take their values.

        Derived state lives in memory and is rebuilt from the record stream on reload, so an
        event costs one card write however many older cards it touches.
        """
        session = self._session
        if card.kind is CardKind.USER_INSTRUCTION:
            new_terms = card.terms - session.goal_terms
            session.goal_terms = session.goal_terms | new_terms
            for named in {i for t in new_terms for i in session.by_term.get(t, ())[-MENTION_FANOUT:]}:
                self._rescore(named)
        self._touch_mentioned(card)
        if card.kind is CardKind.TOOL_CALL:
            self._link_sources(card.id, self._register_calls(message, card.id))

    def _link_sources(self, call_card_id: str, calls: list[ToolCall]) -> None:
        """Link each call to the newest earlier cards holding one of its argument values, or one
        of the names inside a value written as SQL (its tables and columns: see
        :func:`names_in_text`). A word value (``economy``, not an identifier) that the user said
        links to that user turn only: a result that merely shows the word (another booking's
        cabin) was not where it came from. Of the results holding a value, those holding the most
        of the call's values are where it came from: a search for a flight's route and date took
        them from that flight's booking, not from another booking through the same airports."""
        session = self._session
        call_seq = seq_of(call_card_id)
        for call in calls:
            texts = argument_values(call.arguments)
            values = {v.lower().lstrip("#") for v in texts}
            inside = {n.lower() for v in texts if _WHITESPACE.search(v) for n in names_in_text(v)} - values
            values |= inside
            used: set[str] = set()
            held: dict[str, int] = {}  # card id -> how many of the call's values it holds
            for value in values:
                newest = itertools.islice(reversed(session.by_term.get(value, ())), MENTION_FANOUT)
                earlier = [i for i in newest if seq_of(i) < call_seq]
                if value not in inside and not IDENTIFIER_TERM.fullmatch(value):
                    said = [i for i in earlier if session.cards[i].kind is CardKind.USER_INSTRUCTION]
                    earlier = said[:1] or earlier
                results = [i for i in earlier if session.cards[i].kind is CardKind.TOOL_RESULT]
                for i in results:
                    if i not in held:
                        held[i] = len(session.cards[i].terms & values)
                most = max((held[i] for i in results), default=0)
                used.update([i for i in earlier if held.get(i, most) == most][:LINK_FANOUT])
            fields = argument_fields(call.arguments)
            for source_id in used:
                source = session.cards[source_id]
                if source.kind is CardKind.TOOL_RESULT:
                    fields |= _fields_holding(source, values, session.fields)
                if call_card_id not in source.decision_links:
                    linked = updated(
                        source,
                        decision_links=(*source.decision_links, call_card_id),
                        used_terms=source.used_terms | (source.terms & values),
                    )
                    session.put(self._score(linked))
            if not fields <= session.fields:
                session.fields = session.fields | fields

    def _touch_mentioned(self, card: Card) -> None:
        """Note that older cards whose identifiers this card mentions were used now (decay restarts)."""
        session = self._session
        for term in card.terms:
            if IDENTIFIER_TERM.fullmatch(term):
                for other_id in session.by_term.get(term, ())[-MENTION_FANOUT:]:
                    session.touch(other_id, card.seq)

    def _rescore(self, card_id: str) -> Card:
        card = self._score(self._session.cards[card_id])
        self._session.put(card)
        return card

    def _score(self, card: Card) -> Card:
        scores = self.heuristics.static_scores(card, goal_terms=self._session.goal_terms)
        return updated(card, scores=scores, prior=self.heuristics.prior(scores))

    def _index(self, card: Card) -> None:
        for term in card.terms:
            self._session.by_term[term].append(card.id)
        for key in card.entity_keys:
            self._session.by_entity[key].add(card.id)

    def _refreshed(self, card: Card) -> list[tuple[str, str, tuple[str, ...]]]:
        """(older card id, entity, columns) for each table row this card re-quotes: it names the
        entity (by the id at its top level, else by an id in its arguments) and states prices, statuses or
        availability: the row's own columns in part give ``columns`` (a seat count without the
        price: the row keeps its other values); all of them, or values under other names (a
        fare lookup's ``price_per_passenger``), give none: every volatile cell of the row is out
        of date. Of the newest ``LINK_FANOUT`` volatile tables among the newest ``MENTION_FANOUT``
        cards holding the entity, so one mentioned in many cards since (a flight the dialogue
        keeps naming) is still re-quoted in its search."""
        if card.kind is not CardKind.TOOL_RESULT or not card.volatile or _is_recall_answer(card):
            return []  # (a recalled record is the older data itself, not a newer quote)
        tool = card.tool_name or ""
        root = root_id(tool, card.arguments, card.facts)
        if root is not None and root.value:  # a booking's status is its own, not its flight's
            named = [(field_name(root.path), root.value)]
        else:
            named = [
                (key, value) for key, value in argument_id_fields(card.arguments) if is_identifier(value)
            ]
        listed: set[str] = set().union(*(t.columns for t in card.tables))
        stated = {f.path for f in card.facts} | listed
        # each name with the column it must be in when it is a number (a customer's 7 is no order's)
        # and the fields this card states of it
        names: dict[str, tuple[str | None, set[str], str | None]] = {
            value.lower(): (id_kind(tool, card.arguments, key, value), stated, None) for key, value in named
        }
        for name, kind, path, columns in _quoted_rows(card):
            names.setdefault(name, (kind, columns, path))
        found = []
        for name, (kind, fields, row_of) in sorted(names.items()):
            holders = self._session.by_term.get(name, ())[-MENTION_FANOUT:]
            quoting = [c for i in reversed(holders) if (c := self._session.cards[i]).volatile and c.tables]
            for other in quoting[:LINK_FANOUT]:  # the newest tables that may list it
                if _on_another_day(card, other):
                    continue
                for table in other.tables:
                    if row_of is not None and table.path != row_of:
                        continue  # a row re-quotes rows of its own list: a payment is no gift card's balance
                    held = _rows_holding(table, name, kind)
                    if held is None:
                        continue
                    quoted = {table.columns[i] for i in volatile_columns(table.columns)}
                    # rows that all hold the name (the offers of one hotel) are re-quoted only by
                    # a newer list of such rows, not by the entity's own record (a customer's
                    # status is not the status of each of its orders)
                    shared = quoted & (fields if held == "row" else listed)
                    if (held == "all" or row_of is not None) and not shared:
                        continue  # (a row of this card re-quotes only the fields it states again)
                    partly = tuple(sorted(shared)) if shared != quoted else ()
                    found.append((other.id, name, partly))
                    break
        return sorted(found, key=lambda quote: seq_of(quote[0]))

    def _supersede(self, card: Card) -> None:
        if _is_recall_answer(card):  # the record recalled, or part of it: nothing newer
            return
        session = self._session
        if card.kind is CardKind.TOOL_RESULT and card.tool_name:  # the call failed before, not now
            for old_id in sorted(
                session.by_entity.get(call_key(card.tool_name, card.arguments), ()), key=seq_of
            ):
                if old_id != card.id and (old := session.cards[old_id]).kind is CardKind.TOOL_ERROR:
                    self._set_aside(old, card.id)
        older_ids = (
            set().union(*(session.by_entity[k] for k in card.entity_keys)) if card.entity_keys else set()
        )
        asked = {value.lower() for value in argument_ids(card.arguments)}
        older = [
            old
            for i in older_ids
            if i != card.id
            and not _about_another(asked, (old := session.cards[i]))
            and not _on_another_day(card, old)
        ]
        together = self._same_step(card)
        trusted = {  # won a tie
            old.id: old
            for old in older
            if self.supersession.outranks(old, card) or (old.id in together and card.trust < old.trust)
        }
        if winner := next(
            (old for old in trusted.values() if set(card.entity_keys) <= set(old.entity_keys)), None
        ):
            self._set_aside(session.cards[card.id], winner.id)
            return
        superseded = {
            c.id for c in self.supersession.superseded(card, [old for old in older if old.id not in trusted])
        }
        for old in older:
            if old.id in superseded:
                self._set_aside(old, card.id)
            elif old.id in trusted:  # its values stand: the new card's that differ are the stale ones
                if outdated := _changed_facts(new := session.cards[card.id], old):
                    session.put(
                        updated(new, stale_facts=(*new.stale_facts, *((p, old.id) for p in outdated)))
                    )
            elif outdated := _changed_facts(old, card):
                session.put(updated(old, stale_facts=(*old.stale_facts, *((p, card.id) for p in outdated))))

    def _same_step(self, card: Card) -> set[str]:
        """Ids of the results before ``card``, a result, that answer calls of the same assistant
        step (only results between them): one moment, whatever microseconds apart a real clock
        read them, so trust decides between their values rather than the order tools returned."""
        if card.kind not in (CardKind.TOOL_RESULT, CardKind.TOOL_ERROR):
            return set()
        together: set[str] = set()
        seq = card.seq - 1
        while (before := self._session.cards.get(f"c{seq}")) is not None and before.kind in (
            CardKind.TOOL_RESULT,
            CardKind.TOOL_ERROR,
        ):
            together.add(before.id)
            seq -= 1
        return together

    def _set_aside(self, card: Card, by: str) -> None:
        """Mark ``card`` superseded by the card ``by``; nothing supersedes it again, so it leaves
        the entity index."""
        session = self._session
        session.put(updated(card, superseded_by=by))
        for key in card.entity_keys:
            session.by_entity[key].discard(card.id)

    # -- build ---------------------------------------------------------------------------------
    @_synchronized
    def build(
        self,
        *,
        system: str | list[Any] | None = None,
        query: str | list[Any] | None = None,
        budget: int | None = None,
        exclude: Collection[str] | None = (),
        recent_messages: int | None = None,
        recall_tool: bool = False,
    ) -> BuiltContext:
        """The messages to send for the next decision: system, memory section, recent dialogue.

        ``system`` and ``query`` may also be a message's content parts; their text is read.
        ``exclude``: ids of cards the caller sends itself (an agent's scratchpad of the running
        task, or the recent turns a framework's own buffer keeps); they appear neither in the
        memory section nor in the recent dialogue. ``recent_messages`` overrides the setting for
        this build: ``0`` puts everything in the memory section (``BuiltContext.memory``), for a
        caller that places the section itself. ``recall_tool``: the model is offered the ``recall``
        tool (:data:`RECALL_TOOL`) with this context; only then does the memory section tell it
        that a card can be recalled.
        """
        session = self._session
        budget = self._budget(budget)
        sent_system = session.system_card if system is None else None
        system = session.system_prompt if system is None else content_text(system)
        focus = self._focus(None if query is None else content_text(query))
        wide = replace(focus, terms=focus.terms | session.goal_terms)
        excluded = _card_ids(exclude)
        window = self.settings.recent_messages if recent_messages is None else recent_messages
        if not _is_a(window, numbers.Integral) or window < 0:
            raise ConfigError(f"recent_messages must be a whole number >= 0, got {window!r}")
        now = self._now()
        recent_entries, recent, whole = self._recent(budget, wide, excluded, window, recall_tool, now)
        shortlist = self._candidates(focus)
        candidates, decisions = self._triage(
            shortlist, {e.card_id for e in recent_entries}, excluded, sent_system
        )
        request = session.cards.get(session.newest.get("user", ""))
        context = ValuationContext(
            focus=focus,
            current_seq=session.seq,
            now=now,
            request_seq=request.seq if request is not None else None,
            last_used=session.last_used,
            namespace=self.namespace,
        )
        header = self._header_tokens(recall_tool)
        memory_budget = max(0, budget - self._renderer.count_messages(recent) - header)
        valued = self.valuator.value(candidates, context=context)
        renderings: dict[tuple[str, bool, Detail], Card] = {}
        richer = {index: [message] for index, message in whole.items()}
        if lean := self._recent_yielding(
            recent_entries, recent, valued, memory_budget, context, wide, renderings
        ):
            for index, message in enumerate(recent):
                if lean[index] is not message:
                    richer.setdefault(index, []).append(message)
            recent = lean
            memory_budget = max(0, budget - self._renderer.count_messages(recent) - header)
        held = int(memory_budget * self.settings.left_out_share)
        kept, dropped = self._select(valued, wide, memory_budget - held, context.now, renderings)
        room = memory_budget - sum(s.card.tokens for s in kept)
        left_out, named = "", dict[str, int]()
        if self.settings.left_out_share:
            left_out, named = self._left_out_line(kept, dropped, recent, wide, room)
        room -= sum(named.values())  # the line's tokens, shared out among the cards it names
        count = self._renderer.count_messages
        for index, forms in richer.items():  # a result cut for the cards goes back if they left room
            for message in forms:
                extra = count([message]) - count([recent[index]])
                if extra <= room:
                    recent[index], room = message, room - extra
                    break
            else:  # or, cut to its share, it takes what room they left
                entry, sent = recent_entries[index], recent[index]
                if room > 0 and index in whole and entry.card_id in session.cards:
                    shown = self._calls_shown(recent_entries)
                    longer = self._cut_result(entry, wide, count([sent]) + room, shown, now)
                    extra = count([longer]) - count([sent])
                    if 0 < extra <= room:
                        recent[index], room = longer, room - extra
        lines = [s.card.summary for s in kept] + ([left_out] if left_out else [])
        memory = fence_memory(lines, recall=recall_tool) if lines else ""
        messages = self.assembler.assemble(system=system, memory=memory, recent=recent)
        decisions += [
            Decision(
                s.card.id, True, _kept_reason(s), s.value, s.card.tokens, s.card.raw_tokens, s.all_scores
            )
            for s in kept
        ]
        decisions += [
            Decision(
                s.card.id,
                False,
                f"{why}; {NAMED_LEFT_OUT}" if s.card.id in named else why,
                s.value,
                named.get(s.card.id, 0),
                s.card.raw_tokens,
                s.all_scores,
            )
            for s, why in dropped
        ]
        built = BuiltContext(
            messages=messages,
            decisions=tuple(sorted(decisions, key=lambda d: seq_of(d.card_id))),
            memory=memory,
            memory_tokens=self._renderer.count(memory) if memory else 0,
            total_tokens=self._renderer.count_messages(messages),
            unconsidered=len(session.cards) - len(shortlist),
            raw_tokens=session.raw_tokens + (count([{"role": "system", "content": system}]) if system else 0),
            focus=focus,
        )
        self._built = (session.seq, system, built)
        return built

    def _left_out_line(
        self,
        kept: list[ScoredCard],
        dropped: list[tuple[ScoredCard, str]],
        recent: list[Message],
        focus: DecisionFocus,
        room: int,
    ) -> tuple[str, dict[str, int]]:
        """The line naming cards the budget left out, most valuable first, each with the values
        of it a next call may take that nothing sent shows (see ``left_out_share``), within
        ``room`` tokens; and the tokens of the line each named card takes. Cards set aside by a
        newer one are not named: their values are outdated."""
        shown = "\n".join([s.card.summary for s in kept] + [message_text(m) for m in recent])
        parts: list[str] = []
        costs: dict[str, int] = {}
        used = self._renderer.count(LEFT_OUT.rstrip())
        tries = LEAN_TRIES  # cards that did not fit, after which no more are tried: the line is full
        for item, why in sorted(dropped, key=lambda pair: -pair[0].value)[:LEFT_OUT_CANDIDATES]:
            if room - used < LEFT_OUT_MIN_TOKENS:
                break
            card = self._session.cards.get(item.card.id)
            if why not in (OVER_BUDGET, FAR_OVER_BUDGET) or card is None or card.superseded_by:
                continue
            unseen = (value for value in left_out_values(card, focus.fields) if value not in shown)
            values = list(itertools.islice(unseen, self.settings.left_out_values))
            if not values:
                continue
            name = f"{card.id} {card.tool_name or card.source}".rstrip()
            part = f"{name}: {', '.join(values)}"
            cost = self._renderer.count(part) + (1 if parts else 0)  # and its separator
            if used + cost <= room:
                parts.append(part)
                costs[card.id] = cost
                used += cost
                shown += "\n" + part  # a value two cards hold is named once
            elif (tries := tries - 1) == 0:
                break
        line = LEFT_OUT + "; ".join(parts)
        while parts and self._renderer.count(line) > room:  # tokens merge across separators, rarely
            parts.pop()
            costs.popitem()
            line = LEFT_OUT + "; ".join(parts)
        if not parts:
            return "", {}
        first = next(iter(costs))
        costs[first] += self._renderer.count(line) - sum(costs.values())  # the line's start, merges
        return line, costs

    def _budget(self, budget: int | None) -> int:
        budget = checked_budget(budget)
        return self.settings.budget_for(
            self._session.raw_tokens, self.settings.budget if budget is None else budget
        )

    def _recent(
        self,
        budget: int,
        focus: DecisionFocus,
        excluded: frozenset[str],
        size: int,
        recall_tool: bool,
        now: float,
    ) -> tuple[list[_Entry], list[Message], dict[int, Message]]:
        """The recent window as sent: shortened from the oldest end while it takes more than
        ``recent_share`` of the budget. Past half of the budget, tool results go at key detail, cut
        to the rows the focus names, or whole when it names none (the agent is about to pick one);
        a result past its share (see ``_newest_share``) is cut to it, the rows the focus
        matches first (returned whole too, by position, to restore if the cards leave room); past
        the whole budget, cut to the focus. The newest message, or the newest call with its
        results, always stays: the model must see the step it is answering, and a request of only
        a system message is rejected by some providers."""
        entries = self._recent_window(excluded, size)
        shown = self._calls_shown(entries)
        lead: _Entry | None = None  # a user turn put before a window that opens with the assistant
        led: Message = {}

        def send(entry: _Entry, *args: Any, **kwargs: Any) -> Message:
            if entry is lead:
                return led
            return self._recent_message(entry, *args, calls_shown=shown, now=now, **kwargs)

        recent = [send(e) for e in entries]
        while recent and self._renderer.count_messages(recent) > budget * self.settings.recent_share:
            cut, rest = entries[0], entries[1:]  # with the rest of its step: its calls and results
            while rest and (
                rest[0].message.get("role") == "tool" or more_calls(cut.message, rest[0].message)
            ):
                cut, rest = rest[0], rest[1:]
            if not rest:
                break
            entries = rest
            recent = [send(e) for e in entries]
        if entries and entries[0].message.get("role") != "user":
            lead = self._user_before(entries, excluded)
            if lead is not None:
                led = self._lead_message(lead, budget)
                entries = [lead, *entries]
                recent = [send(e) for e in entries]
        if self._renderer.count_messages(recent) > budget // 2:  # leave room for the memory section
            recent = [  # (a recalled record keeps its own share, below)
                message
                if self._answers_recall(e.card_id)
                else send(e, focus if self._names_rows(e, focus) else None, detail="key")
                for e, message in zip(entries, recent, strict=True)
            ]
        request = self._session.cards.get(self._session.newest.get("user") or "")
        asked = self._request_as_sent(request, budget) if request and request.id not in excluded else None
        result_share = self._newest_share(budget, asked)
        whole: dict[int, Message] = {}
        for index, (entry, message) in enumerate(zip(entries, recent, strict=True)):
            share = result_share
            if self._answers_recall(entry.card_id):  # all the rest of the window and the request leave
                others = self._renderer.count_messages(recent) - self._renderer.count_messages([message])
                in_window = request is not None and any(e.card_id == request.id for e in entries)
                left = budget - others - self._header_tokens(recall_tool)
                share = self._recall_share(left, None if in_window else asked)
            if message.get("role") == "tool" and self._renderer.count_messages([message]) > share:
                whole[index] = message
                if self._answers_recall(entry.card_id):  # the record itself, cut: not its card again
                    card = self._session.cards[entry.card_id]
                    recent[index] = _with_text(message, self._as_recalled(card, share, header=False).summary)
                else:
                    recent[index] = self._cut_result(entry, focus, share, shown, now)
        if self._renderer.count_messages(recent) > budget:
            recent = [send(e, focus, detail="key") for e in entries]
            media = sum(media_tokens(message) for message in recent)  # sent as they are: not cut
            if self._renderer.count_messages(recent) - media > budget:  # a text alone is over the budget
                share = max(1, budget // (2 * len(entries)))
                recent = [send(e, focus, detail="key", limit=share, over=budget) for e in entries]
            whole = {}
        return entries, recent, whole

    def _user_before(self, entries: list[_Entry], excluded: frozenset[str]) -> _Entry | None:
        """The user's newest turn before the window, to lead a window that opens with the
        assistant (Anthropic's and Gemini's APIs reject a dialogue that opens with the assistant,
        such as a function call right after the system prompt); ``None`` when there is none or the
        caller sends it itself."""
        history, newest = self._session.history, self._session.newest.get("user")
        first = seq_of(entries[0].card_id)
        if newest is None:
            return None
        if seq_of(newest) < first:  # the request itself: no user turn in the window
            at = self._session.history_at(seq_of(newest)) + 1
        else:
            at = self._session.history_at(first)
        lead = _newest_user(history, before=at)
        return None if lead is None or lead.card_id in excluded else lead

    def _lead_message(self, entry: _Entry, budget: int) -> Message:
        """A user turn leading the window: as it is when it fits ``LEAD_SHARE`` of the budget, else
        its lines with values or restrictions, cut to that share (``_request_as_sent``). Its media
        (a screenshot the user asked about) go with it either way, counted in the window."""
        message = entry.message
        if self._renderer.count_messages([message]) - media_tokens(message) <= budget * LEAD_SHARE:
            return message
        card = self._session.cards[entry.card_id]
        return _with_text(message, self._request_as_sent(card, budget, LEAD_SHARE).summary)

    def _cut_result(
        self, entry: _Entry, focus: DecisionFocus, tokens: int, shown: frozenset[str], now: float
    ) -> Message:
        """A tool result of the recent window cut to about ``tokens``, at key detail or as a
        skeleton, whichever shows more of its handles (as the newest result's card, see
        ``_select``)."""
        cuts = [
            self._recent_message(entry, focus, detail=detail, cut=tokens, calls_shown=shown, now=now)
            for detail in ("key", "skeleton")
        ]
        card = self._session.cards[entry.card_id]
        return _most_handles(card, cuts, lambda cut: str(cut.get("content") or ""))

    def _recent_yielding(
        self,
        entries: list[_Entry],
        recent: list[Message],
        valued: list[ScoredCard],
        budget: int,
        context: ValuationContext,
        focus: DecisionFocus,
        renderings: dict[tuple[str, bool, Detail], Card],
    ) -> list[Message] | None:
        """The recent window with its tool results at skeleton detail, when that makes room for a
        card worth more than such a result (and at least ``NEWEST_YIELDS_TO``) that does not fit
        beside the result as sent; else None. As a card, the newest result competes by value like
        any other; sent as a message it must stay, but only as much of it as the more valuable
        cards leave room for (the rest is restored if they leave it). Only the cards worth more
        than a result are selected to see that, without the detail they would gain after."""
        results = {
            i: self._session.cards[e.card_id]
            for i, e in enumerate(entries)
            if e.message.get("role") == "tool"
        }
        if not results:
            return None
        values = {
            item.card.id: item.value for item in self.valuator.value(list(results.values()), context=context)
        }
        least = min(values.get(card.id, 1.0) for card in results.values())
        worth_more = [item for item in valued if item.value >= NEWEST_YIELDS_TO and item.value > least]
        if not worth_more:
            return None
        _, dropped = self._select(worth_more, focus, budget, context.now, renderings, upgrade=False)
        wanted = [item for item, why in dropped if why in (OVER_BUDGET, FAR_OVER_BUDGET)]
        if not wanted:
            return None
        shown = self._calls_shown(entries)
        lean = list(recent)
        for i, card in results.items():
            if not any(item.value > values.get(card.id, 1.0) for item in wanted):
                continue
            skeleton = self._recent_message(
                entries[i], focus, detail="skeleton", calls_shown=shown, now=context.now
            )
            count = self._renderer.count_messages
            if count([skeleton]) < count([recent[i]]) and _shows_a_value(card, skeleton.get("content") or ""):
                lean[i] = skeleton
        return lean if any(a is not b for a, b in zip(lean, recent, strict=True)) else None

    def _triage(
        self, shortlist: list[Card], recent_ids: set[str], excluded: frozenset[str], sent_system: str | None
    ) -> tuple[list[Card], list[Decision]]:
        """Cards that compete for the memory section, and a decision for each card that does not
        (``sent_system``: the system card sent, ``None`` when the caller passed its own prompt)."""
        candidates: list[Card] = []
        decisions: list[Decision] = []
        for card in shortlist:
            if card.id in excluded:
                decisions.append(Decision(card.id, True, "kept: sent by the caller", 1.0, 0, card.raw_tokens))
            elif card.source in ("system", "developer"):
                kept = card.id == sent_system
                if kept:
                    reason = "kept: system prompt, sent as it is"
                elif sent_system is None:
                    reason = "dropped: the system prompt passed to build() is sent instead"
                else:
                    reason = f"dropped: system prompt replaced by the newer {sent_system}"
                decisions.append(Decision(card.id, kept, reason, 1.0 if kept else 0.0, 0, card.raw_tokens))
            elif card.id in recent_ids:
                decisions.append(
                    Decision(
                        card.id, True, "kept: recent dialogue, sent as a message", 1.0, 0, card.raw_tokens
                    )
                )
            elif card.superseded_by and self.settings.superseded == "drop":
                decisions.append(
                    Decision(
                        card.id,
                        False,
                        f"superseded by {card.superseded_by}",
                        0.0,
                        0,
                        card.raw_tokens,
                        card.scores,
                    )
                )
            elif card.kind is CardKind.TOOL_CALL and not card.text:
                decisions.append(
                    Decision(card.id, False, "its arguments head the result card", 0.0, 0, card.raw_tokens)
                )
            elif card.source == REASONING and not card.text:
                decisions.append(
                    Decision(card.id, False, "reasoning without a summary", 0.0, 0, card.raw_tokens)
                )
            else:
                candidates.append(card)
        return candidates, decisions

    def _select(
        self,
        valued: list[ScoredCard],
        focus: DecisionFocus,
        budget: int,
        now: float,
        renderings: dict[tuple[str, bool, Detail], Card],
        *,
        upgrade: bool = True,
    ) -> tuple[list[ScoredCard], list[tuple[ScoredCard, str]]]:
        """Select in value order, each card at its base detail: tool results as skeletons (what the
        next calls take: identifiers, statuses, fields that fed calls), other cards at key detail.
        A card that does not fit goes in as the first lines that do before any less valuable card.
        What is left upgrades kept cards to key, then full detail, most valuable first, then
        shows their long tables whole rather than the rows the focus picks.

        The newest tool result is rendered whole at key detail, the agent may pick from it next;
        past ``newest_share`` of what the request leaves it is cut to that share, the rows the
        focus matches first (from its skeleton when that shows more of its handles), but only as
        far as the cards worth ``NEWEST_YIELDS_TO`` need the room. The user's newest turn, the
        request, goes in full (up to ``REQUEST_SHARE`` of the budget): its key detail keeps only
        sentences with values or restrictions, and "yes, go ahead" has neither. Every rendering
        carries its tags (``as of``, ``superseded by``), so what is selected is what is sent.

        ``renderings`` holds this decision's renderings by card, focus or none, and detail: a
        decision asks for most of them more than once (``upgrade=False``: the selection before
        the budget left is spent on detail)."""
        scored, beyond = _shortlist(valued, budget)
        newest = self._session.newest.get("tool")
        request = self._session.newest.get("user")
        originals = {item.card.id: item.card for item in scored}
        asked = self._request_as_sent(originals[request], budget) if request in originals else None

        def view(card_id: str) -> DecisionFocus | None:
            return None if card_id == newest else focus

        def rendered(card_id: str, card_focus: DecisionFocus | None, detail: Detail) -> Card:
            key = (card_id, card_focus is None, detail)  # one focus per decision
            card = renderings.get(key)
            if card is None:
                card = renderings[key] = self._renderer.render(originals[card_id], card_focus, detail)
            return card

        def base(card: Card) -> Detail:
            if card.id == request:
                return "full"
            if card.id != newest and card.kind in (CardKind.TOOL_RESULT, CardKind.TOOL_ERROR):
                return "skeleton"
            return "key"

        def tagged(card: Card) -> Card:
            return self._renderer.with_summary(card, self._tagged(card.summary, originals[card.id], now))

        def based_card(card: Card) -> Card:
            if asked is not None and card.id == request:
                return tagged(asked)
            return tagged(rendered(card.id, view(card.id), base(card)))

        based = [ScoredCard(based_card(item.card), item.value, item.scores) for item in scored]
        newest_cut: Card | None = None
        recalled = self._answers_recall(newest)
        if newest in originals:
            yielded = sum(
                item.card.tokens
                for item in based
                if item.card.id != newest and item.value >= NEWEST_YIELDS_TO
            )
            share = max(self._newest_share(budget, asked), budget - yielded)
            sent: Card | None = None
            if recalled:
                sent = tagged(self._as_recalled(originals[newest], self._recall_share(budget, asked)))
            elif rendered(newest, None, "key").tokens > share:
                cuts = [
                    self._renderer.render(originals[newest], focus, detail, cut_in_focus_order=share)
                    for detail in ("key", "skeleton")
                ]
                sent = newest_cut = tagged(_most_handles(originals[newest], cuts, lambda cut: cut.summary))
            if sent is not None:
                based = [item._replace(card=sent) if item.card.id == newest else item for item in based]

        def leaner(card: Card, tokens: int) -> Card:
            skeleton = rendered(card.id, focus, "skeleton")
            lean = tagged(skeleton) if skeleton.tokens < card.tokens else card
            return lean if lean.tokens <= tokens else self._renderer.cut(lean, tokens)

        selection = (
            self.selector.select(based, budget=budget, leaner=leaner)
            if self._selector_takes_leaner
            else self.selector.select(based, budget=budget)
        )
        selection.dropped.extend((item, FAR_OVER_BUDGET) for item in beyond)
        if not upgrade:
            return selection.kept, selection.dropped

        def at(detail: Detail) -> Callable[[Card], Card]:
            def richer(card: Card) -> Card:
                if recalled and card.id == newest:  # the record as it is already
                    return card
                if newest_cut is not None and card.id == newest:  # whole, if the rest left room
                    return tagged(rendered(card.id, None, "key"))
                return tagged(rendered(card.id, view(card.id), detail))

            return richer

        def whole(card: Card) -> Card:  # long tables with all their rows, not the focus's
            if card.id == newest or not self.compressor.depends_on_focus(card, detail="full"):
                return card
            return tagged(rendered(card.id, None, "full"))

        full = selection.kept
        for richer in (at("key"), at("full"), whole):
            full = upgrade_detail(full, richer, budget_left=budget - sum(s.card.tokens for s in full))
        kept = sorted(full, key=lambda s: s.card.seq)
        return kept, selection.dropped

    def _header_tokens(self, recall_tool: bool) -> int:
        """What an empty memory section costs, as a message."""
        return self._renderer.count(fence_memory([], recall=recall_tool)) + MESSAGE_OVERHEAD

    def _answers_recall(self, card_id: str | None) -> bool:
        """Whether the card is the result of a ``recall`` call (see :data:`RECALL_TOOL`) made for the
        request being served: once the user speaks again it is an older result like any other."""
        card = self._session.cards.get(card_id or "")
        request = self._session.newest.get("user")
        return (
            card is not None
            and _is_recall_answer(card)
            and (request is None or seq_of(card.id) > seq_of(request))
        )

    def _as_recalled(self, card: Card, share: int, *, header: bool = True) -> Card:
        """The answer to a recall as the model asked for it: the record as it is (after the call,
        with ``header``), not its card (whose long cells are clipped), cut to ``share``."""
        text = content_text((self._session.message_of(card.id) or {}).get("content"))
        if header:
            text = f"{card.summary.split(' -> ', 1)[0]} -> {text}"
        whole = self._renderer.with_summary(card, text)
        return whole if whole.tokens <= share else self._renderer.cut(whole, share, clip=True)

    def _recall_share(self, budget: int, asked: Card | None) -> int:
        """Tokens a recalled record may take: all that the request leaves. The model asked for the
        record in full; cut to the usual share it would read the same cut card again."""
        return max(0, budget - (asked.tokens if asked is not None else 0))

    def _newest_share(self, budget: int, asked: Card | None) -> int:
        """Tokens the newest tool result may take whole: ``newest_share`` of what the user's
        request, as sent (``_request_as_sent``), leaves of ``budget``."""
        return int(max(0, budget - (asked.tokens if asked is not None else 0)) * self.settings.newest_share)

    def _request_as_sent(self, request: Card, budget: int, share: float = REQUEST_SHARE) -> Card:
        """The user's newest turn in full; past ``REQUEST_SHARE`` of ``budget``, its sentences
        with values or restrictions (key detail), cut to their first lines (or characters) that
        fit the share if still too long."""
        limit = int(budget * share)
        full = self._renderer.render(request, None, "full")
        if full.tokens <= limit:
            return full
        key = self._renderer.render(request, None, "key")
        return key if key.tokens <= limit else self._renderer.cut(key, limit, clip=True)

    def _candidates(self, focus: DecisionFocus) -> list[Card]:
        """Every card, or past ``max_candidates`` a shortlist: the best by prior and decay, plus
        every card holding a focus term, and the cards a ``CandidateSource`` valuator retrieves
        (asked at every decision, so it also keeps its index current). Keeps a decision's cost
        flat as memory grows."""
        session = self._session
        limit = self.settings.max_candidates
        retrieved = (
            self._source.candidates(session.cards, focus=focus, limit=limit // 2, namespace=self.namespace)
            if self._source is not None
            else []
        )
        if len(session.cards) <= limit:
            return list(session.cards.values())
        count = len(session.positions)
        decay = self.heuristics.decay
        ages = session.seq - session.seqs[:count]
        priors = session.priors[:count]
        if self.settings.superseded == "drop":  # marked, they compete like any card
            priors = np.where(session.aside[:count], -1.0, priors)
        score = priors * np.maximum(decay.floor, np.exp(-decay.lam * ages))
        best = np.argpartition(-score, limit)[:limit]
        chosen = {session.order[i] for i in best.tolist()}
        for term in focus.terms:
            if len(chosen) >= limit + limit // 2:
                break
            chosen.update(session.by_term.get(term, ())[-(limit // 8) :])
        chosen.update(f"c{seq}" for seq in range(max(0, session.seq - 16), session.seq))
        chosen.update(retrieved)
        return [session.cards[i] for i in chosen if i in session.cards]

    def _tagged(self, line: str, card: Card, now: float) -> str:
        """``line`` (a rendering of ``card``) with the card's tags after its id: ``as of`` for an
        old volatile value (UTC, said so: a model reads a bare time in a zone of its own),
        ``superseded by`` for a card a newer one replaced."""
        if card.volatile and card.as_of is not None and now - card.as_of >= self.settings.as_of_after:
            stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(card.as_of))
            line = line.replace("] ", f"] (as of {stamp}) ", 1)
        if card.superseded_by:  # after the id, which every card starts with
            line = line.replace("] ", f"] (superseded by {card.superseded_by}) ", 1)
        return line

    def _recent_window(self, excluded: frozenset[str], size: int) -> list[_Entry]:
        """The newest ``size`` messages, widened so no tool result loses its call.

        Left out, to go to the memory section as cards, is what a chat API would reject as a
        message: a tool result whose call is not right before it (a broken trace, a framework's
        own error message, a call without an id or name); a message of such calls only; and the
        messages before the window's first user turn when the conversation has none before them
        (it opened with the assistant's greeting), since some APIs reject a dialogue that opens
        with the assistant."""
        history = self._session.history
        if excluded:
            history = [e for e in history if e.card_id not in excluded]
        if not size:
            return []
        start, counted = len(history), 0
        while start > 0 and counted < size:  # a reasoning item is sent as no message: it takes no place
            start -= 1
            counted += history[start].message.get("role") not in UNSENT_ROLES
        while 0 < start < len(history) and (  # from the step's first call
            history[start].message.get("role") == "tool"
            or more_calls(history[start - 1].message, history[start].message)
        ):
            start -= 1
        window: list[_Entry] = []
        calls: set[str] = set()
        for entry in history[start:]:
            message = entry.message
            if message.get("role") in UNSENT_ROLES:
                continue
            if message.get("role") == "tool":
                answered = message.get("tool_call_id")
                if not isinstance(answered, str) or answered not in calls:
                    continue
            elif message.get("role") == "assistant":
                sendable = {c["id"] for c in message.get("tool_calls") or () if sendable_call(c)}
                if message.get("tool_calls") and not sendable:
                    continue  # no call a chat API would take: its card tells what was asked
                more = bool(window) and more_calls(window[-1].message, message)
                calls = calls | sendable if more else sendable
            else:
                calls = set()
            window.append(entry)
        first_user = next((i for i, e in enumerate(window) if e.message.get("role") == "user"), 0)
        if first_user:  # the conversation's user turns before the window count, excluded or not
            opened = self._session.history_at(seq_of(window[0].card_id))
            if _newest_user(self._session.history, before=opened) is None:
                window = window[first_user:]
        if not window:  # all left out: the user's newest turn (APIs reject a system prompt alone)
            newest_user = _newest_user(history)
            window = [newest_user] if newest_user is not None else []
        return window

    def _names_rows(self, entry: _Entry, focus: DecisionFocus) -> bool:
        """Whether the focus names a row of the entry's tables by its entity (``HAT107``)."""
        card = self._session.cards[entry.card_id]
        return any(
            name in focus.terms
            for table in card.tables
            for row in table.rows
            for name in row_names(table, row)
        )

    def _calls_shown(self, entries: list[_Entry]) -> frozenset[str]:
        """Card ids of the tool results in ``entries`` whose call the message before them shows
        unambiguously (its id used once there), so their cards need not repeat it; with
        ``TemplateCompressor``-like compressors only."""
        if not self._renders_without_call:
            return frozenset()
        shown: set[str] = set()
        ids: Counter[str] = Counter()
        before: Message = {}
        for entry in entries:
            message = entry.message
            if message.get("role") == "assistant":
                step = Counter(
                    str(c.get("id")) for c in message.get("tool_calls") or () if isinstance(c, dict)
                )
                ids = ids + step if more_calls(before, message) else step
            elif message.get("role") == "tool" and ids[str(message.get("tool_call_id"))] == 1:
                shown.add(entry.card_id)
            before = message
        return frozenset(shown)

    def _recent_message(
        self,
        entry: _Entry,
        focus: DecisionFocus | None = None,
        *,
        detail: Detail | None = None,
        limit: int | None = None,
        over: int | None = None,
        cut: int | None = None,
        calls_shown: frozenset[str] = frozenset(),
        now: float,
    ) -> Message:
        """A recent message as sent: tool results as their card, at ``detail`` when given (long
        tables cut to ``focus`` when given, else whole), without the call header when the call
        message before shows it (``calls_shown``), with the card's tags at ``now`` (a price read
        an hour ago, a partner's status the airline's of the same step superseded). A user or
        assistant text over ``limit`` tokens (a pasted document) is sent as its card cut to the
        limit, and so is a tool result whose key lines alone take more than ``over`` tokens (an
        output on one long line)."""
        message = entry.message
        if message.get("role") == "assistant" and isinstance(message.get("audio"), Mapping):
            message = _audio_as_sent(message, self._now())
        card = self._session.cards[entry.card_id]
        call = entry.card_id not in calls_shown
        if (
            limit is not None
            and message.get("role") in ("user", "assistant")
            and card.raw_tokens - media_tokens(message) > limit  # its media go with it as they are
        ):
            lean_card = self._renderer.render(card, focus, "key")
            return _with_text(message, self._renderer.cut(lean_card, limit, clip=True).summary)
        if over is not None and message.get("role") == "tool":
            lean_card = self._renderer.render(card, focus, "key", call=call)
            if lean_card.tokens > over:  # its key lines alone are over the budget: one long line
                lean_card = self._renderer.cut(lean_card, limit or over, clip=True)
                return _with_text(message, self._tagged(lean_card.summary, card, now))
        if message.get("role") == "tool" and self.settings.compress_recent_tool_results:
            if detail is None and self._answers_recall(entry.card_id):
                return message  # the record the model asked for, as it is
            sent = card
            if detail is not None or not call:
                sent = self._renderer.render(card, focus, detail or "full", call=call, cut_in_focus_order=cut)
            return _with_text(message, self._tagged(sent.summary, card, now))
        if message.get("role") not in KNOWN_ROLES or message.get("role") in ("system", "developer"):
            return {"role": "user", "content": card.summary}
        return message

    def _focus(self, query: str | None) -> DecisionFocus:
        """What the next decision is about: the query, the last few dialogue turns and the arguments
        of the newest tool call (the entity the agent is working on)."""
        recent = self._session.history[-FOCUS_WINDOW * 3 :]
        said = [
            e for e in recent if e.message.get("role") in ("user", "assistant") and e.message.get("content")
        ][-FOCUS_WINDOW:]
        text = "\n".join(
            turn[:WORDS_SCANNED]
            for turn in [query or "", *(content_text(e.message.get("content")) for e in said)]
        )
        terms = exact_terms(text, limit=512)
        for entry in said:  # with the category words a user turn gained ("clicky", once a table showed it)
            if entry.message.get("role") == "user" and entry.card_id in self._session.cards:
                terms |= self._session.cards[entry.card_id].terms
        last_call = next((e for e in reversed(recent) if e.message.get("tool_calls")), None)
        if last_call is not None and last_call.card_id in self._session.cards:
            terms |= self._session.cards[last_call.card_id].terms
        users = [content_text(e.message.get("content")) for e in recent if e.message.get("role") == "user"]
        asked = (query or (users[-1] if users else ""))[:WORDS_SCANNED]
        return DecisionFocus(
            query=asked, terms=frozenset(terms), fields=self._session.fields, named=topic_words(asked)
        )

    # -- recall and inspection -----------------------------------------------------------------
    def recall(self, card_id: str) -> Message | None:
        """The raw event behind a card as the store keeps it, or ``None`` for an unknown id (only
        this namespace's ``c<N>`` ids are looked up: the id comes from the model). That is the
        event as observed, as JSON holds it: an SDK object as its fields, an event without a role
        (a Responses API item) with ``role`` ``"unknown"``. An id that is not text (``recall(5)``)
        is a ``ConfigError``."""
        if not isinstance(card_id, str):
            raise ConfigError(f"recall takes a card id such as 'c12', got {card_id!r}")
        card = self._session.cards.get(card_id)
        if card is None and not _CARD_ID.fullmatch(card_id):
            return None
        record = self.store.record(self.namespace, card.record_id if card else card_id.replace("c", "r", 1))
        if record is None or record.body == _CLEARED:  # clear()'s own mark is not an event
            return None
        return _stored_body(record)

    def handle_recall(self, arguments: Mapping[str, Any] | str) -> str:
        """Answer a ``recall`` tool call (see :data:`RECALL_TOOL`) with the raw content as text, or
        with ``match`` its rows or lines that hold that text (:func:`~damc_core.excerpt.excerpt`);
        a store that cannot be read gives the agent an answer saying so, not an exception."""
        parsed = parse_arguments(arguments)
        given = parsed.get("card_id")
        if isinstance(given, list) and given:  # ["c2"]
            given = given[0]
        card_id = str(given or "").strip().strip("[]'\" ").lower()  # "[C2]" is c2
        if card_id.isdigit():  # card 2, its number alone
            card_id = f"c{card_id}"
        if not card_id:
            return "recall needs a card_id: the id a memory card starts with, such as c12."
        match = parsed.get("match")
        try:
            raw = self.recall(card_id)
        except Exception as exc:
            logger.exception("damc: recall of %r failed", card_id)
            return f"Could not recall {card_id!r}: {type(exc).__name__}: {exc}"
        if raw is None:
            return f"No memory card {card_id!r} in this session."
        message = with_tool_calls(raw)  # a Responses API item or a legacy call as the message it is
        content = message.get("content")
        if not content and message.get("tool_calls"):  # a call's card: the calls it made
            content = [call_function(call) for call in message["tool_calls"] if isinstance(call, Mapping)]
        elif not content and message.get("role") in UNSENT_ROLES:  # a provider's tool that found nothing:
            content = {key: value for key, value in raw.items() if key != "role"}  # the item, as it came
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
        if not isinstance(match, (str, int, float)) or isinstance(match, bool):
            return text  # no match asked for (or not a text): the whole record
        found = excerpt(text, str(match))
        if found is None:
            return f"Nothing in {card_id!r} contains {str(match)!r}; recall it without match for all of it."
        return found

    @property
    def event_count(self) -> int:
        """Events observed in this namespace so far: a mark for ``messages(since=...)``."""
        return self._session.seq

    @property
    def system_prompt(self) -> str | None:
        """The text of the newest system or developer message observed since the conversation
        (re)started, which ``build`` sends when given no ``system``: an adapter that places the
        memory section itself sends it apart."""
        return self._session.system_prompt

    @_synchronized
    def messages(self, *, since: int | None = None) -> list[Message]:
        """Every event of this namespace as observed, oldest first, read from the store. Adapters
        read it to know what a reopened store already holds.

        ``since``: only the dialogue events observed from that ``event_count`` on, read from
        memory; an adapter finds what another surface recorded during a run without reading the
        whole store."""
        if since is not None:
            return [entry.message for entry in self._session.history[self._session.history_at(since) :]]
        return [m for r in self.store.records(self.namespace) if r.body != _CLEARED and (m := _readable(r))]

    @_synchronized
    def refresh(self) -> None:
        """Read in what other writers stored on this session since this memory last looked (two
        workers serving one conversation in turns): one read of the session's records."""
        self._reload(since=self._session.seq)

    @_synchronized
    def history(self, since: int = 0) -> list[tuple[str, Message]]:
        """(card id, event) of each dialogue event of the conversation from event ``since`` on,
        oldest first, as the pipeline read it, from memory: an adapter learns what a reopened
        memory holds (or another worker added) without reading the store once per card. System
        prompts are not dialogue and are left out."""
        history = self._session.history
        return [(entry.card_id, entry.message) for entry in history[self._session.history_at(since) :]]

    def for_session(self, session: str) -> DecisionMemory:
        """A memory for another session of the same user, sharing this one's store, pipeline and
        settings: one agent serving many conversations (a checkpointer's threads) keeps each
        conversation's records apart."""
        return DecisionMemory(
            namespace=Namespace(self.namespace.user, session),
            store=self.store,
            encoder=self.encoder,
            valuator=self.valuator,
            selector=self.selector,
            compressor=self.compressor,
            assembler=self.assembler,
            counter=self.counter,
            settings=self.settings,
            clock=self.clock,
        )

    def cards(self) -> list[Card]:
        """Every card of this namespace, oldest first."""
        return sorted(self._session.cards.values(), key=lambda c: c.seq)

    def card(self, card_id: str) -> Card | None:
        return self._session.cards.get(card_id)

    @_synchronized
    def clear(self) -> None:
        """Start the conversation over: builds, and a memory reopened on the store, see nothing
        observed before. The records stay in the store (``messages()`` and ``recall`` still
        read them): a clear event among them marks where the conversation starts again."""
        self._append(_CLEARED)
        self._session = _Session(seq=self._session.seq)
        self._built = None
        self._open_decisions.clear()
        self._forget_before(self._session.seq)

    def _forget_before(self, seq: int) -> None:
        """Tell a valuator that keeps something of the conversation that it started over at ``seq``."""
        if self._forgetter is not None:
            try:
                self._forgetter.forget(self.namespace, before=seq)
            except Exception as exc:  # the conversation is cleared all the same
                logger.warning("damc: the valuator could not forget the cleared conversation: %s", exc)

    def _empty(self) -> None:
        """Tell a valuator that keeps something of the namespace that the store holds none of it."""
        if self._emptier is not None:
            try:
                self._emptier.empty(self.namespace)
            except Exception as exc:  # the memory opens all the same
                logger.warning("damc: the valuator could not drop an earlier conversation's cards: %s", exc)

    def _reload(self, since: int = 0) -> None:
        """Bring the in-process view up to the store by replaying its cards in order, from record
        ``since`` on: all of them when the memory opens, another writer's when it took the next
        sequence number. Records that never got a card (the process stopped between storing and
        encoding) are encoded now."""
        records = self.store.records(self.namespace, since=since)
        if not records and not since:  # a conversation the valuator kept is one the store lacks
            self._empty()
        cleared = [i for i, record in enumerate(records) if record.body == _CLEARED]
        if cleared:
            self._session = _Session(seq=records[cleared[-1]].seq + 1)
            records = records[cleared[-1] + 1 :]
            self._forget_before(self._session.seq)  # (cleared by another memory, or before a crash)
        if not records:
            return
        stored = {card.id: card for card in self.store.cards(self.namespace, since=records[0].seq)}
        for record in records:
            self._session.seq = max(self._session.seq, record.seq + 1)
            if not (event := _readable(record)):
                continue
            try:
                message = _stored_message(record.body, event)
                card = stored.get(f"c{record.seq}")
                if card is None or _read_otherwise(card, message):
                    self._process(record, message)
                    continue
                self._pending_call(message)
                self._derive(card, message)
            except Exception as exc:  # one record must not keep the conversation from opening
                logger.warning(
                    "damc: record %s could not be read back (%s); the conversation is read without it",
                    record.id,
                    exc,
                )

    aobserve = _to_thread(observe)
    abuild = _to_thread(build)
    aobserve_tool = _to_thread(observe_tool)


def checked_budget(budget: object) -> int | None:
    """``budget`` when it is a token budget for ``build`` (a whole number > 0, or ``None`` for the
    memory's own), else a ``ConfigError``. Adapters check theirs when they are made: one found bad
    at the agent's first model call would only be logged, and the model sent the whole history."""
    if budget is None:
        return None
    if not whole_number(budget) or budget <= 0:
        raise ConfigError(f"budget must be a whole number of tokens > 0, got {budget!r}")
    return int(budget)


def _require_kinds(namespace: object, store: object, settings: object, clock: object) -> None:
    """Refuse, with a ``ConfigError`` naming the argument, what would otherwise fail at the first
    read or event with an ``AttributeError`` far from its cause (``store="memory.sqlite3"``,
    ``namespace="u-42"``, ``settings={"budget": 800}``, ``clock=time.time()``)."""
    if namespace is not None and not isinstance(namespace, Namespace):
        raise ConfigError(f"namespace must be a Namespace(user=..., session=...), got {namespace!r}")
    missing = [name for name in _STORE_METHODS if not callable(getattr(store, name, None))]
    if store is not None and missing:
        raise ConfigError(
            f"store must be a store such as SQLiteStore(path) or InMemoryStore(), got {store!r}"
            f" (it has no {', '.join(missing)})"
        )
    if settings is not None and not isinstance(settings, MemorySettings):
        raise ConfigError(f"settings must be MemorySettings(...), got {reprlib.repr(settings)}")
    if not callable(clock):
        raise ConfigError(f"clock must be a function giving Unix seconds (time.time), got {clock!r}")


def _require_stages(**stages: object) -> None:
    """Refuse, with a ``ConfigError`` naming the argument, a stage that lacks the method the
    memory calls (``selector="topk"``, a class such as ``DefaultAssembler`` not made): it would
    fail with an ``AttributeError`` or a ``TypeError`` in the agent's step, not here."""
    for name, stage in stages.items():
        method = _STAGE_METHODS[name]
        if stage is not None and (isinstance(stage, type) or not callable(getattr(stage, method, None))):
            raise ConfigError(f"{name} must be an object with a method {method}(), got {stage!r}")


_STAGE_METHODS = {
    "encoder": "encode",
    "valuator": "value",
    "selector": "select",
    "compressor": "render",
    "assembler": "assemble",
    "counter": "count",
}
"""What a memory calls of each stage (see their protocols)."""

_STORE_METHODS = ("append", "record", "records", "put_cards", "cards")
"""What a memory calls of its store (see ``MemoryStore``)."""


def _in_calendar(seconds: float) -> bool:
    """Whether a Unix time falls in the years 1 to 9999 (a time in milliseconds or nanoseconds
    does not, and ``time.gmtime`` fails on the latter)."""
    return _FIRST_SECOND <= seconds <= _LAST_SECOND


_FIRST_SECOND = -62_135_596_800  # 0001-01-01T00:00:00Z
_LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z


def _card_ids(exclude: object) -> frozenset[str]:
    """The card ids ``build(exclude=...)`` names: one id, a collection of them, or ``None`` for
    none. Anything else is a ``ConfigError``: a card passed for its id would exclude nothing."""
    if exclude is None:
        return frozenset()
    if isinstance(exclude, str):
        return frozenset((exclude,))
    ids = list(exclude) if isinstance(exclude, Iterable) else None
    if ids is None or not all(isinstance(i, str) for i in ids):
        got = reprlib.repr(exclude)  # (a card's repr is long)
        raise ConfigError(f"exclude must be card ids such as 'c12' (or a list of them), got {got}")
    return frozenset(ids)


def _changed_facts(old: Card, new: Card) -> list[str]:
    """Paths of ``old``'s facts that ``new`` states differently for the same entity, or states
    at all once a card between them did: ``see`` then points to the newest value, not to a card
    that ``new`` may supersede and the memory drop (a status updated twice)."""
    shared = {attribute for _, attribute in set(old.entity_keys) & set(new.entity_keys)}
    if not shared:
        return []
    current = {f.path: f.value for f in new.facts}
    marked = {path for path, _ in old.stale_facts}
    return [
        f.path
        for f in old.facts
        if f.path.split(".")[0] in shared
        and f.path in current
        and (current[f.path] != f.value or f.path in marked)
    ]


_CATEGORY = re.compile(r"[a-z][a-z_]{3,23}")


def _newest_user(history: Sequence[_Entry], *, before: int | None = None) -> _Entry | None:
    """The newest user turn of ``history`` before position ``before`` (of all of it when None)."""
    end = len(history) if before is None else before
    turns = (history[i] for i in range(end - 1, -1, -1))
    return next((entry for entry in turns if entry.message.get("role") == "user"), None)


def _words(text: str) -> set[str]:
    """Lower-cased words of a text (its first ``WORDS_SCANNED`` characters), and each two
    neighbours joined by ``_`` (``round_trip``)."""
    words = _WORD.findall(text[:WORDS_SCANNED].lower())
    return {*words, *(f"{a}_{b}" for a, b in itertools.pairwise(words))}


_WORD = re.compile(r"[a-z]+")
_WHITESPACE = re.compile(r"\s")
"""What makes an argument value text with names inside it (a query), not one name."""


def _with_categories(card: Card, said: Collection[str]) -> Card:
    """The user card with the category words it says as exact values."""
    new = sorted(set(said) - card.terms)
    if not new:
        return card
    return updated(
        card,
        facts=(*card.facts, *(Fact("text", word, "value") for word in new)),
        terms=card.terms | set(new),
    )


def _most_handles(card: Card, cuts: Sequence[R], text: Callable[[R], str]) -> R:
    """Of cuts of the newest result (at key detail, then as a skeleton), the one whose ``text``
    shows most of the card's handles; the first of those that tie."""
    handles = _handles(card)
    return max(cuts, key=lambda cut: sum(1 for handle in handles if handle in text(cut)))


def _handles(card: Card) -> set[str]:
    """The card's handles: the values calls take as they are (ids, ISO dates) and the ids of its
    rows. Counted in two cuts of the newest result: one at key detail can spend its room on an
    order's address and show no item; its skeleton leaves out the dates of a trip's flights."""
    handles = {fact.value for fact in card.facts if is_handle(fact.value)}
    for table in card.tables:
        for row in table.rows:
            handles.update(cell for cell in row if is_handle(cell))
            handles.update(row_identifiers(table, row))
    return handles


def _shows_a_value(card: Card, text: str) -> bool:
    """Whether ``text`` shows one of the card's values (a skeleton of a name -> id mapping shows
    none: its names are not identifiers)."""
    return any(fact.value in text for fact in card.facts) or any(
        cell and cell in text for table in card.tables for row in table.rows for cell in row
    )


def _fields_holding(card: Card, values: set[str], known: frozenset[str]) -> set[str]:
    """Names of the card's fields and columns, other than ``known`` ones, holding one of
    ``values`` (lower-cased). Known names are skipped: once learned, a field costs no scan."""
    found = {
        name for f in card.facts if (name := field_name(f.path)) not in known and mentions(f.value, values)
    }
    for table in card.tables:
        for i, column in enumerate(table.columns):
            name = field_name(column)
            if name not in known and any(i < len(row) and _holds(row[i], values) for row in table.rows):
                found.add(name)
    return found


def _holds(cell: str, values: set[str]) -> bool:
    """``mentions``, after a cheap substring test that rules out almost every cell of a long table."""
    lowered = cell.lower()
    return any(v in lowered for v in values) and mentions(cell, values)


def _about_another(asked: set[str], old: Card) -> bool:
    """Whether a call that asked for the ids ``asked`` (lower-cased) is about other records than
    ``old`` (asked for other ids, and returned none of them): two orders of one customer share its
    id, and neither is newer news of the other; a booking's status looked up by the id its booking
    call returned is, and so is a booking looked up as ``zfa04y`` after ``ZFA04Y``."""
    asked_before = argument_ids(old.arguments)
    if not (asked and asked_before):
        return False
    returned = (f.value for f in old.facts if f.kind == "id" and "." not in f.path and "[" not in f.path)
    return asked.isdisjoint(value.lower() for value in (*asked_before, *returned))


def _on_another_day(new: Card, old: Card) -> bool:
    """Whether a lookup ``new`` asked for a date that ``old``'s call asked no such date for, under
    the same field (a stock's close, a flight's status or a hotel's rates on another day): the
    same entity on another day is another record, which neither supersedes nor re-quotes the
    first. A call that changes state (moving a booking to a new date) is newer news whatever it
    asked."""
    if changes_state(new.tool_name):
        return False
    before = argument_dates(old.arguments)
    return any(
        field in before and dates.isdisjoint(before[field])
        for field, dates in argument_dates(new.arguments).items()
    )


REQUOTING_ROWS = 8
"""Rows of a short table, each of which re-quotes its entity's row in older tables (a product
looked up again lists the one variant whose price changed); a longer list is a search, which a
newer search of the same call replaces whole."""


def _quoted_rows(card: Card) -> Iterator[tuple[str, str | None, str, set[str]]]:
    """(entity, the column a number must be in, the table's path, the row's fields) for each row
    of the card's short tables, named by its identity column: the same entity's row in an older
    list of the same name (a product's ``variants``) is re-quoted in the fields this row states
    again under the same names (``price``), and only in those. A row of another list (a cart's
    ``items``, a reservation's ``payment_history``) states what was paid, not a new price or a
    gift card's balance."""
    tool = card.tool_name or ""
    for table in card.tables:
        if len(table.rows) > REQUOTING_ROWS:
            continue
        columns = set(table.columns)
        for i in identity_columns(table.columns):
            key = field_name(table.columns[i])
            for row in table.rows:
                if i < len(row) and is_identifier(row[i]):
                    yield row[i].lower(), id_kind(tool, card.arguments, key, row[i]), table.path, columns


def _rows_holding(table: Table, name: str, kind: str | None) -> Literal["row", "all"] | None:
    """How ``table`` holds the entity ``name`` in an identity column (one named ``kind`` when
    given): as one of its rows (``"row"``), in a column every row shares (``"all"``: the hotel all
    the offers are of), or not."""
    found: Literal["row", "all"] | None = None
    for i in identity_columns(table.columns):
        if kind is not None and field_name(table.columns[i]) != kind:
            continue
        cells = {row[i].lower() if i < len(row) else "" for row in table.rows}
        if name in cells:
            if len(cells) > 1 or len(table.rows) == 1:
                return "row"
            found = "all"
    return found


def _shortlist(scored: list[ScoredCard], budget: int) -> tuple[list[ScoredCard], list[ScoredCard]]:
    """Split value-sorted cards where their standing cost passes a few budgets: the rest cannot
    be selected, so they are not rendered for this decision."""
    ranked = sorted(scored, key=lambda s: -s.value)
    spent = 0
    for index, item in enumerate(ranked):
        spent += item.card.tokens
        if spent > SHORTLIST_BUDGETS * budget and index >= SHORTLIST_MIN:
            return ranked[:index], ranked[index:]
    return ranked, []


def _accepts(function: Callable[..., Any], keyword: str) -> bool:
    """Whether ``function`` takes ``keyword``: selectors written before ``leaner`` still work."""
    parameters = inspect.signature(function).parameters.values()
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in parameters)


def _kept_reason(scored: ScoredCard) -> str:
    top = max(
        (s for s in scored.all_scores if s.name not in ("decay", "freshness")),
        key=lambda s: s.value,
        default=None,
    )
    return f"kept: {top.name} ({top.provenance})" if top else "kept"


_CLEARED = json.dumps({"role": "damc", "event": "clear"})
"""The record ``clear()`` stores: the conversation starts again after it."""
_CARD_ID = re.compile(r"c\d+")


def _read_otherwise(card: Card, message: Message) -> bool:
    """Whether a stored card was made from an older reading of its event: a note or an answer
    where the event now reads as a tool call or result, or a note of an event of no role that now
    has one (Responses API items and legacy function calls, which older releases stored as notes
    of ``unknown`` events). Such a card is made again from its record."""
    role = message.get("role")
    step = role in ("tool", HOSTED_TOOL) or (role == "assistant" and bool(message.get("tool_calls")))
    if step and card.kind in (CardKind.SYSTEM_NOTE, CardKind.ASSISTANT_CONCLUSION):
        return True
    return card.kind is CardKind.SYSTEM_NOTE and card.source == "unknown" and role != "unknown"


def _readable(record: RawRecord) -> Message | None:
    """The event of a record, or ``None`` with a warning when the record is damaged: the rest of
    the conversation is still read."""
    try:
        return _stored_body(record)
    except StoreError as exc:
        logger.warning("damc: %s; the conversation is read without it", exc)
        return None


def _stored_body(record: RawRecord) -> Message:
    """The event a record holds; a damaged record is a ``StoreError`` that names it."""
    try:
        body = json.loads(record.body)
    except ValueError as exc:
        raise StoreError(f"record {record.id!r} of {record.namespace.key!r} is damaged: {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("role"), str):
        raise StoreError(f"record {record.id!r} of {record.namespace.key!r} is damaged: not a message")
    return body


def _stored_message(body: str, message: Message) -> Message:
    """The message a stored body holds, as ``normalize_event`` made it (an escaped lone surrogate
    comes back as one, and is replaced again; a legacy function call is read as a tool call)."""
    return normalize_event(message)[0] if "\\ud" in body else with_tool_calls(message)


def _audio_as_sent(message: Message, now: float) -> Message:
    """An assistant's audio reply as Chat Completions takes it back: by its ``id`` alone until it
    expires on the provider's server (its ``expires_at``), then as its transcript. The audio's
    base64 ``data`` goes to no API: the record keeps it."""
    audio = message["audio"]
    rest = {key: value for key, value in message.items() if key != "audio"}
    expires = audio.get("expires_at")
    if isinstance(audio.get("id"), str) and (expires is None or (finite_number(expires) and now < expires)):
        return {**rest, "audio": {"id": audio["id"]}}
    transcript = audio.get("transcript")
    if not content_text(rest.get("content")).strip() and isinstance(transcript, str):
        return {**rest, "content": transcript}
    return rest


def _with_text(message: Message, text: str) -> Message:
    """``message`` with its text replaced by ``text`` (its card): the parts a card holds no text
    of (an image a tool returned, the model's reasoning) still go with it."""
    content = message.get("content")
    kept = (
        [p for p in content if isinstance(p, dict) and "text" not in p] if isinstance(content, list) else []
    )
    return {**message, "content": [{"type": "text", "text": text}, *kept] if kept else text}


def _fallback_card(message: Message, record: RawRecord, card_id: str, exc: Exception) -> Card:
    text = content_text(message.get("content"))
    return Card(
        id=card_id,
        record_id=record.id,
        seq=record.seq,
        created_at=record.created_at,
        kind=CardKind.TOOL_RESULT if message.get("role") == "tool" else CardKind.SYSTEM_NOTE,
        summary="",
        text=f"[not parsed: {type(exc).__name__}; recall {card_id}] {text[:300]}",
        tool_name=str(message.get("name") or "") or None,
        source=str(message.get("role")),
    )
