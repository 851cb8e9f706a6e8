"""Encoding: tool outputs become cards with exact facts, compact tables, errors and constraints."""

from __future__ import annotations

import json

import pytest

from damc_core import CardKind, Fact, Table

RESERVATION = {
    "reservation_id": "ZFA04Y",
    "user_id": "mia_li_3668",
    "created_at": "2024-05-05T23:00:15",
    "flight_date": "2024-05-20",
    "total_price": 1234.56,
    "payment_id": "gift_card_7219486",
    "status": "confirmed",
    "cabin": "economy",
}


def observe_result(memory, msg, name, payload, arguments=None):
    memory.observe(msg.call("call_1", name, arguments or {}))
    return memory.observe(msg.result("call_1", name, payload))


def test_json_object_becomes_facts_with_verbatim_ids_dates_amounts(memory, msg):
    card = observe_result(memory, msg, "get_reservation_details", RESERVATION, {"reservation_id": "ZFA04Y"})

    assert card.kind is CardKind.TOOL_RESULT
    assert card.tool_name == "get_reservation_details"
    assert card.arguments == {"reservation_id": "ZFA04Y"}
    facts = {f.path: f for f in card.facts}
    assert facts["reservation_id"] == Fact("reservation_id", "ZFA04Y", "id")
    assert facts["payment_id"] == Fact("payment_id", "gift_card_7219486", "id")
    assert facts["created_at"] == Fact("created_at", "2024-05-05T23:00:15", "date")
    assert facts["flight_date"] == Fact("flight_date", "2024-05-20", "date")
    assert facts["total_price"] == Fact("total_price", "1234.56", "amount")
    assert facts["status"] == Fact("status", "confirmed", "status")
    for value in ("ZFA04Y", "gift_card_7219486", "2024-05-05T23:00:15", "2024-05-20", "1234.56", "confirmed"):
        assert value in card.summary
    assert card.summary.startswith(f"[{card.id}] get_reservation_details(reservation_id=ZFA04Y) -> ")


def test_prices_and_statuses_make_a_card_volatile_with_an_as_of_time(memory, msg, clock):
    card = observe_result(memory, msg, "get_reservation_details", RESERVATION)

    assert card.volatile
    assert card.as_of == clock.now


def test_nested_objects_keep_their_paths_and_keyed_collections_become_tables(memory, msg, airline_messages):
    memory.observe(airline_messages[2])
    card = memory.observe(airline_messages[3])  # get_user_details

    facts = {f.path: f.value for f in card.facts}
    assert facts["name.first_name"] == "Mia"
    assert facts["email"] == "mia.li3818@example.com"
    assert facts["reservations"] == "[NO6JO3, AIXC49]"
    (methods,) = [t for t in card.tables if t.path == "payment_methods"]
    cells = {cell for row in methods.rows for cell in row}
    assert {"credit_card_4421486", "certificate_7504069", "7447", "250"} <= cells


def test_list_of_records_becomes_a_table(memory, msg, airline_messages):
    memory.observe(airline_messages[4])
    card = memory.observe(airline_messages[5])  # search_direct_flight

    assert card.facts == ()
    (table,) = card.tables
    assert isinstance(table, Table)
    assert table.path == ""
    assert table.columns[0] == "flight_number"
    assert {"prices.economy", "available_seats.economy", "scheduled_departure_time_est"} <= set(table.columns)
    rows = {row[0]: dict(zip(table.columns, row, strict=True)) for row in table.rows}
    assert rows["HAT069"]["prices.economy"] == "121"
    assert rows["HAT069"]["scheduled_departure_time_est"] == "06:00:00"
    assert rows["HAT083"]["available_seats.economy"] == "0"
    assert "HAT069" in card.summary and "HAT083" in card.summary


def test_itineraries_keep_their_option_number_when_a_column_repeats_it(memory, msg):
    def leg(flight_number: str, origin: str, destination: str, stops: int) -> dict[str, object]:
        return {"flight_number": flight_number, "origin": origin, "destination": destination, "stops": stops}

    itineraries = [  # one stop in the first itinerary, two in the second: each leg's stops is its option
        [leg("HAT100", "JFK", "ORD", 1), leg("HAT200", "ORD", "SEA", 1)],
        [leg("HAT300", "JFK", "DEN", 2), leg("HAT400", "DEN", "SLC", 2), leg("HAT500", "SLC", "SEA", 2)],
    ]
    card = observe_result(memory, msg, "search_onestop_flight", itineraries)

    (table,) = card.tables
    assert table.columns == ("option", "flight_number", "origin", "destination", "stops")
    assert [row[0] for row in table.rows] == ["1", "1", "2", "2", "2"]
    assert " option flight_number origin destination stops\n 1 HAT100 JFK ORD 1\n" in card.summary


def test_a_collection_keyed_by_its_records_ids_does_not_repeat_them(memory, msg):
    products = {"P1": {"product_id": "P1", "name": "lamp"}, "P2": {"product_id": "P2", "name": "desk"}}

    card = observe_result(memory, msg, "list_products", products)

    assert card.tables[0].columns == ("product_id", "name")


def test_a_field_named_like_a_collections_key_column_keeps_a_name_of_its_own(memory, msg):
    licenses = {"u1": {"key": "ABC-123", "seats": 5}, "u2": {"key": "DEF-456", "seats": 2}}

    card = observe_result(memory, msg, "list_licenses", licenses)

    assert card.tables[0].columns == ("key", "'key'", "seats")  # the collection's key, then the field
    assert card.tables[0].rows == (("u1", "ABC-123", "5"), ("u2", "DEF-456", "2"))


def test_a_key_holding_a_dot_keeps_its_value_beside_the_nested_key_it_reads_as(memory, msg):
    host = {"host_id": "web-1", "cpu.load": 0.93, "cpu": {"load": 0.41, "cores": 8}}

    card = observe_result(memory, msg, "get_host", host)
    table = observe_result(memory, msg, "list_hosts", [host, {**host, "host_id": "web-2", "cpu.load": 0.12}])
    alone = observe_result(memory, msg, "get_load", {"cpu.load": 0.93})

    facts = {f.path: f.value for f in card.facts}
    assert facts == {"host_id": "web-1", "'cpu.load'": "0.93", "cpu.load": "0.41", "cpu.cores": "8"}
    assert "host_id=web-1; 'cpu.load'=0.93; cpu(load=0.41; cores=8)" in card.summary
    assert table.tables[0].columns == ("host_id", "'cpu.load'", "cpu.load", "cpu.cores")
    assert [row[1:3] for row in table.tables[0].rows] == [("0.93", "0.41"), ("0.12", "0.41")]
    assert [f.path for f in alone.facts] == ["cpu.load"]  # quoted only where another key reads the same


def test_a_dotted_key_takes_one_column_in_every_row_of_a_table(memory, msg):
    hotels = [
        {"hotel_id": "H1", "addr.city": "Oslo", "addr": {"city": "Bergen"}},
        {"hotel_id": "H2", "addr.city": "Paris"},
        {"hotel_id": "H3", "addr": {"city": "Rome"}},
    ]

    listed = observe_result(memory, msg, "search_hotels", hotels)
    keyed = observe_result(memory, msg, "get_hotels", {h["hotel_id"]: h for h in hotels})

    for card in (listed, keyed):
        table = card.tables[0]
        assert table.columns == ("hotel_id", "'addr.city'", "addr.city")
        assert [row[1:] for row in table.rows] == [("Oslo", "Bergen"), ("Paris", ""), ("", "Rome")]
    assert ' H2 Paris ""\n' in memory.card(listed.id).summary


def test_a_dotted_key_beside_an_unnamed_record_still_makes_a_table(memory, msg):
    # an export with a blank header: the record under "" names its fields like the top's ("size")
    products = [
        {"sku": "A1", "": {"size": "M"}, "size.eu": {"min": 38}},
        {"sku": "B2", "size.eu": {"min": 40}},
    ]

    card = observe_result(memory, msg, "list_products", products)

    assert card.tables == (Table("", ("sku", "size", "size.eu.min"), (("A1", "M", "38"), ("B2", "", "40"))),)
    assert "not parsed" not in card.summary


def test_a_key_written_in_quotes_keeps_a_path_apart_from_a_quoted_key(memory, msg):
    card = observe_result(memory, msg, "get_order", {"a.b": 1, "a": {"b": 2}, "'a.b'": 3})

    assert {f.path: f.value for f in card.facts} == {"'a.b'": "1", "a.b": "2", "'\\'a.b\\''": "3"}
    assert "'a.b'=1; '\\'a.b\\''=3; a(b=2)" in memory.card(card.id).summary


def test_a_quoted_key_is_classified_by_its_words(memory, msg):
    card = observe_result(memory, msg, "get_order", {"order.id": "W4923227", "order": {"status": "shipped"}})

    assert {f.path: f.kind for f in card.facts} == {"'order.id'": "id", "order.status": "status"}


def test_long_table_shows_some_rows_and_says_how_to_recall_the_rest(memory, msg):
    rows = [{"item_id": f"{1000000000 + i}", "color": "red", "price": 10 + i} for i in range(100)]

    card = observe_result(memory, msg, "list_items", rows)

    assert len(card.tables[0].rows) == 100
    assert card.summary.startswith(f"[{card.id}]") and "(+" in card.summary and " more rows)" in card.summary
    assert "1000000000" in card.summary
    assert json.loads(memory.handle_recall({"card_id": card.id})) == rows


def test_a_list_longer_than_a_card_holds_is_counted_whole(make_memory, msg):
    rows = [{"id": f"ID{i:06d}", "status": "ok"} for i in range(1_200)]

    card = observe_result(make_memory(), msg, "list_items", rows)

    assert card.tables[0].size == 1_200  # 500 rows kept, the raw record holds the rest
    assert " rows (1200)" in card.summary and "(+1140 more rows)" in card.summary
    assert make_memory().card(card.id).tables[0].size == 1_200  # reopened from the store


@pytest.mark.parametrize(
    "payload",
    ["Error: order #W4923227 not found", "Traceback (most recent call last): KeyError: '#W4923227'"],
)
def test_error_text_becomes_a_tool_error_with_a_constraint(memory, msg, payload):
    card = observe_result(memory, msg, "get_order_details", payload, {"order_id": "#W4923227"})

    assert card.kind is CardKind.TOOL_ERROR
    assert card.constraints[0] == f"get_order_details failed: {payload}"
    assert " FAILED -> " in card.summary
    assert "#W4923227" in card.summary


@pytest.mark.parametrize(
    "payload",
    [
        {"error": "Insufficient gift card balance: $12.50 left on gift_card_1234567"},
        {"status": "failed", "message": "Insufficient gift card balance: $12.50 left on gift_card_1234567"},
        {"success": False, "message": "Insufficient gift card balance: $12.50 left on gift_card_1234567"},
        {"ok": "false", "message": "Insufficient gift card balance: $12.50 left on gift_card_1234567"},
    ],
    ids=["error key", "failed status", "success false", "ok false as text"],
)
def test_error_json_becomes_a_tool_error_with_a_constraint(memory, msg, payload):
    card = observe_result(memory, msg, "exchange_delivered_order_items", payload)

    assert card.kind is CardKind.TOOL_ERROR
    assert card.constraints[0].startswith("exchange_delivered_order_items failed: ")
    assert "Insufficient gift card balance: $12.50 left on gift_card_1234567" in card.constraints[0]
    assert "$12.50" in card.summary and "gift_card_1234567" in card.summary


def test_observe_tool_can_flag_an_error(memory):
    card = memory.observe_tool(
        "cancel_reservation", {"reservation_id": "ZFA04Y"}, "cannot cancel", error=True
    )

    assert card.kind is CardKind.TOOL_ERROR
    assert card.constraints[0] == "cancel_reservation failed: cannot cancel"


@pytest.mark.parametrize(
    "payload",
    [{"reservation_id": "HATHAT", "status": "confirmed"}, {"reservation_id": "HATHAT", "success": True}],
)
def test_successful_result_is_not_an_error(memory, msg, payload):
    card = observe_result(memory, msg, "book_reservation", payload)

    assert card.kind is CardKind.TOOL_RESULT
    assert card.constraints == ()


def test_sold_out_and_zero_seats_become_constraints(memory, msg):
    flights = [
        {"flight_number": "HAT083", "status": "sold out", "available_seats": {"economy": 0, "business": 4}},
        {"flight_number": "HAT069", "status": "available", "available_seats": {"economy": 12, "business": 3}},
    ]

    card = observe_result(memory, msg, "search_direct_flight", flights)

    assert "HAT083: status=sold out" in card.constraints
    assert "HAT083: available_seats.economy=0" in card.constraints
    assert not any("HAT069" in c for c in card.constraints)


def test_sold_out_in_free_text_becomes_a_constraint(memory, msg):
    card = observe_result(
        memory, msg, "check_stock", "The Blue Bottle is sold out. The Red Bottle ships today."
    )

    assert card.constraints == ("The Blue Bottle is sold out.",)


def test_negative_status_field_becomes_a_constraint(memory, msg):
    card = observe_result(
        memory, msg, "get_flight_status", {"flight_number": "HAT045", "status": "cancelled"}
    )

    assert "status=cancelled" in card.constraints


def test_unavailable_variant_becomes_a_constraint(memory, msg):
    product = {
        "product_id": "8310926033",
        "name": "Water Bottle",
        "variants": {
            "1434748144": {
                "item_id": "1434748144",
                "options": {"color": "red"},
                "available": False,
                "price": 49.72,
            },
            "4579334072": {
                "item_id": "4579334072",
                "options": {"color": "blue"},
                "available": True,
                "price": 54.85,
            },
        },
    }

    card = observe_result(memory, msg, "get_product_details", product)

    assert any("1434748144" in c for c in card.constraints)


FILLER = "We reviewed the general store policy with the customer and explained the usual process. "
KEY_SENTENCE = "Order #W4923227 was refunded $154.30 on 2024-05-14 to paypal_7732922. "


def test_free_text_fallback_keeps_the_sentence_with_exact_values(memory, msg):
    text = FILLER * 10 + KEY_SENTENCE + FILLER * 10

    card = observe_result(memory, msg, "read_notes", text)

    assert card.kind is CardKind.TOOL_RESULT
    assert len(card.text) < len(text)
    assert KEY_SENTENCE.strip() in card.text
    for value in ("#W4923227", "$154.30", "2024-05-14", "paypal_7732922"):
        assert value in card.summary
    assert {f.value for f in card.facts} >= {"#W4923227", "$154.30", "2024-05-14", "paypal_7732922"}


def test_free_text_fallback_lists_identifiers_it_could_not_fit(memory, msg):
    sentences = [
        f"Ticket T{i:05d} was reissued after a long explanation of the fare rules. " for i in range(30)
    ]
    text = "".join(sentences)
    assert len(text) > 2_000

    card = observe_result(memory, msg, "read_log", text)

    assert len(card.text) < len(text)
    for i in range(30):
        assert f"T{i:05d}" in card.text


def test_free_text_fallback_keeps_values_late_in_a_long_text(memory, msg):
    text = FILLER * 2_500 + KEY_SENTENCE + FILLER * 10

    card = observe_result(memory, msg, "read_notes", text)

    assert "$154.30" in card.summary
    assert "#W4923227" in card.summary


def test_user_turn_is_kept_whole(memory, msg):
    text = "Hi, I'm mia_li_3668. Please cancel ZFA04Y but not NO6JO3; refund to credit_card_4421486."

    card = memory.observe(msg.user(text))

    assert card.kind is CardKind.USER_INSTRUCTION
    assert card.text == text
    assert card.summary == f"[{card.id}] user: {text}"
    assert {"mia_li_3668", "zfa04y", "no6jo3", "credit_card_4421486"} <= card.terms


def test_names_are_terms_but_words_capitalized_at_a_sentence_start_are_not(memory, msg):
    card = memory.observe(msg.user("Yes, please. The booking is for Omar Davis. Would HAT136 work?"))

    assert {"omar", "davis", "hat136"} <= card.terms
    assert card.terms.isdisjoint({"yes", "the", "would"})


def test_a_number_with_thousands_separators_is_one_value_that_matches_the_record(memory, msg):
    card = memory.observe(msg.user("Keep it under $1,000, please; I fly 12,000 miles a year. Code 7447."))

    assert [(f.kind, f.value) for f in card.facts] == [("amount", "$1,000"), ("id", "12,000"), ("id", "7447")]
    assert {"1,000", "1000", "12000", "7447"} <= card.terms  # "$1,000" finds a record's 1000
    assert card.terms.isdisjoint({"000", "1", "12"})  # no digit group read as an identifier of its own
    assert f"[{card.id}] user: $1,000, 12,000, 7447" == memory.compressor.render(card, detail="skeleton")


def test_a_decimal_number_or_an_address_is_one_identifier_and_a_list_of_ids_stays_apart(memory, msg):
    card = memory.observe(msg.user("Refund 1,234.50 USD for items 4579334072,1421289881 from 10.0.0.1."))

    assert {"1,234.50", "1234.50", "4579334072", "1421289881", "10.0.0.1"} <= card.terms
    assert card.terms.isdisjoint({"234", "50"})


def test_a_number_that_only_appears_inside_an_amount_stays_a_value_of_its_own(memory, msg):
    card = memory.observe(msg.user("Order 12 costs $120; refund 1,234.50 USD for 50 items."))

    ids = {f.value for f in card.facts if f.kind == "id"}
    assert {"12", "50"} <= ids and "1,234.50" not in ids  # the amount's own number is the amount
    assert {"$120", "1,234.50 USD"} <= {f.value for f in card.facts if f.kind == "amount"}


def test_a_time_is_one_value_not_its_hours_and_minutes(memory, msg):
    card = memory.observe(msg.assistant("HAT136 leaves at 07:30 PM and lands at 10:05 PM; 14 seats left."))

    assert [(f.kind, f.value) for f in card.facts] == [
        ("date", "07:30"),
        ("date", "10:05"),
        ("id", "HAT136"),
        ("id", "14"),
    ]
    skeleton = memory.compressor.render(card, detail="skeleton")
    assert skeleton == f"[{card.id}] assistant: 07:30, 10:05, HAT136, 14"


def test_an_iso_timestamp_with_its_fraction_and_zone_is_one_value(memory):
    """A deploy log's timestamps, as APIs write them: a later call (a rollback before the window
    closes) takes each whole, not its date and the pieces around its colons."""
    card = memory.observe_tool(
        "get_deploys",
        {"service": "api"},
        "Deploy d-8812 finished at 2024-05-01T10:00:00.123Z after build b-77 started at "
        "2024-05-01T09:58:12+02:00. Rollback window closes 2024-05-02T10:00:00Z.",
    )

    assert [(f.kind, f.value) for f in card.facts] == [
        ("date", "2024-05-01T10:00:00.123Z"),
        ("date", "2024-05-01T09:58:12+02:00"),
        ("date", "2024-05-02T10:00:00Z"),
        ("id", "d-8812"),
        ("id", "b-77"),
    ]


def test_tool_call_card_records_the_parsed_arguments(memory, msg):
    card = memory.observe(msg.call("call_9", "cancel_reservation", {"reservation_id": "ZFA04Y"}))

    assert card.kind is CardKind.TOOL_CALL
    assert card.tool_name == "cancel_reservation"
    assert card.tool_call_id == "call_9"
    assert card.arguments == {"reservation_id": "ZFA04Y"}
    assert card.summary == f"[{card.id}] assistant called cancel_reservation(reservation_id=ZFA04Y)"


def test_a_value_reused_by_a_later_call_links_the_cards(memory, airline_messages):
    cards = [memory.observe(m) for m in airline_messages]
    user_details, booking_call = cards[3], cards[8]

    assert booking_call.kind is CardKind.TOOL_CALL
    assert booking_call.id in memory.card(user_details.id).decision_links
    assert any(s.name == "causal" for s in memory.card(user_details.id).scores)


def test_a_call_links_to_the_card_holding_its_values_together_not_to_one_sharing_a_few(memory, msg):
    def booking(reservation, legs):
        flights = [{"origin": a, "destination": b, "flight_number": n, "date": d} for a, b, n, d in legs]
        return {"reservation_id": reservation, "cabin": "business", "flights": flights}

    memory.observe(msg.call("r1", "get_reservation_details", {"reservation_id": "JG7FMM"}))
    downgrading = memory.observe(
        msg.result(
            "r1", "get_reservation_details", booking("JG7FMM", [("MCO", "BOS", "HAT028", "2024-05-21")])
        )
    )
    memory.observe(msg.call("r2", "get_reservation_details", {"reservation_id": "LQ940Q"}))
    same_airports = memory.observe(
        msg.result(
            "r2", "get_reservation_details", booking("LQ940Q", [("MCO", "BOS", "HAT013", "2024-05-16")])
        )
    )

    search = memory.observe(
        msg.call("s1", "search_direct_flight", {"origin": "MCO", "destination": "BOS", "date": "2024-05-21"})
    )

    assert search.id in memory.card(downgrading.id).decision_links
    assert search.id not in memory.card(same_airports.id).decision_links


def test_a_timestamp_matches_its_day_but_not_every_date_of_its_year():
    from damc_core.extract import term_variants

    assert term_variants("2024-05-14T10:44:24") == ("2024-05-14t10:44:24", "05-14")
    assert "7504069" in term_variants("certificate_7504069")  # an id's number part still matches


SCAN_TEXTS = [
    KEY_SENTENCE * 3 + "Flights from JFK and LAX are sold out.\nNo digits here but a code: SFO.",
    "Refund of $\n42.10 is pending. Also 7\nUSD fee.\n" + FILLER * 20,  # amounts across a line break
    "Contact ana@example.com about #W4923227. " + FILLER * 5,
    "Read https://docs.acme.io/changelog#2026-03 and src/app/main.py (see [the FAQ](https://acme.io/faq)).",
    "",
]


@pytest.mark.parametrize("text", SCAN_TEXTS)
def test_values_a_summary_hands_on_equal_a_scan_of_the_whole_text(text):
    from damc_core.encode import _extractive_summary
    from damc_core.extract import TextScan

    summarized = TextScan(text)
    _extractive_summary(summarized, 200)

    fresh = TextScan(text)
    for kind in ("date", "amount", "email", "link", "identifier", "name"):
        assert summarized.distinct(kind) == fresh.distinct(kind), kind


@pytest.mark.parametrize("text", SCAN_TEXTS)
@pytest.mark.parametrize("limit", [1, 8, 4096])
def test_terms_of_a_shared_scan_equal_exact_terms_in_order(text, limit):
    from damc_core.extract import TextScan, exact_terms

    assert list(TextScan(text).terms(limit)) == list(exact_terms(text, limit=limit))


def test_an_amount_split_by_a_line_break_is_still_listed_after_a_summary(memory, msg):
    card = memory.observe(msg.user(FILLER * 20 + "You owe $\n42.10 now."))

    assert "$\n42.10" in card.text.partition(" | also: ")[2]
    assert "$\n42.10" in {f.value for f in card.facts}


def test_two_calls_of_one_tool_in_a_message_keep_both_their_arguments(memory, msg):
    card = memory.observe(
        msg.calls([("w1", "get_weather", {"city": "Oslo"}), ("w2", "get_weather", {"city": "Rome"})])
    )

    assert dict(card.arguments) == {"get_weather": {"city": "Oslo"}, "get_weather #2": {"city": "Rome"}}
    assert {"oslo", "rome"} <= card.terms


def test_keys_in_camel_case_or_spaced_are_classified_as_their_snake_case(memory, msg):
    """Numbers alone do not say they are ids: the key does, however the API writes it."""
    order = {"orderNumber": "4579334072", "Item ID": "6117189161", "shipped_at": "noon", "trackingNo": "77"}

    card = observe_result(memory, msg, "get_order", order)

    assert {f.path: f.kind for f in card.facts} == {
        "orderNumber": "id",
        "Item ID": "id",
        "shipped_at": "date",
        "trackingNo": "id",
    }


def test_a_record_in_an_envelope_is_read_as_the_response(memory, msg):
    wrapped = {"success": True, "data": RESERVATION, "meta": {"request_id": "req_8f3a2c91", "took_ms": 42}}

    card = observe_result(memory, msg, "get_reservation_details", wrapped)

    facts = {f.path: f.value for f in card.facts}
    assert facts["reservation_id"] == "ZFA04Y" and facts["status"] == "confirmed"  # not data.status
    assert facts["success"] == "true" and facts["meta.request_id"] == "req_8f3a2c91"  # the envelope, kept
    assert {entity for entity, _ in card.entity_keys} == {"ZFA04Y"}  # a newer lookup supersedes it


def test_a_list_in_an_envelope_keeps_its_name_and_a_small_record_its_place(memory, msg):
    listed = observe_result(memory, msg, "search", {"results": [{"flight_number": "HAT136"}], "took_ms": 42})
    described = observe_result(
        memory, msg, "whoami", {"data": {"user_id": "mia_li_3668"}, "links": ["a", "b"]}
    )

    assert listed.tables[0].path == "results"
    assert [f.path for f in described.facts] == ["data.user_id", "links"]  # no heavier than what is beside it


def rendered(card):
    """A card's facts as its summary shows them, after ``tool(arguments) -> ``."""
    return card.summary.partition(" -> ")[2]


def test_an_envelopes_field_named_like_a_path_of_the_records_is_the_responses(memory, msg):
    """The envelope's ``meta.page`` beside the record's ``meta`` and its ``notes`` beside the
    record's ``notes[0]`` would render under the record's names."""
    order = {"order_id": "W1", "status": "pending_refund", "meta": {"page": 5}}
    order["notes"] = ["gift", {"by": "mia"}]
    wrapped = {"data": order, "meta.page": 2, "notes": ["retried", {"by": "system"}], "status": "ok"}

    card = observe_result(memory, msg, "get_order", wrapped, {"order_id": "W1"})

    assert [(f.path, f.value) for f in card.facts] == [
        ("order_id", "W1"),
        ("status", "pending_refund"),
        ("meta.page", "5"),
        ("notes[0]", "gift"),
        ("notes[1].by", "mia"),
        ("response.meta.page", "2"),
        ("response.notes[0]", "retried"),
        ("response.notes[1].by", "system"),
        ("response.status", "ok"),
    ]
    assert rendered(card) == (
        "status=pending_refund; notes[0]=gift; meta(page=5); notes[1](by=mia); response.meta(page=2); "
        "response(notes[0]=retried; status=ok); response.notes[1](by=system)"
    )


def test_an_envelope_beside_a_record_with_a_response_of_its_own_is_named_envelope(memory, msg):
    nested = {"data": {"order_id": "W1", "status": "delivered", "response": {"status": "refund_requested"}}}
    dotted = {"data": {"ticket_id": "T9", "status": "open", "response.status": "awaiting_customer"}}

    first = observe_result(memory, msg, "get_order", {**nested, "status": "ok"}, {"order_id": "W1"})
    second = observe_result(memory, msg, "get_ticket", {**dotted, "status": "ok"}, {"ticket_id": "T9"})

    assert rendered(first) == "status=delivered; response(status=refund_requested); envelope(status=ok)"
    assert rendered(second) == "status=open; response(status=awaiting_customer); envelope(status=ok)"
    assert [f.path for f in second.facts] == ["ticket_id", "status", "response.status", "envelope.status"]


def test_an_envelopes_own_response_key_keeps_its_name_and_its_status_is_the_envelopes(memory, msg):
    wrapped = {"data": {"order_id": "W1", "status": "pending_refund", "total": 5}, "response": "accepted"}

    card = observe_result(memory, msg, "get_order", {**wrapped, "status": "ok"}, {"order_id": "W1"})

    facts = {f.path: f.value for f in card.facts}
    assert facts["response"] == "accepted" and facts["envelope.status"] == "ok"
    assert rendered(card) == "status=pending_refund; total=5; response=accepted; envelope(status=ok)"


def test_the_keys_of_an_envelope_are_named_apart_from_each_other_and_from_the_records(memory, msg):
    """Named as the response itself would name them: a dotted key beside the record it reads into
    is quoted, and a blank key is ``''``, not the record's fields or ``value``."""
    order = {"order_id": "W1", "status": "pending_refund", "value": 42, "total": 5}
    wrapped = {"data": order, "meta": {"page": 2}, "meta.page": 3, "": {"status": "ok"}}

    card = observe_result(memory, msg, "get_order", wrapped, {"order_id": "W1"})

    assert [(f.path, f.value) for f in card.facts][-3:] == [
        ("meta.page", "2"),
        ("'meta.page'", "3"),
        ("''.status", "ok"),
    ]
    assert rendered(card) == (
        "status=pending_refund; value=42; total=5; 'meta.page'=3; meta(page=2); ''(status=ok)"
    )


SEARCH_RESULTS = """1. Acme Cloud Pricing | Plans for every team
https://www.acmecloud.io/pricing?ref=nav
Compare Starter ($12/user/mo), Team ($29/user/mo) and Enterprise plans.

2. Acme Cloud pricing changes in 2026 - TechCrunch
https://techcrunch.com/2026/03/14/acme-cloud-raises-prices/
Acme Cloud raised its Team plan from $25 to $29 on March 14, 2026.

3. is Acme Cloud worth it? : r/devops
https://www.reddit.com/r/devops/comments/1abc23x/is_acme_cloud_worth_it/
Users discuss the price hike."""


def test_links_in_free_text_are_facts_of_their_own_not_their_pieces(memory, msg):
    card = observe_result(memory, msg, "web_search", SEARCH_RESULTS, {"query": "Acme Cloud pricing"})

    values = [f.value for f in card.facts]
    assert values[3:6] == [
        "https://www.acmecloud.io/pricing?ref=nav",
        "https://techcrunch.com/2026/03/14/acme-cloud-raises-prices/",
        "https://www.reddit.com/r/devops/comments/1abc23x/is_acme_cloud_worth_it/",
    ]
    assert "1abc23x" not in values and "03" not in values  # pieces of a link, not values


def test_a_fetch_of_a_searched_link_links_the_search_to_the_call(memory, msg):
    search = observe_result(memory, msg, "web_search", SEARCH_RESULTS, {"query": "Acme Cloud pricing"})
    url = "https://www.acmecloud.io/pricing?ref=nav"  # no digit: no identifier of it could link the cards

    fetch = memory.observe(msg.call("call_2", "fetch_page", {"url": url}))

    assert fetch.id in memory.card(search.id).decision_links


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("see https://x.io/a?b=1&c=2.", ["https://x.io/a?b=1&c=2"]),
        ("[docs](https://docs.acme.io/changelog#2026-03)", ["https://docs.acme.io/changelog#2026-03"]),
        (
            "https://en.wikipedia.org/wiki/Python_(language)",
            ["https://en.wikipedia.org/wiki/Python_(language)"],
        ),
        ("edit src/app/main.py, then ../shared/notes.txt", ["src/app/main.py", "../shared/notes.txt"]),
        (
            "FAILED tests/test_app.py::TestLogin::test_expired[utc] - AssertionError",
            ["tests/test_app.py::TestLogin::test_expired[utc]"],  # a rerun takes the node id whole
        ),
        ("~/data/x.csv /etc/hosts.conf s3://bucket/part-0001.parquet", None),
        ("C:\\data\\report.csv", ["C:\\data\\report.csv"]),
        ("and/or 2026/03/14 1.5/2.0 TCP/IP km/h HAT028/HAT277", []),
        (
            "README.md\n├── src/main.py\n└── setup.cfg\n[FILE] app.py\n[DIR] tests",
            ["README.md", "src/main.py", "setup.cfg", "app.py"],
        ),
        ("Built with Node.js.\nSee e.g.\nPrices rose 3.5 percent", []),
    ],
)
def test_links_are_urls_and_file_paths_with_a_folder_and_an_extension(text, found):
    from damc_core.extract import links

    assert list(links(text)) == (text.split() if found is None else found)


CARGO_BUILD = (  # cargo's output as a shell tool captures it from a terminal: coloured, with a progress bar
    "\x1b[1m\x1b[32m   Compiling\x1b[0m app v0.1.0 (/work/app)\n"
    "    Building [=====>    ] 41/80: serde\r    Building [=========> ] 79/80: app\r\n"
    "\x1b[0m\x1b[1m\x1b[38;5;9merror[E0425]\x1b[0m\x1b[0m\x1b[1m: "
    "cannot find value `conifg` in this scope\x1b[0m\n"
    "\x1b[0m  \x1b[0m\x1b[0m\x1b[1m\x1b[38;5;12m--> \x1b[0m\x1b[0msrc/main.rs:14:5\x1b[0m\n"
)


def test_terminal_output_is_read_as_the_terminal_shows_it_and_recalled_as_it_came(memory, msg):
    card = observe_result(memory, msg, "shell", CARGO_BUILD, {"command": "cargo build"})

    values = [f.value for f in card.facts]
    assert "src/main.rs" in values and "E0425" in values  # not 0msrc/main.rs, 38;5;9merror
    assert "src/main.rs" in card.terms
    assert "\x1b" not in card.summary and "\r" not in card.summary
    assert "41/80" not in card.summary and "Building [=========> ] 79/80: app" in card.summary
    assert memory.recall(card.id)["content"] == CARGO_BUILD


def test_nul_bytes_separate_the_names_they_sit_between(memory, msg):
    printed = "./src/app.py\x00./src/db/models.py\x00./tests/test_app.py\x00"  # find . -name '*.py' -print0

    card = observe_result(memory, msg, "shell", printed, {"command": "find . -name '*.py' -print0"})

    assert [f.value for f in card.facts] == ["./src/app.py", "./src/db/models.py", "./tests/test_app.py"]
    assert "\x00" not in card.summary
    assert memory.recall(card.id)["content"] == printed


def test_chinese_text_is_read_sentence_by_sentence_keeping_those_with_values(memory, msg):
    filler = "该公司表示将继续加大研发投入并进一步完善售后服务体系。" * 20
    news = (  # a Chinese news page: its full stops have no space after them
        f"华为于2024年3月15日发布了新款手机Mate 60 Pro。{filler}该机型售价为6999元。"
        f"{filler}产品型号为ALN-AL80的机型适用于中国大陆市场。{filler}"
    )

    card = observe_result(
        memory, msg, "fetch_page", news, {"url": "https://news.cn/tech/2024-03/15/c_1130.htm"}
    )

    assert "该机型售价为6999元。" in card.summary
    assert "产品型号为ALN-AL80的机型适用于中国大陆市场。" in card.summary  # whole, not only its code
    assert card.summary.count("该公司表示") <= 1 and card.tokens < len(news) // 4
    assert memory.recall(card.id)["content"] == news


def test_an_error_in_a_long_log_is_a_constraint_that_shows_the_error_line(memory, msg):
    requests = "\n".join(
        f"2024-05-01T10:00:{i:02d}.123Z INFO  [worker-3] GET /api/v2/orders/{1000 + i} 200 12ms"
        for i in range(60)
    )
    log = (
        f"{requests}\n2024-05-01T10:05:01.002Z ERROR [worker-3] POST /api/v2/payments 500 3012ms "
        "req_id=9c81beef: psycopg2.OperationalError: could not connect to server\n"
    )

    card = observe_result(memory, msg, "tail_log", log, {"path": "/var/log/app/api.log"})

    assert len(card.constraints) == 1 and len(card.constraints[0]) <= 120
    assert "ERROR [worker-3] POST /api/v2/payments 500" in card.constraints[0]  # not the first INFO lines


SEARCH_API_RESULTS = {  # a search API's answer, as LangChain's Tavily tool returns it
    "query": "budget hotels lisbon",
    "answer": None,
    "images": [],
    "results": [
        {
            "url": f"https://www.example{i}.com/lisbon/hotels?page={i}",
            "title": f"Top {i} budget hotels in Lisbon",
            "content": "Lisbon offers many affordable options near Rossio and Alfama. " * 3,
            "score": round(0.9 - i / 20, 2),
        }
        for i in range(1, 7)
    ],
    "response_time": 1.43,
}


def test_the_url_of_every_search_result_is_kept_as_the_result_s_identifier(memory, msg):
    card = observe_result(memory, msg, "tavily_search", SEARCH_API_RESULTS, {"query": "budget hotels lisbon"})

    skeleton = memory.compressor.render(card, detail="skeleton")

    for i in range(1, 7):  # the fifth result is as likely to be opened next as the first
        assert f"https://www.example{i}.com/lisbon/hotels?page={i}" in skeleton
    assert "Rossio" not in skeleton and "0.6" not in skeleton


@pytest.mark.parametrize(
    ("page", "cursor"),
    [
        (
            {
                "files": [{"id": "1a2B", "name": "Q3 report.pdf"}],
                "nextPageToken": "~!!~AI9FV7Tq_bbwDsUfA8CxX9AkREpjlkw",
            },
            "~!!~AI9FV7Tq_bbwDsUfA8CxX9AkREpjlkw",
        ),
        (
            {
                "ok": True,
                "channels": [{"id": "C012AB3CD"}],
                "response_metadata": {"next_cursor": "dGVhbTpDMDYxRkE1UEI="},
            },
            "dGVhbTpDMDYxRkE1UEI=",
        ),
        (
            {
                "nodes": [{"number": 12}],
                "pageInfo": {"endCursor": "Y3Vyc29yOnYyOpHOAAAAAQ==", "hasNextPage": True},
            },
            "Y3Vyc29yOnYyOpHOAAAAAQ==",
        ),
        (
            {
                "data": [
                    {"type": "articles", "id": "1", "attributes": {"title": "JSON:API paints my bikeshed!"}}
                ],
                "links": {
                    "self": "https://example.com/articles?page[number]=1&page[size]=1",
                    "next": "https://example.com/articles?page[number]=2&page[size]=1",
                },
            },
            "https://example.com/articles?page[number]=2&page[size]=1",
        ),
    ],
    ids=["page token", "cursor", "graphql end cursor", "json:api next link"],
)
def test_the_cursor_of_the_next_page_is_kept_whatever_it_looks_like(memory, msg, page, cursor):
    card = observe_result(memory, msg, "list_page", page)

    assert cursor in memory.compressor.render(card, detail="key")
    assert cursor in memory.compressor.render(card, detail="skeleton")  # the next page's call takes it


def test_an_access_token_is_no_identifier_a_skeleton_spreads():
    from damc_core.extract import fact_kind

    assert fact_kind("access_token", "ya29.a0AfH6SMBx") == "value"
    assert fact_kind("nextPageToken", "ya29.a0AfH6SMBx") == "id"


def test_the_files_of_a_directory_listing_are_values_a_skeleton_still_names(memory, msg):
    words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda")
    files = ["README.md", *(f"pipeline_{word}_stage.py" for word in words), "pyproject.toml"]
    listing = "\n".join(["docs", "tests", *files])  # one name a line, as a list_directory tool prints it

    card = observe_result(memory, msg, "list_directory", listing, {"dir_path": "."})

    assert [f.value for f in card.facts] == files
    # a later read_file(file_path="pipeline_lambda_stage.py") is about this card
    assert "pipeline_lambda_stage.py" in card.terms
    _, _, also = memory.compressor.render(card, detail="skeleton").partition(" | also: ")
    assert "pipeline_lambda_stage.py" in also


def test_a_link_in_a_record_is_an_identifier_whatever_its_key():
    from damc_core.extract import fact_kind

    assert fact_kind("source", "https://acme.io/faq") == "id"
    assert fact_kind("file", "src/app/main.py") == "id"
    assert fact_kind("note", "and/or") == "value"


MONGO_ORDERS = [  # mongoexport / EJSON.stringify of two orders, in canonical extended JSON
    {
        "_id": {"$oid": "5f8d0d55b54764421b7156c9"},
        "customer": "mia_li_3668",
        "total": {"$numberDecimal": "249.90"},
        "placed": {"$date": "2024-05-01T10:00:00Z"},
        "qty": {"$numberInt": "3"},
        "status": "paid",
    },
    {
        "_id": {"$oid": "5f8d0d55b54764421b7156ca"},
        "customer": "noah_kim_1042",
        "total": {"$numberDecimal": "12.00"},
        "placed": {"$date": {"$numberLong": "1714557600000"}},
        "qty": {"$numberInt": "1"},
        "status": "refunded",
    },
]


def test_mongodb_extended_json_values_are_read_as_the_values_they_wrap(memory, msg):
    card = observe_result(memory, msg, "find_orders", MONGO_ORDERS, {"filter": {"qty": {"$gt": 0}}})

    (orders,) = card.tables
    assert orders.columns == ("_id", "customer", "total", "placed", "qty", "status")
    first = ("5f8d0d55b54764421b7156c9", "mia_li_3668", "249.90", "2024-05-01T10:00:00Z", "3", "paid")
    assert orders.rows[0] == first
    assert orders.rows[1][3] == "1714557600000"  # a date as milliseconds stays in its column, verbatim

    one = observe_result(memory, msg, "find_one_order", MONGO_ORDERS[0])
    facts = {f.path: f for f in one.facts}
    assert facts["_id"] == Fact("_id", "5f8d0d55b54764421b7156c9", "id")
    assert facts["total"] == Fact("total", "249.90", "amount")
    assert one.entity_keys[0] == ("5f8d0d55b54764421b7156c9", "customer")  # the order, not its customer


def test_dynamodb_typed_attribute_values_are_read_as_the_values_they_type(memory, msg):
    query_output = {  # boto3's low-level client.query(...) response
        "Items": [
            {
                "order_id": {"S": "ORD-7781"},
                "amount": {"N": "249.90"},
                "status": {"S": "SHIPPED"},
                "skus": {"L": [{"S": "SKU-1"}, {"S": "SKU-2"}]},
                "address": {"M": {"city": {"S": "Seattle"}, "zip": {"S": "98101"}}},
                "gift": {"BOOL": False},
                "note": {"NULL": True},
            },
            {
                "order_id": {"S": "ORD-7782"},
                "amount": {"N": "12"},
                "status": {"S": "CANCELLED"},
                "skus": {"L": [{"S": "SKU-3"}]},
                "address": {"M": {"city": {"S": "Austin"}, "zip": {"S": "73301"}}},
                "gift": {"BOOL": True},
                "note": {"S": "leave at door"},
            },
        ],
        "Count": 2,
        "ScannedCount": 2,
        "LastEvaluatedKey": {"order_id": {"S": "ORD-7782"}},
    }

    card = observe_result(memory, msg, "query_orders", query_output, {"TableName": "orders"})

    (items,) = card.tables
    columns = ("order_id", "amount", "status", "skus", "address.city", "address.zip", "gift", "note")
    assert items.columns == columns
    assert items.rows == (
        ("ORD-7781", "249.90", "SHIPPED", "SKU-1; SKU-2", "Seattle", "98101", "false", ""),
        ("ORD-7782", "12", "CANCELLED", "SKU-3", "Austin", "73301", "true", "leave at door"),
    )
    assert "ORD-7782: status=CANCELLED" in card.constraints
    assert Fact("LastEvaluatedKey.order_id", "ORD-7782", "id") in card.facts  # where the next page starts


def test_a_one_letter_key_beside_plain_values_is_no_type_wrapper(memory, msg):
    card = observe_result(memory, msg, "stock_by_size", {"sku": "TEE-9", "stock": {"S": "4"}, "color": "red"})

    assert Fact("stock.S", "4", "value") in card.facts


def test_a_graphql_error_list_keeps_each_error_s_message_at_every_detail(memory, msg):
    response = {  # GitHub's GraphQL API: an error beside the part of the data that resolved
        "data": {"user": None, "viewer": {"login": "alice"}},
        "errors": [
            {
                "type": "NOT_FOUND",
                "path": ["user"],
                "locations": [{"line": 2, "column": 3}],
                "message": "Could not resolve to a User with the login of 'nobody'.",
            }
        ],
    }

    card = observe_result(
        memory, msg, "github_graphql", response, {"query": '{ user(login: "nobody") { id } }'}
    )

    assert card.kind is CardKind.TOOL_ERROR
    for detail in ("key", "skeleton"):
        rendered = memory._renderer.render(card, None, detail).summary
        assert "Could not resolve to a User with the login of 'nobody'." in rendered, detail
    # a result's prose stays out of key detail: only a failure's why is kept
    listing = observe_result(
        memory, msg, "list_commits", [{"sha": "9fceb02", "message": "Fix the login page crash"}]
    )
    assert "Fix the login page crash" not in memory._renderer.render(listing, None, "key").summary


@pytest.mark.parametrize(
    ("response", "why"),
    [
        (  # RFC 9457 problem details, as an HTTP API answers a refused request
            {
                "type": "https://example.com/probs/out-of-credit",
                "title": "You do not have enough credit.",
                "status": 403,
                "detail": "Your current balance is 30, but that costs 50.",
                "instance": "/account/12345/msgs/abc",
            },
            "Your current balance is 30, but that costs 50.",
        ),
        (  # an AWS Lambda function that raised, as lambda.invoke returns it
            {
                "errorMessage": "Order ORD-1 was not found in table orders",
                "errorType": "NotFoundError",
                "stackTrace": ["    at handler (/var/task/index.js:10:5)"],
            },
            "Order ORD-1 was not found in table orders",
        ),
    ],
    ids=["problem details", "lambda error"],
)
def test_an_http_problem_or_a_function_error_is_a_failed_call_that_says_why(memory, msg, response, why):
    card = observe_result(memory, msg, "call_api", response, {"path": "/account/12345/msgs"})

    assert card.kind is CardKind.TOOL_ERROR
    assert why in memory._renderer.render(card, None, "key").summary


def test_a_success_status_a_count_of_errors_or_a_checked_link_s_status_is_no_failure(memory, msg):
    batch = {"status": 200, "error_count": 3, "processed": 10, "batch_id": "B-77"}
    checked = {"url": "https://acme.io/old-pricing", "status": 404, "checked_at": "2024-05-01T10:00:00Z"}

    assert observe_result(memory, msg, "import_rows", batch).kind is CardKind.TOOL_RESULT
    assert observe_result(memory, msg, "check_link", checked).kind is CardKind.TOOL_RESULT


def test_json_numbers_keep_the_digits_the_api_wrote(memory, msg):
    charge = '{"charge_id": "ch_3MmlLr", "amount": 100.10, "fee": 2.50, "rate": 1e-3, "seats_left": 0}'

    card = observe_result(memory, msg, "get_charge", charge, {"charge_id": "ch_3MmlLr"})

    facts = {f.path: f.value for f in card.facts}
    assert (facts["amount"], facts["fee"], facts["rate"]) == ("100.10", "2.50", "1e-3")
    assert "100.10" in card.terms  # "refund the $100.10 charge" names this card
    assert "amount=100.10; fee=2.50" in memory._renderer.render(card, None, "key").summary
    assert "seats_left=0" in card.constraints


def test_a_call_that_takes_an_amount_written_with_a_trailing_zero_links_to_its_card(memory, msg):
    observe_result(memory, msg, "get_charge", '{"charge_id": "ch_3MmlLr", "amount": 100.10}')
    memory.observe(msg.call("call_2", "refund", '{"charge": "ch_A", "amount": 100.10}'))  # parsed: 100.1

    charge = memory.cards()[1]
    assert "100.1" in charge.terms and "100.10" in charge.terms
    assert memory.cards()[2].id in memory.card(charge.id).decision_links
