"""``CounterfactualValuator``: decision values learned from what the model needed before.

Online it makes no model call: a card's counterfactual value for the next decision is the
similarity-weighted mean of what it was worth at past decisions (see :mod:`.book`). That figure is
blended into a base valuator's (the heuristics by default) with a share that grows with the
evidence: a card no past decision valued keeps the base value (cold start). By default the
evidence only raises a value: a small scoring model that ignores a card says little against it,
while a large drop in the action's log-probability without it says the card carried what the
action needed.

Past decisions are valued in batch: ``DecisionMemory`` reports each call whose result came back
clean (:class:`~damc_core.value.DecisionRecorder`), and every ``batch_every`` reports, or on
:meth:`refresh`, the estimator runs the model on them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from ..types import Card, DecisionFocus, Namespace, Score, ScoredCard
from ..value import (
    CandidateSource,
    Emptying,
    Forgetting,
    HeuristicValuator,
    ObservedDecision,
    ValuationContext,
    Valuator,
)
from .book import Estimate, ValueBook, ValuedDecision

logger = logging.getLogger("damc")

_CacheKey = tuple[Namespace, frozenset[str], int, int]
"""Namespace, focus terms, current event, book version."""

ValueDecision = Callable[[ObservedDecision], ValuedDecision | None]
"""Runs the model on one decision: its cards' values, or ``None`` when it cannot be valued."""


@dataclass(frozen=True, slots=True)
class Blend:
    """How counterfactual evidence is mixed with the base value."""

    scale: float = 1.0
    """Nats at which a card counts as ~63% valuable: ``1 - exp(-nats / scale)`` maps onto [0, 1]."""
    half: float = 3.0
    """Past decisions at which the counterfactual share reaches half of ``max_share``."""
    max_share: float = 0.2
    """Highest share of the counterfactual value. Kept small: a card that carried the action at
    past decisions (the search a booking was picked from) is often spent by the next one, and on
    recorded airline conversations a share of 0.6 kept fewer needed values than 0.2."""
    lower: bool = False
    """Let evidence lower a card below its base value too. Off by default: leave-one-out with a
    small model misses most cards' effect, and lowering them cost needed values in replays."""

    def __post_init__(self) -> None:
        if self.scale <= 0:
            raise ConfigError(f"Blend.scale must be > 0 nats, got {self.scale}")
        if self.half <= 0:
            raise ConfigError(f"Blend.half must be > 0 decisions, got {self.half}")
        if not 0 <= self.max_share <= 1:
            raise ConfigError(f"Blend.max_share must be in [0, 1], got {self.max_share}")

    def unit(self, nats: float) -> float:
        """A drop in log-probability as a value in [0, 1]; a card that helped nothing is 0."""
        return 1.0 - math.exp(-max(0.0, nats) / self.scale)

    def share(self, decisions: int) -> float:
        return self.max_share * decisions / (decisions + self.half)


class CounterfactualValuator:
    """Blends a base valuator's values with counterfactual estimates from past decisions.

    ``value_decision`` (usually :func:`~damc_core.counterfactual.batch.model_valuation`) measures
    recorded decisions; without it the valuator only reads ``book`` (values computed offline,
    e.g. by ``damc value``). Estimates are cached for ``ttl`` seconds per card and focus.
    """

    def __init__(
        self,
        *,
        base: Valuator | None = None,
        book: ValueBook | None = None,
        value_decision: ValueDecision | None = None,
        batch_every: int = 8,
        blend: Blend | None = None,
        ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if batch_every <= 0:
            raise ConfigError(f"batch_every must be > 0 decisions, got {batch_every}")
        if ttl < 0:
            raise ConfigError(f"ttl must be >= 0 seconds, got {ttl}")
        self.base: Valuator = base or HeuristicValuator()
        self.book = book if book is not None else ValueBook()
        self.value_decision = value_decision
        self.batch_every = batch_every
        self.blend = blend or Blend()
        self.ttl = ttl
        self.clock = clock
        self._pending: list[ObservedDecision] = []
        self._lock = threading.Lock()
        self._cache: dict[_CacheKey, tuple[float, dict[str, Estimate], frozenset[str]]] = {}

    # -- online ----------------------------------------------------------------------------------
    def candidates(
        self, cards: Mapping[str, Card], *, focus: DecisionFocus, limit: int, namespace: Namespace
    ) -> list[str]:
        """The base valuator's candidates (e.g. retrieval's), so wrapping it keeps them; none otherwise."""
        if isinstance(self.base, CandidateSource):
            return self.base.candidates(cards, focus=focus, limit=limit, namespace=namespace)
        return []

    def forget(self, namespace: Namespace, *, before: int) -> None:
        """Passed on to the base valuator (e.g. retrieval's index) when it keeps something."""
        if isinstance(self.base, Forgetting):
            self.base.forget(namespace, before=before)

    def empty(self, namespace: Namespace) -> None:
        """Passed on to the base valuator (e.g. retrieval's index) when it keeps something."""
        if isinstance(self.base, Emptying):
            self.base.empty(namespace)

    def value(self, cards: Sequence[Card], *, context: ValuationContext) -> list[ScoredCard]:
        base = self.base.value(cards, context=context)
        if context.namespace is None:
            return base
        estimates = self._estimates(cards, context)
        out = []
        for scored in base:
            estimate = estimates.get(scored.card.id)
            if estimate is None:
                out.append(scored)
                continue
            unit = self.blend.unit(estimate.nats)
            share = self.blend.share(estimate.decisions)
            why = (
                f"counterfactual: {estimate.nats:+.2f} nats over {estimate.decisions} past decisions "
                f"(best similarity {estimate.similarity:.2f}, {', '.join(estimate.sources)}), "
                f"share {share:.2f}"
            )
            value = (1.0 - share) * scored.value + share * unit
            if not self.blend.lower:
                value = max(value, scored.value)
            out.append(ScoredCard(scored.card, value, (*scored.scores, Score("counterfactual", unit, why))))
        return out

    def _estimates(self, cards: Sequence[Card], context: ValuationContext) -> dict[str, Estimate]:
        """Estimates for this decision, reused within ``ttl`` while no new values arrived."""
        assert context.namespace is not None
        key = (context.namespace, context.focus.terms, context.current_seq, self.book.version)
        now = self.clock()
        ids = [card.id for card in cards]
        with self._lock:
            cached = self._cache.get(key)
            fresh = cached is not None and now - cached[0] <= self.ttl
            if cached is not None and fresh and cached[2].issuperset(ids):  # asked before: estimated or not
                return cached[1]
            if len(self._cache) > 1024:
                self._cache = {k: v for k, v in self._cache.items() if now - v[0] <= self.ttl}
        estimates = self.book.estimate(
            context.namespace, ids, terms=context.focus.terms, before=context.current_seq
        )
        asked = frozenset(ids)
        with self._lock:
            if cached is not None and fresh:
                estimates, asked = {**cached[1], **estimates}, asked | cached[2]
            self._cache[key] = (now, estimates, asked)
        return estimates

    # -- learning --------------------------------------------------------------------------------
    def record_decision(self, decision: ObservedDecision) -> None:
        """Keep a decision whose call succeeded; value the batch once ``batch_every`` are waiting."""
        if self.value_decision is None:
            return
        with self._lock:
            self._pending.append(decision)
            due = len(self._pending) >= self.batch_every
        if due:
            self.refresh()

    @property
    def pending(self) -> int:
        """Recorded decisions not valued yet."""
        with self._lock:
            return len(self._pending)

    def refresh(self) -> int:
        """Value every waiting decision now; returns how many were added to the book.

        A decision the model cannot value is logged and skipped, never raised into the agent. An
        error that is not the decision's own (a ``ValueError`` such as ``ContextTooLong`` is) ends
        the batch: a scoring server that is down or times out would hold the agent's step once
        per decision, each after the client's timeout and retries.
        """
        with self._lock:
            batch, self._pending = self._pending, []
        if self.value_decision is None:
            return 0
        added = 0
        for index, decision in enumerate(batch):
            try:
                valued = self.value_decision(decision)
            except ValueError as exc:
                logger.warning("damc: could not value decision at seq %s (%s)", decision.seq, exc)
                continue
            except Exception as exc:
                left = len(batch) - index - 1
                logger.warning(
                    "damc: could not value decision at seq %s (%s)%s",
                    decision.seq,
                    exc,
                    f"; the batch ends here, {left} left unvalued" if left else "",
                )
                break
            if valued is not None:
                self.book.add(valued)
                added += 1
        return added
