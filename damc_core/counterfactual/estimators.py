"""Estimators: from an ablation problem and a scorer to one value per card.

The value of a card is what the gold action's log-probability loses when the card alone is left
out (leave-one-out). :class:`LeaveOneOut` measures it exactly with ``n + 1`` scorer passes; the
others spend fewer passes:

* :class:`AblationSurrogate` scores random contexts that each leave out a few cards and fits a
  sparse linear model of the loss on which cards were left out (the idea of ContextCite);
* :class:`CoarseToFine` leaves out groups of adjacent cards and splits only the groups whose
  removal matters (the idea of AttriBoT's hierarchical attribution);
* :class:`CopyAttribution` reads, token by token, which words of the action the cards make
  likelier and credits the cards that spell them: two passes, whatever the number of cards.

All of them submit their contexts in one ``score`` call, ordered so that consecutive contexts share
long prefixes (a scorer that keeps its KV cache then evaluates little more than the changed part).

A score that is not a finite number (NaN, an infinity) is a failed measurement: no difference can
be taken from it, and one infinite value would outweigh every other decision a card was part of.
It is left out; a card that only failed passes measured gets no value (unknown, not zero), and
:attr:`CardValues.failed` counts the failed passes for the values' provenance.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from ..errors import ConfigError
from .problem import AblationProblem, CardValues
from .scorer import LogProbScorer, TokenLogProbScorer


class Estimator(Protocol):
    """Values the cards of one decision with a scorer."""

    def estimate(self, problem: AblationProblem, scorer: LogProbScorer) -> CardValues: ...


def _keep_all(n: int) -> tuple[bool, ...]:
    return (True,) * n


def _without(n: int, left_out: Sequence[int]) -> tuple[bool, ...]:
    mask = [True] * n
    for i in left_out:
        mask[i] = False
    return tuple(mask)


def _score_masks(
    problem: AblationProblem, scorer: LogProbScorer, masks: Sequence[tuple[bool, ...]]
) -> list[float]:
    """Scores of ``masks`` (in their order), submitted in prefix-sharing order: masks sorted with
    kept-before-dropped at each position put masks that agree on their first cards side by side."""
    order = sorted(range(len(masks)), key=lambda i: tuple(not flag for flag in masks[i]))
    scores = scorer.score([problem.request(masks[i]) for i in order])
    out = [0.0] * len(masks)
    for i, score in zip(order, scores, strict=True):
        out[i] = score
    return out


def _measured(
    problem: AblationProblem,
    values: Sequence[float | None],
    full: float,
    scores: Sequence[float],
    estimator: str,
) -> CardValues:
    """The values of the cards that have one (``None``: only failed passes measured the card);
    ``scores`` are every pass's, the full context's among them."""
    kept = [(card, v) for card, v in zip(problem.card_ids, values, strict=True) if v is not None]
    return CardValues(
        card_ids=tuple(card for card, _ in kept),
        values=tuple(v for _, v in kept),
        full=full,
        passes=len(scores),
        estimator=estimator,
        failed=sum(not math.isfinite(s) for s in scores),
    )


@dataclass(frozen=True, slots=True)
class LeaveOneOut:
    """Exact values: the full context and each context without one card, ``n + 1`` passes."""

    name: str = "leave-one-out"

    def estimate(self, problem: AblationProblem, scorer: LogProbScorer) -> CardValues:
        n = len(problem.card_ids)
        masks = [_keep_all(n), *(_without(n, [i]) for i in range(n))]
        scores = _score_masks(problem, scorer, masks)
        full, *without = scores
        values = [full - w if math.isfinite(full - w) else None for w in without]
        return _measured(problem, values, full, scores, self.name)


@dataclass(frozen=True, slots=True)
class AblationSurrogate:
    """Leave-one-out values estimated from ``ablations`` random contexts plus the full one.

    Each card is left out of at least one context, about ``drop_fraction`` of them where the
    ablations are enough to give every card its own pattern, so no card goes unmeasured. The loss
    of each context, ``full - score``, is fitted as a sum of per-card losses by the Lasso
    (coordinate descent; ``alpha`` relative to the largest useful penalty): few cards carry a
    decision, and the sparse fit finds them from fewer contexts than cards. Cards left out of the
    very same contexts cannot be told apart, so they share their fitted effect evenly. When
    ``ablations`` would cover exact leave-one-out, that is run instead.
    """

    ablations: int = 32
    drop_fraction: float = 0.25
    alpha: float = 0.01
    seed: int = 0
    name: str = "ablation-surrogate"

    def __post_init__(self) -> None:
        if self.ablations < 1:
            raise ConfigError(f"AblationSurrogate.ablations must be >= 1, got {self.ablations}")
        if not 0.0 < self.drop_fraction <= 0.5:
            raise ConfigError(
                f"AblationSurrogate.drop_fraction must be in (0, 0.5], got {self.drop_fraction}"
            )
        if self.alpha < 0.0:
            raise ConfigError(f"AblationSurrogate.alpha must be >= 0, got {self.alpha}")

    def estimate(self, problem: AblationProblem, scorer: LogProbScorer) -> CardValues:
        n = len(problem.card_ids)
        if self.ablations >= n:
            return replace(LeaveOneOut().estimate(problem, scorer), estimator=self.name)
        dropped = self.design(n)
        masks = [_keep_all(n), *(tuple(not d for d in row) for row in dropped.tolist())]
        scores = _score_masks(problem, scorer, masks)
        losses = scores[0] - np.asarray(scores[1:], dtype=np.float64)
        measured = np.isfinite(losses)  # the fit uses only the contexts whose loss is known
        design, losses = dropped[measured], losses[measured]
        fitted = _shared_by_twins(design, lasso(design.astype(np.float64), losses, alpha=self.alpha))
        # a card that no measured context was without has no value
        values = [float(fitted[card]) if design[:, card].any() else None for card in range(n)]
        return _measured(problem, values, scores[0], scores, self.name)

    def design(self, n: int) -> np.ndarray:
        """Which cards each ablation leaves out (``ablations x n`` booleans), seeded.

        Each card is left out of about ``drop_fraction`` of the ablations (of more, once the
        patterns of that size are used up), so the contexts stay near the full one, and no two
        cards are left out of the same ablations while distinct patterns remain (two cards always
        removed together could not be told apart).
        """
        rng = np.random.default_rng(self.seed)
        m = self.ablations
        k = max(1, math.ceil(self.drop_fraction * m))
        sizes = sorted(range(1, m + 1), key=lambda size: (abs(size - k), size))
        dropped = np.zeros((m, n), dtype=bool)
        used: set[tuple[int, ...]] = set()
        for card in range(n):
            for size in sizes:
                if math.comb(m, size) <= sum(len(p) == size for p in used):
                    continue
                pattern = tuple(sorted(rng.choice(m, size=size, replace=False).tolist()))
                while pattern in used:
                    pattern = tuple(sorted(rng.choice(m, size=size, replace=False).tolist()))
                break
            else:  # every pattern is taken: repeat one of the preferred size
                pattern = tuple(rng.choice(m, size=k, replace=False).tolist())
            used.add(pattern)
            dropped[list(pattern), card] = True
        return dropped


def _shared_by_twins(dropped: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` with each set of cards left out of the same ablations given the mean of their
    values: the fit can only tell their sum, and would hand all of it to the first of them."""
    twins: dict[bytes, list[int]] = {}
    for card in range(dropped.shape[1]):
        twins.setdefault(dropped[:, card].tobytes(), []).append(card)
    shared: np.ndarray = values.copy()
    for cards in twins.values():
        shared[cards] = values[cards].mean()
    return shared


def lasso(x: np.ndarray, y: np.ndarray, *, alpha: float, iterations: int = 500) -> np.ndarray:
    """``argmin_w ||y - x w||^2 / (2 m) + a ||w||_1`` without intercept, by coordinate descent.

    ``alpha`` is relative: ``a = alpha * max_j |x_j . y| / m``, the penalty above which every
    weight is zero, so one setting suits losses of any scale.
    """
    m, n = x.shape
    weights = np.zeros(n)
    if m == 0 or not np.any(y):
        return weights
    penalty = alpha * float(np.max(np.abs(x.T @ y))) / m
    norms = (x * x).sum(axis=0) / m
    residual = y.astype(np.float64).copy()
    for _ in range(iterations):
        largest_step = 0.0
        for j in range(n):
            if norms[j] == 0.0:
                continue
            old = weights[j]
            rho = float(x[:, j] @ residual) / m + norms[j] * old
            new = math.copysign(max(abs(rho) - penalty, 0.0), rho) / norms[j]
            if new != old:
                residual -= x[:, j] * (new - old)
                weights[j] = new
                largest_step = max(largest_step, abs(new - old))
        if largest_step < 1e-9:
            break
    return weights


@dataclass(frozen=True, slots=True)
class CoarseToFine:
    """Leave out groups of adjacent cards, then split only the groups whose removal matters.

    The cards start in ``branching`` groups; a group whose removal changes the action's
    log-probability by at least ``threshold`` nats is split into ``branching`` parts, and so on
    down to single cards, largest effects first, within ``max_passes`` (``None``: no limit; fewer
    than ``branching + 1`` passes start with fewer groups). A card whose group was not split gets
    the group's value shared evenly; a group whose pass failed is not split, its cards get none.
    """

    branching: int = 4
    threshold: float = 0.5
    max_passes: int | None = None
    name: str = "coarse-to-fine"

    def __post_init__(self) -> None:
        if self.branching < 2:
            raise ConfigError(f"CoarseToFine.branching must be >= 2, got {self.branching}")
        if self.threshold < 0.0:
            raise ConfigError(f"CoarseToFine.threshold must be >= 0, got {self.threshold}")
        if self.max_passes is not None and self.max_passes < 2:
            raise ConfigError(
                "CoarseToFine.max_passes must be >= 2 (the full context and one ablation) or None, "
                f"got {self.max_passes}"
            )

    def estimate(self, problem: AblationProblem, scorer: LogProbScorer) -> CardValues:
        n = len(problem.card_ids)
        budget = self.max_passes if self.max_passes is not None else math.inf
        values: list[float | None] = [None] * n
        level = _split(range(n), int(min(self.branching, budget - 1)))  # the first level fits too
        masks: list[tuple[bool, ...]] = [_keep_all(n), *(_without(n, g) for g in level)]
        full, *scores = _score_masks(problem, scorer, masks)
        every = [full, *scores]
        while level:
            effects = [(full - s, g) for s, g in zip(scores, level, strict=True) if math.isfinite(full - s)]
            children: list[range] = []
            for effect, group in sorted(effects, key=lambda p: -abs(p[0])):
                parts = _split(group, self.branching)
                affordable = len(every) + len(children) + len(parts) <= budget
                if len(group) > 1 and abs(effect) >= self.threshold and affordable:
                    children.extend(parts)
                else:
                    for card in group:
                        values[card] = effect / len(group)
            level = children
            scores = _score_masks(problem, scorer, [_without(n, g) for g in level]) if level else []
            every.extend(scores)
        return _measured(problem, values, full, every, self.name)


def _split(cards: range, parts: int) -> list[range]:
    """``cards`` cut into at most ``parts`` adjacent, near-equal, non-empty ranges."""
    size = len(cards)
    bounds = [cards.start + size * i // parts for i in range(parts + 1)]
    return [range(a, b) for a, b in itertools.pairwise(bounds) if b > a]


ACTION_WORD = re.compile(r"[A-Za-z0-9@.:\-]+(?:_[A-Za-z0-9@.:\-]+)*")
"""A word of an action a card can spell: an id, a date, a name; ``mia_li_3668`` is one word."""


@dataclass(frozen=True, slots=True)
class CopyAttribution:
    """Values from two passes, whatever the number of cards: the action with every card and with none.

    A model writes an id, a date or a name into its next call by copying it from the context, so
    the log-probability the cards add to each word of the action belongs to the cards that spell
    that word, shared among them (and the head, when it spells the word too: a card is then not
    the only source). A card's value is the sum of its shares. Words are the action's ids and
    their ``_``-joined parts (``get_user_details`` also credits a card saying "details"), of at
    least ``min_chars`` characters. A card the action copies nothing from still moves the model a
    little, more the longer it is (leave-one-out on recorded decisions): ``per_char`` nats per
    character of the card orders those cards, and is too small to lift one over a card that lends
    a word. Needs a scorer that reads log-probabilities token by token (:class:`TokenLogProbScorer`).
    """

    min_chars: int = 3
    per_char: float = 0.00075
    name: str = "copy-attribution"

    def __post_init__(self) -> None:
        if self.min_chars < 1:
            raise ConfigError(f"CopyAttribution.min_chars must be >= 1, got {self.min_chars}")
        if self.per_char < 0.0:
            raise ConfigError(f"CopyAttribution.per_char must be >= 0, got {self.per_char}")

    def estimate(self, problem: AblationProblem, scorer: LogProbScorer) -> CardValues:
        if not isinstance(scorer, TokenLogProbScorer):
            raise ConfigError(
                f"CopyAttribution needs a scorer that reads log-probabilities token by token "
                f"(LlamaCppScorer, TransformersScorer, OpenAICompatibleScorer); {scorer.name} gives only sums"
            )
        n = len(problem.card_ids)
        with_all = problem.request(_keep_all(n))
        if not n:  # nothing to credit: the full score is all there is to measure
            (alone,) = scorer.score([with_all])
            return _measured(problem, [], alone, [alone], self.name)
        every, none = scorer.token_log_probs([with_all, problem.request((False,) * n)])
        full = sum(every.log_probs)
        scores = [full, sum(none.log_probs)]
        if not all(math.isfinite(s) for s in scores):  # a failed pass: no value can be taken from it
            return _measured(problem, [None] * n, full, scores, self.name)
        gains = [a - b for a, b in zip(every.log_probs, none.log_probs, strict=True)]
        spans = list(itertools.pairwise((0, *every.ends)))
        words = action_words(with_all.continuation, self.min_chars)
        tokens_of = [[t for t, (a, b) in enumerate(spans) if a < e and b > s] for s, e, _ in words]
        # a token inside an id and inside its part counts once, shared by the words that hold it
        words_of = [sum(t in tokens for tokens in tokens_of) for t in range(len(spans))]
        values = [self.per_char * len(text) for text in problem.card_texts]
        for (_, _, word), tokens in zip(words, tokens_of, strict=True):
            sources = [i for i, text in enumerate(problem.card_texts) if word in text]
            gain = sum(gains[t] / words_of[t] for t in tokens)
            for i in sources:
                values[i] += gain / (len(sources) + (word in problem.head))
        return _measured(problem, values, full, scores, self.name)


def action_words(action: str, min_chars: int = 1) -> list[tuple[int, int, str]]:
    """``(start, end, word)`` of each word of ``action`` a card could spell: every
    :data:`ACTION_WORD`, and the parts of one joined by ``_``, of at least ``min_chars``."""
    found: list[tuple[int, int, str]] = []
    for match in ACTION_WORD.finditer(action):
        parts = [(match.start(), match.end())]
        if "_" in match.group():
            offset = match.start()
            for part in match.group().split("_"):
                parts.append((offset, offset + len(part)))
                offset += len(part) + 1
        found.extend((a, b, action[a:b]) for a, b in parts if b - a >= min_chars)
    return found
