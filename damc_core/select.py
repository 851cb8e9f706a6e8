"""Select stage: which cards fit the token budget, and which facts a newer card supersedes.

Selectors see scored cards with their token costs and return the kept ones plus a reason for every
drop. Conflicts are resolved before selection: a newer card on the same (entity, attribute) wins,
source trust breaks ties between cards of the same moment (the memory counts the results of one
assistant step as one), and the loser is marked
``superseded_by`` (dropped, or shown as superseded, by configuration).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .checks import in_unit, whole_number
from .errors import ConfigError
from .types import Card, ScoredCard


@dataclass(frozen=True, slots=True)
class Selection:
    kept: list[ScoredCard]
    dropped: list[tuple[ScoredCard, str]]
    """Each dropped card with the reason, for ``explain()``."""


Leaner = Callable[[Card, int], Card]
"""Renders a card more compactly (fewer tokens, fewer values) for a card that does not fit, within
the given tokens where it can."""


class Selector(Protocol):
    """Chooses cards for the memory section within ``budget`` tokens.

    ``leaner``, when given, offers a compact rendering of a card that does not fit as it is: a more
    valuable card in lean form goes before a less valuable one in full."""

    def select(
        self, scored: Sequence[ScoredCard], *, budget: int, leaner: Leaner | None = None
    ) -> Selection: ...


OVER_BUDGET = "over the token budget"
FAR_OVER_BUDGET = "far outside the budget in value order"
LEAN_TRIES = 8
"""Lean renderings that did not fit, after which a selection stops asking for more: near the end
of the budget almost none fit, and each costs a rendering."""


def _fill(
    ordered: Iterable[ScoredCard],
    budget: int,
    refuse: Callable[[ScoredCard, int], str | None],
    leaner: Leaner | None = None,
) -> Selection:
    """Keep cards in the given order while the budget lasts, each as it is or else in its ``leaner``
    form; ``refuse(card, kept_so_far)`` may give a reason to drop one regardless."""
    if budget < 0:
        raise ConfigError(f"budget must be >= 0 tokens, got {budget}")
    kept: list[ScoredCard] = []
    dropped: list[tuple[ScoredCard, str]] = []
    left = budget
    tries = LEAN_TRIES
    for item in ordered:
        reason = refuse(item, len(kept))
        if reason is None and item.card.tokens > left:
            reason = OVER_BUDGET
            if leaner is not None and left > 0 and tries > 0:
                lean = leaner(item.card, left)
                if lean.tokens < item.card.tokens and lean.tokens <= left:
                    item, reason = item._replace(card=lean), None
                else:
                    tries -= 1
        if reason is None:
            kept.append(item)
            left -= item.card.tokens
        else:
            dropped.append((item, reason))
    return Selection(kept, dropped)


@dataclass(frozen=True, slots=True)
class TopKSelector:
    """The ``k`` most valuable cards that fit the budget."""

    k: int = 20

    def __post_init__(self) -> None:
        if not whole_number(self.k) or self.k <= 0:
            raise ConfigError(f"TopKSelector.k must be a whole number > 0, got {self.k!r}")

    def select(self, scored: Sequence[ScoredCard], *, budget: int, leaner: Leaner | None = None) -> Selection:
        return _fill(
            sorted(scored, key=lambda s: (-s.value, -s.card.seq)),
            budget,
            lambda item, kept: f"outside the top {self.k}" if kept >= self.k else None,
            leaner,
        )


@dataclass(frozen=True, slots=True)
class ThresholdSelector:
    """Every card worth at least ``min_value``, most valuable first, while the budget lasts."""

    min_value: float = 0.5

    def __post_init__(self) -> None:
        if not in_unit(self.min_value):
            raise ConfigError(f"ThresholdSelector.min_value must be in [0, 1], got {self.min_value!r}")

    def select(self, scored: Sequence[ScoredCard], *, budget: int, leaner: Leaner | None = None) -> Selection:
        def below(item: ScoredCard, kept: int) -> str | None:
            return (
                f"value {item.value:.2f} below threshold {self.min_value}"
                if item.value < self.min_value
                else None
            )

        return _fill(sorted(scored, key=lambda s: (-s.value, -s.card.seq)), budget, below, leaner)


@dataclass(frozen=True, slots=True)
class HybridSelector:
    """Greedy by ``value / tokens ** token_exponent`` (value already includes time decay), above a floor.

    ``token_exponent=1`` is plain value per token; it starves large cards that hold many needed
    values (an account with all its payment methods), and on recorded airline trajectories it kept
    fewer needed facts than value order. The default 0 fills the budget in value order; the budget
    itself is what makes cheap cards win ties.
    """

    min_value: float = 0.05
    token_exponent: float = 0.0

    def __post_init__(self) -> None:
        if not in_unit(self.min_value):
            raise ConfigError(f"HybridSelector.min_value must be in [0, 1], got {self.min_value!r}")
        if not in_unit(self.token_exponent):
            raise ConfigError(f"HybridSelector.token_exponent must be in [0, 1], got {self.token_exponent!r}")

    def select(self, scored: Sequence[ScoredCard], *, budget: int, leaner: Leaner | None = None) -> Selection:
        def density(item: ScoredCard) -> float:
            return float(item.value / max(1, item.card.tokens) ** self.token_exponent)

        def below(item: ScoredCard, kept: int) -> str | None:
            return (
                f"value {item.value:.2f} below floor {self.min_value}"
                if item.value < self.min_value
                else None
            )

        return _fill(sorted(scored, key=lambda s: (-density(s), -s.card.seq)), budget, below, leaner)


@dataclass(frozen=True, slots=True)
class Supersession:
    """Decides which older cards a new card supersedes.

    An older card is superseded when the new card states a value for every (entity, attribute) it
    does, and the new card is at least as trusted, or is not of the same moment: newer by more
    than ``same_moment`` seconds, or not the event right before it (trust only breaks ties between
    cards of the same moment; the memory also counts the results of one assistant step as one).
    """

    same_moment: float = 0.0

    def superseded(self, new: Card, older: Sequence[Card]) -> list[Card]:
        if not new.entity_keys:
            return []
        keys = set(new.entity_keys)
        out = []
        for old in older:
            if old.id == new.id or old.superseded_by or not old.entity_keys:
                continue
            if set(old.entity_keys) <= keys and not self.outranks(old, new):
                out.append(old)
        return out

    def outranks(self, old: Card, new: Card) -> bool:
        """Whether ``old`` wins a tie with ``new``: of the same moment and more trusted, so its
        values stand and ``new``'s are the ones to set aside."""
        tie = abs(new.created_at - old.created_at) <= self.same_moment and new.seq - old.seq <= 1
        return tie and new.trust < old.trust


def upgrade_detail(
    kept: Sequence[ScoredCard],
    richer: Callable[[Card], Card],
    *,
    budget_left: int,
    min_tokens: int = 8,
) -> list[ScoredCard]:
    """Spend the budget left after selection on richer renderings of kept cards, most valuable first.

    Selection runs on a cheaper rendering so that more cards fit; this pass restores detail while it
    fits. ``richer`` renders a card in full; it is called only while ``min_tokens`` of budget is left.
    """
    out = list(kept)
    for i in sorted(range(len(out)), key=lambda i: -out[i].value):
        if budget_left < min_tokens:
            break
        full = richer(out[i].card)
        extra = full.tokens - out[i].card.tokens
        if 0 <= extra <= budget_left and full.summary != out[i].card.summary:
            out[i] = out[i]._replace(card=full)
            budget_left -= extra
    return out
