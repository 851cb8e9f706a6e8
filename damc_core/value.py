"""Value stage: how much a card matters for the decision the agent is about to make.

The default :class:`HeuristicValuator` scores three dimensions of decision value:

* **causal necessity**: the card holds values a later call takes as arguments (exact IDs, dates,
  amounts), values the user named, or values already used by an earlier decision;
* **option constraint**: the card rules options out (errors, sold out, not enough balance);
* **state change**: the card records a change of the world's or the task's state (a booking, a
  cancellation, a derived conclusion).

Dimensions combine as a noisy-or weighted by the task mode, start from a per-kind cold-start
prior, gain from overlap with the decision focus and fade with ``exp(-lambda * age)``.
Valuators are pluggable and combine with :class:`WeightedValuators`.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, TypeVar, runtime_checkable

from .checks import finite_number, in_unit
from .compress import identity_columns, row_identifiers
from .encode import list_items
from .errors import ConfigError
from .extract import (
    CONFIRMED,
    CONSENT,
    ENTITY_KEY,
    FUNCTION_WORDS,
    NEGATIVE_STATUS,
    changes_state,
    is_handle,
    is_sql_statement,
    snake_case,
)
from .types import BuiltContext, Card, CardKind, DecisionFocus, Message, Namespace, Score, ScoredCard


@dataclass(frozen=True, slots=True)
class ValuationContext:
    """What a valuator may look at besides the cards."""

    focus: DecisionFocus
    current_seq: int
    """Sequence number the next event will get (the newest observed event's plus one)."""
    now: float
    """Unix time of the decision."""
    last_used: Mapping[str, int] = field(default_factory=dict)
    """Card id -> ``seq`` of the newest event that mentioned one of its identifiers or took one as
    an argument. Turn decay counts from there, so a card the conversation keeps returning to stays
    fresh."""
    namespace: Namespace | None = None
    """Whose conversation the cards belong to; card ids are unique only within one namespace."""
    request_seq: int | None = None
    """``seq`` of the user's newest turn, the request the decision serves. When the caller sends
    that turn itself (excluded from the candidates), no older turn takes its place; ``None``: the
    newest user card among the candidates."""


@runtime_checkable
class Valuator(Protocol):
    """Gives every candidate card a decision value in [0, 1] with the scores behind it."""

    def value(self, cards: Sequence[Card], *, context: ValuationContext) -> list[ScoredCard]: ...


@runtime_checkable
class CandidateSource(Protocol):
    """A valuator that also proposes candidates (e.g. by semantic search) when a long memory is cut
    to a shortlist, so a card it finds is valued even if recency and priors would leave it out."""

    def candidates(
        self, cards: Mapping[str, Card], *, focus: DecisionFocus, limit: int, namespace: Namespace
    ) -> list[str]:
        """Ids of up to ``limit`` of ``namespace``'s cards worth valuing for ``focus``, best first."""


@dataclass(frozen=True, slots=True)
class ObservedDecision:
    """A tool call the agent made from a built context, reported once its result came back clean.

    Valuators that learn from the agent's own decisions (see :class:`DecisionRecorder`) take the
    executed call as the right action for that context.
    """

    namespace: Namespace
    seq: int
    """``seq`` of the assistant message that made the call."""
    system: str | None
    """The system prompt in force."""
    history: tuple[Message, ...]
    """Every message before the call, system prompt excluded, as observed."""
    card_ids: tuple[str, ...]
    """The card of each message of ``history``, in the same order."""
    built: BuiltContext
    """The context built right before the call: what the model decided from."""
    action: Message
    """The assistant message with the one call whose result came back clean."""


@runtime_checkable
class DecisionRecorder(Protocol):
    """A valuator that ``DecisionMemory`` tells about each decision whose call succeeded."""

    def record_decision(self, decision: ObservedDecision) -> None: ...


@runtime_checkable
class Forgetting(Protocol):
    """A valuator that keeps something of each conversation outside the store (an index of its
    cards): told when a conversation was started over at event ``before`` (``clear()``, here or
    in another memory on the namespace), it drops what it keeps of the cards before it."""

    def forget(self, namespace: Namespace, *, before: int) -> None: ...


@runtime_checkable
class Emptying(Protocol):
    """A valuator that keeps something of each conversation outside the store: told that a memory
    found no event of a namespace in its store (a new ``InMemoryStore``, a store file deleted), it
    drops what it keeps of the namespace. That is an earlier conversation's, which the store no
    longer has, and the new one's cards take its ids (``c0``, ``c1``, ...)."""

    def empty(self, namespace: Namespace) -> None: ...


class TaskMode(str, Enum):
    """How the agent's task weighs the value dimensions."""

    PRECISE_PLANNING = "precise_planning"
    """Bookings, orders, transactions: exact parameters and constraints dominate."""
    INFORMATION_GATHERING = "information_gathering"
    """Research: new entities and factual conclusions dominate."""
    CREATIVE = "creative"
    """Writing and ideation: the user's instructions and concepts dominate, parameters matter less."""


@dataclass(frozen=True, slots=True)
class ModeWeights:
    causal: float
    constraint: float
    state: float
    focus: float


MODE_WEIGHTS: dict[TaskMode, ModeWeights] = {
    TaskMode.PRECISE_PLANNING: ModeWeights(causal=0.9, constraint=0.85, state=0.8, focus=0.6),
    TaskMode.INFORMATION_GATHERING: ModeWeights(causal=0.6, constraint=0.5, state=0.4, focus=0.9),
    TaskMode.CREATIVE: ModeWeights(causal=0.3, constraint=0.4, state=0.3, focus=0.8),
}

COLD_START_PRIOR: dict[CardKind, float] = {
    CardKind.USER_INSTRUCTION: 0.3,
    CardKind.TOOL_ERROR: 0.5,
    CardKind.TOOL_RESULT: 0.35,
    CardKind.ASSISTANT_CONCLUSION: 0.05,
    CardKind.TOOL_CALL: 0.05,
    CardKind.SYSTEM_NOTE: 0.2,
}
"""Value of a card before anything is known about its use. Errors rule options out and results
hold the exact values calls reuse; user turns gain value through the values and restrictions
they state (causal and constraint scores), not by default; assistant text mostly restates."""


@dataclass(frozen=True, slots=True)
class Decay:
    """``exp(-lam * age)``; age in turns (events) by default, or in seconds."""

    lam: float = 0.05
    unit: str = "turns"
    floor: float = 0.2
    """Lowest multiplier: an old card that an open decision still needs must stay selectable."""

    def __post_init__(self) -> None:
        if not finite_number(self.lam) or self.lam < 0:
            raise ConfigError(f"Decay.lam must be a number >= 0, got {self.lam!r}")  # (NaN is not)
        if self.unit not in ("turns", "seconds"):
            raise ConfigError(f"Decay.unit must be 'turns' or 'seconds', got {self.unit!r}")
        if not in_unit(self.floor):
            raise ConfigError(f"Decay.floor must be in [0, 1], got {self.floor!r}")

    def factor(self, card: Card, context: ValuationContext) -> float:
        if self.unit == "turns":
            used = context.last_used.get(card.id, -1)
            age: float = context.current_seq - (card.seq if card.seq > used else used)
        else:
            age = context.now - card.created_at
        return max(self.floor, math.exp(-self.lam * age)) if age > 0 else 1.0


def noisy_or(values: Sequence[float]) -> float:
    out = 1.0
    for v in values:
        out *= 1.0 - min(1.0, max(0.0, v))
    return 1.0 - out


LIST_IN_PROGRESS = 0.95
"""Causal score of a card listing values (a user's orders, reservations) that calls are going
through one by one: two or more used, some not yet."""

PENDING_INPUT = 0.85
"""Causal score of a user turn giving handles (ids, ISO dates) that no call has taken yet: the
agent asked for them, or the user gave them, for a call still to come (the passengers of a
booking). Once a call takes them, the turn scores by its links like any other card."""


def _list_in_progress(card: Card) -> tuple[int, int] | None:
    """(used, listed) for the first list of the card whose values later calls are going through."""
    lists = [items for f in card.facts if (items := list_items(f.value)) is not None]
    lists += [[row[i] for row in t.rows] for t in card.tables for i in identity_columns(t.columns)]
    for values in lists:
        used = sum(1 for v in values if v.lower().lstrip("#") in card.used_terms)
        if 2 <= used < len(values):
            return used, len(values)
    return None


PROPOSAL = 0.9
"""Score of the assistant turn the user has just agreed to ("Shall I return items 4579334072 and
6117189161 to credit_card_3124723?" - "Yes, go ahead"): the action it proposed comes next, with
its values. Only when that agreement is the newest event and the turn holds exact values."""

RECORD_AGING = 0.5
"""Exponent on the time decay of a lookup by id (a reservation, an order, a profile): the record
of an entity the task works on stays true and in use for the whole conversation, while a search
or a step's output is soon replaced by the next; its decay is the square root of theirs."""

SHARED_TERMS_CAP = 0.9
"""Highest focus from shared terms alone: a lookup of the entity the dialogue is on (its id in the
focus) outranks one that shares names and dates with it (another reservation of the same user)."""
_VIEWS = frozenset({CardKind.TOOL_RESULT, CardKind.TOOL_ERROR})
_DECAY_WHY = "time decay since the card was made or last mentioned"
_REQUEST_WHY = "the user's newest turn: the request this decision serves"
_PROPOSAL_WHY = "what the user has just agreed to: the values of the action it proposed"
_FRESH_WHY = "fades with each newer card from the same tool"


PENDING_IN_SERIES = 0.9
"""Score of a lookup whose entity an action going through a series has not reached yet: the
reservations looked up one by one and then changed one by one, the next to change is one whose
lookup the action has not taken. Not when the user has just agreed to a proposal: that names the
next action, which may leave the series (a return after a run of cancellations). Also the score of
the next lookup of a run whose values the agent takes into later calls one lookup after the other
(a search for each reservation's route, see ``_next_to_take``), and of a list of ids the agent looks
up one after the other (a profile's reservations, see ``_lists_gone_through``)."""
_PENDING_WHY = "holds what the agent goes through one by one and has not reached yet"
_REQUEST_SCORE = Score("request", 1.0, _REQUEST_WHY)
_PROPOSAL_SCORE = Score("proposal", PROPOSAL, _PROPOSAL_WHY)
_PENDING_SCORE = Score("pending", PENDING_IN_SERIES, _PENDING_WHY)


def _seq(card: Card) -> int:
    return card.seq


def _pending_in_series(cards: Sequence[Card]) -> frozenset[str]:
    """Ids of the lookups of an entity, made before a state-changing tool acted on two or more
    others by the same argument (``reservation_id``), that it has not acted on: the entities were
    looked up, then gone through, and these are next (see ``PENDING_IN_SERIES``). A lookup after
    the last action is the agent's current view, valued as such. With them, the next lookup of a
    run whose values later calls took in order (``_next_to_take``) and the lists of ids looked up
    in their order (``_lists_gone_through``)."""
    acted: dict[str, set[str]] = {}
    last_act: dict[str, int] = {}
    lookups: list[tuple[Card, frozenset[tuple[str, str]]]] = []
    looked_up: set[str] = set()  # every entity a result is about
    for card in cards:
        if card.kind is not CardKind.TOOL_RESULT or not (handles := _handles_of(card)):
            continue
        looked_up.update(value for _, value in handles)
        if changes_state(card.tool_name):
            for name, value in handles:
                acted.setdefault(name, set()).add(value)
                last_act[name] = max(last_act.get(name, -1), card.seq)
        elif not card.constraints:  # a cancelled order, a sold-out flight: ruled out, not next
            lookups.append((card, handles))
    series = {name: values for name, values in acted.items() if len(values) >= 2}
    taken_next = _next_to_take(lookups) | _lists_gone_through(cards, looked_up)
    if not series:
        return taken_next
    pending = set()
    for card, handles in lookups:  # loops, not any(): this runs for every candidate at every decision
        ahead = False
        for name, value in handles:
            values = series.get(name)
            if values is None:
                continue
            if value in values:
                break  # acted on already
            ahead = ahead or card.seq < last_act[name]
        else:
            if ahead:
                pending.add(card.id)
    return frozenset(pending) | taken_next


def _next_to_take(lookups: Sequence[tuple[Card, frozenset[tuple[str, str]]]]) -> frozenset[str]:
    """Ids of the lookup next in line where the agent looked entities up in a run and then took
    each one's values into later calls in the order it looked them up (a search for each
    reservation's route, one after the other): the first of the run not taken yet, after the
    last one taken."""
    runs: dict[tuple[str | None, str], list[Card]] = {}
    for card, handles in lookups:
        for name, _ in handles:
            runs.setdefault((card.tool_name, name), []).append(card)
    out = set()
    for cards in runs.values():
        cards.sort(key=_seq)
        taken = [card for card in cards if card.decision_links]
        if len(taken) < 2:
            continue
        first_uses = [min(seq_of(link) for link in card.decision_links) for card in taken]
        if any(later <= earlier for earlier, later in itertools.pairwise(first_uses)):
            continue  # not one after the other in the order looked up
        after = [card for card in cards if taken[-1].seq < card.seq < first_uses[0]]
        if after:
            out.add(after[0].id)
    return frozenset(out)


def _lists_gone_through(cards: Sequence[Card], looked_up: Collection[str]) -> frozenset[str]:
    """Ids of the results that list ids (a profile's reservations) which calls look up in the
    list's order, a later call taking one from the card, with some still to look up: the list is
    what the next lookup takes its id from. ``looked_up``: the entities results are about."""
    out = set()
    for card in cards:
        if card.kind is not CardKind.TOOL_RESULT or not card.decision_links:
            continue
        for fact in card.facts:
            items = list_items(fact.value)
            if items is None:
                continue
            taken = [item.lower() in looked_up for item in items]
            done = taken.index(False) if False in taken else len(taken)
            if 0 < done < len(taken) and not any(taken[done:]):  # the first items looked up, not the rest
                out.add(card.id)
                break
    return frozenset(out)


def seq_of(card_id: str) -> int:
    """The sequence number in a card id (``c12`` -> 12): ids sort by it, not as text."""
    return int(card_id[1:])


_MEMO_HELD = 4096
"""Entries each memo keeps, the least recently used let go first: a decision asks about at most a
few hundred candidates (``MemorySettings.max_candidates``), so this covers a few dozen
conversations at once, and each entry holds its card's facts or tables alive, so a server's
dropped conversations must age out rather than fill the memo."""
_MEMO_LOCK = threading.Lock()
_Source = TypeVar("_Source")
_Derived = TypeVar("_Derived")
_NO_SUBJECT: frozenset[str] = frozenset()


def _remembered(
    memo: OrderedDict[int, tuple[object, _Derived]],
    anchor: object,
    compute: Callable[[_Source], _Derived],
    source: _Source,
) -> _Derived:
    """``compute(source)`` remembered per ``anchor`` object: a card's renderings share its
    arguments, facts and tables, so what is derived from them is derived once. Checked by
    identity (an id can be reused after its object is gone) and bounded in size. ``compute`` is
    a plain function, not a closure: this runs for every candidate at every decision."""
    key = id(anchor)
    with _MEMO_LOCK:
        held = memo.get(key)
        if held is not None and held[0] is anchor:
            memo.move_to_end(key)
            return held[1]
    value = compute(source)
    with _MEMO_LOCK:
        memo[key] = (anchor, value)
        memo.move_to_end(key)
        while len(memo) > _MEMO_HELD:
            memo.popitem(last=False)
    return value


_SUBJECTS: OrderedDict[int, tuple[object, frozenset[str]]] = OrderedDict()


def subject_of(card: Card) -> frozenset[str]:
    """The entity a lookup was about: identifier arguments under id-like names (``reservation_id``,
    ``order_id``), or an SQL statement (``query="SELECT COUNT(*) FROM Customer"``: the answer to
    another query is another record, not a newer view of this one). Results of one tool about
    different entities are different records, not newer views of one record; searches (no id
    argument) and pages read by their URL have no subject (see ``ENTITY_KEY``).

    Asked for every candidate at every decision, so it is remembered per arguments object."""
    arguments = card.arguments
    if not arguments:
        return _NO_SUBJECT
    return _remembered(_SUBJECTS, arguments, _id_arguments, arguments)


def _id_arguments(arguments: Mapping[str, object]) -> frozenset[str]:
    queries = (
        " ".join(value.split()).lower()
        for value in arguments.values()
        if isinstance(value, str) and is_sql_statement(value)
    )
    return frozenset(value for _, value in _remembered(_HANDLES, arguments, _handles, arguments)).union(
        queries
    )


_HANDLES: OrderedDict[int, tuple[object, frozenset[tuple[str, str]]]] = OrderedDict()


def _handles_of(card: Card) -> frozenset[tuple[str, str]]:
    """``(argument name, value)`` for each identifier argument of the card's call (``("reservation_id",
    "boh180")``): its subject with what each value identifies. Remembered per arguments object."""
    arguments = card.arguments
    if not arguments:
        return frozenset()
    return _remembered(_HANDLES, arguments, _handles, arguments)


def _handles(arguments: Mapping[str, object]) -> frozenset[tuple[str, str]]:
    return frozenset(
        (snake_case(key), str(value).lower())
        for key, value in arguments.items()
        if ENTITY_KEY.search(snake_case(key))
        and isinstance(value, (str, int))
        and not isinstance(value, bool)
    )


_WORD = re.compile(r"[a-z]{4,}")
_GENERIC_NAMES = frozenset({"list", "search", "find", "fetch", "details", "info", "value", "rows"})
"""Words in tool and field names that say nothing about what a card holds."""
_VOCABULARIES: OrderedDict[int, tuple[object, frozenset[str]]] = OrderedDict()


def _words(texts: Iterable[str], *, skip: frozenset[str]) -> frozenset[str]:
    """Lower-cased words of four or more letters, a plural ``s`` cut (``bags`` matches ``bag``)."""
    return frozenset(
        w[:-1] if w.endswith("s") and not w.endswith("ss") else w
        for text in texts
        for w in _WORD.findall(text.lower())
        if w not in skip
    )


@functools.lru_cache(maxsize=1024)
def topic_words(text: str) -> frozenset[str]:
    """Content words of a request (``gift``, ``card``, ``balance``): what it is about, in words,
    for the cards that hold such things but share no exact term with it."""
    return _words((text,), skip=FUNCTION_WORDS)


def vocabulary_of(card: Card) -> frozenset[str]:
    """Words naming what a card holds: tool name, keys, table names and columns, and the word
    parts of its identifiers (``gift_card_7480005``: gift, card).

    Asked for every candidate at every decision, so it is remembered per facts (or tables) object."""
    anchor = card.facts or card.tables
    if not anchor:
        return _words((card.tool_name or "",), skip=_GENERIC_NAMES)
    return _remembered(_VOCABULARIES, anchor, _vocabulary, card)


def _vocabulary(card: Card) -> frozenset[str]:
    return _words(_names(card), skip=_GENERIC_NAMES)


def _names(card: Card) -> list[str]:
    names = [card.tool_name or "", *(f.path for f in card.facts)]
    names += [f.value for f in card.facts if f.kind == "id"]
    for table in card.tables:
        names += [table.path, *table.columns]
        names += [identifier for row in table.rows for identifier in row_identifiers(table, row)]
    return names


@dataclass(frozen=True, slots=True)
class HeuristicValuator:
    """Causal necessity, option constraint and state change, weighted by task mode; no model calls."""

    mode: TaskMode = TaskMode.PRECISE_PLANNING
    decay: Decay = field(default_factory=Decay)
    priors: dict[CardKind, float] = field(default_factory=lambda: dict(COLD_START_PRIOR))
    rank_decay: float = 0.5
    """Multiplier per newer card from the same tool (or of the same kind): the newest search result
    usually replaces the older ones as what the agent works from."""
    rank_floor: float = 0.2
    """Lowest freshness multiplier."""

    def __post_init__(self) -> None:
        """Settings read from a config file are checked here, not at the first event they would
        break (an unknown mode was a ``KeyError`` inside the agent's step)."""
        if not isinstance(self.mode, str) or self.mode not in MODE_WEIGHTS:
            modes = ", ".join(mode.value for mode in TaskMode)
            raise ConfigError(f"HeuristicValuator.mode must be one of {modes}, got {self.mode!r}")
        if not isinstance(self.decay, Decay):
            raise ConfigError(f"HeuristicValuator.decay must be a Decay, got {self.decay!r}")
        for name in ("rank_decay", "rank_floor"):
            if not in_unit(getattr(self, name)):
                raise ConfigError(f"HeuristicValuator.{name} must be in [0, 1], got {getattr(self, name)!r}")
        if not isinstance(self.priors, Mapping) or not all(
            kind in CardKind.__members__.values() and in_unit(value) for kind, value in self.priors.items()
        ):
            raise ConfigError(
                f"HeuristicValuator.priors must map card kinds to values in [0, 1], got {self.priors!r}"
            )

    def static_scores(self, card: Card, *, goal_terms: frozenset[str] = frozenset()) -> tuple[Score, ...]:
        """Query-independent scores, computed once when the card is made and when links change."""
        weights = MODE_WEIGHTS[self.mode]
        scores = [Score("prior", self.priors.get(card.kind, 0.2), f"cold-start prior for {card.kind.value}")]
        causal, why = self._causal(card, goal_terms)
        if causal:
            scores.append(Score("causal", causal * weights.causal, why))
        constraint, why = self._constraint(card)
        if constraint:
            scores.append(Score("constraint", constraint * weights.constraint, why))
        state, why = self._state(card)
        if state:
            scores.append(Score("state", state * weights.state, why))
        return tuple(scores)

    def prior(self, scores: Sequence[Score]) -> float:
        return noisy_or([s.value for s in scores])

    def value(self, cards: Sequence[Card], *, context: ValuationContext) -> list[ScoredCard]:
        focus_weight = MODE_WEIGHTS[self.mode].focus
        focus_terms = context.focus.terms
        focus_tools = context.focus.tools
        newer_of_same_source: dict[tuple[str | None, frozenset[str]], int] = {}
        out = []
        request_seen = False
        proposal_seq = -1  # the assistant turn the user has just agreed to, if any
        request_words = topic_words(context.focus.query) if context.focus.query else frozenset()
        decay_of = self.decay.factor
        pending = _pending_in_series(cards)
        standing: dict[tuple[float, int], tuple[Score, ...]] = {}  # most cards share decay and rank
        for card in sorted(cards, key=_seq, reverse=True):
            rank = 0
            subject = subject_of(card)
            viewed = card.kind in _VIEWS
            if viewed:  # a newer result of the same lookup is the agent's current view
                view = (card.tool_name, subject)
                rank = newer_of_same_source.get(view, 0)
                newer_of_same_source[view] = rank + 1
            overlap = (
                len(card.terms & focus_terms) if focus_terms and not card.terms.isdisjoint(focus_terms) else 0
            )
            topic = len(request_words & vocabulary_of(card)) if request_words and viewed else 0
            focus = (
                min(SHARED_TERMS_CAP, 0.35 * (overlap + topic)) * focus_weight if overlap or topic else 0.0
            )
            if subject and not subject.isdisjoint(focus_terms):
                focus = focus_weight  # the card is about the entity the dialogue is on
            if focus_tools and card.tool_name in focus_tools:
                focus = max(focus, 0.3 * focus_weight)
            decay = decay_of(card, context)
            if subject and viewed:  # the record of an entity ages at half the rate (see RECORD_AGING)
                decay **= RECORD_AGING
            scores = standing.get((decay, rank))
            if scores is None:
                freshness = max(self.rank_floor, self.rank_decay**rank)
                scores = standing[decay, rank] = (
                    Score("decay", decay, _DECAY_WHY),
                    Score("freshness", freshness, _FRESH_WHY),
                )
            freshness = scores[1].value
            if focus:
                why = f"shares {overlap} exact terms with the decision focus"
                if topic:
                    why += f" and {topic} words with the request"
                scores += (Score("focus", focus, why),)
            if (
                card.kind is CardKind.USER_INSTRUCTION
                and not request_seen
                and context.request_seq in (None, card.seq)
            ):
                request_seen = True  # the newest user turn is the request the decision serves
                if card.seq == context.current_seq - 1 and CONSENT.search(card.text):
                    proposal_seq = card.seq - 1
                out.append(ScoredCard(card, 1.0, (*scores, _REQUEST_SCORE)))
                continue
            next_up = 0.0  # what the next action takes: the proposal agreed to, the series' next entity
            if card.seq == proposal_seq and card.kind is CardKind.ASSISTANT_CONCLUSION and card.facts:
                next_up = PROPOSAL
                scores += (_PROPOSAL_SCORE,)
            elif card.id in pending and proposal_seq < 0:
                next_up = PENDING_IN_SERIES
                scores += (_PENDING_SCORE,)
            aged = card.prior * decay * freshness
            out.append(ScoredCard(card, 1.0 - (1.0 - aged) * (1.0 - focus) * (1.0 - next_up), scores))
        return out[::-1]

    @staticmethod
    def _causal(card: Card, goal_terms: frozenset[str]) -> tuple[float, str]:
        reasons, score = [], 0.0
        if card.kind in (CardKind.ASSISTANT_CONCLUSION, CardKind.TOOL_CALL, CardKind.SYSTEM_NOTE):
            return 0.0, ""  # restates facts held by other cards
        if card.decision_links:
            score = 0.6 + 0.1 * min(3, len(card.decision_links))
            reasons.append(f"values used by later calls {', '.join(card.decision_links[:4])}")
        ids = sum(1 for f in card.facts if f.kind in ("id", "date", "amount")) + sum(
            len(t.rows) for t in card.tables
        )
        if ids and card.kind in (CardKind.TOOL_RESULT, CardKind.USER_INSTRUCTION):
            score = max(
                score, min(0.75, 0.3 + 0.1 * math.log2(1 + ids))
            )  # more exact values, likelier needed
            reasons.append(f"{ids} exact identifiers, dates or amounts")
        if card.kind is CardKind.USER_INSTRUCTION and not card.decision_links:
            handles = sum(1 for f in card.facts if f.kind in ("id", "date") and is_handle(f.value))
            if handles:
                score = max(score, PENDING_INPUT)
                reasons.append(f"{handles} ids or dates the user gave that no call has taken yet")
        if card.used_terms and (progress := _list_in_progress(card)):
            used, listed = progress
            score = max(score, LIST_IN_PROGRESS)
            reasons.append(
                f"calls went through {used} of its {listed} listed values; the rest are likely next"
            )
        named = (
            len(card.terms & goal_terms) if goal_terms and card.kind is not CardKind.USER_INSTRUCTION else 0
        )
        if named:
            score = max(score, min(0.8, 0.4 + 0.1 * named))
            reasons.append(f"{named} values named by the user")
        return score, "; ".join(reasons)

    @staticmethod
    def _constraint(card: Card) -> tuple[float, str]:
        if card.kind is CardKind.TOOL_ERROR:
            return 0.9, "tool error rules this action out as called"
        if card.constraints:
            return 0.7, "rules out: " + "; ".join(card.constraints[:3])
        if card.kind is CardKind.USER_INSTRUCTION and NEGATIVE_STATUS.search(card.text):
            return 0.5, "user states a restriction"
        return 0.0, ""

    @staticmethod
    def _state(card: Card) -> tuple[float, str]:
        if card.kind is CardKind.TOOL_RESULT and changes_state(card.tool_name):
            return 0.9, f"{card.tool_name} changed state"
        if card.kind is CardKind.ASSISTANT_CONCLUSION and CONFIRMED.search(card.text):
            return 0.5, "assistant concluded a state change"
        if card.kind is CardKind.TOOL_RESULT and any(
            f.kind == "status" and CONFIRMED.search(f.value) for f in card.facts
        ):
            return 0.6, "result reports a confirmed status"
        return 0.0, ""


def _is_part(part: object) -> bool:
    """Whether ``part`` is a (valuator, finite weight > 0) pair."""
    return (
        isinstance(part, (tuple, list))
        and len(part) == 2
        and isinstance(part[0], Valuator)
        and finite_number(part[1])
        and part[1] > 0
    )


@dataclass(frozen=True, slots=True)
class WeightedValuators:
    """Several valuators as one: a weighted mean of their values, every score kept with its source.

    Parts that propose candidates (retrieval) or learn from decisions (counterfactual) keep doing
    so inside the mix: both are forwarded.
    """

    parts: tuple[tuple[Valuator, float], ...]

    def __post_init__(self) -> None:
        """A NaN weight would make every value NaN, and a part that is no pair or no valuator
        would fail only at the first decision."""
        if not isinstance(self.parts, (tuple, list)) or not self.parts or not all(map(_is_part, self.parts)):
            raise ConfigError(
                f"WeightedValuators needs at least one (valuator, weight > 0) pair, got {self.parts!r}"
            )

    def value(self, cards: Sequence[Card], *, context: ValuationContext) -> list[ScoredCard]:
        """Each card's values from every part, paired by card id: parts return their cards in
        orders of their own (the heuristics oldest first, whatever order the shortlist came in)."""
        total = sum(w for _, w in self.parts)
        results = [({s.card.id: s for s in v.value(cards, context=context)}, w) for v, w in self.parts]
        out = []
        for card in cards:
            value = sum(r[card.id].value * w for r, w in results) / total
            scores = tuple(s for r, _ in results for s in r[card.id].scores)
            out.append(ScoredCard(card, value, scores))
        return out

    def candidates(
        self, cards: Mapping[str, Card], *, focus: DecisionFocus, limit: int, namespace: Namespace
    ) -> list[str]:
        """The parts' candidates, merged in part order, without repeats."""
        found = (
            card_id
            for valuator, _ in self.parts
            if isinstance(valuator, CandidateSource)
            for card_id in valuator.candidates(cards, focus=focus, limit=limit, namespace=namespace)
        )
        return list(dict.fromkeys(found))[:limit]

    def record_decision(self, decision: ObservedDecision) -> None:
        """Tell every part that learns from decisions."""
        for valuator, _ in self.parts:
            if isinstance(valuator, DecisionRecorder):
                valuator.record_decision(decision)

    def forget(self, namespace: Namespace, *, before: int) -> None:
        """Tell every part that keeps something of the conversation, each even when one fails."""

        def told(part: Valuator) -> None:
            if isinstance(part, Forgetting):
                part.forget(namespace, before=before)

        self._tell(told)

    def empty(self, namespace: Namespace) -> None:
        """Tell every part that keeps something of the namespace, each even when one fails."""

        def told(part: Valuator) -> None:
            if isinstance(part, Emptying):
                part.empty(namespace)

        self._tell(told)

    def _tell(self, told: Callable[[Valuator], None]) -> None:
        """``told`` of every part; the first failure is raised once every part was told."""
        failures = []
        for valuator, _ in self.parts:
            try:
                told(valuator)
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]


def heuristics_of(valuator: Valuator | None) -> HeuristicValuator:
    """The heuristic valuator that ``valuator`` is, wraps (``base``) or mixes in, searched
    breadth-first; the default one when there is none. Cards' standing scores and priors come
    from it, so a wrapped valuator's task mode and priors apply there too."""
    queue: list[object] = [valuator]
    while queue:
        found = queue.pop(0)
        if isinstance(found, HeuristicValuator):
            return found
        if isinstance(found, WeightedValuators):
            queue.extend(part for part, _ in found.parts)
        elif isinstance(base := getattr(found, "base", None), Valuator):
            queue.append(base)
    return HeuristicValuator()
