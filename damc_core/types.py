"""The records that flow through the pipeline: raw records, cards, scores and built contexts.

Every record is a frozen dataclass: stages return new objects (``dataclasses.replace``) instead of
mutating what they were given, so a card handed to the caller never changes under its feet.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any, NamedTuple

from .errors import ConfigError

Message = dict[str, Any]
"""An OpenAI-style chat message: ``role``, ``content`` and, where present, ``tool_calls``,
``tool_call_id`` and ``name``. The exchange format between DAMC and every adapter."""

CARD_FORMAT_VERSION = 1


class CardKind(str, Enum):
    """What a card was made from; compressors and valuators pick their template by it."""

    USER_INSTRUCTION = "user_instruction"
    ASSISTANT_CONCLUSION = "assistant_conclusion"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    TOOL_ERROR = "tool_error"
    SYSTEM_NOTE = "system_note"


@dataclass(frozen=True, slots=True)
class Namespace:
    """Whose memory this is. Records of one namespace are never read for another."""

    user: str = "default"
    """The end user (tenant) the agent works for."""
    session: str = "default"
    """One conversation or task of that user."""

    def __post_init__(self) -> None:
        for name in ("user", "session"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"Namespace.{name} must be a non-empty string, got {value!r}")
            if not value.isascii() and not _is_utf8(value):  # half of an emoji: no store takes it
                raise ConfigError(f"Namespace.{name} must be valid text, got {value!r}")

    @property
    def key(self) -> str:
        """Stable storage key; ``%`` and ``/`` inside the parts are escaped (``%25``, ``%2F``), so
        two namespaces never collide (a part with neither keeps the key it always had)."""
        return f"{_escaped(self.user)}/{_escaped(self.session)}"


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One observed event exactly as it arrived, stored before any processing."""

    id: str
    """Unique id (``r`` + sequence number within the namespace)."""
    namespace: Namespace
    """Owner of the record."""
    seq: int
    """Position of the event in the namespace's stream, from 0."""
    created_at: float
    """Unix time the event was observed."""
    body: str
    """The event, serialized verbatim as JSON (bytes that are not UTF-8 are kept as base64)."""
    v: int = CARD_FORMAT_VERSION
    """Format version of this record."""


@dataclass(frozen=True, slots=True)
class Fact:
    """One exact value taken from an event, with the path it was found at."""

    path: str
    """Where the value sits, e.g. ``flights[1].flight_number`` or ``text``."""
    value: str
    """The value, verbatim as a string."""
    kind: str = "value"
    """``id``, ``date``, ``amount``, ``status``, ``error``, ``name`` or ``value``."""


@dataclass(frozen=True, slots=True)
class Table:
    """A list of records from a tool output, kept as compact rows instead of repeated JSON keys."""

    path: str
    """Where the list sits in the output (``""`` for a top-level list)."""
    columns: tuple[str, ...]
    """Flattened column names, e.g. ``prices.economy``."""
    rows: tuple[tuple[str, ...], ...]
    """Cell values verbatim; ``""`` where a record has no such field."""
    left_out: int = 0
    """Records of the list past the rows kept (the raw record holds them)."""

    @property
    def size(self) -> int:
        """Records in the list, kept or not."""
        return len(self.rows) + self.left_out


class Score(NamedTuple):
    """One valuator's opinion of a card, kept so ``explain()`` can say why a card was kept.

    A named tuple rather than a dataclass: valuators make several per card per decision.
    """

    name: str
    """What was measured, e.g. ``causal``, ``constraint``, ``state``, ``focus``, ``decay``."""
    value: float
    """The measurement, in [0, 1] unless the name says otherwise."""
    provenance: str
    """Which valuator produced it and from what, e.g. ``heuristic: used as argument of book_flight``."""


@dataclass(frozen=True, slots=True)
class Card:
    """A memory card: a short exact account of one event, linked to its raw record."""

    id: str
    """Unique id within the namespace (``c`` + sequence number); shown in the prompt for ``recall``."""
    record_id: str
    """The raw record this card was made from; ``recall`` returns it."""
    seq: int
    """Position of the source event in the stream; newer cards have larger ``seq``."""
    created_at: float
    """Unix time the source event was observed."""
    kind: CardKind
    """What the card was made from."""
    summary: str
    """The compact rendering sent to the model, with IDs, times, amounts and statuses verbatim."""
    facts: tuple[Fact, ...] = ()
    """Exact key facts extracted from the event."""
    tables: tuple[Table, ...] = ()
    """Lists of records from the event, as compact rows."""
    text: str = ""
    """Extract of unstructured content (numbers, names and IDs kept) when the event is free text."""
    tool_name: str | None = None
    """Tool that produced (or, for ``TOOL_CALL`` cards, was called with) this content."""
    tool_call_id: str | None = None
    """The call id that pairs a tool result with the assistant message that requested it."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """Parameters of the tool call this card belongs to."""
    decision_links: tuple[str, ...] = ()
    """Ids of later tool-call cards that took a value of this card as an argument."""
    constraints: tuple[str, ...] = ()
    """Options this card rules out or limits, e.g. ``error: seat unavailable``."""
    source: str = ""
    """Where the content came from: ``user``, ``assistant`` or ``tool:<name>``."""
    trust: float = 0.5
    """How far the source is trusted, in [0, 1]; breaks ties between conflicting cards."""
    as_of: float | None = None
    """Unix time the values were true; set for volatile values (prices, seats, statuses)."""
    volatile: bool = False
    """Whether the values can change over time (prices, availability, balances)."""
    entity_keys: tuple[tuple[str, str], ...] = ()
    """(entity, attribute) pairs this card states a value for; a newer card on the same pair wins."""
    stale_rows: tuple[tuple[str, str], ...] = ()
    """(entity, newer card id) for table rows whose prices or statuses a newer card re-quoted;
    those cells are rendered as a pointer to the newer card instead of the old value."""
    stale_cells: tuple[tuple[str, str, str], ...] = ()
    """(entity, column, newer card id) for single cells of table rows a newer card re-quoted in
    part (a seat count without the price): those cells point to the newer card, the rest stay."""
    stale_facts: tuple[tuple[str, str], ...] = ()
    """(fact path, newer card id) for values a newer card on the same entity changed; rendered as a
    pointer to the newer card, so the outdated value is not shown as current."""
    superseded_by: str | None = None
    """Id of the newer card that replaced every value of this one."""
    used_terms: frozenset[str] = frozenset()
    """Values of this card that later tool calls took as arguments (lower-cased)."""
    prior: float = 0.0
    """Query-independent decision value in [0, 1], set by the encoder's valuation at observe time."""
    scores: tuple[Score, ...] = ()
    """The value scores behind ``prior``, with their provenance."""
    tokens: int = 0
    """Token cost of ``summary``."""
    raw_tokens: int = 0
    """Token cost of the raw event the card replaces."""
    terms: frozenset[str] = frozenset()
    """Lower-cased exact tokens (IDs, codes, names) used to match the decision focus."""
    v: int = CARD_FORMAT_VERSION
    """Format version of this card."""


_CARD_FIELDS = tuple(f.name for f in fields(Card))
_card_values = operator.attrgetter(*_CARD_FIELDS)
_CARD_SLOTS = {name: vars(Card)[name] for name in _CARD_FIELDS}
_CARD_SETTERS = tuple(slot.__set__ for slot in _CARD_SLOTS.values())


def updated(card: Card, **changes: Any) -> Card:
    """``dataclasses.replace(card, **changes)`` at half the cost: every event and decision copies
    cards with a field or two changed (a summary, scores, a link), and ``replace`` builds them
    through the generated ``__init__``, whose only work for a card is to set each field."""
    if type(card) is not Card:
        return replace(card, **changes)
    new = object.__new__(Card)
    for put, value in zip(_CARD_SETTERS, _card_values(card), strict=True):
        put(new, value)
    for name, value in changes.items():
        slot = _CARD_SLOTS.get(name)
        if slot is None:
            raise TypeError(f"Card has no field {name!r}")
        slot.__set__(new, value)
    return new


@dataclass(frozen=True, slots=True)
class DecisionFocus:
    """What the agent is deciding now: the query plus focus terms inferred from the pending step."""

    query: str = ""
    """The current request, usually the newest user turn."""
    terms: frozenset[str] = frozenset()
    """Lower-cased exact tokens (IDs, names, codes) the next decision is likely to use."""
    tools: frozenset[str] = frozenset()
    """Tool names the next step is likely to call."""
    fields: frozenset[str] = frozenset()
    """Field names whose values calls take (argument names, and the fields of results that fed a
    call): what a skeleton keeps besides identifiers and the focus terms."""
    named: frozenset[str] = frozenset()
    """Words of the request that may name a field (``email``, ``membership``): a skeleton keeps a
    record's value for a field the user asks about."""


class ScoredCard(NamedTuple):
    """A card with the value it has for the current decision (a named tuple: made per card per decision)."""

    card: Card
    value: float
    """Decision value for the current focus, after decay, in [0, 1]."""
    scores: tuple[Score, ...] = ()
    """Scores of this decision (focus, decay, ...); the card's standing scores are on ``card.scores``."""

    @property
    def all_scores(self) -> tuple[Score, ...]:
        """Standing and per-decision scores together, with their provenance."""
        return (*self.card.scores, *self.scores)


class Decision(NamedTuple):
    """Why one card was kept or dropped in a built context (a named tuple: made per card per build)."""

    card_id: str
    kept: bool
    reason: str
    value: float
    tokens: int
    """Tokens the card costs in the memory section: 0 when dropped, unless the left-out line
    names it, then its part of that line."""
    raw_tokens: int
    """Tokens the raw event would have cost."""
    scores: tuple[Score, ...] = ()


@dataclass(frozen=True, slots=True)
class BuiltContext:
    """The messages to send, and the record of how they were chosen."""

    messages: list[Message]
    """A valid OpenAI-style message sequence: system, memory, recent dialogue."""
    decisions: tuple[Decision, ...]
    """One entry per candidate card."""
    memory: str
    """The fenced memory section as placed in ``messages`` ("" when no card was kept or named): for a
    caller that puts it into a prompt of its own."""
    memory_tokens: int
    """Tokens of the memory section, counted line by line with a cache: up to about one token a
    line above a count of the whole text, so a budget counted this way errs on the safe side."""
    total_tokens: int
    """Tokens of every message sent, system prompt included, counted the same way (a long system
    prompt of many short lines counts some percent above its whole-text count)."""
    raw_tokens: int
    """Tokens the same history would cost sent verbatim."""
    unconsidered: int = 0
    """Cards left out before valuation because a long memory is first cut to a shortlist."""
    focus: DecisionFocus = field(default_factory=DecisionFocus)
    """What the decision was read to be about; learning valuators compare decisions by it."""

    @property
    def compression_ratio(self) -> float:
        """Sent tokens over verbatim tokens (lower is smaller)."""
        return self.total_tokens / self.raw_tokens if self.raw_tokens else 1.0
