"""Valuation: the three decision-value dimensions, task modes, decay, focus and combination."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from damc_core import (
    CardKind,
    ConfigError,
    Decay,
    DecisionFocus,
    HeuristicValuator,
    MemorySettings,
    TaskMode,
    ValuationContext,
    WeightedValuators,
)
from damc_core.value import subject_of

NO_FOCUS = DecisionFocus()


def scored_by_id(memory, valuator, *, focus=NO_FOCUS, now=None):
    context = ValuationContext(
        focus=focus,
        current_seq=len(memory.cards()),
        now=now if now is not None else memory.clock(),
        last_used=memory._session.last_used,
    )
    return {s.card.id: s for s in valuator.value(memory.cards(), context=context)}


def names(scored):
    return {s.name for s in scored.all_scores}


def test_a_value_taken_as_argument_makes_its_source_causally_necessary(memory, msg):
    memory.observe(msg.call("c1", "get_user_details", {"user_id": "mia_li_3668"}))
    profile = memory.observe(
        msg.result("c1", "get_user_details", {"user_id": "mia_li_3668", "payment_id": "gift_card_7"})
    )
    before = memory.card(profile.id).prior
    memory.observe(msg.call("c2", "pay", {"payment_id": "gift_card_7"}))

    linked = memory.card(profile.id)
    assert linked.decision_links == ("c2",)
    assert "gift_card_7" in linked.used_terms
    assert linked.prior > before
    assert any(s.name == "causal" and "used by later calls c2" in s.provenance for s in linked.scores)


def test_a_call_taking_a_word_the_user_said_links_to_the_user_not_to_results_showing_the_word(memory, msg):
    memory.observe(msg.call("c1", "get_reservation_details", {"reservation_id": "LQ940Q"}))
    other_booking = memory.observe(
        msg.result("c1", "get_reservation_details", {"reservation_id": "LQ940Q", "cabin": "economy"})
    )
    memory.observe(msg.call("c2", "get_reservation_details", {"reservation_id": "2FBBAH"}))
    target = memory.observe(
        msg.result("c2", "get_reservation_details", {"reservation_id": "2FBBAH", "cabin": "business"})
    )
    request = memory.observe(msg.user("Please downgrade 2FBBAH to economy."))

    update = memory.observe(
        msg.call("c3", "update_reservation_flights", {"reservation_id": "2FBBAH", "cabin": "economy"})
    )

    assert update.id in memory.card(request.id).decision_links  # the user said "economy"
    assert update.id in memory.card(target.id).decision_links  # an identifier links as before
    assert memory.card(other_booking.id).decision_links == ()  # showing "economy" is no evidence


def test_a_user_turn_saying_a_word_value_that_a_tool_holds_gains_it_as_an_exact_value(make_memory, msg):
    from damc_core import MemorySettings, TemplateCompressor

    memory = make_memory(settings=MemorySettings(budget=1_000))
    request = memory.observe(msg.user("Please move all passengers down to economy class, thanks."))
    memory.observe(msg.call("c1", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
    memory.observe(
        msg.result("c1", "get_reservation_details", {"reservation_id": "ZFA04Y", "cabin": "economy"})
    )

    named = memory.card(request.id)
    assert "economy" in named.terms
    assert "economy" in TemplateCompressor().render(named, detail="skeleton")
    reopened = make_memory(settings=MemorySettings(budget=1_000))  # derived state is rebuilt the same way
    assert reopened.card(request.id).terms == named.terms


def test_a_user_turn_naming_a_field_of_a_tool_result_gains_it_as_an_exact_value(memory, msg):
    request = memory.observe(msg.user("I'd like to upgrade to business if it is not too expensive."))
    memory.observe(msg.call("c1", "search_direct_flight", {"origin": "JFK", "destination": "SEA"}))
    memory.observe(
        msg.result("c1", "search_direct_flight", [{"flight_number": "HAT069", "prices": {"business": 470}}])
    )

    assert "business" in memory.card(request.id).terms
    assert "expensive" not in memory.card(request.id).terms


def test_errors_and_sold_out_options_carry_option_constraint(memory, msg):
    memory.observe(msg.call("c1", "book", {"flight": "HAT083"}))
    error = memory.observe(msg.result("c1", "book", "Error: not enough seats on flight HAT083"))
    memory.observe(msg.call("c2", "search", {"date": "2024-05-20"}))
    search = memory.observe(
        msg.result(
            "c2",
            "search",
            [
                {"flight_number": "HAT069", "status": "available"},
                {"flight_number": "HAT083", "status": "sold out"},
            ],
        )
    )

    assert {s.name for s in memory.card(error.id).scores} >= {"constraint"}
    assert any(s.name == "constraint" and "HAT083" in s.provenance for s in memory.card(search.id).scores)


def test_a_state_changing_tool_result_scores_state_change(memory, msg):
    memory.observe(msg.call("c1", "cancel_reservation", {"reservation_id": "NO6JO3"}))
    done = memory.observe(
        msg.result("c1", "cancel_reservation", {"reservation_id": "NO6JO3", "status": "cancelled"})
    )

    state = [s for s in memory.card(done.id).scores if s.name == "state"]
    assert state and "cancel_reservation changed state" in state[0].provenance


def test_task_mode_changes_how_much_the_same_evidence_is_worth(memory, msg):
    memory.observe(msg.call("c1", "book", {"flight": "HAT083"}))
    error = memory.observe(msg.result("c1", "book", "Error: seat unavailable"))

    def constraint(mode):
        scores = HeuristicValuator(mode=mode).static_scores(memory.card(error.id))
        return next(s.value for s in scores if s.name == "constraint")

    assert constraint(TaskMode.PRECISE_PLANNING) > constraint(TaskMode.INFORMATION_GATHERING)
    assert constraint(TaskMode.INFORMATION_GATHERING) > constraint(TaskMode.CREATIVE)


def test_decay_is_exponential_in_turns_with_a_floor(memory, msg):
    for i in range(30):
        memory.observe(msg.user(f"note {i}"))
    decay = Decay(lam=0.1, floor=0.05)
    context = ValuationContext(focus=DecisionFocus(), current_seq=30, now=0.0)

    assert decay.factor(memory.card("c20"), context) == pytest.approx(math.exp(-0.1 * 10))
    assert decay.factor(memory.card("c0"), context) == pytest.approx(0.05)


def test_decay_in_seconds_uses_the_clock(memory, msg, clock):
    card = memory.observe(msg.user("hello"))
    clock.advance(600)
    context = ValuationContext(focus=DecisionFocus(), current_seq=1, now=clock())

    assert Decay(lam=0.001, unit="seconds", floor=0).factor(card, context) == pytest.approx(math.exp(-0.6))


def test_bad_decay_settings_are_refused():
    with pytest.raises(ConfigError, match="lam"):
        Decay(lam=-1)
    with pytest.raises(ConfigError, match="unit"):
        Decay(unit="hours")


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ({"mode": "fast"}, "mode must be one of precise_planning, information_gathering, creative"),
        ({"mode": None}, "mode must be one of"),
        ({"decay": 0.05}, "decay must be a Decay"),
        ({"rank_decay": 2}, "rank_decay must be in"),
        ({"rank_floor": -1}, "rank_floor must be in"),
        ({"priors": {CardKind.TOOL_RESULT: 5}}, "priors must map card kinds to values in"),
    ],
)
def test_bad_heuristic_settings_are_refused_when_made_not_at_the_first_event(setting, match):
    with pytest.raises(ConfigError, match=match):
        HeuristicValuator(**setting)


def test_a_task_mode_may_be_given_by_its_name(memory, msg):
    memory.observe(msg.user("write a poem about HAT069"))

    assert scored_by_id(memory, HeuristicValuator(mode="creative")) == scored_by_id(
        memory, HeuristicValuator(mode=TaskMode.CREATIVE)
    )


def test_cards_sharing_the_decision_focus_gain_value(memory, msg):
    memory.observe(msg.user("my reservations are NO6JO3 and AIXC49"))
    memory.observe(msg.user("and I like window seats"))
    valuator = HeuristicValuator()

    focused = scored_by_id(memory, valuator, focus=DecisionFocus(terms=frozenset({"aixc49"})))
    plain = scored_by_id(memory, valuator)

    assert focused["c0"].value > plain["c0"].value
    assert "focus" in names(focused["c0"]) and "focus" not in names(plain["c0"])


def test_a_newer_result_of_the_same_tool_is_the_fresher_view(memory, msg):
    for i, date in enumerate(("2024-05-20", "2024-05-21")):
        memory.observe(msg.call(f"s{i}", "search_direct_flight", {"date": date}))
        memory.observe(msg.result(f"s{i}", "search_direct_flight", [{"flight_number": f"HAT00{i}"}]))
    scored = scored_by_id(memory, HeuristicValuator())

    freshness = {
        cid: next(s.value for s in scored[cid].scores if s.name == "freshness") for cid in ("c1", "c3")
    }
    assert freshness["c3"] == 1.0 and freshness["c1"] < 1.0


def test_lookups_of_different_entities_are_not_newer_views_of_one_record(memory, msg):
    for i, reservation in enumerate(("JG7FMM", "2FBBAH")):
        memory.observe(msg.call(f"r{i}", "get_reservation_details", {"reservation_id": reservation}))
        memory.observe(msg.result(f"r{i}", "get_reservation_details", {"reservation_id": reservation}))
    focus = DecisionFocus(terms=frozenset({"jg7fmm"}))
    scored = scored_by_id(memory, HeuristicValuator(), focus=focus)

    assert all(s.value == 1.0 for s in scored["c1"].scores if s.name == "freshness")
    assert scored["c1"].value > scored["c3"].value  # the older lookup is about the entity in focus


def test_the_lookup_of_the_entity_in_focus_outranks_one_sharing_more_terms(memory, msg):
    user = {"user_id": "omar_davis_3817"}
    memory.observe(msg.call("c1", "get_reservation_details", {"reservation_id": "2FBBAH"}))
    asked = memory.observe(msg.result("c1", "get_reservation_details", {"reservation_id": "2FBBAH", **user}))
    memory.observe(msg.call("c2", "get_reservation_details", {"reservation_id": "LQ940Q"}))
    other = memory.observe(
        msg.result(
            "c2", "get_reservation_details", {"reservation_id": "LQ940Q", **user, "date": "2024-05-21"}
        )
    )
    focus = DecisionFocus(
        "Downgrade 2FBBAH too", frozenset({"2fbbah", "omar_davis_3817", "2024-05-21", "05-21"})
    )

    scored = scored_by_id(memory, HeuristicValuator(), focus=focus)

    assert len(other.terms & focus.terms) > len(asked.terms & focus.terms)
    assert scored[asked.id].value > scored[other.id].value


def test_a_lookups_subject_is_its_id_arguments_and_follows_the_card(memory, msg):
    memory.observe(msg.call("r0", "get_reservation_details", {"reservation_id": "JG7FMM", "full": True}))
    lookup = memory.observe(msg.result("r0", "get_reservation_details", {"status": "confirmed"}))
    assert subject_of(lookup) == {"jg7fmm"}
    assert subject_of(lookup) is subject_of(memory.card(lookup.id))  # asked at every decision: kept
    assert subject_of(replace(lookup, arguments={"reservation_id": "2FBBAH"})) == {"2fbbah"}
    assert subject_of(replace(lookup, arguments={"query": "flights to LAX"})) == frozenset()
    # pages read one after another are the agent's reading, the newest its current view
    assert subject_of(replace(lookup, arguments={"url": "https://acme.io/pricing"})) == frozenset()


def test_a_live_conversation_stays_remembered_while_dropped_ones_age_out(memory, msg, monkeypatch):
    from damc_core import value

    monkeypatch.setattr(value, "_MEMO_HELD", 32)  # a server's worth of conversations, scaled down
    for memo in ("_SUBJECTS", "_HANDLES", "_VOCABULARIES"):  # as a new process has them
        monkeypatch.setattr(value, memo, type(getattr(value, memo))())
    memory.observe(msg.call("r0", "get_reservation_details", {"reservation_id": "JG7FMM"}))
    lookup = memory.observe(msg.result("r0", "get_reservation_details", {"status": "confirmed"}))
    subject = subject_of(lookup)

    for n in range(100):  # conversations served once, then dropped, between this one's decisions
        other = memory.for_session(f"s{n}")
        other.observe(msg.call("r0", "get_reservation_details", {"reservation_id": f"R{n}"}))
        other.observe(msg.result("r0", "get_reservation_details", {"status": "confirmed"}))
        other.build(budget=400)
        memory.build(budget=400)

    assert subject_of(memory.card(lookup.id)) is subject  # not derived again
    assert max(len(value._SUBJECTS), len(value._HANDLES), len(value._VOCABULARIES)) <= 32


def test_the_newest_user_turn_is_the_request_and_always_counts(memory, msg):
    memory.observe(msg.user("my user id is mia_li_3668"))
    memory.observe(msg.call("c1", "get_user_details", {"user_id": "mia_li_3668"}))
    memory.observe(
        msg.result("c1", "get_user_details", {"user_id": "mia_li_3668", "payment_id": "gift_card_7"})
    )
    memory.observe(msg.user("book the cheapest one"))
    scored = scored_by_id(memory, HeuristicValuator())

    assert scored["c3"].value == 1.0 and "request" in names(scored["c3"])
    assert "request" not in names(scored["c0"])


def test_weighted_valuators_average_values_and_keep_every_score(memory, msg):
    memory.observe(msg.user("book HAT069 for mia_li_3668"))
    planning = HeuristicValuator(mode=TaskMode.PRECISE_PLANNING)
    creative = HeuristicValuator(mode=TaskMode.CREATIVE, decay=Decay(lam=1.0, floor=0.0))
    both = WeightedValuators(((planning, 3.0), (creative, 1.0)))

    a = scored_by_id(memory, planning)["c0"]
    b = scored_by_id(memory, creative)["c0"]
    mixed = scored_by_id(memory, both)["c0"]

    assert mixed.value == pytest.approx((3 * a.value + b.value) / 4)
    assert len(mixed.scores) == len(a.scores) + len(b.scores)


@pytest.mark.parametrize(
    "parts",
    [
        ((HeuristicValuator(), float("nan")),),
        ((HeuristicValuator(), "1"),),
        (HeuristicValuator(), 1.0),
        ((HeuristicValuator(), 1.0), (None, 1.0)),
    ],
    ids=["nan weight", "weight as text", "one pair not in a tuple of pairs", "no valuator"],
)
def test_weighted_valuators_refuse_parts_that_are_not_valuator_and_weight_pairs(parts):
    with pytest.raises(ConfigError, match=r"\(valuator, weight > 0\) pair"):
        WeightedValuators(parts)


def test_a_wrapped_or_mixed_heuristic_valuator_sets_the_cards_priors(make_memory, msg):
    from damc_core.counterfactual import CounterfactualValuator

    creative = HeuristicValuator(mode=TaskMode.CREATIVE, priors={CardKind.USER_INSTRUCTION: 0.9})
    for valuator in (
        CounterfactualValuator(base=creative),
        WeightedValuators(((CounterfactualValuator(), 1.0), (creative, 1.0))),
    ):
        memory = make_memory(valuator=valuator)
        card = memory.observe(msg.user("hello"))
        assert memory.heuristics is creative and card.prior >= 0.9


def test_weighted_valuators_need_positive_weights():
    with pytest.raises(ConfigError):
        WeightedValuators(((HeuristicValuator(), 0.0),))


class CardsKeptOutsideTheStore:
    """A valuator keeping each namespace's cards where the store is not (as retrieval's index
    does): notes the namespaces it is told the store holds nothing of."""

    def __init__(self) -> None:
        self.emptied: list[str] = []

    def value(self, cards, *, context):
        return HeuristicValuator().value(cards, context=context)

    def empty(self, namespace):
        self.emptied.append(namespace.key)


def test_a_memory_on_a_namespace_its_store_holds_nothing_of_tells_a_valuator_keeping_cards(make_memory, msg):
    from damc_core.counterfactual import CounterfactualValuator

    kept = CardsKeptOutsideTheStore()
    for valuator in (
        kept,
        CounterfactualValuator(base=kept),
        WeightedValuators(((kept, 1.0), (HeuristicValuator(), 1.0))),
    ):
        memory = make_memory(valuator=valuator)  # nothing stored yet: whatever it kept is gone
        memory.observe(msg.user("book flight HAT069"))
    assert kept.emptied == ["mia_li_3668/trip-1"]

    make_memory(valuator=kept)  # reopened on its records
    memory.for_session("trip-2")
    assert kept.emptied == ["mia_li_3668/trip-1", "mia_li_3668/trip-2"]


def test_a_spoken_date_focuses_the_card_holding_that_iso_date(memory, msg):
    for i, (reservation, date) in enumerate((("OBUT9V", "2024-05-27"), ("Q0ZF0J", "2024-05-28"))):
        memory.observe(msg.call(f"r{i}", "get_reservation_details", {"reservation_id": reservation}))
        memory.observe(
            msg.result(f"r{i}", "get_reservation_details", {"reservation_id": reservation, "date": date})
        )
    memory.observe(msg.user("The departure is on May 27th, from Houston."))

    built = memory.build(budget=400)
    values = {d.card_id: d for d in built.decisions}

    assert any(s.name == "focus" for s in values["c1"].scores)
    assert "05-27" in built.focus.terms and "05-28" not in built.focus.terms  # the month-day of an ISO date


def test_a_request_in_words_focuses_the_card_that_holds_such_things(memory, msg):
    memory.observe(msg.call("u", "get_user_details", {"user_id": "sofia_kim_7287"}))
    memory.observe(
        msg.result(
            "u",
            "get_user_details",
            {
                "payment_methods": {
                    "gift_card_7480005": {"source": "gift_card", "amount": 44},
                    "credit_card_2929732": {"source": "credit_card", "brand": "visa"},
                }
            },
        )
    )
    memory.observe(msg.call("s", "search_direct_flight", {"origin": "DEN", "destination": "IAH"}))
    memory.observe(msg.result("s", "search_direct_flight", [{"flight_number": "HAT229", "price": 109}]))
    memory.observe(msg.user("I want to pay with the gift card that has the smallest balance."))

    built = memory.build(budget=400)
    decisions = {d.card_id: d for d in built.decisions}

    focus = next(s for s in decisions["c1"].scores if s.name == "focus")
    assert "words with the request" in focus.provenance
    assert not any("words with the request" in s.provenance for s in decisions["c3"].scores)


def test_a_word_the_user_said_before_a_table_showed_it_focuses_that_tables_rows(memory, msg, memory_text):
    memory.observe(msg.user("Exchange my keyboard for one with clicky switches, please."))
    memory.observe(msg.call("p", "get_product_details", {"product_id": "1656367028"}))
    switches = ["linear", "tactile", "linear", "tactile", "clicky", "linear"] * 8  # too long to show whole
    variants = {
        f"77064102{i:02d}": {
            "item_id": f"77064102{i:02d}",
            "options": {"switch type": kind},
            "price": 200 + i,
        }
        for i, kind in enumerate(switches)
    }
    memory.observe(msg.result("p", "get_product_details", {"product_id": "1656367028", "variants": variants}))
    memory.observe(msg.call("o", "get_order_details", {"order_id": "#W2378156"}))
    memory.observe(msg.result("o", "get_order_details", {"order_id": "#W2378156", "status": "delivered"}))

    sent = memory_text(memory.build(budget=400).messages)

    assert "7706410204" in sent and "7706410210" in sent  # the two clicky variants
    assert "7706410200" not in sent


def test_a_list_that_calls_are_going_through_keeps_its_place(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(budget=260, recent_messages=0))
    memory.observe(msg.user("Cancel all my pending orders. I am Yusuf Rossi, zip 19122."))
    memory.observe(msg.call("u", "get_user_details", {"user_id": "yusuf_rossi_9620"}))
    orders = ["#W6247578", "#W9711842", "#W4776164", "#W6679257"]
    profile = {"email": "yusuf.rossi7301@example.com", "address": {"city": "Philadelphia", "zip": "19122"}}
    memory.observe(msg.result("u", "get_user_details", {**profile, "orders": orders}))
    for i, order in enumerate(orders[:2]):
        memory.observe(msg.call(f"o{i}", "get_order_details", {"order_id": order}))
        items = [{"name": "T-Shirt", "item_id": f"834911898{i}", "price": 53.43 + i}]
        result = {"order_id": order, "status": "cancelled", "items": items, "payment": "credit_card_9513926"}
        memory.observe(msg.result(f"o{i}", "get_order_details", result))

    built = memory.build()

    profile_card = next(d for d in built.decisions if d.card_id == "c2")
    assert any("went through 2 of its 4 listed values" in s.provenance for s in profile_card.scores)
    assert "#W4776164" in memory_text(built.messages)  # the next order to look up


def test_ids_and_dates_the_user_gave_count_as_input_for_a_call_still_to_come(memory, msg):
    memory.observe(msg.user("Book SFO to JFK on May 17 for three passengers."))
    memory.observe(msg.assistant("Please give each passenger's first name, last name and date of birth."))
    passengers = memory.observe(
        msg.user("Emily Smith 1988-04-10, John Smith 1990-11-22 and Sarah Johnson 1995-07-15.")
    )
    in_passing = memory.observe(msg.user("Would three seats get us under $1,000?"))  # no value a call takes

    waiting = "3 ids or dates the user gave that no call has taken yet"
    assert any(s.name == "causal" and waiting in s.provenance for s in memory.card(passengers.id).scores)
    assert not any(waiting in s.provenance for s in memory.card(in_passing.id).scores)

    booking = {"passengers": [{"first_name": "Emily", "last_name": "Smith", "dob": "1988-04-10"}]}
    memory.observe(msg.call("b1", "book_reservation", booking))

    taken = memory.card(passengers.id)
    assert taken.decision_links  # from now on it counts by the calls that took its values
    assert not any(waiting in s.provenance for s in taken.scores)


def test_the_proposal_the_user_has_just_agreed_to_is_kept_with_its_values(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(budget=250, recent_messages=0))
    memory.observe(msg.user("I am mia_garcia_4516 and I want to return everything I ordered."))
    for i, order in enumerate(["#W5490111", "#W7387996"]):
        memory.observe(msg.call(f"o{i}", "get_order_details", {"order_id": order}))
        items = [
            {
                "name": name,
                "item_id": f"{4579334072 + 1000 * i + k}",
                "price": 54.85 + k,
                "options": {"color": "black"},
            }
            for k, name in enumerate(["Water Bottle", "Gaming Mouse", "Desk Lamp", "Backpack", "T-Shirt"])
        ]
        result = {"order_id": order, "status": "delivered", "items": items, "payment": "credit_card_3124723"}
        memory.observe(msg.result(f"o{i}", "get_order_details", result))
    proposal = memory.observe(
        msg.assistant(
            "To confirm, I will return the items 4579334072 and 4579335073 of order #W5490111 and #W7387996 "
            "to credit_card_3124723. Shall I proceed?"
        )
    )
    memory.observe(msg.user("Yes, please go ahead."))

    built = memory.build()

    kept = next(d for d in built.decisions if d.card_id == proposal.id)
    assert kept.kept and any(s.name == "proposal" for s in kept.scores)
    assert "4579335073" in memory_text(built.messages)

    memory.observe(msg.user("Actually, which of them was the cheapest?"))  # no agreement: no proposal
    asked = next(d for d in memory.build().decisions if d.card_id == proposal.id)
    assert not any(s.name == "proposal" for s in asked.scores)


def test_the_next_entity_of_a_series_of_changes_outranks_the_changes_already_made(
    make_memory, msg, memory_text
):
    memory = make_memory(settings=MemorySettings(budget=300, recent_messages=0))
    memory.observe(msg.user("Downgrade all my reservations to economy, please."))
    reservations = ["JG7FMM", "2FBBAH", "X7BYG1", "BOH180"]
    for i, reservation in enumerate(reservations):  # looked up one by one
        memory.observe(msg.call(f"r{i}", "get_reservation_details", {"reservation_id": reservation}))
        flights = [
            {
                "flight_number": f"HAT{270 + 3 * i + leg}",
                "date": f"2024-05-2{i}",
                "origin": "SFO",
                "destination": "BOS",
            }
            for leg in range(2)
        ]
        details = {
            "reservation_id": reservation,
            "cabin": "business",
            "status": "confirmed",
            "flights": flights,
        }
        memory.observe(msg.result(f"r{i}", "get_reservation_details", details))
    for i, reservation in enumerate(reservations[:3]):  # then changed one by one
        memory.observe(
            msg.call(
                f"u{i}", "update_reservation_flights", {"reservation_id": reservation, "cabin": "economy"}
            )
        )
        changed = {
            "reservation_id": reservation,
            "cabin": "economy",
            "status": "confirmed",
            "price_paid": 412 + i,
        }
        memory.observe(msg.result(f"u{i}", "update_reservation_flights", changed))

    built = memory.build()

    assert "HAT279" in memory_text(built.messages)  # the flights BOH180's change will take
    next_up = next(d for d in built.decisions if d.card_id == "c8")  # BOH180's lookup
    assert any(s.name == "pending" for s in next_up.scores)
    changed_lookups = [d for d in built.decisions if d.card_id in ("c2", "c4", "c6")]
    assert not any(s.name == "pending" for d in changed_lookups for s in d.scores)


def _looked_up_reservations(memory, msg, routes):
    """The user's reservations looked up one by one, each a trip on its own route and day."""
    memory.observe(msg.user("Which of my trips have a direct flight that is over 3 hours? Check each."))
    for i, (reservation, (origin, destination, date)) in enumerate(routes.items()):
        memory.observe(msg.call(f"r{i}", "get_reservation_details", {"reservation_id": reservation}))
        flight = {
            "flight_number": f"HAT{200 + i}",
            "origin": origin,
            "destination": destination,
            "date": date,
        }
        details = {
            "reservation_id": reservation,
            "cabin": "economy",
            "status": "confirmed",
            "flights": [flight],
        }
        memory.observe(msg.result(f"r{i}", "get_reservation_details", details))


def _searched(memory, msg, call_id, route):
    origin, destination, date = route
    memory.observe(
        msg.call(
            call_id, "search_direct_flight", {"origin": origin, "destination": destination, "date": date}
        )
    )
    flights = [
        {"flight_number": f"HAT{300 + k}", "status": "available", "duration_hours": 2 + k} for k in range(3)
    ]
    memory.observe(msg.result(call_id, "search_direct_flight", flights))


ROUTES = {
    "NM1VX1": ("MSP", "EWR", "2024-05-25"),
    "KC18K6": ("EWR", "CLT", "2024-05-21"),
    "H8Q05L": ("JFK", "ATL", "2024-05-24"),
    "WUNA5K": ("ORD", "PHL", "2024-05-10"),
}


def test_the_next_lookup_of_a_run_taken_one_by_one_into_later_calls_is_kept(make_memory, msg, memory_text):
    """The agent looked four reservations up, then searched the first's route and the second's:
    the third's lookup holds the route the next search takes."""
    memory = make_memory(settings=MemorySettings(budget=230, recent_messages=0))
    _looked_up_reservations(memory, msg, ROUTES)
    routes = list(ROUTES.values())
    _searched(memory, msg, "s0", routes[0])
    _searched(memory, msg, "s1", routes[1])

    built = memory.build()

    assert "JFK" in memory_text(built.messages)  # H8Q05L's route, for the next search
    next_up = next(d for d in built.decisions if d.card_id == "c6")  # H8Q05L's lookup
    assert next_up.kept and any(s.name == "pending" for s in next_up.scores)
    later = next(d for d in built.decisions if d.card_id == "c8")  # WUNA5K's: not next yet
    assert not any(s.name == "pending" for s in later.scores)


def test_lookups_taken_out_of_order_are_no_run_to_go_through(make_memory, msg):
    memory = make_memory(settings=MemorySettings(budget=230, recent_messages=0))
    _looked_up_reservations(memory, msg, ROUTES)
    routes = list(ROUTES.values())
    _searched(memory, msg, "s0", routes[1])  # the second reservation's route first
    _searched(memory, msg, "s1", routes[0])

    built = memory.build()

    assert not any(s.name == "pending" for d in built.decisions for s in d.scores)


def test_a_list_of_ids_looked_up_in_its_order_is_kept_until_its_last_id(make_memory, msg, memory_text):
    """The profile lists five reservations; the agent has looked the first three up, one after the
    other: the next lookup takes its id from the profile."""
    memory = make_memory(settings=MemorySettings(budget=180, recent_messages=0))
    memory.observe(msg.user("What is booked under my name? I am daiki_muller_1116."))
    memory.observe(msg.call("p", "get_user_details", {"user_id": "daiki_muller_1116"}))
    reservations = ["7WPL39", "XEHM4B", "59XX6W", "3EMQJ6", "A90KR2"]
    profile = {"user_id": "daiki_muller_1116", "membership": "silver", "reservations": reservations}
    memory.observe(msg.result("p", "get_user_details", profile))
    for i, reservation in enumerate(reservations[:3]):
        memory.observe(msg.call(f"r{i}", "get_reservation_details", {"reservation_id": reservation}))
        details = {
            "reservation_id": reservation,
            "origin": "LAS",
            "destination": "ATL",
            "flights": [{"flight_number": f"HAT00{i}", "date": f"2024-05-2{i}"}],
        }
        memory.observe(msg.result(f"r{i}", "get_reservation_details", details))

    built = memory.build()

    assert "3EMQJ6" in memory_text(built.messages)
    listed = next(d for d in built.decisions if d.card_id == "c2")  # the profile's result
    assert listed.kept and any(s.name == "pending" for s in listed.scores)


def test_a_list_whose_ids_are_all_looked_up_is_not_pending(make_memory, msg):
    memory = make_memory(settings=MemorySettings(budget=180, recent_messages=0))
    memory.observe(msg.call("p", "get_user_details", {"user_id": "daiki_muller_1116"}))
    profile = {"user_id": "daiki_muller_1116", "reservations": ["7WPL39", "XEHM4B"]}
    memory.observe(msg.result("p", "get_user_details", profile))
    for i, reservation in enumerate(profile["reservations"]):
        memory.observe(msg.call(f"r{i}", "get_reservation_details", {"reservation_id": reservation}))
        memory.observe(msg.result(f"r{i}", "get_reservation_details", {"reservation_id": reservation}))

    listed = next(d for d in memory.build().decisions if d.card_id == "c1")

    assert not any(s.name == "pending" for s in listed.scores)


def test_an_agreed_proposal_outranks_the_series_it_leaves(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(budget=260, recent_messages=0))
    memory.observe(msg.user("Cancel my pending orders, then return the lamp I got."))
    orders = ["#W9373487", "#W5481803", "#W2692684", "#W7449508"]
    for i, order in enumerate(orders):  # looked up one by one
        memory.observe(msg.call(f"o{i}", "get_order_details", {"order_id": order}))
        items = [
            {"name": name, "item_id": f"64779155{i}{k}", "price": 120 + k} for k, name in enumerate("ABC")
        ]
        details = {"order_id": order, "status": "pending" if i < 3 else "delivered", "items": items}
        memory.observe(msg.result(f"o{i}", "get_order_details", details))
    for i, order in enumerate(orders[:2]):  # two cancelled; #W2692684's turn would be next
        memory.observe(
            msg.call(f"c{i}", "cancel_pending_order", {"order_id": order, "reason": "no longer needed"})
        )
        memory.observe(
            msg.result(f"c{i}", "cancel_pending_order", {"order_id": order, "status": "cancelled"})
        )
    proposal = memory.observe(
        msg.assistant(
            "To confirm, I will return item 6477915530 of order #W7449508 to gift_card_7711863. "
            "Shall I proceed?"
        )
    )
    memory.observe(msg.user("Yes, please go ahead."))

    built = memory.build()

    agreed = next(d for d in built.decisions if d.card_id == proposal.id)
    assert agreed.kept and "gift_card_7711863" in memory_text(built.messages)
    lookup = next(d for d in built.decisions if d.card_id == "c6")  # #W2692684's, still not acted on
    assert not any(s.name == "pending" for s in lookup.scores)


def test_the_record_of_an_entity_ages_slower_than_a_search(memory, msg):
    memory.observe(msg.call("r1", "get_reservation_details", {"reservation_id": "4NQLHD"}))
    reservation = memory.observe(
        msg.result("r1", "get_reservation_details", {"reservation_id": "4NQLHD", "flight_number": "HAT021"})
    )
    memory.observe(msg.call("s1", "search_direct_flight", {"origin": "IAH", "destination": "LAS"}))
    search = memory.observe(msg.result("s1", "search_direct_flight", [{"flight_number": "HAT112"}]))
    for turn in range(12):  # the dialogue goes on about the price
        memory.observe(msg.user(f"Would it fit under $1,00{turn}?"))
        memory.observe(msg.assistant("Let me work that out."))

    decisions = {d.card_id: d for d in memory.build().decisions}
    decay = {
        card.id: next(s.value for s in decisions[card.id].scores if s.name == "decay")
        for card in (reservation, search)
    }

    assert decay[reservation.id] > decay[search.id]  # though the older of the two
