"""Estimators against a scorer whose answer is a known sum of per-card effects.

With an additive scorer the exact leave-one-out value of each card is its effect, so what each
estimator should return is known in advance; the real-model checks are in ``test_llama_cpp.py``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from damc_core.counterfactual import AblationProblem, ScoreRequest
from damc_core.counterfactual.estimators import (
    AblationSurrogate,
    CoarseToFine,
    CopyAttribution,
    LeaveOneOut,
    action_words,
    lasso,
)
from damc_core.counterfactual.scorer import TokenLogProbs, TokenLogProbScorer, byte_piece_ends
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


class CopyingScorer:
    """A model that copies: each token of the continuation (a run of letters and digits, or one
    other character) costs ``miss`` nats, or ``hit`` when the context holds it. Records requests."""

    def __init__(self, hit: float = -0.5, miss: float = -6.0) -> None:
        self.hit, self.miss = hit, miss
        self.requests: list[ScoreRequest] = []

    @property
    def name(self) -> str:
        return "copying"

    def token_log_probs(self, requests: Sequence[ScoreRequest]) -> list[TokenLogProbs]:
        self.requests.extend(requests)
        out = []
        for request in requests:
            tokens = re.findall(r"[A-Za-z0-9]+|.", request.continuation)
            ends = tuple(itertools.accumulate(len(t) for t in tokens))
            values = tuple(self.hit if t.strip() and t in request.context else self.miss for t in tokens)
            out.append(TokenLogProbs(ends, values))
        return out

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]:
        return [sum(t.log_probs) for t in self.token_log_probs(requests)]


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
        lambda: CopyAttribution(min_chars=0),
        lambda: CopyAttribution(per_char=-0.1),
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
    copied = CopyAttribution().estimate(problem, CopyingScorer())
    assert (copied.values, copied.passes) == ((), 1) and copied.full < 0


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


BOOKING = AblationProblem(
    card_ids=("c2", "c3", "c4"),
    card_texts=(
        "[c2] get_user_details(user_id=mia_li_3668) -> payment_methods: credit_card_7815826",
        "[c3] search_direct_flight(origin=JFK, destination=SEA) -> HAT069 economy; HAT083 sold out",
        "[c4] assistant: HAT069 departs at 06:00.",
    ),
    head="Memory:\n[c1] user: Book the flight on 2024-05-20 with my visa.\n",
    tail="\nNext tool call:",
    action=" book_reservation(flight_number=HAT069, date=2024-05-20, payment_id=credit_card_7815826)",
)
"""The payment id is in one card, the flight in two, the date in the head only."""
GAIN = 6.0 - 0.5
"""What the copying scorer gains on a token the cards hold and the rest of the context does not."""


def test_copy_attribution_credits_the_card_an_id_is_copied_from_with_two_passes():
    scorer = CopyingScorer()
    values = CopyAttribution(per_char=0.0).estimate(BOOKING, scorer)
    by_card = dict(zip(values.card_ids, values.values, strict=True))

    assert values.passes == 2 and values.estimator == "copy-attribution"
    assert [r.context.count("[c") for r in scorer.requests] == [4, 1]  # every card, then none
    assert values.full == scorer.score([BOOKING.request((True,) * 3)])[0]
    # c2 alone spells credit_card_7815826 (5 tokens), and "payment" of payment_id, whose token
    # payment_id (spelled by no card) holds too
    assert by_card["c2"] == pytest.approx(5 * GAIN + GAIN / 2)
    # HAT069 is in c3 and c4: half each; the date is in the head, so no card gains by it
    assert by_card["c3"] == by_card["c4"] == pytest.approx(GAIN / 2)


def test_a_word_the_head_also_spells_gives_a_card_only_its_share():
    problem = AblationProblem(
        card_ids=("c2",),
        card_texts=("[c2] user: my id is mia_li_3668",),
        head="[c1] user: I am mia_li_3668.\n",
        tail="\nNext tool call:",
        action=" get_user_details(user_id=mia_li_3668)",
    )
    values = CopyAttribution(per_char=0.0).estimate(problem, CopyingScorer())

    assert values.values == (0.0,)  # the head holds the id too: nothing to gain from the card


def test_cards_that_lend_the_action_nothing_are_ordered_by_length_below_one_that_does():
    problem = AblationProblem(
        card_ids=("short", "long", "source"),
        card_texts=("[c2] user: ok", "[c3] assistant: " + "a long answer " * 30, "[c4] id=ZX91QF"),
        head="",
        tail="\nNext tool call:",
        action=" cancel(reservation_id=ZX91QF)",
    )
    values = CopyAttribution().estimate(problem, CopyingScorer())

    assert values.values[2] > values.values[1] > values.values[0] > 0


def test_action_words_are_ids_and_the_parts_joined_in_them():
    words = [w for _, _, w in action_words(" get_user_details(user_id=mia_li_3668, date=2024-05-20)", 3)]

    assert (
        " ".join(words)
        == "get_user_details get user details user_id user mia_li_3668 mia 3668 date 2024-05-20"
    )


def test_copy_attribution_needs_a_scorer_that_reads_token_by_token():
    assert isinstance(CopyingScorer(), TokenLogProbScorer)
    assert not isinstance(AdditiveScorer([1.0]), TokenLogProbScorer)
    with pytest.raises(ConfigError, match="token by token"):
        CopyAttribution().estimate(problem_of(3), AdditiveScorer([1.0, 2.0, 3.0]))


def test_copy_attribution_with_a_failed_pass_gives_no_card_a_value():
    class NoNumbers(CopyingScorer):
        def token_log_probs(self, requests: Sequence[ScoreRequest]) -> list[TokenLogProbs]:
            measured = super().token_log_probs(requests)
            return [TokenLogProbs(t.ends, (math.nan,) * len(t.ends)) for t in measured]

    values = CopyAttribution().estimate(BOOKING, NoNumbers())

    assert (values.card_ids, values.values, values.failed) == ((), (), 2)


def test_token_ends_count_characters_and_stop_before_a_character_split_between_tokens():
    # "é" is two bytes; a byte-level tokenizer may split it between two tokens
    pieces = [b" caf", "é".encode()[:1], "é".encode()[1:], b" ok"]

    assert byte_piece_ends(pieces, " café ok") == (4, 4, 5, 8)
    # a tokenizer that spells the continuation with one more leading space is counted from the text
    assert byte_piece_ends([b"  id", b"=7"], " id=7") == (3, 5)
