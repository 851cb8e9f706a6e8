"""Compression: templates per card kind, detail levels, focused tables, the LLM summarizer option."""

from __future__ import annotations

import pytest
from conftest import FLIGHTS

from damc_core import ConfigError, DecisionFocus, MemorySettings, SummarizingCompressor, TemplateCompressor
from damc_core.assemble import fence_memory

LONG_TEXT = (
    "The hotel Maris Lodge offers rooms from 2024-06-01 to 2024-06-05. "
    "Breakfast is served daily and the staff is friendly. "
    "Booking reference HX-88213 must be quoted at check-in. "
    "The lobby was renovated recently and guests enjoy the view. " * 3
)


class RecordingSummarizer:
    """A fake LLM: returns a fixed summary and records every request it received."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.requests: list[tuple[str, str]] = []

    def summarize(self, text: str, *, instructions: str) -> str:
        self.requests.append((text, instructions))
        return self.reply


def test_every_rendering_starts_with_the_card_id(memory, airline_messages):
    for message in airline_messages:
        memory.observe(message)
    compressor = TemplateCompressor()

    for card in memory.cards():
        for detail in ("full", "key", "skeleton"):
            assert compressor.render(card, detail=detail).startswith(f"[{card.id}]")


def test_key_detail_drops_free_text_but_keeps_identifiers_and_short_values(memory, msg):
    memory.observe(msg.call("c1", "get_user_details", {"user_id": "mia_li_3668"}))
    card = memory.observe(
        msg.result(
            "c1",
            "get_user_details",
            {
                "address": {"address1": "975 Sunset Drive", "city": "Austin"},
                "dob": "1990-04-05",
                "reservations": ["NO6JO3", "AIXC49"],
                "note": "Prefers aisle seats on long flights",
                "email": "mia.li@example.com",
            },
        )
    )
    compressor = TemplateCompressor()

    full, key = compressor.render(card), compressor.render(card, detail="key")
    assert "aisle seats" in full and "mia.li@example.com" in full
    assert "aisle seats" not in key and "mia.li@example.com" not in key
    assert all(v in key for v in ("975 Sunset Drive", "1990-04-05", "NO6JO3", "AIXC49"))
    assert key.endswith(" (more)") and not full.endswith(" (more)")  # the model can recall the rest


def test_key_detail_keeps_option_columns_whose_values_are_a_few_words(memory, msg):
    variants = [
        {
            "item_id": "7706410293",
            "switch": "clicky",
            "size": "full size",
            "review": "Loud but lovely to type on",
        },
        {
            "item_id": "8484921793",
            "switch": "linear",
            "size": "80%",
            "review": "Quiet, smooth, a little mushy",
        },
    ]
    memory.observe(msg.call("c1", "get_product_details", {"product_id": "1656367028"}))
    card = memory.observe(msg.result("c1", "get_product_details", {"variants": variants}))

    key = TemplateCompressor().render(card, detail="key")

    assert 'clicky "full size"' in key and "80%" in key
    assert "mushy" not in key


def test_a_long_table_is_cut_to_the_rows_in_focus_with_a_recall_hint(memory, msg):
    rows = [{"flight_number": f"HAT{100 + i}", "price": 100 + i} for i in range(20)]
    memory.observe(msg.call("c1", "search", {"date": "2024-05-20"}))
    card = memory.observe(msg.result("c1", "search", rows))

    text = TemplateCompressor().render(card, focus=DecisionFocus(terms=frozenset({"hat113"})))

    assert "HAT113" in text and "HAT101" not in text
    assert text.startswith(f"[{card.id}]") and text.endswith(" more rows)")  # recall(its id) has them


def test_table_cells_are_space_separated_and_quoted_when_they_hold_a_space_or_are_empty(memory, msg):
    memory.observe(msg.call("c1", "search", {"date": "2024-05-20"}))
    plain = memory.observe(
        msg.result("c1", "search", [{"flight": "HAT101", "seats": 3}, {"flight": "HAT102", "seats": 0}])
    )
    memory.observe(msg.call("c2", "hotels", {"city": "Austin"}))
    spaced = memory.observe(
        msg.result(
            "c2",
            "hotels",
            [
                {"name": "Maris Lodge", "stars": 4, "note": ""},
                {"name": "Inn", "stars": 3, "note": 'say "hi"'},
            ],
        )
    )

    compressor = TemplateCompressor()
    assert "\n HAT101 3\n HAT102 0" in compressor.render(plain)
    assert '\n "Maris Lodge" 4 ""\n Inn 3 "say \\"hi\\""' in compressor.render(spaced)


def test_a_category_a_cell_starts_with_is_said_once_but_numbers_and_codes_are_all_kept(memory):
    methods = [
        {"id": "credit_card_4421486", "source": "credit_card", "last_four": "7447"},
        {"id": "gift_card_7359776", "source": "gift_card", "last_four": ""},
    ]
    orders = [{"item": "pen", "quantity": 2, "price": 2.5}, {"item": "ink", "quantity": 1, "price": 1.99}]
    flights = [{"flight_number": "HAT001", "fare_code": "HAT001-Y", "seats": 20, "departs": "20:00:00"}]

    cards = [
        memory.observe_tool(name, {}, rows) for name, rows in (("m", methods), ("o", orders), ("f", flights))
    ]

    paying, ordering, flying = (TemplateCompressor().render(card) for card in cards)
    assert "source" not in paying and "credit_card_4421486" in paying  # the id says the source
    assert "quantity" in ordering and "\n pen 2 2.5" in ordering
    assert "flight_number fare_code seats departs" in flying and "HAT001 HAT001-Y 20 20:00:00" in flying


def test_a_skeleton_keeps_identifiers_and_statuses_and_drops_the_rest(memory, msg):
    memory.observe(msg.call("c1", "book_hotel", {"hotel": "Maris Lodge", "nights": 3}))
    card = memory.observe(
        msg.result(
            "c1",
            "book_hotel",
            {"booking_id": "HB-44817", "status": "confirmed", "nightly_rate": 129, "breakfast": "included"},
        )
    )

    skeleton = TemplateCompressor().render(card, detail="skeleton")

    assert "HB-44817" in skeleton and "confirmed" in skeleton
    assert "129" not in skeleton and "included" not in skeleton
    assert skeleton.startswith(f"[{card.id}]") and skeleton.endswith(" (more)")


def test_a_skeleton_of_free_text_lists_the_links_past_its_opening(memory, msg):
    results = "\n\n".join(
        f"{i}. Acme Cloud pricing, source {i}: a long snippet about plans, seats and annual billing.\n"
        f"https://news.example.com/acme/pricing-story-{i}/"
        for i in range(1, 7)
    )
    memory.observe(msg.call("c1", "web_search", {"query": "Acme Cloud pricing"}))
    card = memory.observe(msg.result("c1", "web_search", results))

    skeleton = TemplateCompressor().render(card, detail="skeleton")

    opening, _, also = skeleton.partition(" | also: ")
    assert "https://news.example.com/acme/pricing-story-1/" in opening
    assert "https://news.example.com/acme/pricing-story-6/" in also  # the one the agent may open next
    assert "pricing-story-1" not in also and skeleton.endswith(" (more)")


@pytest.mark.parametrize(
    ("dates", "shown"),
    [(["2024-05-22", "2024-05-22"], True), (["2024-05-22", "2024-05-25"], False)],
    ids=["one-way legs", "round trip"],
)
def test_a_skeleton_keeps_the_date_every_flight_of_a_reservation_shares(memory, msg, dates, shown):
    memory.observe(msg.call("r", "get_reservation_details", {"reservation_id": "M20IZO"}))
    flights = [
        {"origin": "JFK", "destination": "ATL", "flight_number": "HAT268", "date": dates[0], "price": 160},
        {"origin": "ATL", "destination": "MCO", "flight_number": "HAT010", "date": dates[1], "price": 98},
    ]
    card = memory.observe(msg.result("r", "get_reservation_details", {"flights": flights}))

    skeleton = TemplateCompressor().render(card, detail="skeleton")

    assert "HAT268" in skeleton and "HAT010" in skeleton and "160" not in skeleton
    assert ("all date=2024-05-22" in skeleton) is shown  # one value for the table, not one per row


def test_a_skeleton_keeps_a_list_of_identifiers_the_task_may_go_through(memory, msg):
    memory.observe(msg.call("u", "get_user_details", {"user_id": "amelia_davis_8890"}))
    profile = {
        "address": {"address1": "442 Sunset Drive", "city": "San Diego", "zip": "92125"},
        "membership": "silver",
        "reservations": ["8C8K4E", "UDMOP1", "XAZ3C0"],
    }
    card = memory.observe(msg.result("u", "get_user_details", profile))

    skeleton = TemplateCompressor().render(card, detail="skeleton")

    assert "reservations=[8C8K4E, UDMOP1, XAZ3C0]" in skeleton  # each one cancelled or changed next
    assert "Sunset" not in skeleton and "silver" not in skeleton


def test_a_skeleton_keeps_the_names_a_record_is_called_by(memory, msg):
    memory.observe(msg.call("u", "get_user_details", {"user_id": "mia_li_3668"}))
    profile = {
        "name": {"first_name": "Mia", "last_name": "Li"},
        "address": {"address1": "975 Sunset Drive", "city": "Austin"},
        "membership": "gold",
        "reservations": ["NO6JO3", "AIXC49"],
    }
    card = memory.observe(msg.result("u", "get_user_details", profile))

    skeleton = TemplateCompressor().render(card, detail="skeleton")

    assert "first_name=Mia; last_name=Li" in skeleton  # a booking takes the traveller's name
    assert "Sunset" not in skeleton and "Austin" not in skeleton and "gold" not in skeleton


def test_a_skeleton_leaves_an_address_out_though_its_state_and_country_look_like_status_and_code(memory, msg):
    memory.observe(msg.call("u", "get_user_details", {"user_id": "omar_rossi_1241"}))
    profile = {
        "name": {"first_name": "Omar", "last_name": "Rossi"},
        "address": {"address1": "901 Main St", "city": "Phoenix", "country": "USA", "state": "AZ"},
        "orders": ["#W2378156", "#W4817420"],
        "state": "active",
    }
    card = memory.observe(msg.result("u", "get_user_details", profile))

    skeleton = TemplateCompressor().render(card, detail="skeleton")

    assert "#W2378156" in skeleton and "state=active" in skeleton  # the account's state is a status
    assert "AZ" not in skeleton and "USA" not in skeleton


def test_a_skeleton_of_a_search_keeps_the_status_that_rules_flights_out(memory, msg):
    flights = [
        {"flight_number": f"HAT00{n}", "status": "sold out" if n % 2 else "available", "price": 100 + n}
        for n in range(1, 6)
    ]
    memory.observe(msg.call("s1", "search_direct_flight", {"origin": "JFK", "destination": "SEA"}))
    card = memory.observe(msg.result("s1", "search_direct_flight", flights))

    skeleton = TemplateCompressor().render(card, detail="skeleton")

    assert 'HAT001 "sold out"' in skeleton and "HAT002 available" in skeleton
    assert "101" not in skeleton


def test_a_skeleton_of_a_long_list_tells_its_size_and_no_all_for_the_rows_it_picked(memory, msg):
    airports = [{"code": f"A{i:04d}", "user": "mia_li_3668" if i % 97 == 0 else "other"} for i in range(1200)]
    memory.observe(msg.call("a1", "list_all_airports", {}))
    card = memory.observe(msg.result("a1", "list_all_airports", airports))

    skeleton = TemplateCompressor().render(
        card, focus=DecisionFocus(terms=frozenset({"mia_li_3668"})), detail="skeleton"
    )

    assert "rows (1200)" in skeleton and "A0097" in skeleton
    assert "all user=" not in skeleton


def test_notes_that_differ_past_the_clipped_length_are_never_said_to_be_one_for_all_rows(memory, msg):
    preamble = " ".join(f"w{j}" for j in range(120))
    notes = [{"id": f"P{i}", "note": f"{preamble} END{i}"} for i in range(4)]
    memory.observe(msg.call("p1", "list_products", {}))
    card = memory.observe(msg.result("p1", "list_products", notes))

    full = TemplateCompressor().render(card, focus=None, detail="full")

    assert "all note=" not in full and full.count('"w0 w1 ') == 4  # each row its own (clipped) note


def test_a_skeleton_keeps_the_fields_that_calls_take(memory, msg):
    memory.observe(msg.user("Hi, my user id is mia_li_3668."))
    memory.observe(msg.call("c1", "get_user", {"user_id": "mia_li_3668"}))
    memory.observe(msg.result("c1", "get_user", {"name": "Mia Li", "reservations": ["NO6JO3", "4WQ150"]}))
    memory.observe(msg.call("c2", "get_reservation", {"reservation_id": "NO6JO3"}))
    memory.observe(msg.call("c3", "change_flight", {"flight_number": "HAT136", "date": "2024-05-20"}))
    card = memory.observe(
        msg.result(
            "c2",
            "get_reservation",
            {
                "reservation_id": "NO6JO3",
                "flights": [
                    {"flight_number": "HAT136", "date": "2024-05-20", "price": 612, "aircraft": "A320"},
                    {"flight_number": "HAT039", "date": "2024-05-22", "price": 488, "aircraft": "B737"},
                ],
            },
        )
    )

    focus = memory.build().focus
    skeleton = TemplateCompressor().render(card, focus=focus, detail="skeleton")

    # argument names of the calls so far, and the result field the reservation id came from
    assert {"user_id", "reservation_id", "reservations", "flight_number", "date"} <= focus.fields
    assert "text" not in focus.fields  # the user's turn is not a result with fields
    assert "HAT136 2024-05-20" in skeleton and "HAT039 2024-05-22" in skeleton
    assert "612" not in skeleton and "A320" not in skeleton
    assert skeleton.startswith(f"[{card.id}]") and skeleton.endswith(" (more)")


def test_a_skeleton_keeps_the_field_the_user_asks_for_by_name(memory, msg):
    memory.observe(msg.call("c1", "get_user_details", {"user_id": "mia_li_3668"}))
    profile = {"email": "mia.li3818@example.com", "membership": "gold", "phone_last_four": "7447"}
    card = memory.observe(msg.result("c1", "get_user_details", {"user_id": "mia_li_3668", **profile}))
    compressor = TemplateCompressor()

    memory.observe(msg.user("Great, please email me the whole itinerary."))
    email = compressor.render(card, focus=memory.build().focus, detail="skeleton")
    memory.observe(msg.user("And what are the last four digits of my phone?"))
    phone = compressor.render(card, focus=memory.build().focus, detail="skeleton")

    assert "mia.li3818@example.com" in email and "gold" not in email and "7447" not in email
    assert "7447" in phone and "mia.li3818@example.com" not in phone  # a field named in words


def test_a_tight_memory_shows_a_contact_field_once_the_user_asks_for_it(make_memory, msg, memory_text):
    memory = make_memory(settings=MemorySettings(budget=200, recent_messages=0))
    memory.observe(msg.user("Hi, I'm mia_li_3668."))
    memory.observe(msg.call("c1", "get_user_details", {"user_id": "mia_li_3668"}))
    profile = {
        "email": "mia.li3818@example.com",
        "membership": "gold",
        "address": {"address1": "12 Elm St", "city": "Austin", "zip": "78701"},
        "payment_methods": {"credit_card_4421486": {"brand": "visa", "last_four": "7447"}},
    }
    memory.observe(msg.result("c1", "get_user_details", {"user_id": "mia_li_3668", **profile}))
    memory.observe(msg.call("c2", "search_flights", {"origin": "JFK", "destination": "SEA"}))
    memory.observe(msg.result("c2", "search_flights", {"flights": FLIGHTS}))
    memory.observe(msg.user("Book nothing yet."))
    before = memory_text(memory.build().messages)  # key detail leaves contact data out

    memory.observe(msg.user("Please email me the flight options."))
    after = memory_text(memory.build().messages)

    assert "mia.li3818@example.com" not in before
    assert "mia.li3818@example.com" in after


def test_a_skeleton_keeps_the_identifiers_of_every_row_of_a_short_table(memory, msg):
    memory.observe(msg.call("c1", "get_reservation", {"reservation_id": "ZFA04Y"}))
    payments = [
        {"payment_id": "gift_card_8887175", "amount": 215},
        {"payment_id": "credit_card_74", "amount": 90},
    ]
    card = memory.observe(
        msg.result("c1", "get_reservation", {"status": "booked", "payment_history": payments})
    )

    skeleton = TemplateCompressor().render(card, detail="skeleton")

    assert "gift_card_8887175" in skeleton and "credit_card_74" in skeleton
    assert "215" not in skeleton


def test_a_result_that_restates_a_list_argument_shows_it_once(memory, msg):
    flights = [
        {"flight_number": "HAT136", "date": "2024-05-20"},
        {"flight_number": "HAT039", "date": "2024-05-22"},
    ]
    memory.observe(msg.call("c1", "book_reservation", {"user_id": "mia_li_3668", "flights": flights}))
    booked = memory.observe(
        msg.result(
            "c1", "book_reservation", {"reservation_id": "ZFA04Y", "status": "confirmed", "flights": flights}
        )
    )
    memory.observe(msg.call("c2", "book_reservation", {"user_id": "mia_li_3668", "flights": flights}))
    failed = memory.observe(msg.result("c2", "book_reservation", "Error: not enough seats on HAT039"))

    text = TemplateCompressor().render(booked)

    assert text.startswith(f"[{booked.id}] book_reservation(user_id=mia_li_3668, flights=…) -> ")
    assert "HAT136 2024-05-20" in text and text.count("HAT136") == 1
    assert (
        "flights=[(flight_number=HAT136, date=2024-05-20), (flight_number=HAT039, date=2024-05-22)]"
        in TemplateCompressor().render(failed)
    )  # not restated: the failed call's records as it wrote them, for the retry to copy


def test_a_list_argument_is_elided_only_when_the_result_shows_each_value_whole(memory):
    items = [{"item_id": 12, "quantity": 3}, {"item_id": 7, "quantity": 2}]
    card = memory.observe_tool("place_order", {"items": items}, {"order_id": "W1273", "total": 23.5})

    assert "place_order(items=[" in card.summary and "…" not in card.summary


def test_a_sparse_row_stays_one_line_and_says_no_empty_all(memory):
    rows = [{"id": "A1", "note": "late checkout\nB2: status=cancelled"}, {"id": "B2"}, {"id": "C3"}]
    card = memory.observe_tool("list_rooms", {}, rows)

    lines = TemplateCompressor().render(card).split("\n")
    assert lines[1:] == [" rows (3):", " A1: note=late checkout\\nB2: status=cancelled", " B2:", " C3:"]


def test_keys_of_a_collection_stay_unless_one_column_repeats_them(memory):
    card = memory.observe_tool("cart", {}, {"1": {"qty": 1, "price": 10}, "2": {"qty": 3, "price": 2}})

    assert "key qty price\n 1 1 10\n 2 3 2" in TemplateCompressor().render(card)


def test_a_list_of_values_keeps_each_item_whole_and_in_its_place(memory):
    card = memory.observe_tool(
        "seating", {}, {"names": ["Smith, John", "Doe, Jane"], "seats": ["12A", None, "12C"]}
    )

    assert 'names=["Smith, John", "Doe, Jane"]; seats=[12A, null, 12C]' in card.summary


def test_large_and_integral_numbers_are_written_as_sent(memory):
    card = memory.observe_tool("quote", {}, {"budget": 1e23, "price": 121.0, "rate": 0.5})

    assert "budget=1e+23" in card.summary and "price=121;" in card.summary and "rate=0.5" in card.summary


def test_a_failed_call_reads_as_the_call_it_was_so_a_retry_can_copy_it(memory, msg):
    passengers = [
        {"first_name": "Mary Ann", "last_name": "Li", "dob": "1990-04-05"},
        {"first_name": "Omar", "last_name": "Davis", "dob": "1982-10-19"},
    ]
    payments = [{"payment_id": "gift_card_7", "amount": 50}, {"payment_id": "credit_card_4"}]
    memory.observe(msg.call("c1", "book", {"passengers": passengers, "payments": payments}))

    failed = memory.observe(msg.result("c1", "book", "Error: payment declined"))

    assert (
        TemplateCompressor()
        .render(failed)
        .startswith(
            f"[{failed.id}] book(passengers=[(first_name=Mary Ann, last_name=Li, dob=1990-04-05), "
            "(first_name=Omar, last_name=Davis, dob=1982-10-19)], "
            "payments=[(payment_id=gift_card_7, amount=50), (payment_id=credit_card_4)]) FAILED -> "
        )
    )


def test_summarizer_is_used_for_long_free_text_and_cannot_drop_identifiers(memory, msg):
    memory.observe(msg.call("c1", "web_search", {"query": "Maris Lodge"}))
    card = memory.observe(msg.result("c1", "web_search", LONG_TEXT))
    llm = RecordingSummarizer("Maris Lodge has rooms 2024-06-01 to 2024-06-05.")

    text = SummarizingCompressor(llm, min_chars=100).render(card)

    assert len(llm.requests) == 1
    sent, instructions = llm.requests[0]
    assert "HX-88213" in sent and "exactly" in instructions
    assert "HX-88213" in text  # dropped by the summary, appended back from the source
    assert text.startswith(f"[{card.id}]")


def test_an_identifier_the_summary_drops_is_appended_though_a_longer_one_holds_its_text(memory, msg):
    """Order W123 is not kept by W1234, nor room 12 by 2024-06-12: the summary is read as values."""
    memory.observe(msg.call("c1", "read_email", {"folder": "orders"}))
    email = (
        "Hello, your order W1234 shipped on 2024-06-12 and arrives in two days. "
        "Order W123 is still pending: the item is back-ordered. Your room 12 booking is unchanged. "
    ) * 3
    card = memory.observe(msg.result("c1", "read_email", email))
    llm = RecordingSummarizer("Order W1234 shipped on 2024-06-12.")

    text = SummarizingCompressor(llm, min_chars=100).render(card)

    assert text.endswith("Order W1234 shipped on 2024-06-12. | also: W123, 12")


@pytest.mark.parametrize(
    ("summary", "invented"),
    [
        ("Maris Lodge, 2024-06-01 to 2024-06-05; quote HX-88214 at check-in.", "HX-88214"),
        ("Maris Lodge has rooms from 2024-06-01; quote HX-88", "HX-88"),  # cut at the token limit
    ],
    ids=["off by a digit", "cut short"],
)
def test_a_summary_that_states_an_identifier_the_text_does_not_hold_is_not_used(
    memory, msg, caplog, summary, invented
):
    memory.observe(msg.call("c1", "web_search", {"query": "Maris Lodge"}))
    card = memory.observe(msg.result("c1", "web_search", LONG_TEXT))

    with caplog.at_level("WARNING", logger="damc"):
        text = SummarizingCompressor(RecordingSummarizer(summary), min_chars=100).render(card)

    assert text == TemplateCompressor().render(card)
    assert f"the summarizer wrote {invented} (not in the text) on card c1" in caplog.text


def test_a_summary_no_shorter_than_the_text_is_not_used(memory, msg):
    """SmolLM2-135M asked for one or two sentences of a 410-character text repeated it and went on
    to its token limit: with the ids it dropped appended, the card would grow."""
    text = (
        "Flight HAT069 from JFK to SEA on 2024-05-20 departs at 06:00 and arrives at 09:30. Economy "
        "seats cost $121 and 3 seats remain. Flight HAT083 on the same day is sold out. The airline "
        "recommends arriving two hours before departure. Baggage allowance is one carry-on and one "
        "personal item; checked bags cost $35 each. Reservation ZFA04Y was created for mia_li_3668. "
        "Seat selection opens 24 hours before departure."
    )
    memory.observe(msg.call("c1", "read_email", {"folder": "inbox"}))
    card = memory.observe(msg.result("c1", "read_email", text))
    ramble = (
        "Flight HAT069 from JFK to SEA on 2024-05-20 departs at 06:00 and arrives at 09:30. Economy "
        "seats cost $121, one carry-on costs $35 each, and there are two checked bags for a single "
        "item. Baggage allowance is one carry-on with one personal item; checked bags cost $35 each. "
        "The airline recommends arriving two hours before departure. The airline recommends arriving "
        "two hours before departure on the same day as"
    )

    rendered = SummarizingCompressor(RecordingSummarizer(ramble)).render(card)

    assert rendered == TemplateCompressor().render(card)


def test_structured_results_never_reach_the_summarizer(memory, msg, airline_messages):
    for message in airline_messages:
        memory.observe(message)
    llm = RecordingSummarizer("unused")
    compressor = SummarizingCompressor(llm, min_chars=10)

    for card in memory.cards():
        if card.tables:
            assert compressor.render(card) == TemplateCompressor().render(card)
    assert all("{" not in text[:1] for text, _ in llm.requests)


def test_a_failing_summarizer_falls_back_to_the_template(memory, msg):
    class Broken:
        def summarize(self, text: str, *, instructions: str) -> str:
            raise TimeoutError("provider down")

    memory.observe(msg.call("c1", "web_search", {"query": "Maris Lodge"}))
    card = memory.observe(msg.result("c1", "web_search", LONG_TEXT))

    assert SummarizingCompressor(Broken(), min_chars=100).render(card) == TemplateCompressor().render(card)


class Reply:
    """What a chat model's ``invoke`` returns: a message object, not its text."""

    def __init__(self, content: str) -> None:
        self.content = content


@pytest.mark.parametrize(
    "reply",
    [Reply("Maris Lodge, HX-88213."), None, b"Maris Lodge, HX-88213.", "  "],
    ids=["a reply object", "None", "bytes", "blank"],
)
@pytest.mark.parametrize("detail", ["skeleton", "key", "full"])
def test_a_summary_that_is_no_text_falls_back_to_the_template_at_the_detail_asked_and_is_logged(
    memory, msg, caplog, reply, detail
):
    memory.observe(msg.user("Find me a hotel near the lake"))
    card = memory.observe(msg.assistant(LONG_TEXT))
    llm = RecordingSummarizer(reply)

    with caplog.at_level("WARNING", logger="damc"):
        text = SummarizingCompressor(llm, min_chars=100).render(card, detail=detail)

    assert len(llm.requests) == 1
    assert text == TemplateCompressor().render(card, detail=detail)
    assert "the summarizer returned" in caplog.text and "not text on card c1" in caplog.text


def test_a_failing_summarizer_falls_back_to_the_template_at_the_detail_asked(memory, msg, caplog):
    class Broken:
        def summarize(self, text: str, *, instructions: str) -> str:
            raise TimeoutError("provider down")

    memory.observe(msg.user("Find me a hotel near the lake"))
    card = memory.observe(msg.assistant(LONG_TEXT))

    with caplog.at_level("WARNING", logger="damc"):
        skeleton = SummarizingCompressor(Broken(), min_chars=100).render(card, detail="skeleton")

    assert skeleton == TemplateCompressor().render(card, detail="skeleton")
    assert len(skeleton) < len(TemplateCompressor().render(card)) / 3
    assert "the summarizer raised TimeoutError: provider down on card c1" in caplog.text


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: SummarizingCompressor(lambda text, instructions: text[:80]),
            "needs an object with summarize",
        ),
        (
            lambda: SummarizingCompressor(RecordingSummarizer("ok"), min_chars="400"),
            "min_chars must be a whole",
        ),
    ],
    ids=["a function for the summarizer", "min_chars as text"],
)
def test_a_summarizer_option_of_the_wrong_kind_is_a_config_error(make, match):
    """Either would leave every card unsummarized (the function has no ``summarize``), or fail at
    each long text (``len(text) < "400"``), without a word."""
    with pytest.raises(ConfigError, match=match):
        make()


def test_volatile_cards_older_than_the_threshold_show_as_of(make_memory, msg, clock):
    from damc_core import MemorySettings

    memory = make_memory(settings=MemorySettings(as_of_after=300, recent_messages=0))
    memory.observe(msg.call("c1", "get_price", {"sku": "SKU123"}))
    memory.observe(msg.result("c1", "get_price", {"sku": "SKU123", "price": 19.99}))

    fresh = memory.build().messages[0]["content"]
    clock.advance(3600)
    stale = memory.build().messages[0]["content"]

    assert "as of" not in fresh
    assert "(as of 2024-05-15 15:00 UTC)" in stale  # UTC said, so a model in another zone reads it right


def test_a_result_of_the_recent_window_read_long_ago_shows_as_of_too(make_memory, msg, clock):
    """The user comes back an hour later to a price the last message holds: it is dated like a card."""
    from damc_core import MemorySettings

    memory = make_memory(settings=MemorySettings(as_of_after=300, recent_messages=4))
    memory.observe(msg.user("What does SKU123 cost?"))
    memory.observe(msg.call("k1", "get_price", {"sku": "SKU123"}))
    memory.observe(msg.result("k1", "get_price", {"sku": "SKU123", "price": 19.99}))
    fresh = memory.build().messages[-1]["content"]
    clock.advance(3600)
    memory.observe(msg.user("OK, buy it."))

    built = memory.build(budget=300)

    (result,) = [m for m in built.messages if m["role"] == "tool"]
    assert fresh == "[c2] -> price=19.99"
    assert result["content"] == "[c2] (as of 2024-05-15 15:00 UTC) -> price=19.99"
    assert built.total_tokens <= 300


@pytest.mark.parametrize("superseded", ["drop", "mark"])
def test_as_of_and_superseded_tags_count_in_the_budget(make_memory, msg, clock, superseded):
    from damc_core import MemorySettings

    memory = make_memory(settings=MemorySettings(budget=400, recent_messages=0, superseded=superseded))
    memory.observe(msg.user("Check all my reservations, user mia_li_3668."))
    for n in range(60):  # 30 reservations looked up twice, the second time cancelled
        reservation = {"reservation_id": f"R{n % 30:05d}", "status": ["confirmed", "cancelled"][n // 30]}
        memory.observe(
            msg.call(f"k{n}", "get_reservation_details", {"reservation_id": reservation["reservation_id"]})
        )
        memory.observe(msg.result(f"k{n}", "get_reservation_details", {**reservation, "price": 100 + n}))
    clock.advance(3600)  # every volatile card now shows "(as of ...)"

    built = memory.build()

    assert "(as of " in built.memory
    assert built.total_tokens <= 400
    explained = sum(d.tokens for d in built.decisions)  # cards kept, and those the left-out line names
    assert abs(explained + memory.counter.count(fence_memory([])) - built.memory_tokens) <= 4  # tags included


def test_a_long_free_text_result_is_summarized_once_whatever_the_focus_or_detail(make_memory, msg):
    """The card is rendered whole when it comes, then at key and skeleton detail and cut to a
    share of the budget; each is the same text, sent to the model once."""
    from damc_core import MemorySettings

    llm = RecordingSummarizer("Maris Lodge has rooms from 2024-06-01; quote HX-88213 at check-in.")
    memory = make_memory(
        compressor=SummarizingCompressor(llm, min_chars=100),
        settings=MemorySettings(budget=120, recent_messages=0),
    )
    memory.observe(msg.call("c1", "web_search", {"query": "Maris Lodge"}))
    memory.observe(msg.result("c1", "web_search", LONG_TEXT * 3))

    for turn in ("Is HX-88213 my booking?", "Does Maris Lodge have a view?", "Book it for 2024-06-01."):
        memory.observe(msg.user(turn))
        for budget in (60, 120, 800):
            memory.build(budget=budget)

    assert len(llm.requests) == 1


def test_a_text_the_summarizer_failed_on_is_not_sent_again_at_every_rendering(make_memory, msg, caplog):
    """A provider that is down or times out costs the step once, not once per detail."""

    class Down:
        calls = 0

        def summarize(self, text: str, *, instructions: str) -> str:
            Down.calls += 1
            raise TimeoutError("provider down")

    memory = make_memory(
        compressor=SummarizingCompressor(Down(), min_chars=100),
        settings=MemorySettings(budget=120, recent_messages=0),
    )
    memory.observe(msg.call("c1", "web_search", {"query": "Maris Lodge"}))
    with caplog.at_level("WARNING", logger="damc"):
        memory.observe(msg.result("c1", "web_search", LONG_TEXT * 3))
        memory.observe(msg.user("Is HX-88213 my booking?"))
        for budget in (60, 800):
            built = memory.build(budget=budget)

    assert Down.calls == 1 and caplog.text.count("the summarizer raised TimeoutError") == 1
    assert "HX-88213" in built.messages[0]["content"]


def _reservation_and_search(memory, msg):
    memory.observe(msg.call("r", "get_reservation_details", {"reservation_id": "M20IZO"}))
    flights = [
        {"flight_number": "HAT069", "date": "2024-05-22", "price": 121},
        {"flight_number": "HAT083", "date": "2024-05-24", "price": 100},
    ]
    reservation = memory.observe(
        msg.result(
            "r",
            "get_reservation_details",
            {
                "reservation_id": "M20IZO",
                "status": "active",
                "origin": "JFK",
                "cabin": "economy",
                "flights": flights,
            },
        )
    )
    memory.observe(msg.call("s", "search_direct_flight", {"origin": "JFK", "destination": "SEA"}))
    rows = [
        {"flight_number": f"HAT{100 + i}", "date": f"2024-05-{10 + i}", "price": 90 + i} for i in range(12)
    ]
    search = memory.observe(msg.result("s", "search_direct_flight", rows))
    return reservation, search


def test_a_skeleton_reads_the_values_it_shows_only_when_wanted(memory, msg):
    reservation, search = _reservation_and_search(memory, msg)
    compressor = TemplateCompressor()

    read = compressor.terms_read(reservation, detail="skeleton")

    assert "economy" in read  # shown when the focus names it
    assert not {"m20izo", "jfk", "active", "hat069"} & read  # ids, status, a short table's rows: always
    assert compressor.terms_read(reservation, detail="key") == frozenset()
    assert {"hat100", "hat111"} <= compressor.terms_read(search, detail="key")  # a long table's rows


def test_a_card_renders_alike_for_any_focus_that_differs_in_terms_it_does_not_read(
    memory, msg, airline_messages
):
    import random
    from dataclasses import replace

    _reservation_and_search(memory, msg)
    memory.observe(msg.call("q", "get_flight_price", {"flight_number": "HAT105"}))
    memory.observe(msg.result("q", "get_flight_price", {"flight_number": "HAT105", "price": 140}))
    for message in airline_messages:
        memory.observe(message)
    compressor = TemplateCompressor()
    draw = random.Random(7)
    assert any(card.stale_rows or card.stale_cells for card in memory.cards())  # re-quoted rows point on
    for card in memory.cards():
        terms = sorted(card.terms)
        for detail in ("full", "key", "skeleton"):
            read = compressor.terms_read(card, detail=detail)
            for _ in range(40):
                wanted = frozenset(draw.sample(terms, draw.randint(0, len(terms))))
                used = frozenset(draw.sample(terms, draw.randint(0, min(3, len(terms)))))

                as_wanted = compressor.render(
                    replace(card, used_terms=used), focus=DecisionFocus(terms=wanted), detail=detail
                )
                as_read = compressor.render(
                    replace(card, used_terms=used & read),
                    focus=DecisionFocus(terms=wanted & read),
                    detail=detail,
                )

                assert as_wanted == as_read


def test_a_rendering_is_reused_while_the_focus_names_nothing_new_the_card_reads(memory, msg):
    from damc_core import TiktokenCounter
    from damc_core.render import CardRenderer

    reservation, _ = _reservation_and_search(memory, msg)
    renderer = CardRenderer(TemplateCompressor(), TiktokenCounter())

    first = renderer.render(reservation, DecisionFocus(terms=frozenset({"m20izo"})), "skeleton")
    again = renderer.render(reservation, DecisionFocus(terms=frozenset({"m20izo", "hat069"})), "skeleton")
    on_cabin = renderer.render(reservation, DecisionFocus(terms=frozenset({"economy"})), "skeleton")

    assert again is first
    assert on_cabin is not first and "economy" in on_cabin.summary and "economy" not in first.summary


def test_a_real_model_summarizes_a_long_text_without_losing_or_making_up_an_identifier(
    make_memory, msg, chat_server, recorded_http
):
    """SmolLM2-135M behind llama-cpp-python's OpenAI-compatible server, as a user would plug in
    any chat model: the card keeps every identifier of the text and states none it lacks."""
    openai = pytest.importorskip("openai")
    import httpx

    from damc_core.extract import identifiers

    client = openai.OpenAI(
        api_key="local",
        base_url=chat_server,
        http_client=httpx.Client(transport=recorded_http),
        max_retries=0,
    )

    class ChatSummarizer:
        def summarize(self, text: str, *, instructions: str) -> str:
            reply = client.chat.completions.create(
                model="smollm2",
                messages=[{"role": "system", "content": instructions}, {"role": "user", "content": text}],
                max_tokens=60,
                temperature=0.0,
            )
            return reply.choices[0].message.content or ""

    email = (
        "Flight HAT069 from JFK to SEA on 2024-05-20 departs at 06:00 and arrives at 09:30. Economy "
        "seats cost $121 and 3 seats remain. Flight HAT083 on the same day is sold out. The airline "
        "recommends arriving two hours before departure. Baggage allowance is one carry-on and one "
        "personal item; checked bags cost $35 each. Reservation ZFA04Y was created for mia_li_3668."
    )
    memory = make_memory(compressor=SummarizingCompressor(ChatSummarizer(), min_chars=100))
    memory.observe(msg.call("c1", "read_email", {"folder": "inbox"}))
    card = memory.observe(msg.result("c1", "read_email", email))
    memory.observe(msg.user("Is ZFA04Y on HAT069?"))
    memory.build(budget=60, recent_messages=0)

    assert recorded_http.statuses == [200]  # one summary, reused at every detail
    shown = set(identifiers(card.summary))
    assert set(identifiers(email)) <= shown
    assert shown <= {card.id, *identifiers(email), *identifiers("read_email(folder=inbox)")}


def test_a_result_that_only_restates_its_call_reads_as_confirmed_not_empty(make_memory, msg):
    """A status update that returns the values it was given tells the model the update took;
    "(empty)" would read as if the tool returned nothing, and a model may call it again."""
    from damc_core import MemorySettings

    memory = make_memory(settings=MemorySettings(recent_messages=2))
    memory.observe(msg.user("Mark order O-1 as shipped, and check O-2."))
    memory.observe(msg.call("k1", "update_order_status", {"order_id": "O-1", "status": "shipped"}))
    memory.observe(msg.result("k1", "update_order_status", {"order_id": "O-1", "status": "shipped"}))
    memory.observe(msg.call("k2", "get_order", {"order_id": "O-2"}))
    memory.observe(msg.result("k2", "get_order", {}))
    memory.observe(msg.call("k3", "update_order_status", {"order_id": "O-2", "status": "shipped"}))
    memory.observe(msg.result("k3", "update_order_status", {"order_id": "O-2", "status": "shipped"}))

    built = memory.build()

    assert "[c2] update_order_status(order_id=O-1, status=shipped) -> (as called)" in built.memory
    assert "[c4] get_order(order_id=O-2) -> (empty)" in built.memory  # it did return nothing
    assert built.messages[-1]["content"] == "[c6] -> (as called)"  # the recent result, its call just before


def test_a_result_whose_facts_key_detail_leaves_out_says_more_not_empty(memory, msg):
    memory.observe(msg.call("k1", "add_note", {"order_id": "O-1"}))
    card = memory.observe(
        msg.result("k1", "add_note", {"note": "The customer was happy with the service and will come back"})
    )

    assert TemplateCompressor().render(card, detail="key") == "[c1] add_note(order_id=O-1) -> (more)"


def test_a_skeleton_keeps_the_flag_that_says_whether_the_call_worked(memory, msg):
    """``completed=false`` is the status of a refund that did not go through: a skeleton that
    left it out would read ``refund_order(order_id=O-1) -> (more)``, as if it had."""
    memory.observe(msg.user("Refund order O-1 to my card."))
    memory.observe(msg.call("k1", "refund_order", {"order_id": "O-1"}))
    pending = memory.observe(
        msg.result("k1", "refund_order", {"completed": False, "message": "The refund waits for a review"})
    )
    memory.observe(msg.call("k2", "get_user", {"user_id": "mia_li_3668"}))
    profile = memory.observe(msg.result("k2", "get_user", {"user_id": "mia_li_3668", "newsletter": False}))
    compressor = TemplateCompressor()

    assert (
        compressor.render(pending, detail="skeleton")
        == "[c2] refund_order(order_id=O-1) -> completed=false (more)"
    )
    assert "newsletter" not in compressor.render(profile, detail="skeleton")  # a setting, not an outcome


def test_a_failed_call_keeps_its_reason_at_every_detail(memory, msg):
    """Why a call failed is what the next call changes (another payment method): a lean
    rendering that kept only ``status=failed`` would have the agent try the same card again."""
    memory.observe(msg.user("Exchange the lamp in order W1, pay with gift_card_1234567."))
    memory.observe(
        msg.call("k1", "exchange_items", {"order_id": "W1", "payment_method_id": "gift_card_1234567"})
    )
    failed = memory.observe(
        msg.result(
            "k1",
            "exchange_items",
            {"status": "failed", "message": "Insufficient gift card balance: $12.50 left"},
        )
    )
    memory.observe(msg.call("k2", "get_order", {"order_id": "W2"}))
    traced = memory.observe(
        msg.result("k2", "get_order", {"error": "lookup failed", "detail": "at db.py " * 100})
    )
    memory.observe(msg.call("k3", "get_order", {"order_id": "W3"}))
    logged = memory.observe(msg.result("k3", "get_order", {"status": "failed", "message": "at db.py " * 100}))
    memory.observe(msg.call("k4", "book", {"seat": "12A"}))
    coded = memory.observe(msg.result("k4", "book", {"error": "bad_request", "message": "Seat 12A is taken"}))
    compressor = TemplateCompressor()

    for detail in ("key", "skeleton"):
        assert compressor.render(logged, detail=detail).endswith("at db.… (more)")  # a long one, its start
        assert compressor.render(coded, detail=detail).endswith(
            "error=bad_request; message=Seat 12A is taken"
        )
        lean = compressor.render(failed, detail=detail)
        assert lean.endswith("FAILED -> status=failed; message=Insufficient gift card balance: $12.50 left")
        assert "at db.py" not in compressor.render(traced, detail=detail)  # its error field says why
