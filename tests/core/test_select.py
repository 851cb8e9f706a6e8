"""Selection: every selector keeps within the token budget and gives a reason for every drop; bad
settings fail at construction with ConfigError."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from damc_core import (
    Card,
    CardKind,
    ConfigError,
    Decay,
    DefaultAssembler,
    HybridSelector,
    MemorySettings,
    ScoredCard,
    Selection,
    ThresholdSelector,
    TopKSelector,
)
from damc_core.memory import NAMED_LEFT_OUT
from damc_core.select import LEAN_TRIES
from damc_core.tokens import count_messages


def scored(values_and_tokens):
    """ScoredCards c0, c1, ... with the given (value, tokens)."""
    return [
        ScoredCard(
            Card(
                id=f"c{i}",
                record_id=f"r{i}",
                seq=i,
                created_at=0.0,
                kind=CardKind.TOOL_RESULT,
                summary=f"[c{i}] result",
                tokens=tokens,
            ),
            value,
        )
        for i, (value, tokens) in enumerate(values_and_tokens)
    ]


CANDIDATES = scored([(0.9, 120), (0.8, 40), (0.7, 300), (0.6, 20), (0.3, 60), (0.04, 10), (0.55, 90)])
SELECTORS = [
    TopKSelector(k=3),
    ThresholdSelector(min_value=0.5),
    HybridSelector(),
    HybridSelector(token_exponent=1.0),
]


@pytest.mark.parametrize("selector", SELECTORS, ids=repr)
@pytest.mark.parametrize("budget", [0, 50, 200, 1_000])
def test_selectors_obey_the_budget_and_explain_every_drop(selector, budget):
    selection = selector.select(CANDIDATES, budget=budget)

    assert sum(s.card.tokens for s in selection.kept) <= budget
    kept_ids = [s.card.id for s in selection.kept]
    dropped_ids = [s.card.id for s, _ in selection.dropped]
    assert sorted(kept_ids + dropped_ids) == sorted(s.card.id for s in CANDIDATES)
    assert len(set(kept_ids + dropped_ids)) == len(CANDIDATES)
    for _, reason in selection.dropped:
        assert isinstance(reason, str) and reason


def test_top_k_keeps_the_k_most_valuable_that_fit():
    selection = TopKSelector(k=3).select(CANDIDATES, budget=1_000)

    assert [s.card.id for s in selection.kept] == ["c0", "c1", "c2"]
    assert {reason for _, reason in selection.dropped} == {"outside the top 3"}


def test_top_k_skips_a_card_that_does_not_fit_and_says_so():
    selection = TopKSelector(k=3).select(CANDIDATES, budget=200)

    assert [s.card.id for s in selection.kept] == ["c0", "c1", "c3"]
    assert dict((s.card.id, r) for s, r in selection.dropped)["c2"] == "over the token budget"


def test_threshold_keeps_every_card_above_the_value_floor():
    selection = ThresholdSelector(min_value=0.5).select(CANDIDATES, budget=1_000)

    assert sorted(s.card.id for s in selection.kept) == ["c0", "c1", "c2", "c3", "c6"]
    reasons = dict((s.card.id, r) for s, r in selection.dropped)
    assert reasons["c4"] == "value 0.30 below threshold 0.5"
    assert reasons["c5"] == "value 0.04 below threshold 0.5"


def test_hybrid_drops_cards_below_its_floor_and_over_the_budget():
    selection = HybridSelector(min_value=0.05).select(CANDIDATES, budget=200)

    reasons = dict((s.card.id, r) for s, r in selection.dropped)
    assert reasons["c5"] == "value 0.04 below floor 0.05"
    assert "over the token budget" in reasons.values()
    assert "c0" in [s.card.id for s in selection.kept]


def test_hybrid_value_per_token_prefers_small_decisive_cards():
    candidates = scored([(0.9, 400), (0.6, 20), (0.5, 20)])

    by_value = HybridSelector(token_exponent=0.0).select(candidates, budget=400)
    by_density = HybridSelector(token_exponent=1.0).select(candidates, budget=400)

    assert [s.card.id for s in by_value.kept] == ["c0"]
    assert [s.card.id for s in by_density.kept] == ["c1", "c2"]


@pytest.mark.parametrize("selector", SELECTORS[:3], ids=repr)
def test_a_card_that_does_not_fit_goes_in_lean_before_less_valuable_cards(selector):
    candidates = scored([(0.9, 300), (0.8, 330), (0.7, 60)])
    offered = []

    def skeleton(card, tokens_left):
        offered.append((card.id, tokens_left))
        return replace(card, summary=f"[{card.id}] skeleton", tokens=card.tokens // 3)

    selection = selector.select(candidates, budget=200, leaner=skeleton)

    kept = {s.card.id: s.card.summary for s in selection.kept}
    assert kept == {"c0": "[c0] skeleton", "c2": "[c2] result"}
    assert offered == [("c0", 200), ("c1", 100)]
    assert sum(s.card.tokens for s in selection.kept) <= 200


def test_a_selection_stops_asking_for_lean_renderings_that_do_not_fit():
    candidates = scored([(0.9, 90)] + [(0.5, 100)] * 20)
    offered = []

    def barely_leaner(card, tokens_left):
        offered.append(card.id)
        return replace(card, tokens=card.tokens - 1)

    HybridSelector().select(candidates, budget=95, leaner=barely_leaner)

    assert len(offered) == LEAN_TRIES


def test_nothing_to_select_is_fine():
    for selector in SELECTORS:
        selection = selector.select([], budget=100)
        assert selection.kept == [] and selection.dropped == []


@pytest.mark.parametrize("selector", SELECTORS, ids=repr)
def test_negative_budget_is_a_config_error(selector):
    with pytest.raises(ConfigError, match="budget must be >= 0"):
        selector.select(CANDIDATES, budget=-1)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: TopKSelector(k=0), "TopKSelector.k must be a whole number > 0"),
        (lambda: TopKSelector(k=-3), "TopKSelector.k must be a whole number > 0"),
        (lambda: TopKSelector(k="5"), "TopKSelector.k must be a whole number > 0, got '5'"),
        (lambda: TopKSelector(k=float("nan")), "TopKSelector.k must be a whole number > 0, got nan"),
        (
            lambda: ThresholdSelector(min_value="0.5"),
            r"ThresholdSelector.min_value must be in \[0, 1\], got '0.5'",
        ),
        (lambda: HybridSelector(token_exponent=None), r"HybridSelector.token_exponent .*, got None"),
        (lambda: ThresholdSelector(min_value=1.5), r"ThresholdSelector.min_value must be in \[0, 1\]"),
        (lambda: ThresholdSelector(min_value=-0.1), r"ThresholdSelector.min_value must be in \[0, 1\]"),
        (lambda: HybridSelector(min_value=2.0), r"HybridSelector.min_value must be in \[0, 1\]"),
        (lambda: HybridSelector(token_exponent=1.5), r"HybridSelector.token_exponent must be in \[0, 1\]"),
        (lambda: MemorySettings(budget=0), "MemorySettings.budget must be > 0"),
        (lambda: MemorySettings(budget=-100), "MemorySettings.budget must be > 0"),
        (lambda: MemorySettings(recent_messages=-1), "MemorySettings.recent_messages must be >= 0"),
        (lambda: MemorySettings(superseded="keep"), "MemorySettings.superseded must be 'drop' or 'mark'"),
        (lambda: MemorySettings(budget="1000"), "MemorySettings.budget must be a whole number, got '1000'"),
        (lambda: MemorySettings(recent_messages=1.5), "recent_messages must be a whole number"),
        (lambda: MemorySettings(budget_ratio=float("nan")), "MemorySettings.budget_ratio must be a finite"),
        (lambda: MemorySettings(max_candidates=0), "MemorySettings.max_candidates must be > 0"),
        (
            lambda: MemorySettings(budget=500, budget_ratio=0.07, min_budget=800),
            r"MemorySettings.min_budget \(800\) is above budget \(500\)",
        ),
        (lambda: Decay(lam=-0.1), "Decay.lam must be a number >= 0"),
        (lambda: Decay(lam=float("nan")), "Decay.lam must be a number >= 0, got nan"),
        (lambda: Decay(floor="0.2"), r"Decay.floor must be in \[0, 1\], got '0.2'"),
        (lambda: Decay(unit="days"), "Decay.unit"),
    ],
    ids=[
        "k=0",
        "k<0",
        "k as text",
        "k nan",
        "threshold as text",
        "hybrid exponent None",
        "threshold>1",
        "threshold<0",
        "hybrid floor>1",
        "hybrid exponent>1",
        "budget=0",
        "budget<0",
        "recent<0",
        "superseded=keep",
        "budget as text",
        "recent as a fraction",
        "ratio nan",
        "no candidates",
        "growing from above the budget",
        "decay lam<0",
        "decay lam nan",
        "decay floor as text",
        "decay unit",
    ],
)
def test_bad_settings_raise_config_error(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        MemorySettings(budget=0)


def test_build_with_a_non_positive_budget_is_a_config_error(memory, msg):
    memory.observe(msg.user("Hello"))

    with pytest.raises(ConfigError, match="budget must be a whole number of tokens > 0"):
        memory.build(budget=0)
    with pytest.raises(ConfigError, match="got inf"):
        memory.build(budget=float("inf"))


def long_conversation(airline_messages, msg):
    messages = list(airline_messages)
    for i in range(6):
        messages.append(msg.user(f"Also check SEA to C{i:02d} on 2024-05-2{i}."))
        messages.append(
            msg.call(f"s{i}", "search_direct_flight", {"origin": "SEA", "destination": f"C{i:02d}"})
        )
        flights = [
            {"flight_number": f"HAT{100 + 10 * i + j}", "status": "available", "price": 90 + j}
            for j in range(8)
        ]
        messages.append(msg.result(f"s{i}", "search_direct_flight", flights))
    messages.append(msg.assistant("Here are the options."))
    return messages


@pytest.mark.parametrize(
    "selector", [HybridSelector(), TopKSelector(k=4), ThresholdSelector(min_value=0.3)], ids=repr
)
@pytest.mark.parametrize("budget", [250, 600, 1_200])
def test_built_context_stays_within_the_budget(make_memory, msg, airline_messages, counter, selector, budget):
    memory = make_memory(selector=selector, assembler=DefaultAssembler(placement="user"))
    for message in long_conversation(airline_messages, msg):
        memory.observe(message)

    built = memory.build(budget=budget)

    system = [m for m in built.messages if m["role"] == "system"]
    assert built.total_tokens - count_messages(system, counter) <= budget
    assert built.total_tokens < built.raw_tokens
    for decision in built.decisions:
        assert decision.reason
        if not decision.kept:  # its share of the left-out line, if that names it
            assert decision.tokens == 0 or decision.reason.endswith(NAMED_LEFT_OUT)
    assert sum(d.tokens for d in built.decisions if d.kept) <= budget


def test_with_a_budget_ratio_the_budget_grows_with_the_history(airline_messages):
    from damc_core import DecisionMemory, InMemoryStore, MemorySettings

    settings = MemorySettings(budget=4000, recent_messages=0, budget_ratio=0.1, min_budget=150)
    growing = DecisionMemory(store=InMemoryStore(), settings=settings)
    fixed = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=4000, recent_messages=0))
    sizes = []
    for message in airline_messages:
        growing.observe(message)
        fixed.observe(message)
        built = growing.build()
        assert built.memory_tokens <= 150 + int(0.1 * built.raw_tokens)
        sizes.append(built.memory_tokens)

    assert sizes[-1] > sizes[0]  # more history, more budget
    assert growing.build().memory_tokens < fixed.build().memory_tokens
    capped = DecisionMemory(store=InMemoryStore(), settings=replace(settings, budget=200))
    for message in airline_messages:
        capped.observe(message)
    assert capped.build().memory_tokens <= 200


def test_the_users_newest_turn_is_sent_whole_under_a_tight_budget(make_memory, msg, airline_messages):
    from damc_core import MemorySettings, TemplateCompressor

    memory = make_memory(settings=MemorySettings(budget=200, recent_messages=0))
    for message in airline_messages[:7]:  # up to the assistant's offer of HAT069
        memory.observe(message)
    reply = "Sounds good, go ahead with that one, and please use the same card I paid with last time."
    request = memory.observe(msg.user(reply))
    assert reply not in TemplateCompressor().render(request, detail="key")  # no value, no restriction

    built = memory.build()

    assert reply in built.messages[0]["content"]  # the request is what the next call acts on
    assert built.memory_tokens <= 200


def test_a_selector_written_without_leaner_still_works(make_memory, msg, airline_messages):
    class NewestFirst:
        """A custom selector with the original signature: newest cards first, while they fit."""

        def __init__(self):
            self.calls = 0

        def select(self, scored, *, budget):
            self.calls += 1
            kept, dropped, left = [], [], budget
            for item in sorted(scored, key=lambda s: -s.card.seq):
                if item.card.tokens <= left:
                    kept.append(item)
                    left -= item.card.tokens
                else:
                    dropped.append((item, "over the token budget"))
            return Selection(kept, dropped)

    selector = NewestFirst()
    memory = make_memory(selector=selector)
    for message in airline_messages:
        memory.observe(message)

    built = memory.build(budget=1_000)

    assert selector.calls == 1
    kept = [d.card_id for d in built.decisions if d.kept and d.tokens]
    assert kept and all(f"[{card_id}]" in built.messages[0]["content"] for card_id in kept)


def test_a_card_too_big_even_as_a_skeleton_sends_its_first_lines_that_fit(make_memory, msg):
    from damc_core import MemorySettings

    memory = make_memory(settings=MemorySettings(budget=130, recent_messages=0))
    memory.observe(msg.call("c1", "get_reservation", {"reservation_id": "ZFA04Y"}))
    flights = [
        {"flight_number": f"HAT{100 + i}", "date": f"2024-05-{10 + i}", "price": 120 + i} for i in range(6)
    ]
    reservation = memory.observe(
        msg.result("c1", "get_reservation", {"reservation_id": "ZFA04Y", "flights": flights})
    )
    memory.observe(msg.call("c2", "change_flight", {"flight_number": "HAT100", "date": "2024-05-10"}))
    memory.observe(msg.result("c2", "change_flight", {"status": "changed"}))
    memory.observe(msg.user("Good. Now change the next one as well."))

    built = memory.build()

    memory_text = built.messages[0]["content"]
    cut_card = memory_text.partition(f"[{reservation.id}]")[2].partition("\n[")[0]
    assert cut_card.endswith(" (cut)")  # its id heads it: recall it for the rest
    assert "HAT100 2024-05-10" in memory_text and "HAT105" not in memory_text
    assert built.memory_tokens <= 130
    assert json.loads(memory.recall(reservation.id)["content"])["flights"] == flights  # nothing is lost


def test_older_results_go_in_as_skeletons_and_take_detail_back_while_the_budget_lasts(make_memory, msg):
    from damc_core import MemorySettings

    def reservation(rid: str, flight: str) -> dict[str, object]:
        return {
            "reservation_id": rid,
            "status": "confirmed",
            "flights": [{"flight_number": flight, "date": "2024-05-20", "price": 612}],
            "created_at": "2024-05-01T10:44:24",
            "insurance": "yes",
            "total_baggages": 2,
            "address": "281 Spruce Street, Suite 942, San Diego",
        }

    def memory_at(budget: int) -> str:
        memory = make_memory(settings=MemorySettings(budget=budget, recent_messages=0))
        memory.clear()
        memory.observe(msg.user("Please check my bookings ZFA04Y, NO6JO3 and 4WQ150."))
        for rid, flight in (("ZFA04Y", "HAT136"), ("NO6JO3", "HAT039"), ("4WQ150", "HAT212")):
            memory.observe(msg.call(rid, "get_reservation_details", {"reservation_id": rid}))
            memory.observe(msg.result(rid, "get_reservation_details", reservation(rid, flight)))
        return memory.build().messages[0]["content"]

    tight, roomy = memory_at(220), memory_at(2_000)

    assert all(f"reservation_id={rid}" in tight for rid in ("ZFA04Y", "NO6JO3", "4WQ150"))  # all three fit
    assert tight.count("Spruce Street") < 3  # not all in full
    assert roomy.count("Spruce Street") == 3  # with room, every card in full


def test_an_older_search_goes_with_all_its_rows_when_the_budget_has_room(make_memory, msg, memory_text):
    from damc_core import MemorySettings

    memory = make_memory(settings=MemorySettings(budget=8000, recent_messages=2))
    memory.observe(msg.user("Find me the cheapest JFK to SEA flight on May 20."))
    flights = [{"flight_number": f"HAT{n:03d}", "price": 300 - 20 * n} for n in range(1, 9)]
    memory.observe(msg.call("a", "search_direct_flight", {"origin": "JFK", "destination": "SEA"}))
    memory.observe(msg.result("a", "search_direct_flight", flights))
    memory.observe(msg.call("b", "get_user_details", {"user_id": "mia_li_3668"}))
    memory.observe(msg.result("b", "get_user_details", {"user_id": "mia_li_3668", "membership": "gold"}))

    assert "HAT008 140" in memory_text(
        memory.build().messages
    )  # the cheapest, the sixth row past the preview


def test_a_card_whose_first_line_alone_is_over_the_budget_is_left_out_not_clipped(make_memory, msg):
    from damc_core import MemorySettings

    memory = make_memory(settings=MemorySettings(budget=150, recent_messages=0))
    memory.observe(msg.call("c1", "list_bookings", {"user_id": "mia_li_3668"}))
    statuses = {f"status_of_booking_number_{i}": "confirmed and paid" for i in range(40)}  # one long line
    bookings = memory.observe(msg.result("c1", "list_bookings", statuses))
    memory.observe(msg.call("c2", "get_weather", {"city": "Boston"}))
    memory.observe(msg.result("c2", "get_weather", {"forecast": "rain", "as_of": "2024-05-15"}))

    built = memory.build()

    assert f"[{bookings.id}]" not in built.messages[0]["content"]  # no clipped header stub
    assert next(d for d in built.decisions if d.card_id == bookings.id).reason == "over the token budget"
    assert built.memory_tokens <= 150


def _exchange_lookups(memory, msg) -> None:
    """An order with two products, then the first product's 20 variants: the agent has the second
    product still to look up."""
    memory.observe(msg.user("Exchange my keyboard for one with clicky switches, and my thermostat too."))
    memory.observe(msg.call("o", "get_order_details", {"order_id": "#W2378156"}))
    items = [
        {"name": "Mechanical Keyboard", "product_id": "1656367028", "item_id": "1151293680", "price": 272.33},
        {"name": "Smart Thermostat", "product_id": "4896585277", "item_id": "4983901480", "price": 262.47},
    ]
    memory.observe(msg.result("o", "get_order_details", {"order_id": "#W2378156", "items": items}))
    memory.observe(msg.call("p", "get_product_details", {"product_id": "1656367028"}))
    kinds = ["linear", "tactile", "linear", "tactile", "clicky"] * 4
    variants = {
        f"77064102{i:02d}": {
            "item_id": f"77064102{i:02d}",
            "options": {
                "switch type": kind,
                "backlight": ["RGB", "white", "none"][i % 3],
                "size": "full size",
            },
            "available": i % 2 == 0,
            "price": 230.5 + i,
        }
        for i, kind in enumerate(kinds)
    }
    memory.observe(msg.result("p", "get_product_details", {"product_id": "1656367028", "variants": variants}))


def test_a_newest_result_past_its_share_is_cut_to_it_with_the_rows_in_focus_first(
    make_memory, msg, memory_text
):
    memory = make_memory(
        settings=MemorySettings(budget=390, recent_messages=0, newest_share=0.5, left_out_share=0)
    )  # the card's own cut names what it leaves out
    _exchange_lookups(memory, msg)

    built = memory.build()

    sent = memory_text(built.messages)
    newest = next(line for line in sent.split("\n[") if line.startswith("c4]"))
    assert "4896585277" in sent  # the product still to look up: the order card was not crowded out
    shown, _, hint = newest.partition(" (cut; not shown: ")
    assert "7706410204" in shown  # a clicky variant leads the cut
    assert "7706410216" in hint  # the variants left out are named, for the next call or a recall
    kept = {d.card_id: d for d in built.decisions if d.kept}
    assert kept["c4"].tokens < memory.card("c4").tokens


def test_a_newest_result_within_its_share_is_sent_whole(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(budget=1200, recent_messages=0, newest_share=0.5))
    _exchange_lookups(memory, msg)

    sent = memory_text(memory.build().messages)

    assert all(f"77064102{i:02d}" in sent for i in range(20))


def test_newest_share_must_be_a_share():
    with pytest.raises(ConfigError, match="newest_share"):
        MemorySettings(newest_share=0)


def test_a_newest_record_past_its_share_leaves_room_for_the_profile_listing_the_next_order(
    make_memory, msg, memory_text
):
    memory = make_memory(settings=MemorySettings(budget=391, recent_messages=0))
    memory.observe(msg.user("I am Fatima Johnson in 78712. Change my pending boots to size 8."))
    memory.observe(msg.call("u", "get_user_details", {"user_id": "fatima_johnson_7581"}))
    profile = {"email": "fatima.johnson2300@example.com", "orders": ["#W9389413", "#W8665881", "#W5199551"]}
    memory.observe(msg.result("u", "get_user_details", profile))
    memory.observe(msg.call("o", "get_order_details", {"order_id": "#W9389413"}))
    names = ["Hiking Boots", "Smart Watch", "Mechanical Keyboard", "T-Shirt", "Backpack", "Desk Lamp"]
    names += ["Tent", "Water Bottle", "Scarf", "Kettle", "Gaming Mouse", "Yoga Mat"]
    items = [
        {
            "name": name,
            "product_id": f"73633540{i:02d}",
            "item_id": f"41273232{i:02d}",
            "price": 251.82 + i,
            "options": {
                "material": "synthetic",
                "color": ["gold", "blue", "white"][i % 3],
                "size": f"{7 + i}",
            },
        }
        for i, name in enumerate(names)
    ]
    order = {"order_id": "#W9389413", "status": "delivered", "address": {"address1": "123 Elm Street"}}
    memory.observe(msg.result("o", "get_order_details", {**order, "items": items}))

    built = memory.build()

    assert "#W8665881" in memory_text(built.messages)  # the next order to look up
    newest = next(d for d in built.decisions if d.card_id == "c4")
    assert newest.kept and newest.tokens < memory.card("c4").tokens  # cut to leave the profile room


def test_small_talk_does_not_push_the_rows_of_the_newest_result_out(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(budget=350, recent_messages=0))
    memory.observe(msg.user("Hi there! I hope you're having a lovely day. I need some help with a trip."))
    memory.observe(msg.assistant("Of course, happy to help! What can I do for you today?"))
    for _ in range(3):
        memory.observe(msg.user("Thanks so much, you're very kind. It's about my round trip next month."))
        memory.observe(msg.assistant("No problem at all. Which reservation is it, and what's your user id?"))
    memory.observe(msg.user("It's reservation XEWRD9 and I'm james_lee_6136. Move it all to economy."))
    memory.observe(msg.call("r", "get_reservation_details", {"reservation_id": "XEWRD9"}))
    legs = [("LAX", "ORD"), ("ORD", "ATL"), ("ATL", "DFW"), ("DFW", "DEN"), ("DEN", "PHX"), ("PHX", "LAX")]
    legs += [("LAX", "SEA"), ("SEA", "LAX")]
    flights = [
        {"origin": a, "destination": b, "flight_number": f"HAT{30 + 37 * i:03d}", "date": f"2024-05-{13 + i}"}
        for i, (a, b) in enumerate(legs)
    ]
    reservation = {
        "reservation_id": "XEWRD9",
        "user_id": "james_lee_6136",
        "cabin": "basic_economy",
        "flights": [{**f, "price": 92 + i} for i, f in enumerate(flights)],
        "passengers": [
            {"first_name": first, "last_name": "Lee", "dob": dob}
            for first, dob in [("James", "1995-06-11"), ("Mei", "1996-02-03"), ("Noah", "2019-09-30")]
        ],
        "payment_history": [{"payment_id": "gift_card_4643416", "amount": 561}],
    }
    memory.observe(msg.result("r", "get_reservation_details", reservation))

    built = memory.build()

    sent = memory_text(built.messages)
    assert all(f["flight_number"] in sent and f["date"] in sent for f in flights)  # what the change takes
    assert sent.count("very kind") < 3  # the small talk gave way


def test_a_newest_result_takes_its_share_of_what_a_long_request_leaves(make_memory, retail, memory_text):
    memory = make_memory(settings=MemorySettings(budget=400, recent_messages=0))
    retail.long_request_and_order(memory)
    for product in range(2):  # the agent goes through the order's products one by one
        retail.product_lookup(memory, product, variants=11)

    built = memory.build()

    assert "3377618302" in memory_text(built.messages)  # the next product to look up
    newest = next(d for d in built.decisions if d.card_id == "c6")
    assert newest.kept and newest.tokens < memory.card("c6").tokens  # cut to its share


def test_a_card_that_fits_cut_at_some_budget_is_kept_at_every_larger_one(make_memory, msg):
    memory = make_memory(settings=MemorySettings(recent_messages=0))
    memory.observe(msg.user("I am amelia_davis_8890. Please cancel all my upcoming reservations."))
    memory.observe(msg.call("u", "get_user_details", {"user_id": "amelia_davis_8890"}))
    profile = {
        "name": {"first_name": "Amelia", "last_name": "Davis"},
        "reservations": ["8C8K4E", "UDMOP1", "XAZ3C0", "LU15PA", "MSJ4OA", "I6M8JQ", "4XGCCM"],
        "payment_methods": {
            method: {"source": method.rpartition("_")[0], "id": method}
            for method in (
                "gift_card_7397998",
                "gift_card_1647044",
                "credit_card_4074252",
                "credit_card_6738701",
                "credit_card_5799376",
                "gift_card_5251654",
            )
        },
    }
    memory.observe(msg.result("u", "get_user_details", profile))
    memory.observe(msg.call("r", "cancel_reservation", {"reservation_id": "8C8K4E"}))
    memory.observe(msg.result("r", "cancel_reservation", {"reservation_id": "8C8K4E", "status": "cancelled"}))
    kept_at = [
        budget
        for budget in range(60, 260)
        if next(d for d in memory.build(budget=budget).decisions if d.card_id == "c2").kept
    ]

    assert kept_at == list(range(kept_at[0], 260))  # more room never drops it: a cut fits its room
    assert kept_at[0] < 200  # cut to its first lines, well before it fits whole


def test_a_long_search_cut_to_its_share_names_the_rows_it_leaves_out(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(budget=600, recent_messages=0))
    memory.observe(msg.user("Find me a flight from DCA to JFK on 2024-07-01 that lands before the evening."))
    memory.observe(
        msg.call("s", "search_flights", {"origin": "DCA", "destination": "JFK", "date": "2024-07-01"})
    )
    flights = [
        {
            "flight_number": f"UA{1600 + i}",
            "departure": f"2024-07-01T{6 + i % 14:02d}:{(7 * i) % 60:02d}",
            "aircraft": ["A320", "B737 MAX 8", "E175"][i % 3],
            "seats_left": i % 9,
            "fare": 180.5 + 11 * i,
            "on_time_rate": 0.7 + (i % 3) / 10,
        }
        for i in range(30)
    ]
    memory.observe(msg.result("s", "search_flights", {"results": flights}))

    sent = memory_text(memory.build().messages)

    shown, _, hint = sent.partition(" (cut; not shown: ")
    assert "UA1600" in shown and "UA1615" not in shown  # the first rows in full
    assert "UA1615" in hint  # and the next flights by their numbers, to book or recall


def test_free_text_cut_to_the_budget_names_the_links_it_leaves_out(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(budget=200, recent_messages=0, left_out_share=0))
    memory.observe(msg.user("What changed in Acme Cloud's pricing? Read the sources."))
    memory.observe(msg.call("s", "web_search", {"query": "Acme Cloud pricing change"}))
    results = "\n".join(
        f"{i}. Acme Cloud pricing report {i}\nhttps://news.example.com/acme/report-{i}\n"
        f"The Team plan rose from $25 to $29 on 2026-03-{10 + i} for {1000 + i} buyers in region eu-{i}."
        for i in range(1, 7)
    )
    memory.observe(msg.result("s", "web_search", results))

    sent = memory_text(memory.build().messages)

    shown, _, hint = sent.partition(" (cut; not shown: ")
    assert "https://news.example.com/acme/report-1" in shown and "report-6" not in shown
    assert hint.startswith("https://news.example.com/acme/report-")  # links first: the pages to open
    assert "https://news.example.com/acme/report-6" in hint


def test_a_reservation_cut_short_names_the_flights_and_payments_its_lines_leave_out(
    make_memory, msg, memory_text
):
    memory = make_memory(settings=MemorySettings(recent_messages=0))
    memory.observe(msg.user("Please move my reservation 2FBBAH to economy."))
    memory.observe(msg.call("r", "get_reservation_details", {"reservation_id": "2FBBAH"}))
    legs = [("DEN", "PHL", "HAT080", 537), ("PHL", "DEN", "HAT076", 996), ("DEN", "MIA", "HAT255", 1440)]
    reservation = {
        "reservation_id": "2FBBAH",
        "user_id": "omar_davis_3817",
        "origin": "DEN",
        "destination": "DEN",
        "cabin": "business",
        "flights": [
            {"origin": o, "destination": d, "flight_number": f, "date": "2024-05-28", "price": p}
            for o, d, f, p in legs
        ],
        "payment_history": [{"payment_id": "gift_card_3481935", "amount": 4420}],
    }
    memory.observe(msg.result("r", "get_reservation_details", reservation))
    memory.observe(msg.user("Before that, what are the baggage rules?"))

    cut = [
        memory_text(memory.build(budget=budget).messages).partition(" (cut; not shown: ")
        for budget in range(60, 200)
    ]
    named = [(shown, hint.partition(")")[0].split()) for shown, found, hint in cut if found]

    assert {"HAT080", "gift_card_3481935"} <= {name for _, names in named for name in names}
    for shown, names in named:
        assert not any(name in shown for name in names)  # only what the lines leave out
        assert not shown.endswith("payment_id")  # not a table's header in place of its rows


def test_an_order_cut_to_its_share_shows_its_items_not_just_its_address(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(recent_messages=0))
    memory.observe(msg.user("I'd like to exchange the garden hose from order #W7181492 for a longer one."))
    memory.observe(msg.call("o", "get_order_details", {"order_id": "#W7181492"}))
    products = [("Garden Hose", "6679515468"), ("Desk Lamp", "6817146515"), ("Backpack", "2524789262")]
    order = {
        "order_id": "#W7181492",
        "user_id": "isabella_johansson_2152",
        "address": {
            "address1": "313 Chestnut Street",
            "address2": "Suite 537",
            "city": "Jacksonville",
            "country": "USA",
            "state": "FL",
            "zip": "32286",
        },
        "items": [
            {
                "name": name,
                "product_id": product,
                "item_id": f"{5753502325 + n}",
                "price": 96.35 + n,
                "options": {"length": "25ft", "material": "rubber", "color": "green"},
            }
            for n, (name, product) in enumerate(products)
        ],
        "status": "delivered",
    }
    memory.observe(msg.result("o", "get_order_details", order))

    sent = memory_text(memory.build(budget=130).messages)

    assert "(cut" in sent or "(more)" in sent  # the order does not fit whole
    assert "6679515468" in sent and "5753502325" in sent  # the hose's product and item ids


def test_a_result_cut_in_the_recent_window_takes_the_room_the_cards_leave(make_memory, msg):
    memory = make_memory(settings=MemorySettings(recent_messages=2))
    memory.observe(msg.user("Which items of order #W7181492 can I still exchange?"))
    memory.observe(msg.call("o", "get_order_details", {"order_id": "#W7181492"}))
    names = ["Garden Hose", "Desk Lamp", "Backpack", "Water Bottle", "Tea Kettle", "Yoga Mat", "Bookshelf"]
    order = {
        "order_id": "#W7181492",
        "address": {"address1": "313 Chestnut Street", "address2": "Suite 537", "city": "Jacksonville"},
        "items": [
            {
                "name": name,
                "product_id": f"{6679515468 + 7 * n}",
                "item_id": f"{5753502325 + n}",
                "price": 96 + n,
            }
            for n, name in enumerate(names)
        ],
        "status": "delivered",
    }
    memory.observe(msg.result("o", "get_order_details", order))

    built = memory.build(budget=200)

    sent = built.messages[-1]["content"]
    assert "(cut" in sent  # the order does not fit whole
    # nothing else needs the room: it shows rows, not only the ids of those it leaves out
    assert "Garden Hose" in sent and "Desk Lamp" in sent
    assert built.total_tokens <= 200


def test_a_trip_cut_to_its_share_keeps_its_flights_dates_over_a_payment_id(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(budget=176, recent_messages=0))
    memory.observe(msg.user("Please downgrade reservation GV1N64 to economy."))
    memory.observe(msg.call("r", "get_reservation_details", {"reservation_id": "GV1N64"}))
    legs = [("LAS", "DEN", "HAT003", "2024-05-19", 561), ("DEN", "LAS", "HAT290", "2024-05-20", 1339)]
    names = [
        ("Sophia", "Johansson", "1993-07-11"),
        ("James", "Patel", "1995-04-07"),
        ("Ava", "Smith", "1990-01-02"),
    ]
    reservation = {
        "reservation_id": "GV1N64",
        "user_id": "james_patel_9828",
        "flight_type": "round_trip",
        "cabin": "business",
        "flights": [
            {"origin": o, "destination": d, "flight_number": f, "date": day, "price": p}
            for o, d, f, day, p in legs
        ],
        "passengers": [{"first_name": f, "last_name": last, "dob": dob} for f, last, dob in names],
        "payment_history": [{"payment_id": "gift_card_1642017", "amount": 5700}],
        "created_at": "2024-05-03T05:35:00",
        "total_baggages": 3,
        "insurance": "no",
    }
    memory.observe(msg.result("r", "get_reservation_details", reservation))

    sent = memory_text(memory.build().messages)

    assert "(cut" in sent  # the reservation does not fit whole
    assert "HAT290 2024-05-20" in sent  # each flight with the date a change of it takes


@pytest.mark.parametrize("recent_messages", [0, 2])
def test_a_request_longer_than_half_the_budget_is_sent_cut_not_left_out(make_memory, msg, recent_messages):
    memory = make_memory(settings=MemorySettings(budget=400, recent_messages=recent_messages))
    clauses = " ".join(f"Clause {i}: a change fee of ${30 + i} applies." for i in range(600))
    memory.observe(msg.user(f"Does my fare allow a free change? Here are the fare rules. {clauses}"))
    memory.observe(msg.call("s", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
    memory.observe(
        msg.result("s", "get_reservation_details", {"reservation_id": "ZFA04Y", "cabin": "economy"})
    )

    built = memory.build()

    request = next(d for d in built.decisions if d.card_id == "c0")
    assert request.kept and request.tokens <= 200  # its first lines, with a hint to recall the rest
    assert "[c0] user: " in built.messages[0]["content"] and " (cut)" in built.messages[0]["content"]
    assert "cabin=economy" in "\n".join(str(m.get("content")) for m in built.messages)
    assert built.total_tokens <= 400


def _going_through_reservations(memory, msg) -> None:
    """An account listing five reservations, and the second one looked up: the agent has three
    still to go through."""
    memory.observe(msg.user("I'm amelia_davis_8890. Please cancel all my remaining reservations."))
    memory.observe(msg.call("u", "get_user_details", {"user_id": "amelia_davis_8890"}))
    account = {
        "user_id": "amelia_davis_8890",
        "name": {"first_name": "Amelia", "last_name": "Davis"},
        "payment_methods": {
            f"gift_card_{n}": {"source": "gift_card", "amount": n % 300} for n in (7397998, 1647044)
        },
        "reservations": ["8C8K4E", "UDMOP1", "XAZ3C0", "LU15PA", "MSJ4OA"],
    }
    memory.observe(msg.result("u", "get_user_details", account))
    for code, origin, numbers in (("8C8K4E", "BOS", (247, 193)), ("UDMOP1", "SFO", (110, 272, 301, 158))):
        memory.observe(msg.call(code, "get_reservation_details", {"reservation_id": code}))
        flights = [
            {
                "origin": origin,
                "destination": "DEN",
                "flight_number": f"HAT{n:03d}",
                "date": f"2024-05-{n % 28 + 1:02d}",
                "price": 100 + n,
            }
            for n in numbers
        ]
        passengers = [{"first_name": "Amelia", "last_name": "Davis", "dob": "1984-03-05"}]
        memory.observe(
            msg.result(
                code,
                "get_reservation_details",
                {
                    "reservation_id": code,
                    "user_id": "amelia_davis_8890",
                    "cabin": "business",
                    "flights": flights,
                    "passengers": passengers,
                    "insurance": "no",
                },
            )
        )


@pytest.mark.parametrize(  # (by value per token, the account's card is worth less than a reservation's)
    "selector", [HybridSelector(), TopKSelector(k=8)], ids=["value order", "top k"]
)
def test_a_result_in_the_recent_window_gives_way_to_a_more_valuable_card(
    make_memory, msg, memory_text, selector
):
    memory = make_memory(selector=selector, settings=MemorySettings(budget=211, recent_messages=2))
    _going_through_reservations(memory, msg)

    built = memory.build()

    assert "LU15PA" in memory_text(built.messages)  # the reservations still to go through
    newest = built.messages[-1]
    assert newest["role"] == "tool"
    assert "HAT110" in newest["content"] and newest["content"].endswith(("(cut)", "(more)"))  # it yielded
    assert built.total_tokens <= 211


def test_a_result_in_the_recent_window_is_sent_whole_when_the_cards_leave_room(make_memory, msg):
    memory = make_memory(settings=MemorySettings(budget=1200, recent_messages=2))
    _going_through_reservations(memory, msg)

    newest = memory.build().messages[-1]

    assert "2024-05-27" in newest["content"] and "372" in newest["content"]


def test_a_cut_names_a_left_out_row_whose_id_only_appears_inside_a_shown_value(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(recent_messages=0, left_out_share=0))
    memory.observe(msg.user("Any room for two nights from 2024-07-12?"))
    memory.observe(msg.call("h", "search_rooms", {"check_in": "2024-07-12", "nights": 2}))
    rooms = [
        {"room_id": f"{10 + i}", "view": ["sea", "garden", "city"][i % 3], "rate": f"{100 + 2 * i}.5"}
        for i in range(30)
    ]  # room 12 is also the day of the check-in; rooms 10 to 39 cost 100.5 to 158.5
    memory.observe(msg.result("h", "search_rooms", {"rooms": rooms}))

    cut = [
        memory_text(memory.build(budget=budget).messages).partition(" (cut; not shown: ")
        for budget in range(80, 300, 20)
    ]
    named = [(shown, hint.partition(")")[0].split()) for shown, found, hint in cut if found]

    assert named
    for shown, names in named:
        rows_shown = {line.split()[0] for line in shown.split("\n")[1:] if line[1:3].isdigit()}
        left_out = {str(10 + i) for i in range(30)} - rows_shown
        assert names and set(names) <= left_out  # only what the lines leave out
        if "12" in left_out:
            assert "12" in names  # left out, so named, though the check-in date shows its number
