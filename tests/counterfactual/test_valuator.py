"""``CounterfactualValuator``: past decisions' card values steer the next decision, no model call.

The model-backed measurement has its own tests (with the local model); here decisions are valued
by a transparent rule, so the blending, the cold start and the memory wiring can be checked exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pytest

from damc_core import HeuristicValuator, Namespace, WeightedValuators
from damc_core.counterfactual import LeaveOneOut, ScoreRequest, model_valuation
from damc_core.counterfactual.book import ValueBook, ValuedDecision, similarity
from damc_core.counterfactual.valuator import Blend, CounterfactualValuator
from damc_core.encode import argument_values, parse_arguments
from damc_core.errors import ConfigError, TraceError
from damc_core.memory import OPEN_DECISIONS_KEPT
from damc_core.types import DecisionFocus
from damc_core.value import ObservedDecision, ValuationContext

NS = Namespace(user="mia_li_3668", session="trip-1")


class ArgumentHolders:
    """Values a decision by which cards hold the call's argument values (1 nat each), and records it."""

    def __init__(self) -> None:
        self.seen: list[ObservedDecision] = []

    def __call__(self, decision: ObservedDecision) -> ValuedDecision:
        self.seen.append(decision)
        call = decision.action["tool_calls"][0]["function"]
        wanted = {v.lower() for v in argument_values(parse_arguments(call["arguments"]))}
        values = {}
        for entry in decision.built.decisions:
            values[entry.card_id] = 0.0
        for index, message in enumerate(decision.history, start=1):
            text = json.dumps(message).lower()
            values[f"c{index}"] = 1.0 if any(w in text for w in wanted) else 0.0
        return ValuedDecision(NS, decision.seq, decision.built.focus.terms, values, "holders/rule")


def valued(seq: int, terms: set[str], **values: float) -> ValuedDecision:
    return ValuedDecision(NS, seq, frozenset(terms), values, "loo/test")


def test_estimate_is_the_similarity_weighted_mean_over_earlier_decisions():
    book = ValueBook([valued(3, {"hat069", "jfk"}, c1=2.0), valued(5, {"zfa04y"}, c1=0.0, c2=1.0)])

    found = book.estimate(NS, ["c1", "c2", "c9"], terms=frozenset({"hat069", "jfk"}), before=10)

    near, far = 1.0, similarity(frozenset({"hat069", "jfk"}), frozenset({"zfa04y"}))
    assert found["c1"].nats == pytest.approx((2.0 * near + 0.0 * far) / (near + far))
    assert found["c1"].decisions == 2
    assert found["c2"].nats == pytest.approx(1.0)
    assert "c9" not in found  # no past decision valued it
    assert book.estimate(NS, ["c1"], terms=frozenset(), before=4)["c1"].decisions == 1  # only seq < 4
    assert book.estimate(Namespace(user="other"), ["c1"], terms=frozenset(), before=10) == {}


def test_estimates_over_a_long_book_are_each_cards_weighted_mean_in_card_order():
    import random

    rng = random.Random(7)
    words = [f"w{i}" for i in range(40)]
    book = ValueBook(
        ValuedDecision(
            NS,
            seq,
            frozenset(rng.sample(words, 6)),
            {f"c{rng.randrange(80)}": rng.uniform(-3, 3) for _ in range(12)},
            rng.choice(["loo", "judge"]),
        )
        for seq in range(300)
    )
    asked, terms = [f"c{i}" for i in rng.sample(range(90), 40)], frozenset(words[:6])

    estimates = book.estimate(NS, asked, terms=terms, before=250)

    for card_id, estimate in estimates.items():
        past = [
            (d, similarity(terms, d.terms)) for d in book.decisions(NS, before=250) if card_id in d.values
        ]
        assert estimate.nats == sum(d.values[card_id] * w for d, w in past) / sum(w for _, w in past)
        assert estimate.decisions == len(past) and estimate.sources == tuple(
            sorted({d.source for d, _ in past})
        )
    assert list(estimates) == [c for c in asked if c in estimates]


def test_without_evidence_the_heuristic_value_stands(airline_messages, make_memory):
    memory = make_memory()
    for message in airline_messages[:6]:
        memory.observe(message)
    context = ValuationContext(DecisionFocus(), current_seq=6, now=0.0, namespace=NS)

    plain = HeuristicValuator().value(memory.cards(), context=context)
    blended = CounterfactualValuator().value(memory.cards(), context=context)

    assert blended == plain


def test_counterfactual_share_grows_with_the_decisions_behind_it(airline_messages, make_memory):
    memory = make_memory()
    for message in airline_messages[:6]:
        memory.observe(message)
    card = memory.card("c3")  # the user's profile
    context = ValuationContext(DecisionFocus(terms=frozenset({"mia_li_3668"})), 20, 0.0, namespace=NS)
    base = HeuristicValuator().value([card], context=context)[0].value

    def value_after(decisions: int) -> float:
        book = ValueBook(valued(seq, {"mia_li_3668"}, c3=5.0) for seq in range(6, 6 + decisions))
        scored = CounterfactualValuator(book=book).value([card], context=context)[0]
        assert scored.scores[-1].name == "counterfactual"
        assert f"over {decisions} past decisions" in scored.scores[-1].provenance
        return scored.value

    one, many = value_after(1), value_after(12)
    assert base < one < many <= 1.0
    blend = Blend()
    assert many == pytest.approx((1 - blend.share(12)) * base + blend.share(12) * blend.unit(5.0))


def test_a_card_that_never_helped_keeps_its_heuristic_value_unless_evidence_may_lower_it(
    airline_messages, make_memory
):
    memory = make_memory()
    for message in airline_messages[:6]:
        memory.observe(message)
    card = memory.card("c3")
    context = ValuationContext(DecisionFocus(), 20, 0.0, namespace=NS)
    book = ValueBook(valued(seq, set(), c3=-0.4) for seq in range(6, 14))
    heuristic = HeuristicValuator().value([card], context=context)[0].value

    kept = CounterfactualValuator(book=book).value([card], context=context)[0]
    lowered = CounterfactualValuator(book=book, blend=Blend(lower=True)).value([card], context=context)[0]

    assert kept.value == heuristic
    assert kept.scores[-1].value == 0.0  # the evidence is still recorded, with its provenance
    assert lowered.value < heuristic


def test_memory_reports_built_calls_whose_result_came_back_clean(airline_messages, make_memory, msg):
    rule = ArgumentHolders()
    valuator = CounterfactualValuator(value_decision=rule, batch_every=2)
    memory = make_memory(valuator=valuator)
    conversation = airline_messages
    for message in conversation[:2]:
        memory.observe(message)
    memory.build(budget=400)
    memory.observe(conversation[2])  # get_user_details, called from the context just built
    memory.observe(conversation[3])  # clean result: recorded
    memory.observe(conversation[4])  # search call made without a build: no decision to learn from
    memory.observe(conversation[5])
    memory.build(budget=400)
    memory.observe(msg.call("call_x", "book_reservation", {"flight_number": "HAT999"}))
    memory.observe(msg.result("call_x", "book_reservation", "Error: flight HAT999 not found"))
    assert valuator.pending == 1 and not rule.seen  # the failed call was not recorded

    memory.observe(conversation[6])  # the assistant offers HAT069
    memory.observe(conversation[7])  # the user confirms
    memory.build(budget=400)
    memory.observe(conversation[8])  # book_reservation with HAT069 and the credit card
    memory.observe(conversation[9])

    assert [d.seq for d in rule.seen] == [2, 10] and valuator.pending == 0 and len(valuator.book) == 2
    first, second = rule.seen
    assert first.action["tool_calls"][0]["function"]["name"] == "get_user_details"
    assert [m["role"] for m in first.history] == ["user"] and first.system == conversation[0]["content"]
    assert second.built.focus.terms and "hat069" in second.built.focus.terms

    built = memory.build(budget=400)
    steered = {d.card_id for d in built.decisions if any(s.name == "counterfactual" for s in d.scores)}
    assert "c3" in steered  # the profile held the user id and the card the booking used


def test_calls_whose_result_never_comes_are_let_go_after_the_newest_few(make_memory, msg):
    class LearnsFromDecisions:
        def __init__(self):
            self.heuristics = HeuristicValuator()
            self.calls_reported: list[str] = []

        def value(self, cards, *, context):
            return self.heuristics.value(cards, context=context)

        def record_decision(self, decision):
            self.calls_reported.append(decision.action["tool_calls"][0]["id"])

    valuator = LearnsFromDecisions()
    memory = make_memory(valuator=valuator)
    memory.observe(msg.user("Check the status of every order"))
    for n in range(OPEN_DECISIONS_KEPT + 10):  # a tool that never answers: each call waits
        memory.build(budget=400)
        memory.observe(msg.call(f"call_{n}", "get_order", {"order_id": f"W{n}"}))

    memory.observe(msg.result("call_0", "get_order", {"status": "shipped"}))  # too late to learn from
    memory.observe(msg.result(f"call_{OPEN_DECISIONS_KEPT + 9}", "get_order", {"status": "shipped"}))

    assert valuator.calls_reported == [f"call_{OPEN_DECISIONS_KEPT + 9}"]


def test_a_counterfactual_valuator_in_a_weighted_mix_still_learns(airline_messages, make_memory):
    rule = ArgumentHolders()
    counterfactual = CounterfactualValuator(value_decision=rule, batch_every=1)
    memory = make_memory(valuator=WeightedValuators(((counterfactual, 2.0), (HeuristicValuator(), 1.0))))
    for message in airline_messages[:2]:
        memory.observe(message)
    memory.build(budget=400)
    memory.observe(airline_messages[2])  # get_user_details, called from the context just built
    memory.observe(airline_messages[3])  # its clean result

    assert [d.seq for d in rule.seen] == [2] and len(counterfactual.book) == 1


def test_a_failing_measurement_is_logged_and_skipped(airline_messages, make_memory, caplog):
    def broken(decision: ObservedDecision) -> ValuedDecision:
        raise RuntimeError("model file missing")

    valuator = CounterfactualValuator(value_decision=broken, batch_every=1)
    memory = make_memory(valuator=valuator)
    memory.observe(airline_messages[1])
    memory.build(budget=300)
    memory.observe(airline_messages[2])
    memory.observe(airline_messages[3])  # the agent goes on

    assert len(valuator.book) == 0 and "could not value decision at seq 1" in caplog.text


class PaymentReader:
    """Makes the booking likely only from a context holding the card it pays with; a context
    without the flight search makes it overflow (NaN), as a model can on an odd prompt."""

    name = "payment-reader"

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]:
        return [self.log_p(r.context) for r in requests]

    @staticmethod
    def log_p(context: str) -> float:
        if "search_direct_flight(" not in context:
            return math.nan
        return -2.0 if "credit_card_4421486" in context else -12.0


def test_a_pass_the_scorer_could_not_score_leaves_its_card_unvalued_and_is_told(
    airline_messages, make_memory
):
    valuator = CounterfactualValuator(
        value_decision=model_valuation(LeaveOneOut(), PaymentReader()), batch_every=1
    )
    memory = make_memory(valuator=valuator)
    for message in airline_messages[:8]:
        memory.observe(message)
    memory.build(budget=400)
    memory.observe(airline_messages[8])  # book_reservation, paid with the profile's credit card
    memory.observe(airline_messages[9])

    (decision,) = valuator.book.decisions(NS)
    assert decision.values == {"c3": 10.0, "c6": 0.0, "c7": 0.0}  # c5, the search, went unmeasured
    assert decision.source == "leave-one-out/payment-reader (1 of 5 passes failed)"
    profile = next(d for d in memory.build(budget=400).decisions if d.card_id == "c3")
    assert "(1 of 5 passes failed)" in profile.scores[-1].provenance


def test_values_file_round_trip_and_bad_lines(tmp_path):
    book = ValueBook([valued(3, {"hat069"}, c1=0.5, c2=-0.1)])
    path = tmp_path / "values.jsonl"
    book.write_jsonl(path)

    again = ValueBook.read_jsonl(path)

    assert again.decisions(NS) == book.decisions(NS)
    path.write_text('{"traj": 0, "step": 4, "card_ids": ["c1"]}\n', encoding="utf-8")
    with pytest.raises(TraceError, match=r"values\.jsonl:1: not a values line"):
        ValueBook.read_jsonl(path)


def test_settings_are_checked_when_made():
    with pytest.raises(ConfigError, match="batch_every"):
        CounterfactualValuator(batch_every=0)
    with pytest.raises(ConfigError, match="max_share"):
        Blend(max_share=1.5)


def test_a_book_is_written_while_valuation_goes_on_adding(tmp_path):
    import threading

    book = ValueBook()
    done = threading.Event()

    def add():
        for seq in range(20_000):
            book.add(valued(seq, {"hat069"}, c1=1.0))
        done.set()

    writer = threading.Thread(target=add)
    writer.start()
    written = 0
    while not done.is_set():
        book.write_jsonl(tmp_path / "values.jsonl")  # raised "dictionary changed size" before
        written += 1
    writer.join()
    book.write_jsonl(tmp_path / "values.jsonl")

    assert written > 0
    assert len((tmp_path / "values.jsonl").read_text().splitlines()) == 20_000


def test_estimates_for_one_decision_are_reused_within_the_ttl_even_for_cards_without_any():
    from damc_core.testing import sample_card

    class CountingBook(ValueBook):
        asked = 0

        def estimate(self, *args, **kwargs):
            CountingBook.asked += 1
            return super().estimate(*args, **kwargs)

    valuator = CounterfactualValuator(book=CountingBook([valued(1, {"hat069"}, c1=2.0)]), ttl=3600)
    focus = DecisionFocus("q", frozenset({"hat069"}))
    context = ValuationContext(focus, current_seq=5, now=0.0, namespace=NS)
    cards = [sample_card(1), sample_card(2)]  # c2: no decision valued it yet

    for _ in range(5):
        valuator.value(cards, context=context)

    assert CountingBook.asked == 1
