"""Estimators against a scorer whose answer is a known sum of per-card effects.

With an additive scorer the exact leave-one-out value of each card is its effect, so what each
estimator should return is known in advance; the real-model checks are in ``test_llama_cpp.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from damc_core.counterfactual import AblationProblem, ScoreRequest
from damc_core.counterfactual.estimators import AblationSurrogate, CoarseToFine, LeaveOneOut, lasso
from damc_core.errors import ConfigError


class AdditiveScorer:
    """``log P = base + sum of the effects of the cards present``; records every request it gets."""

    def __init__(self, effects: Sequence[float], base: float = -20.0) -> None:
        self.effects = list(effects)
        self.base = base
        self.requests: list[ScoreRequest] = []

    @property
    def name(self) -> str:
        return "additive"

    def present(self, context: str) -> list[int]:
        return [i for i in range(len(self.effects)) if f"<card {i}>" in context]

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]:
        self.requests.extend(requests)
        return [self.base + sum(self.effects[i] for i in self.present(r.context)) for r in requests]


class FailsWithout(AdditiveScorer):
    """An additive scorer whose answer is ``failure`` (NaN, an infinity) for every context without
    card ``card``: a model that overflows, or a backend that returns no number."""

    def __init__(self, effects: Sequence[float], *, card: int, failure: float) -> None:
        super().__init__(effects)
        self.card, self.failure = card, failure

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]:
        scores = super().score(requests)
        return [
            s if self.card in self.present(r.context) else self.failure
            for r, s in zip(requests, scores, strict=True)
        ]


def problem_of(n: int) -> AblationProblem:
    return AblationProblem(
        card_ids=tuple(f"c{i}" for i in range(n)),
        card_texts=tuple(f"<card {i}> detail {i}" for i in range(n)),
        head="Cards:\n",
        tail="Next tool call:",
        action=" book_reservation(payment_id=credit_card_7815826)",
    )


def sparse_effects(n: int, big: dict[int, float]) -> list[float]:
    return [big.get(i, 0.0) for i in range(n)]


def test_leave_one_out_returns_each_cards_effect_with_n_plus_one_passes():
    scorer = AdditiveScorer([3.0, 0.0, -1.5, 12.0])
    values = LeaveOneOut().estimate(problem_of(4), scorer)

    assert values.values == pytest.approx((3.0, 0.0, -1.5, 12.0))
    assert values.full == pytest.approx(-20.0 + 13.5)
    assert (values.passes, values.estimator) == (5, "leave-one-out")
    assert values.card_ids == ("c0", "c1", "c2", "c3")


def test_leave_one_out_asks_full_context_first_then_removes_cards_from_the_last_to_the_first():
    scorer = AdditiveScorer([1.0] * 4)
    LeaveOneOut().estimate(problem_of(4), scorer)

    present = [scorer.present(r.context) for r in scorer.requests]
    assert present == [[0, 1, 2, 3], [0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]


def test_surrogate_finds_the_few_cards_that_carry_the_decision_with_a_quarter_of_the_passes():
    n = 64
    effects = sparse_effects(n, {5: 30.0, 40: 8.0, 41: -4.0})
    values = AblationSurrogate(ablations=n // 4).estimate(problem_of(n), AdditiveScorer(effects))

    assert values.passes == n // 4 + 1
    assert values.values[5] == pytest.approx(30.0, abs=1.0)
    assert values.values[40] == pytest.approx(8.0, abs=1.0)
    assert values.values[41] == pytest.approx(-4.0, abs=1.0)
    others = [abs(v) for i, v in enumerate(values.values) if i not in (5, 40, 41)]
    assert max(others) < 1.0


def test_surrogate_with_enough_ablations_runs_exact_leave_one_out():
    effects = [0.5, -2.0, 7.0]
    values = AblationSurrogate(ablations=32).estimate(problem_of(3), AdditiveScorer(effects))

    assert values.values == pytest.approx(effects)
    assert (values.passes, values.estimator) == (4, "ablation-surrogate")


def test_surrogate_design_is_seeded_and_leaves_each_card_out_of_its_own_quarter_of_the_contexts():
    first = AblationSurrogate(ablations=16, drop_fraction=0.25, seed=7).design(40)
    again = AblationSurrogate(ablations=16, drop_fraction=0.25, seed=7).design(40)
    other = AblationSurrogate(ablations=16, drop_fraction=0.25, seed=8).design(40)

    assert (first == again).all() and not (first == other).all()
    assert set(first.sum(axis=0).tolist()) == {4}
    assert len({tuple(column) for column in first.T.tolist()}) == 40


def test_surrogate_design_tells_cards_apart_even_when_ablations_are_few():
    design = AblationSurrogate(ablations=6, drop_fraction=0.25).design(40)

    assert len({tuple(column) for column in design.T.tolist()}) == 40


def test_surrogate_with_too_few_ablations_to_tell_cards_apart_shares_the_effect_among_them():
    n = 10
    surrogate = AblationSurrogate(ablations=2, seed=3)
    values = surrogate.estimate(problem_of(n), AdditiveScorer(sparse_effects(n, {7: 9.0})))

    patterns = [tuple(column) for column in surrogate.design(n).T.tolist()]
    twins_of_7 = [i for i in range(n) if patterns[i] == patterns[7]]
    assert len(twins_of_7) > 1  # two ablations cannot give ten cards ten patterns
    assert sum(values.values[i] for i in twins_of_7) == pytest.approx(9.0, rel=0.05)
    assert {round(values.values[i], 9) for i in twins_of_7} == {round(values.values[7], 9)}
    assert all(abs(values.values[i]) < 0.5 for i in range(n) if i not in twins_of_7)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=8, max_value=120),
    card=st.integers(0, 7),
    effect=st.floats(0.5, 40.0),
    seed=st.integers(0, 2**16),
)
def test_surrogate_finds_the_one_card_that_carries_the_decision_for_any_seed(n, card, effect, seed):
    values = AblationSurrogate(ablations=max(8, n // 4), seed=seed).estimate(
        problem_of(n), AdditiveScorer(sparse_effects(n, {card: effect}))
    )

    assert max(range(n), key=lambda i: values.values[i]) == card
    assert values.values[card] == pytest.approx(effect, rel=0.1)


def test_coarse_to_fine_splits_only_the_groups_that_matter():
    n = 64
    effects = sparse_effects(n, {5: 30.0, 41: 8.0})
    values = CoarseToFine(branching=4, threshold=0.5).estimate(problem_of(n), AdditiveScorer(effects))

    assert values.values[5] == pytest.approx(30.0)
    assert values.values[41] == pytest.approx(8.0)
    assert sum(abs(v) for i, v in enumerate(values.values) if i not in (5, 41)) == pytest.approx(0.0)
    # the full context, 4 groups of 16, the 4 + 4 quarters of the two that matter, their 4 + 4 cards
    assert values.passes == 1 + 4 + 8 + 8


@settings(max_examples=60, deadline=None)
@given(
    effects=st.lists(st.floats(-5.0, 20.0), min_size=1, max_size=50),
    branching=st.integers(2, 6),
    threshold=st.floats(0.0, 3.0),
)
def test_coarse_to_fine_conserves_the_total_effect_of_an_additive_scorer(effects, branching, threshold):
    values = CoarseToFine(branching=branching, threshold=threshold).estimate(
        problem_of(len(effects)), AdditiveScorer(effects)
    )

    assert sum(values.values) == pytest.approx(sum(effects), abs=1e-6)
    assert values.passes <= 2 * len(effects) + 1


@settings(max_examples=40, deadline=None)
@given(effects=st.lists(st.floats(-5.0, 20.0), min_size=1, max_size=40), branching=st.integers(2, 5))
def test_coarse_to_fine_with_zero_threshold_is_exact_leave_one_out(effects, branching):
    values = CoarseToFine(branching=branching, threshold=0.0).estimate(
        problem_of(len(effects)), AdditiveScorer(effects)
    )

    assert values.values == pytest.approx(effects, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(effects=st.lists(st.floats(-5.0, 20.0), min_size=2, max_size=60), budget=st.integers(2, 30))
def test_coarse_to_fine_stays_within_max_passes(effects, budget):
    values = CoarseToFine(threshold=0.0, max_passes=budget).estimate(
        problem_of(len(effects)), AdditiveScorer(effects)
    )

    assert values.passes <= budget
    assert sum(values.values) == pytest.approx(sum(effects), abs=1e-6)  # every effect is shared out


def test_lasso_recovers_an_exact_sparse_solution_and_zero_for_no_signal():
    x = [[1, 0, 0, 1], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]]
    import numpy as np

    design = np.array(x, dtype=float)
    truth = np.array([0.0, 5.0, 0.0, 0.0])
    assert lasso(design, design @ truth, alpha=1e-4) == pytest.approx(truth, abs=0.01)
    assert lasso(design, np.zeros(5), alpha=0.01).tolist() == [0.0] * 4


@pytest.mark.parametrize(
    "make",
    [
        lambda: AblationSurrogate(ablations=0),
        lambda: AblationSurrogate(drop_fraction=0.9),
        lambda: AblationSurrogate(alpha=-1.0),
        lambda: CoarseToFine(branching=1),
        lambda: CoarseToFine(threshold=-0.1),
        lambda: CoarseToFine(max_passes=1),
    ],
)
def test_bad_settings_are_refused_when_the_estimator_is_made(make):
    with pytest.raises(ConfigError):
        make()


def test_a_decision_without_cards_has_only_the_full_score():
    problem = problem_of(0)
    for estimator in (LeaveOneOut(), AblationSurrogate(), CoarseToFine()):
        values = estimator.estimate(problem, AdditiveScorer([]))
        assert (values.values, values.full, values.passes) == ((), -20.0, 1)


@pytest.mark.parametrize("failure", [math.nan, -math.inf, math.inf])
@pytest.mark.parametrize(
    "estimator",
    [LeaveOneOut(), AblationSurrogate(ablations=12), CoarseToFine(threshold=0.0)],
    ids=lambda e: e.name,
)
def test_a_score_that_is_not_a_number_is_a_failed_measurement_left_out(estimator, failure):
    n = 40
    scorer = FailsWithout(sparse_effects(n, {5: 30.0, 33: -4.0}), card=20, failure=failure)
    values = estimator.estimate(problem_of(n), scorer)

    found = dict(zip(values.card_ids, values.values, strict=True))
    assert all(math.isfinite(v) for v in values.values)
    assert "c20" not in found  # every pass without it failed: its value is unknown, not zero
    assert found["c5"] == pytest.approx(30.0, abs=1.0) and found["c33"] == pytest.approx(-4.0, abs=1.0)
    assert sorted(found, key=found.__getitem__)[-1] == "c5"
    assert 0 < values.failed < values.passes
    assert values.source("additive") == (
        f"{estimator.name}/additive ({values.failed} of {values.passes} passes failed)"
    )


@pytest.mark.parametrize(
    "estimator", [LeaveOneOut(), AblationSurrogate(ablations=4), CoarseToFine()], ids=lambda e: e.name
)
def test_when_the_full_context_cannot_be_scored_no_card_has_a_value(estimator):
    values = estimator.estimate(problem_of(10), FailsWithout([1.0] * 10, card=10, failure=math.nan))

    assert (values.card_ids, values.values) == ((), ())
    assert values.failed == values.passes
