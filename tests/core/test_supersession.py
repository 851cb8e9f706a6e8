"""Supersession: a newer result about the same entity replaces the older card's values."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import pytest

from damc_core import Card, DefaultEncoder, MemorySettings, Supersession, explain

BEFORE = {
    "reservation_id": "ZFA04Y",
    "user_id": "mia_li_3668",
    "origin": "JFK",
    "destination": "SEA",
    "cabin": "basic_economy",
    "total_baggages": 1,
    "status": "confirmed",
}
AFTER = {**BEFORE, "cabin": "business", "total_baggages": 2}


def look_up_twice(memory, msg):
    """Fetch ZFA04Y, upgrade it, fetch it again, then talk a bit so both results leave the recent window."""
    memory.observe(msg.user("What is in reservation ZFA04Y?"))
    memory.observe(msg.call("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
    old = memory.observe(msg.result("call_1", "get_reservation_details", BEFORE))
    memory.observe(msg.user("Upgrade it to business and add a bag."))
    memory.observe(msg.call("call_2", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
    new = memory.observe(msg.result("call_2", "get_reservation_details", AFTER))
    memory.observe(msg.assistant("Your reservation is now in business with 2 bags."))
    memory.observe(msg.user("Thanks! Anything else I should know?"))
    memory.observe(msg.assistant("No, that is all."))
    return old, new


def test_newer_result_for_the_same_reservation_supersedes_the_older_card(memory, msg):
    old, new = look_up_twice(memory, msg)

    assert memory.card(old.id).superseded_by == new.id
    assert memory.card(new.id).superseded_by is None
    assert ("ZFA04Y", "cabin") in new.entity_keys


def test_superseded_card_is_dropped_and_the_newer_value_is_sent(memory, msg, memory_text):
    old, new = look_up_twice(memory, msg)

    built = memory.build()

    fenced = memory_text(built.messages)
    assert f"[{new.id}]" in fenced
    assert "cabin=business" in fenced
    assert f"[{old.id}]" not in fenced
    assert "basic_economy" not in str(built.messages)
    (decision,) = [d for d in built.decisions if d.card_id == old.id]
    assert not decision.kept
    assert decision.reason == f"superseded by {new.id}"
    assert memory.recall(old.id)["content"]  # still recallable


def test_mark_mode_shows_the_superseded_card_marked(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(superseded="mark"))
    old, new = look_up_twice(memory, msg)

    built = memory.build()

    fenced = memory_text(built.messages)
    assert "cabin=business" in fenced
    old_lines = [line for line in fenced.splitlines() if f"[{old.id}]" in line]
    for line in old_lines:
        assert line.startswith(f"[{old.id}] (superseded by {new.id}) ")
    (decision,) = [d for d in built.decisions if d.card_id == old.id]
    assert decision.kept == bool(old_lines)


@pytest.mark.parametrize("superseded", ["drop", "mark"])
def test_marked_superseded_cards_compete_past_max_candidates(make_memory, msg, superseded):
    """Past ``max_candidates`` a decision values a shortlist: a marked card is on it by its
    prior, as any card; a dropped one takes no place on it."""
    memory = make_memory(settings=MemorySettings(superseded=superseded, max_candidates=12, budget=4000))
    old, new = look_up_twice(memory, msg)
    for n in range(20):  # small talk: more cards than max_candidates, the lookups far behind
        memory.observe(msg.user(f"And what about the weather, question {n}?"))
        memory.observe(msg.assistant("Sunny."))

    built = memory.build()

    considered = {d.card_id for d in built.decisions}
    assert (old.id in considered) is (superseded == "mark")
    if superseded == "mark":
        assert f"[{old.id}] (superseded by {new.id}) " in built.memory


def test_result_about_another_reservation_supersedes_nothing(memory, msg):
    memory.observe(msg.call("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
    first = memory.observe(msg.result("call_1", "get_reservation_details", BEFORE))
    memory.observe(msg.call("call_2", "get_reservation_details", {"reservation_id": "NO6JO3"}))
    memory.observe(msg.result("call_2", "get_reservation_details", {**BEFORE, "reservation_id": "NO6JO3"}))

    assert memory.card(first.id).superseded_by is None


def test_json_rpc_answers_to_other_requests_supersede_nothing_whatever_their_request_ids(memory):
    """A JSON-RPC client may number every request 1: that id is the request's, not a record's."""

    def answer(result: dict) -> dict:
        return {"jsonrpc": "2.0", "id": 1, "result": result}

    paris = memory.observe_tool("rpc", {"method": "weather", "city": "Paris"}, answer({"temperature": 20}))
    memory.observe_tool("rpc", {"method": "weather", "city": "London"}, answer({"temperature": 15}))
    refused = memory.observe_tool(
        "rpc",
        {"method": "book", "flight": "HAT1"},
        {"jsonrpc": "2.0", "id": 1, "error": {"message": "sold out"}},
    )

    assert memory.card(paris.id).superseded_by is None
    assert (
        "temperature=20" in memory.card(paris.id).summary and "jsonrpc" not in memory.card(paris.id).summary
    )
    assert refused.kind.name == "TOOL_ERROR" and "sold out" in refused.summary


def test_another_order_of_the_same_customer_supersedes_nothing_and_dates_nothing(memory, msg):
    def order(number: str, status: str) -> dict:
        return {"customer_id": "C-77", "order_id": number, "status": status, "total": 40}

    first = memory.observe_tool("get_order", {"order_id": "O-1"}, order("O-1", "delivered"))
    memory.observe_tool("get_order", {"order_id": "O-2"}, order("O-2", "cancelled"))

    kept = memory.card(first.id)
    assert kept.superseded_by is None and kept.stale_facts == ()
    assert "O-1" in memory.build(budget=3000).memory


def test_a_status_looked_up_by_the_id_a_booking_returned_dates_the_booking(memory, msg):
    booked = memory.observe_tool(
        "book_hotel",
        {"hotel_id": "H1", "offer_id": "OF7"},
        {"hotel_booking_id": "HB9", "status": "confirmed"},
    )
    memory.observe_tool(
        "get_booking_status", {"booking_id": "HB9"}, {"hotel_booking_id": "HB9", "status": "cancelled"}
    )

    assert memory.card(booked.id).superseded_by is not None


def test_a_customers_record_re_quotes_none_of_its_orders(memory, msg, memory_text):
    orders = [
        {"order_id": f"ORD-{n}", "customer_id": "cust_4821", "status": status, "total": 10.0 * n}
        for n, status in enumerate(["delivered", "cancelled", "pending"], start=1)
    ]
    listed = memory.observe_tool("list_orders", {"customer_id": "cust_4821"}, orders)
    memory.observe_tool(
        "get_customer", {"customer_id": "cust_4821"}, {"customer_id": "cust_4821", "status": "active"}
    )

    assert memory.card(listed.id).stale_rows == () and memory.card(listed.id).stale_cells == ()


def test_a_limit_that_equals_a_product_number_re_quotes_nothing(memory, msg):
    products = [
        {"product_id": 10, "name": "MX", "price": 49.99},
        {"product_id": 11, "name": "G3", "price": 29.99},
    ]
    listed = memory.observe_tool("list_products", {"category": "mice"}, products)
    memory.observe_tool(
        "search_hotels", {"city": "Paris", "max_results": 10}, [{"hotel": "Ritz", "price": 900}]
    )

    assert memory.card(listed.id).stale_rows == () and memory.card(listed.id).stale_cells == ()


def test_result_with_fewer_fields_does_not_supersede_a_fuller_one(memory, msg):
    memory.observe(msg.call("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
    full = memory.observe(msg.result("call_1", "get_reservation_details", BEFORE))
    memory.observe(msg.call("call_2", "update_reservation_baggages", {"reservation_id": "ZFA04Y"}))
    memory.observe(
        msg.result("call_2", "update_reservation_baggages", {"reservation_id": "ZFA04Y", "total_baggages": 2})
    )

    assert memory.card(full.id).superseded_by is None


def test_repeated_search_with_the_same_arguments_supersedes_the_earlier_one(memory, msg, airline_messages):
    search_call, search_result = airline_messages[4], airline_messages[5]
    memory.observe(search_call)
    first = memory.observe(search_result)
    memory.observe({**search_call, "tool_calls": [{**search_call["tool_calls"][0], "id": "call_again"}]})
    second = memory.observe({**search_result, "tool_call_id": "call_again"})

    assert memory.card(first.id).superseded_by == second.id


@pytest.mark.parametrize(("newer_trust", "superseded"), [(0.9, True), (0.8, True), (0.1, False)])
def test_trust_breaks_ties_between_cards_of_the_same_moment(memory, msg, newer_trust, superseded):
    memory.observe(msg.call("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
    old = memory.observe(msg.result("call_1", "get_reservation_details", BEFORE))
    newer = memory.observe(msg.result("call_1", "get_reservation_details", AFTER))  # same clock reading
    assert old.trust == 0.8

    chosen = Supersession().superseded(replace(newer, trust=newer_trust), [old])

    assert (chosen == [old]) is superseded


@dataclass(frozen=True)
class PartnerTrustedLess:
    """The default encoder, with a partner's feed trusted less than the airline's own API."""

    inner: DefaultEncoder = field(default_factory=DefaultEncoder)

    def encode(self, message, **context) -> Card:
        card = self.inner.encode(message, **context)
        return replace(card, trust=0.3) if card.tool_name == "partner_flight_status" else card


def ask_both_for_the_status(memory, msg):
    """One step asks the airline and a partner for HAT069's status; they disagree. Returns the
    airline's and the partner's result cards."""
    memory.observe(msg.user("Is HAT069 on time?"))
    memory.observe(
        msg.calls(
            [
                ("a1", "airline_flight_status", {"flight_number": "HAT069"}),
                ("p1", "partner_flight_status", {"flight_number": "HAT069"}),
            ]
        )
    )
    airline = memory.observe(
        msg.result("a1", "airline_flight_status", {"flight_number": "HAT069", "status": "on time"})
    )
    partner = memory.observe(
        msg.result("p1", "partner_flight_status", {"flight_number": "HAT069", "status": "delayed"})
    )
    return airline, partner


def test_the_less_trusted_of_two_answers_at_once_is_the_one_superseded(make_memory, msg, memory_text):
    memory = make_memory(encoder=PartnerTrustedLess(), settings=MemorySettings(recent_messages=0))
    airline, partner = ask_both_for_the_status(memory, msg)

    assert memory.card(partner.id).superseded_by == airline.id
    assert memory.card(airline.id).superseded_by is None and memory.card(airline.id).stale_facts == ()
    built = memory.build(budget=2000)
    fenced = memory_text(built.messages)
    assert f"[{airline.id}] airline_flight_status(flight_number=HAT069) -> status=on time" in fenced
    assert "delayed" not in fenced
    assert f"superseded by {airline.id}" in explain(built)
    assert "delayed" in memory.recall(partner.id)["content"]


def test_trust_decides_between_the_results_of_one_step_however_far_apart_the_clock_read_them(
    make_memory, msg, memory_text
):
    """Parallel calls of one assistant message answer at one moment: a real clock reads their
    results microseconds apart, and a third call's result may come between them."""
    memory = make_memory(
        encoder=PartnerTrustedLess(), clock=time.time, settings=MemorySettings(recent_messages=0)
    )
    memory.observe(msg.user("Is HAT069 on time?"))
    memory.observe(
        msg.calls(
            [
                ("a1", "airline_flight_status", {"flight_number": "HAT069"}),
                ("w1", "get_weather", {"airport": "JFK"}),
                ("p1", "partner_flight_status", {"flight_number": "HAT069"}),
            ]
        )
    )
    airline = memory.observe(
        msg.result("a1", "airline_flight_status", {"flight_number": "HAT069", "status": "on time"})
    )
    memory.observe(msg.result("w1", "get_weather", {"airport": "JFK", "forecast": "rain"}))
    partner = memory.observe(
        msg.result("p1", "partner_flight_status", {"flight_number": "HAT069", "status": "delayed"})
    )

    assert memory.card(partner.id).superseded_by == airline.id
    assert memory.card(airline.id).superseded_by is None
    fenced = memory_text(memory.build(budget=2000).messages)
    assert "status=on time" in fenced and "delayed" not in fenced


def test_a_superseded_result_of_the_recent_window_is_marked(make_memory, msg):
    """Both results of the step go to the model as tool messages (each call needs its answer):
    the one set aside says so, rather than contradicting the other unmarked."""
    memory = make_memory(encoder=PartnerTrustedLess(), clock=time.time)
    airline, partner = ask_both_for_the_status(memory, msg)

    sent = [m["content"] for m in memory.build(budget=2000).messages if m["role"] == "tool"]

    assert sent == [
        f"[{airline.id}] -> status=on time",
        f"[{partner.id}] (superseded by {airline.id}) -> status=delayed",
    ]


def test_a_result_of_a_later_step_supersedes_a_more_trusted_one_of_an_earlier_step(make_memory, msg):
    memory = make_memory(encoder=PartnerTrustedLess(), clock=time.time)
    memory.observe_tool(
        "airline_flight_status", {"flight_number": "HAT069"}, {"flight_number": "HAT069", "status": "on time"}
    )
    partner = memory.observe_tool(
        "partner_flight_status", {"flight_number": "HAT069"}, {"flight_number": "HAT069", "status": "delayed"}
    )

    assert partner.superseded_by is None
    assert memory.card("c1").superseded_by == partner.id  # newer news, though from a less trusted source


SEARCH = [
    {"flight_number": "HAT028", "origin": "MCO", "destination": "BOS", "price": 1859},
    {"flight_number": "HAT277", "origin": "BOS", "destination": "CLT", "price": 1679},
]


def test_a_newer_quote_for_a_flight_points_the_older_row_to_it(memory, msg, memory_text):
    memory.observe(msg.call("s1", "search_direct_flight", {"origin": "MCO", "destination": "BOS"}))
    search = memory.observe(msg.result("s1", "search_direct_flight", SEARCH))
    memory.observe(msg.call("p1", "get_flight_price", {"flight_number": "HAT028"}))
    quote = memory.observe(msg.result("p1", "get_flight_price", {"flight_number": "HAT028", "price": 1999}))

    assert memory.card(search.id).stale_rows == (("hat028", quote.id),)
    fenced = memory_text(memory.build(budget=2000).messages)
    assert f"see {quote.id}" in fenced
    assert "1679" in fenced and "1859" not in fenced


def test_a_record_that_only_shares_an_airport_re_quotes_nothing(memory, msg, memory_text):
    memory.observe(msg.call("s1", "search_direct_flight", {"origin": "MCO", "destination": "BOS"}))
    search = memory.observe(msg.result("s1", "search_direct_flight", SEARCH))
    memory.observe(msg.call("r1", "get_reservation_details", {"reservation_id": "LQ940Q"}))
    memory.observe(
        msg.result(
            "r1",
            "get_reservation_details",
            {"reservation_id": "LQ940Q", "origin": "MCO", "destination": "PHX", "price": 103},
        )
    )

    assert memory.card(search.id).stale_rows == ()
    assert "1859" in memory_text(memory.build(budget=2000).messages)


def test_a_booking_of_a_flight_re_quotes_none_of_the_flights_values(memory, msg, memory_text):
    flights = [{**row, "status": "available"} for row in SEARCH]
    memory.observe(msg.call("s1", "search_direct_flight", {"origin": "MCO", "destination": "BOS"}))
    search = memory.observe(msg.result("s1", "search_direct_flight", flights))
    memory.observe(msg.call("b1", "book_reservation", {"user_id": "mia_li_3668", "flight_number": "HAT028"}))
    memory.observe(
        msg.result(
            "b1",
            "book_reservation",
            {"reservation_id": "ZFA04Y", "flight_number": "HAT028", "status": "confirmed", "price": 1859},
        )
    )

    # the reservation's status is the booking's; the flight is still available at its price
    assert memory.card(search.id).stale_rows == () and memory.card(search.id).stale_cells == ()
    fenced = memory_text(memory.build(budget=2000).messages)
    assert "all status=available" in fenced and "HAT028 MCO BOS 1859" in fenced


PILLOW = {
    "product_id": "7359931509",
    "title": "Voyager Neck Pillow Plus",
    "variants": [
        {"item_id": "4530077987", "options": {"color": "navy"}, "price": 326.44, "available": True},
        {"item_id": "9777315623", "options": {"color": "grey"}, "price": 356.33, "available": True},
    ],
}


def test_a_product_looked_up_again_with_one_variant_re_quotes_that_variants_row(memory, msg, memory_text):
    """The shop answers a second lookup with the one variant whose price changed."""
    memory.observe(msg.call("p1", "get_product_details", {"product_id": "7359931509"}))
    first = memory.observe(msg.result("p1", "get_product_details", PILLOW))
    memory.observe(msg.call("p2", "get_product_details", {"product_id": "7359931509"}))
    changed = {**PILLOW, "variants": [{**PILLOW["variants"][1], "price": 310.57, "price_updated": True}]}
    again = memory.observe(msg.result("p2", "get_product_details", changed))

    assert memory.card(first.id).stale_rows == (("9777315623", again.id),)
    fenced = memory_text(memory.build(budget=2000, recent_messages=0).messages)
    assert "310.57" in fenced and "356.33" not in fenced


def test_an_item_added_to_a_cart_re_quotes_none_of_its_product_row(memory, msg, memory_text):
    memory.observe(msg.call("p1", "get_product_details", {"product_id": "7359931509"}))
    product = memory.observe(msg.result("p1", "get_product_details", PILLOW))
    memory.observe(msg.call("a1", "add_to_cart", {"item_id": "9777315623", "quantity": 2}))
    cart = {
        "cart_id": "CARTFGP5TQFA",
        "items": [{"item_id": "9777315623", "quantity": 2, "unit_price": 356.33}],
    }
    memory.observe(msg.result("a1", "add_to_cart", cart))

    # the cart's unit price is what the item was added at, not a newer price of the product
    assert memory.card(product.id).stale_rows == () and memory.card(product.id).stale_cells == ()


SEATS = [
    {"flight_number": f"HAT00{n}", "status": "available", "available_seats": 5, "price": 100 + n}
    for n in range(1, 5)
]


def test_a_seat_count_re_quoted_alone_points_only_that_cell_to_the_newer_card(memory, msg, memory_text):
    memory.observe(msg.call("s1", "search_direct_flight", {"origin": "JFK", "destination": "SEA"}))
    search = memory.observe(msg.result("s1", "search_direct_flight", SEATS))
    memory.observe(msg.call("q1", "get_seats", {"flight_number": "HAT002"}))
    seats = memory.observe(msg.result("q1", "get_seats", {"flight_number": "HAT002", "available_seats": 2}))

    assert memory.card(search.id).stale_cells == (("hat002", "available_seats", seats.id),)
    fenced = memory_text(memory.build(budget=2000).messages)
    assert f'HAT002 "see {seats.id}" 102' in fenced  # the price was not re-quoted: it stays


def test_a_flight_named_in_many_cards_since_its_search_is_still_re_quoted(memory, msg):
    memory.observe(msg.call("s1", "search_direct_flight", {"origin": "JFK", "destination": "SEA"}))
    search = memory.observe(msg.result("s1", "search_direct_flight", SEATS))
    for n in range(10):  # the dialogue keeps naming HAT001
        memory.observe(msg.call(f"n{n}", "get_flight_notes", {"flight_number": "HAT001"}))
        memory.observe(
            msg.result(f"n{n}", "get_flight_notes", {"flight_number": "HAT001", "note": f"gate B{n}"})
        )
    memory.observe(msg.call("q1", "get_flight_status", {"flight_number": "HAT001"}))
    quote = memory.observe(
        msg.result(
            "q1",
            "get_flight_status",
            {"flight_number": "HAT001", "status": "sold out", "available_seats": 0, "price": 999},
        )
    )

    assert memory.card(search.id).stale_rows == (("hat001", quote.id),)


def test_the_same_failed_call_repeated_keeps_only_its_newest_error(memory, msg, memory_text):
    booking = {"user_id": "mia_li_3668", "flight_number": "HAT001", "date": "2024-05-20"}
    errors = []
    for n in range(5):
        memory.observe(msg.call(f"b{n}", "book_reservation", booking))
        errors.append(
            memory.observe(msg.result(f"b{n}", "book_reservation", "Error: flight HAT001 not available"))
        )

    assert [memory.card(e.id).superseded_by for e in errors] == [e.id for e in errors[1:]] + [None]
    assert str(memory.build().messages).count("not available") == 1  # the newest, in the recent window


def test_the_same_stock_on_another_day_is_another_record(memory, msg, memory_text):
    memory.observe(msg.user("How did AAPL close on 2024-05-20 and on 2024-05-21?"))
    first = memory.observe_tool(
        "get_daily_price",
        {"symbol": "AAPL", "date": "2024-05-20"},
        {"symbol": "AAPL", "date": "2024-05-20", "close": 191.04},
    )
    memory.observe_tool(
        "get_daily_price",
        {"symbol": "AAPL", "date": "2024-05-21"},
        {"symbol": "AAPL", "date": "2024-05-21", "close": 192.35},
    )

    assert memory.card(first.id).superseded_by is None and memory.card(first.id).stale_facts == ()
    fenced = memory_text(memory.build(budget=2000, recent_messages=0).messages)
    assert "close=191.04" in fenced and "close=192.35" in fenced


def test_a_booking_moved_to_another_day_supersedes_its_first_date(memory, msg):
    def moved(day: str) -> dict:
        return {"hotel_booking_id": "HB9", "check_in": day, "status": "confirmed"}

    first = memory.observe_tool(
        "update_booking", {"booking_id": "HB9", "check_in": "2024-06-01"}, moved("2024-06-01")
    )
    second = memory.observe_tool(
        "update_booking", {"booking_id": "HB9", "check_in": "2024-06-08"}, moved("2024-06-08")
    )

    assert memory.card(first.id).superseded_by == second.id


def test_a_flights_seats_on_another_day_re_quote_none_of_its_search(memory, msg, memory_text):
    memory.observe(
        msg.call("s1", "search_direct_flight", {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"})
    )
    search = memory.observe(msg.result("s1", "search_direct_flight", SEATS))
    memory.observe(msg.call("q1", "get_seats", {"flight_number": "HAT002", "date": "2024-05-27"}))
    memory.observe(msg.result("q1", "get_seats", {"flight_number": "HAT002", "available_seats": 0}))

    assert memory.card(search.id).stale_cells == () and memory.card(search.id).stale_rows == ()
    fenced = memory_text(memory.build(budget=2000).messages)
    assert "all status=available, available_seats=5" in fenced and "HAT002 102" in fenced


def test_a_call_that_failed_and_then_succeeded_keeps_only_its_success(memory, msg, memory_text):
    booking = {"user_id": "mia_li_3668", "flight_number": "HAT069", "date": "2024-05-20"}
    memory.observe(msg.user("Book HAT069 on 2024-05-20 for me."))
    memory.observe(msg.call("b1", "book_reservation", booking))
    failed = memory.observe(msg.result("b1", "book_reservation", "Error: payment service timed out"))
    memory.observe(msg.call("b2", "book_reservation", booking))
    booked = memory.observe(
        msg.result("b2", "book_reservation", {"reservation_id": "ZFA04Y", "status": "confirmed"})
    )

    assert memory.card(failed.id).superseded_by == booked.id
    built = memory.build(budget=2000, recent_messages=0)
    fenced = memory_text(built.messages)
    assert "reservation_id=ZFA04Y" in fenced and "timed out" not in fenced
    assert f"superseded by {booked.id}" in explain(built)
    assert "timed out" in memory.recall(failed.id)["content"]


def test_a_reservation_looked_up_again_in_lower_case_supersedes_the_first_lookup(memory, msg):
    first = memory.observe_tool("get_reservation_details", {"reservation_id": "ZFA04Y"}, BEFORE)
    again = memory.observe_tool("get_reservation_details", {"reservation_id": "zfa04y"}, AFTER)

    assert memory.card(first.id).superseded_by == again.id
    assert "basic_economy" not in memory.build(budget=2000, recent_messages=0).memory


def test_a_customers_status_dates_nothing_of_an_order_that_names_the_customer_first(memory, msg, memory_text):
    order = memory.observe_tool(
        "get_order",
        {"order_id": "O-1"},
        {"customer_id": "C-77", "order_id": "O-1", "status": "delivered", "total": 40},
    )
    memory.observe_tool(
        "get_customer",
        {"customer_id": "C-77"},
        {"customer_id": "C-77", "name": "Ann Lee", "status": "active"},
    )

    assert ("O-1", "status") in order.entity_keys
    assert memory.card(order.id).stale_facts == ()
    assert "status=delivered" in memory_text(memory.build(budget=2000, recent_messages=0).messages)


def test_a_status_updated_twice_points_the_first_lookup_to_the_newest_update(memory, msg, memory_text):
    order = memory.observe_tool(
        "get_order", {"order_id": "O-1"}, {"order_id": "O-1", "status": "pending", "total": 40}
    )
    first = memory.observe_tool(
        "set_order_status",
        {"order_id": "O-1", "to": "processing"},
        {"order_id": "O-1", "status": "processing"},
    )
    second = memory.observe_tool(
        "set_order_status", {"order_id": "O-1", "to": "shipped"}, {"order_id": "O-1", "status": "shipped"}
    )

    assert memory.card(first.id).superseded_by == second.id
    fenced = memory_text(memory.build(budget=2000, recent_messages=0).messages)
    assert f"[{order.id}] get_order(order_id=O-1) -> status=see {second.id}; total=40" in fenced
    assert f"[{first.id}]" not in fenced and "status=shipped" in fenced


def test_a_customer_and_an_order_with_the_same_number_are_two_records(memory, msg, memory_text):
    customer = memory.observe_tool(
        "get_customer", {"customer_id": 7}, {"id": 7, "name": "Ann Lee", "status": "active"}
    )
    order = memory.observe_tool(
        "get_order", {"order_id": 7}, {"id": 7, "name": "Spring order", "status": "shipped", "total": 30}
    )
    cancelled = memory.observe_tool("cancel_order", {"order_id": 7}, {"order_id": 7, "status": "cancelled"})

    assert memory.card(customer.id).superseded_by is None and memory.card(customer.id).stale_facts == ()
    assert memory.card(order.id).stale_facts == (("status", cancelled.id),)
    fenced = memory_text(memory.build(budget=2000, recent_messages=0).messages)
    assert "name=Ann Lee; status=active" in fenced


def test_records_of_two_tools_asked_for_the_same_bare_id_are_two_records(memory, msg):
    customer = memory.observe_tool("get_customer", {"id": 7}, {"id": 7, "status": "active"})
    memory.observe_tool("get_order", {"id": 7}, {"id": 7, "status": "shipped"})

    assert memory.card(customer.id).superseded_by is None


def test_a_customers_number_re_quotes_no_order_of_that_number_in_a_list(memory, msg, memory_text):
    orders = [
        {"order_id": 1001, "status": "pending", "total": 5},
        {"order_id": 1002, "status": "shipped", "total": 9},
    ]
    listed = memory.observe_tool("list_orders", {"customer_id": 1001}, orders)
    memory.observe_tool(
        "get_customer", {"customer_id": 1001}, {"id": 1001, "name": "Ann Lee", "status": "active"}
    )

    assert memory.card(listed.id).stale_cells == () and memory.card(listed.id).stale_rows == ()
    assert "1001 pending 5" in memory_text(memory.build(budget=2000, recent_messages=0).messages)

    status = memory.observe_tool("get_order_status", {"order_id": 1001}, {"status": "shipped"})

    assert memory.card(listed.id).stale_cells == (("1001", "status", status.id),)


def stripe_invoices(status: str, *invoice_ids: str) -> dict:
    """A page of Stripe's ``GET /v1/invoices?status=...``: its ``url`` is the endpoint's."""
    invoices = [
        {"id": invoice, "object": "invoice", "amount_due": 4200, "currency": "usd", "status": status}
        for invoice in invoice_ids
    ]
    return {"object": "list", "url": "/v1/invoices", "has_more": False, "data": invoices}


def test_a_page_of_another_query_of_the_same_list_supersedes_nothing(memory, msg, memory_text, clock):
    memory.observe(msg.user("Which invoices are open, and which were paid?"))
    memory.observe(msg.call("call_1", "list_invoices", {"status": "open"}))
    first = memory.observe(msg.result("call_1", "list_invoices", stripe_invoices("open", "in_1MtHbE")))
    clock.advance(60)
    memory.observe(msg.call("call_2", "list_invoices", {"status": "paid"}))
    memory.observe(msg.result("call_2", "list_invoices", stripe_invoices("paid", "in_1NuKcF")))

    assert memory.card(first.id).superseded_by is None
    assert "in_1MtHbE" in memory_text(memory.build(budget=2000).messages)


def test_a_balance_is_the_account_s_record_not_its_currency_s(memory, msg):
    def balance(account: str, amount: str) -> dict:  # a JSON-RPC 2.0 answer, as a wallet service sends it
        return {
            "jsonrpc": "2.0",
            "result": {"balance": amount, "currency": "EUR", "account_id": account},
            "id": 1,
        }

    memory.observe(msg.call("call_1", "get_balance", {}))
    first = memory.observe(msg.result("call_1", "get_balance", balance("acc_990", "1520.75")))
    memory.observe(msg.call("call_2", "get_balance", {"wallet": "savings"}))
    memory.observe(msg.result("call_2", "get_balance", balance("acc_991", "80.00")))

    assert first.entity_keys[0] == ("acc_990", "balance")
    assert memory.card(first.id).superseded_by is None
