"""Retrieval as a value signal and as candidate generation for :class:`~damc_core.DecisionMemory`.

:class:`RetrievalValuator` wraps another valuator (the heuristics by default). It serves every
namespace it is asked about (``for_session`` memories share it), each in its own collection.
Before a decision it indexes new cards, searches the index with the decision focus and the
user's request, spreads each hit along the decision graph (card A informed call B, B produced
result C: a hit on B lifts A and C), and lifts the wrapped value by the retrieval score. If the
index cannot be reached the wrapped values are returned unchanged and a warning is logged:
retrieval never stops the agent. What a wrapped valuator learns from (decisions, a clear, an empty
store) is passed on to it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..checks import finite_number, whole_number
from ..errors import ConfigError
from ..types import Card, CardKind, DecisionFocus, Namespace, Score, ScoredCard
from ..value import (
    DecisionRecorder,
    Emptying,
    Forgetting,
    HeuristicValuator,
    ObservedDecision,
    ValuationContext,
    Valuator,
)
from .index import CardIndex, Hit, card_document, document_digest, focus_query

logger = logging.getLogger("damc")

KEPT_NAMESPACES = 1024
"""Namespaces whose upkeep state one valuator keeps in memory; the least recently used beyond
this are re-read from the index when they return."""
REUSE_PROBE = 8
"""Cards, oldest first, whose text is compared with the index's at each decision."""


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """When cards leave the live index."""

    cold_below: float = 0.05
    """A card valued below this ..."""
    cold_after: int = 400
    """... at every decision over this many events (cards written) moves to cold storage (still
    searchable with ``cold=True``, its record and card untouched in the store). Counted in events,
    not in one process's decisions, because the count is kept in the index: a process that takes
    the namespace over continues it."""
    merge_threshold: float = 0.98
    """Cosine similarity at which live cards count as near-duplicates and merge into one entry."""
    every: int = 50
    """Decisions between lifecycle passes (each pass reads the namespace's live vectors)."""

    def __post_init__(self) -> None:
        for name in ("cold_after", "every"):
            if not whole_number(value := getattr(self, name)) or value <= 0:
                raise ConfigError(f"Lifecycle.{name} must be a whole number > 0, got {value!r}")
        if not finite_number(self.cold_below):
            raise ConfigError(f"Lifecycle.cold_below must be a finite number, got {self.cold_below!r}")
        if not finite_number(self.merge_threshold) or not 0 < self.merge_threshold <= 1:
            raise ConfigError(f"Lifecycle.merge_threshold must be in (0, 1], got {self.merge_threshold}")


@dataclass(slots=True)
class _State:
    indexed: dict[str, str] = field(default_factory=dict)
    """Card id -> the summary this valuator put in the index (or found there) for it."""
    found: dict[str, str] | None = None
    """Card id -> digest of the entries the index held when the namespace was first seen, not yet
    matched to a card: a card whose text has the same digest is not embedded again (a reopened
    memory re-embeds nothing), one with another digest (another conversation written under the
    same ids) is."""
    drops: int = 0
    """``CardIndex.drops`` when this state was read from the index."""
    decisions: int = 0
    low_since: dict[str, int] | None = None
    """Card id -> event sequence number since which it has been valued low (read from the index)."""
    cold: set[str] = field(default_factory=set)
    """Card ids in cold storage (read from the index on first use, like ``indexed``)."""
    focus: DecisionFocus | None = None
    hits: list[Hit] = field(default_factory=list)
    seq: int | None = None
    """The decision (event sequence number) ``hits`` were found for, and the last one counted in
    ``decisions``: a build values its recent results too, and that is one decision, one search."""
    aged: int | None = None


class RetrievalValuator:
    """Lifts ``base``'s values by semantic and exact retrieval for the decision focus."""

    def __init__(
        self,
        index: CardIndex,
        *,
        base: Valuator | None = None,
        weight: float = 0.3,
        k: int = 16,
        graph: float = 0.6,
        lifecycle: Lifecycle | None = None,
    ) -> None:
        if not (finite_number(weight) and finite_number(graph) and 0 < weight <= 1 and 0 <= graph <= 1):
            raise ConfigError(f"weight must be in (0, 1] and graph in [0, 1], got {weight!r}, {graph!r}")
        if not whole_number(k) or k <= 0:
            raise ConfigError(f"k must be a whole number > 0, got {k!r}")
        self.index = index
        self.base: Valuator = base or HeuristicValuator()
        if isinstance(self.base, DecisionRecorder):
            # a base that learns from decisions (a ``CounterfactualValuator``) is told of each;
            # only then is this a recorder, so a memory pairs calls with contexts only for it
            self.record_decision: Callable[[ObservedDecision], None] = self.base.record_decision
        self.weight = weight
        self.k = k
        self.graph = graph
        self.lifecycle = lifecycle
        self._states: OrderedDict[str, _State] = OrderedDict()
        self._states_lock = threading.Lock()

    def _state(self, namespace: Namespace) -> _State:
        with self._states_lock:
            state = self._states.pop(namespace.key, None)
            drops = self.index.drops(namespace)
            if state is None or state.drops != drops:  # new, or its index dropped since: read afresh
                state = _State(drops=drops)
            self._states[namespace.key] = state
            if len(self._states) > KEPT_NAMESPACES:
                self._states.popitem(last=False)
            return state

    def forget(self, namespace: Namespace, *, before: int) -> None:
        """Remove the namespace's cards made before event ``before`` from the index: a cleared
        conversation's cards are searched no more, and would take the new ones' places among
        the hits. What this process knew of the index is read afresh. Passed on to ``base`` when
        it keeps something of the conversation, even when the index cannot be reached."""
        with self._states_lock:
            self._states.pop(namespace.key, None)
        try:
            self.index.delete_before(namespace, before)
        finally:
            if isinstance(self.base, Forgetting):
                self.base.forget(namespace, before=before)

    def empty(self, namespace: Namespace) -> None:
        """Drop the namespace's index when it holds cards: a memory found no event of it in its
        store (a new ``InMemoryStore``, a deleted store file), so they are an earlier
        conversation's, found beside the new one's under the same ids. Dropped rather than
        deleted: another worker that indexed the namespace meanwhile sees the drop and indexes its
        cards again."""
        with self._states_lock:
            self._states.pop(namespace.key, None)
        try:
            if self.index.count(namespace) or self.index.count(namespace, cold=True):
                self.index.drop(namespace)
        finally:
            if isinstance(self.base, Emptying):
                self.base.empty(namespace)

    # -- candidate generation -------------------------------------------------------------------
    def candidates(
        self, cards: Mapping[str, Card], *, focus: DecisionFocus, limit: int, namespace: Namespace
    ) -> list[str]:
        """Ids of the cards retrieval finds for this focus (hits and their graph neighbours)."""
        try:
            state = self._state(namespace)
            self._sync(state, namespace, cards)
            hits = self._search(state, namespace, focus)
        except Exception as exc:  # an unreachable index must not stop the agent
            logger.warning("damc: retrieval unavailable (%s); using heuristics only", exc)
            return []
        found: list[str] = []
        for hit in hits:
            for card_id in hit.members or (hit.card_id,):
                found.append(card_id)
                hit_card = cards.get(card_id)
                if hit_card is not None:
                    found.extend(_neighbours_forward(hit_card, cards))
        return list(dict.fromkeys(i for i in found if i in cards))[:limit]

    # -- valuation ------------------------------------------------------------------------------
    def value(self, cards: Sequence[Card], *, context: ValuationContext) -> list[ScoredCard]:
        valued = self.base.value(cards, context=context)
        namespace = context.namespace or Namespace()
        state = self._state(namespace)
        try:
            self._sync(state, namespace, {c.id: c for c in cards})
            hits = self._search(state, namespace, context.focus, context.current_seq)
        except Exception as exc:
            logger.warning("damc: retrieval unavailable (%s); using heuristics only", exc)
            return valued
        scores = self._scores(hits, cards)
        out = []
        for item in valued:
            found = scores.get(item.card.id)
            if found is None:
                out.append(item)
                continue
            lift, why = found
            value = 1.0 - (1.0 - item.value) * (1.0 - self.weight * lift)
            out.append(ScoredCard(item.card, value, (*item.scores, Score("retrieval", lift, why))))
        self._age(state, namespace, out, context.current_seq)
        return out

    def _scores(self, hits: list[Hit], cards: Sequence[Card]) -> dict[str, tuple[float, str]]:
        """Card id -> (retrieval score relative to the best hit, provenance), graph spread included."""
        if not hits:
            return {}
        top = max(h.score for h in hits) or 1.0
        by_id = {c.id: c for c in cards}
        informed: defaultdict[str, list[str]] = defaultdict(list)
        for card in cards:
            for later in card.decision_links:
                informed[later].append(card.id)
        scores: dict[str, tuple[float, str]] = {}

        def lift(card_id: str, value: float, why: str) -> None:
            if value > scores.get(card_id, (0.0, ""))[0]:
                scores[card_id] = (value, why)

        for hit in hits:
            relative = hit.score / top
            why = f"retrieval: similarity {hit.similarity:.2f}" + (
                f", exact {', '.join(hit.exact)}" if hit.exact else ""
            )
            for card_id in hit.members or (hit.card_id,):
                lift(card_id, relative, why + (f" (merged into {hit.card_id})" if hit.members else ""))
                matched = by_id.get(card_id)
                if matched is None:
                    continue
                spread = relative * self.graph
                for source in informed.get(card_id, ()):
                    lift(source, spread, f"retrieval: informed {card_id}, which matched")
                for neighbour in _neighbours_forward(matched, by_id):
                    lift(neighbour, spread, f"retrieval: linked to {card_id}, which matched")
        return scores

    # -- index upkeep ---------------------------------------------------------------------------
    def _sync(self, state: _State, namespace: Namespace, cards: Mapping[str, Card]) -> None:
        """Index the cards the index lacks or holds with other text. A namespace reused for a new
        conversation has other cards under the ids indexed before: its first cards tell, and then
        every card's text is compared (comparing them all at every decision would cost more than
        the search at 100,000 cards)."""
        if state.found is None:
            cold = self.index.digests(namespace, cold=True)
            state.found = self.index.digests(namespace) | cold
            state.cold = set(cold)
        indexed = state.indexed
        changed = cards.keys() - indexed.keys()
        first = itertools.islice(cards.items(), REUSE_PROBE)
        if any(indexed.get(i, card.summary) != card.summary for i, card in first):
            changed |= {i for i, card in cards.items() if i in indexed and indexed[i] != card.summary}
        new, moved = [], []
        for card_id in changed:
            card = cards[card_id]
            if not card.summary:
                continue
            held = state.found.pop(card_id, None)
            if card_id not in indexed and held == document_digest(card_document(card)):
                indexed[card_id] = card.summary
                continue
            new.append(card)
            if card_id in state.cold:
                moved.append(card_id)
        if moved:  # an older text under this id: gone from cold storage, the new one goes live
            self.index.delete(namespace, moved, cold=True)
            state.cold.difference_update(moved)
        if new:
            self.index.add(namespace, sorted(new, key=lambda c: c.seq))
            indexed.update((c.id, c.summary) for c in new)

    def _search(
        self, state: _State, namespace: Namespace, focus: DecisionFocus, seq: int | None = None
    ) -> list[Hit]:
        """Hits for the focus; one search per decision (``seq``) even when candidates and values
        both ask, and values ask twice: candidates search (``seq`` None) for the decision coming."""
        if seq is None or state.focus != focus or state.seq not in (None, seq):
            query = focus_query(focus)
            hits = self.index.search(namespace, query, terms=focus.terms, k=self.k)
            if state.cold:
                hits += self.index.search(namespace, query, terms=focus.terms, k=self.k, cold=True)
            state.focus, state.hits = focus, hits
        state.seq = seq
        return state.hits

    def _age(self, state: _State, namespace: Namespace, valued: list[ScoredCard], now: int) -> None:
        """Track since when each card has stayed below the cold threshold (in the index, where any
        process continues it); every few decisions retire the long-low cards and merge
        near-duplicates."""
        lifecycle = self.lifecycle
        if state.aged == now:  # the same decision valuing more of its cards
            return
        state.aged = now
        state.decisions += 1
        if lifecycle is None:
            return
        try:
            if state.low_since is None:
                state.low_since = self.index.low_since(namespace)
            low, changes = state.low_since, dict[str, int | None]()
            for item in valued:
                card_id = item.card.id
                if card_id in state.cold:
                    continue
                if item.value < lifecycle.cold_below:
                    if card_id not in low:
                        low[card_id] = changes[card_id] = now
                elif low.pop(card_id, None) is not None:
                    changes[card_id] = None
            self.index.mark_low(namespace, changes)
            if state.decisions % lifecycle.every:
                return
            stale = [i for i, since in low.items() if now - since >= lifecycle.cold_after]
            self.index.retire(namespace, stale)
            state.cold.update(stale)
            for card_id in stale:
                del low[card_id]
            merged = self.index.merge_near_duplicates(namespace, threshold=lifecycle.merge_threshold)
            state.cold.update(member for m in merged for member in m.members)
        except Exception as exc:
            state.low_since = None  # re-read from the index next time
            logger.warning("damc: index lifecycle pass failed (%s); will retry", exc)


def _neighbours_forward(card: Card, cards: Mapping[str, Card]) -> list[str]:
    """Cards one decision step after ``card``: the calls it informed and, for a call, its result."""
    out = list(card.decision_links)
    if card.kind is CardKind.TOOL_CALL and card.tool_call_id:
        call_ids = card.tool_call_id.split(", ")
        for offset in range(1, len(call_ids) + 1):
            result = cards.get(f"c{card.seq + offset}")
            if result is not None and result.tool_call_id in call_ids:
                out.append(result.id)
    return out
