"""Tool outputs that hold data without being JSON become the cards their JSON would: Python reprs
(``str(dict)``, dataclass and pydantic reprs, SQL rows; LlamaIndex's ``FunctionTool`` sends
``str(raw_output)``, LangChain does for outputs JSON cannot encode), JSON in a Markdown fence or
after an introduction, one JSON object per line."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from dataclasses import dataclass

import numpy as np
import pytest

from damc_core import CardKind, DecisionMemory, InMemoryStore, Namespace
from damc_core.pyliteral import parse_python_literal
from damc_core.tabular import select_names

RESERVATION = {
    "reservation_id": "ZFA04Y",
    "status": "confirmed",
    "insurance": None,
    "refundable": True,
    "total_price": 1234.56,
    "flights": [
        {"flight_number": "HAT136", "date": "2024-05-20", "seats_left": 0},
        {"flight_number": "HAT039", "date": "2024-05-21", "seats_left": 4},
    ],
}


def looked_up(memory, msg, content):
    memory.observe(msg.call("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
    return memory.observe(msg.result("call_1", "get_reservation_details", content))


def test_a_printed_dict_becomes_the_card_its_json_would(make_memory, msg):
    from_json = looked_up(make_memory(), msg, json.dumps(RESERVATION))
    from_repr = looked_up(make_memory(), msg, str(RESERVATION))

    assert from_repr.kind is CardKind.TOOL_RESULT
    assert from_repr.facts == from_json.facts
    assert from_repr.tables == from_json.tables
    assert from_repr.summary.partition("]")[2] == from_json.summary.partition("]")[2]  # all but the id
    assert "HAT136" in from_repr.summary and "2024-05-21" in from_repr.summary


@dataclass
class Flight:
    number: str
    departs: datetime.datetime
    fare: decimal.Decimal


def test_values_a_repr_prints_as_calls_read_as_their_text():
    booking = {
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "on": datetime.date(2024, 5, 20),
        "at": datetime.datetime(2024, 5, 20, 14, 30, tzinfo=datetime.timezone.utc),
        "legs": (Flight("HAT136", datetime.datetime(2024, 5, 20, 9, 5), decimal.Decimal("129.50")),),
        "tags": {"window"},
        1: b"bytes",
    }

    assert parse_python_literal(repr(booking)) == {
        "id": "12345678-1234-5678-1234-567812345678",
        "on": "2024-05-20",
        "at": "2024-05-20T14:30:00+00:00",
        "legs": [{"number": "HAT136", "departs": "2024-05-20T09:05:00", "fare": "129.50"}],
        "tags": ["window"],
        "1": "bytes",
    }


def test_numpy_values_read_as_the_values_they_hold(memory):
    """A row read from a DataFrame (``df.iloc[0].to_dict()``) holds NumPy scalars, which JSON cannot
    encode: its repr prints them as ``np.int64(0)``."""
    row = {
        "flight_number": np.str_("HAT136"),
        "seats_left": np.int64(0),
        "price": np.float64(129.5),
        "refundable": np.True_,
        "legs": np.array([1, 2], dtype=np.int8),
    }

    card = memory.observe_tool("get_flight", {"flight_number": "HAT136"}, row)

    assert card.summary == (
        f"[{card.id}] get_flight(flight_number=HAT136) -> "
        "seats_left=0; price=129.5; refundable=true; legs=[1, 2]"
    )
    assert parse_python_literal(repr([np.float32(1.5), np.False_, np.arange(3)])) == [1.5, False, [0, 1, 2]]


def test_an_object_that_holds_itself_shows_the_marks_its_repr_prints(memory, msg):
    order = {"order_id": "#W4923227", "status": "shipped"}
    order["self"] = order  # a back-reference, as ORM objects and parsed graphs have
    history = ["#W4923227", "#W2611340"]
    history.append(history)

    card = memory.observe_tool("get_order", {"order_id": "#W4923227"}, order)  # JSON cannot hold it: its repr
    listed = memory.observe_tool("list_orders", {}, history)
    linked = memory.observe_tool("get_nodes", {}, str([{"id": "n1", "next": order}]))

    assert card.summary.endswith("-> status=shipped; self={...}")
    assert "[#W4923227, #W2611340, [...]]" in listed.summary
    assert "Ellipsis" not in card.summary + listed.summary + linked.summary
    assert parse_python_literal(repr((history,))) == [["#W4923227", "#W2611340", "[...]"]]


def test_sql_rows_printed_as_tuples_keep_every_value(memory, msg):
    memory.observe(msg.call("q", "sql_db_query", {"query": "SELECT id, name, total FROM orders"}))
    rows = [(1017, "Alice", decimal.Decimal("12.50")), (1018, "Bob", decimal.Decimal("7.25"))]
    card = memory.observe(msg.result("q", "sql_db_query", str(rows)))

    assert all(value in card.summary for value in ("1017", "Alice", "12.50", "1018", "Bob", "7.25"))
    assert "Decimal" not in card.summary
    (orders,) = card.tables  # rows, not one fact per tuple: a decision can keep the rows it needs
    assert orders.columns == ("id", "name", "total")  # named by the query
    assert orders.rows == (("1017", "Alice", "12.50"), ("1018", "Bob", "7.25"))


def test_sql_rows_are_named_by_the_query_so_a_skeleton_keeps_each_row_s_id(memory, msg):
    query = (
        "SELECT t.TrackId, t.Name, SUM(il.Quantity) AS Sold "
        "FROM Track t JOIN InvoiceLine il USING (TrackId) GROUP BY 1"
    )
    # LangChain's SQLDatabase.run prints the rows as tuples
    memory.observe(msg.call("q", "sql_db_query", {"query": query}))
    rows = "[(2850, 'The Fix', 5), (2868, 'Walkabout', 5), (3177, 'Hot Girl', 4)]"
    card = memory.observe(msg.result("q", "sql_db_query", rows))

    (sold,) = card.tables
    assert sold.columns == ("TrackId", "Name", "Sold")
    skeleton = memory.compressor.render(card, detail="skeleton")
    assert all(track_id in skeleton for track_id in ("2850", "2868", "3177"))  # what a next query filters by


def test_an_aggregate_s_rows_stay_in_its_skeleton(memory, msg):
    """A query's rows with no identifier column (one total per country) are all it answered: a
    skeleton keeps them whole rather than show an empty result."""
    query = (
        "SELECT c.Country, SUM(i.Total) AS TotalSales FROM Invoice i "
        "JOIN Customer c ON i.CustomerId = c.CustomerId GROUP BY c.Country ORDER BY TotalSales DESC LIMIT 3;"
    )
    memory.observe(msg.call("q", "sql_db_query", {"query": query}))
    card = memory.observe(
        msg.result("q", "sql_db_query", "[('USA', 523.06), ('Canada', 303.96), ('France', 195.1)]")
    )

    skeleton = memory.compressor.render(card, detail="skeleton")

    assert skeleton.endswith(" rows (3): Country TotalSales\n USA 523.06\n Canada 303.96\n France 195.1")
    assert memory.compressor.terms_read(card, detail="skeleton") == frozenset()  # whatever the focus


@pytest.mark.parametrize(
    ("sql", "names"),
    [
        ('select distinct "Album"."Title", count(*) from Album;', ["Title", "count(*)"]),
        ("WITH top AS (SELECT x, y FROM t) SELECT top.x, 'a, b' AS label FROM top", ["x", "label"]),
        ("SELECT TOP 5 [Name], coalesce(total, 0) FROM t", ["Name", "coalesce(total, 0)"]),
        ("SELECT * FROM Track", None),  # the query does not say its columns
        ("SELECT a.id, b.id FROM a JOIN b", None),  # two columns named alike
        ("please select the cheapest one from the list", None),
    ],
)
def test_the_names_of_the_columns_an_sql_query_returns(sql, names):
    assert select_names(sql) == names


ORDERS = [
    {"order_id": "A-1001", "status": "shipped", "total": "19.99"},
    {"order_id": "A-1002", "status": "cancelled", "total": "5.00"},
]


@pytest.mark.parametrize(
    "columns_and_rows",
    [
        {"columns": ["order_id", "status", "total"], "rows": [list(o.values()) for o in ORDERS]},
        {  # DataFrame.to_json(orient="split")
            "columns": ["order_id", "status", "total"],
            "index": [0, 1],
            "data": [list(o.values()) for o in ORDERS],
        },
        {  # ClickHouse's JSONCompact: a "rows" count beside the data
            "meta": [{"name": "order_id", "type": "String"}, {"name": "status"}, {"name": "total"}],
            "data": [list(o.values()) for o in ORDERS],
            "rows": 2,
        },
    ],
    ids=["columns and rows", "split", "meta and data"],
)
def test_a_table_sent_as_column_names_and_rows_becomes_the_table_its_records_would(
    make_memory, msg, columns_and_rows
):
    def searched(content):
        memory = make_memory()
        memory.observe(msg.call("q", "find_orders", {"user_id": "u1"}))
        return memory.observe(msg.result("q", "find_orders", json.dumps(content)))

    from_records, from_columns = searched(ORDERS), searched(columns_and_rows)

    assert from_columns.tables == from_records.tables
    assert any("A-1002" in constraint for constraint in from_columns.constraints)  # cancelled
    assert "columns" not in from_columns.summary and "meta" not in from_columns.summary


@pytest.mark.parametrize(
    "data",
    [
        {"columns": ["order_id", "status"], "rows": []},
        {"columns": ["order_id", "status"], "rows": [["A-1"]]},
        [["A-1", "shipped"], ["A-2"]],
        [[1], [2]],
    ],
    ids=["no rows", "a row narrower than its header", "ragged", "one column"],
)
def test_lists_that_are_not_a_table_keep_every_value_as_facts(memory, msg, data):
    memory.observe(msg.call("q", "find_orders", {"user_id": "u1"}))

    card = memory.observe(msg.result("q", "find_orders", json.dumps(data)))

    assert not card.tables
    assert all(value in card.summary for value in ("A-1", "shipped") if value in json.dumps(data))


def test_a_csv_output_becomes_the_table_its_records_would(make_memory, msg):
    def searched(content):
        memory = make_memory()
        memory.observe(msg.call("q", "find_orders", {"user_id": "u1"}))
        return memory.observe(msg.result("q", "find_orders", content))

    printed = 'order_id,status,total\nA-1001,shipped,19.99\n"A-1002","cancelled","5.00"\n'
    tab_separated = "order_id\tstatus\ttotal\nA-1001\tshipped\t19.99\nA-1002\tcancelled\t5.00"
    fenced = "Your orders:\n```csv\n" + printed + "```"

    expected = searched(json.dumps(ORDERS)).tables
    assert searched(printed).tables == expected
    assert searched(tab_separated).tables == expected
    assert searched(fenced).tables == expected


def test_a_csv_cell_keeps_its_quoted_delimiters_and_line_breaks(memory, msg):
    memory.observe(msg.call("q", "export_notes", {}))
    printed = 'ticket,note\nT-1,"late, by 2 hours"\nT-2,"two\nlines"'

    card = memory.observe(msg.result("q", "export_notes", printed))

    (notes,) = card.tables
    assert notes.rows == (("T-1", "late, by 2 hours"), ("T-2", "two\nlines"))


@pytest.mark.parametrize(
    "text",
    [
        "[INFO] server started on port 8080",
        "(see the attached file)",
        "ValueError('flight HAT136 is sold out')",
        "Flight(number=flight_number)",
        "{**defaults, 'seat': '12A'}",
        "datetime.date(2024, 13, 40)",
    ],
)
def test_text_that_only_looks_like_a_repr_stays_text(memory, msg, text):
    card = looked_up(memory, msg, text)

    assert not card.tables and text in card.text
    with pytest.raises(ValueError):
        parse_python_literal(text)


def test_a_repr_nested_past_the_parser_is_a_text_card_with_its_record_kept(memory, msg):
    deep = "[" * 300 + "'HAT136'" + "]" * 300

    card = looked_up(memory, msg, deep)

    assert card.kind is CardKind.TOOL_RESULT and "HAT136" in card.summary
    assert memory.recall(card.id)["content"] == deep


def test_a_repr_longer_than_the_encoder_reads_as_data_is_read_as_text(msg):
    from damc_core import DefaultEncoder

    memory = DecisionMemory(
        store=InMemoryStore(), namespace=Namespace("u", "s"), encoder=DefaultEncoder(max_literal_chars=100)
    )
    card = looked_up(memory, msg, str(RESERVATION))

    assert not card.tables and "HAT136" in card.summary


@pytest.mark.parametrize(
    ("wrapped", "note"),
    [
        ("```json\n{json}\n```", None),
        (
            "Here is the reservation:\n\n```\n{json}\n```\nAsk me to change it.",
            "Here is the reservation: … Ask me to change it.",
        ),
        ("Tool returned: {json}", "Tool returned:"),
        ("{repr}", None),
        ("Result:\n```python\n{repr}\n```", "Result:"),
    ],
    ids=["fenced", "fenced in prose", "introduced", "repr", "fenced repr"],
)
def test_data_inside_a_wrapper_becomes_the_card_its_json_would(make_memory, msg, wrapped, note):
    from_json = looked_up(make_memory(), msg, json.dumps(RESERVATION))
    content = wrapped.replace("{json}", json.dumps(RESERVATION, indent=2)).replace(
        "{repr}", repr(RESERVATION)
    )

    card = looked_up(make_memory(), msg, content)

    assert card.tables == from_json.tables
    assert [f for f in card.facts if f.path != "note"] == list(from_json.facts)
    assert [f.value for f in card.facts if f.path == "note"] == ([note] if note else [])
    assert note is None or note in card.summary  # what the tool said around its data, at full detail


@pytest.mark.parametrize(
    "serialized",
    [
        json.dumps({"result": json.dumps(RESERVATION)}),  # a wrapper that put the tool's JSON text in a field
        json.dumps(json.dumps(RESERVATION)),  # json.dumps applied twice
        repr({"result": json.dumps(RESERVATION, indent=2)}),  # LlamaIndex's str() of such a wrapper
    ],
    ids=["in a field", "twice", "in a repr"],
)
def test_json_serialized_inside_a_string_becomes_the_card_its_json_would(make_memory, msg, serialized):
    from_json = looked_up(make_memory(), msg, json.dumps(RESERVATION))

    card = looked_up(make_memory(), msg, serialized)

    assert card.tables == from_json.tables and card.facts == from_json.facts
    assert "HAT039" in card.summary and '\\"' not in card.summary  # not cut at a cell's 300 characters


def test_an_envelopes_status_beside_the_records_is_said_to_be_the_responses(memory):
    order = {"order_id": "O-77", "status": "cancelled", "total": 5.5, "items": 2}
    reply = {"status": "success", "data": order, "code": 200}
    card = memory.observe_tool("get_order", {"order_id": "O-77"}, reply)

    facts = {f.path: f.value for f in card.facts}
    assert facts["status"] == "cancelled" and facts["response.status"] == "success"
    assert facts["code"] == "200"


def test_an_introduction_that_rules_an_option_out_is_a_constraint(memory, msg):
    memory.observe(msg.call("s", "search_flights", {"date": "2024-05-20"}))
    content = "HAT136 is sold out. Other flights: " + json.dumps([{"flight_number": "HAT039", "seats": 4}])

    card = memory.observe(msg.result("s", "search_flights", content))

    assert card.tables[0].rows == (("HAT039", "4"),)
    assert any("sold out" in constraint for constraint in card.constraints)


def test_an_error_with_its_details_as_json_is_a_tool_error(memory, msg):
    memory.observe(msg.call("b", "book_flight", {"flight_number": "HAT136"}))

    card = memory.observe(
        msg.result("b", "book_flight", 'Error: payment declined {"code": 402, "card": "visa_4242"}')
    )

    assert card.kind is CardKind.TOOL_ERROR
    assert {f.path: f.value for f in card.facts}["card"] == "visa_4242"


def test_one_json_object_per_line_becomes_a_table(memory, msg):
    memory.observe(msg.call("s", "search_flights", {"date": "2024-05-20"}))
    lines = "\n".join(json.dumps({"flight_number": f"HAT{n}", "seats": n % 3}) for n in range(130, 134))

    card = memory.observe(msg.result("s", "search_flights", lines))

    assert card.tables[0].columns == ("flight_number", "seats")
    assert [row[0] for row in card.tables[0].rows] == ["HAT130", "HAT131", "HAT132", "HAT133"]


def test_key_value_lines_are_read_with_every_value_as_written(memory, msg):
    memory.observe(msg.call("r", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
    printed = (
        "passenger:\n"
        "  first_name: Mia\n"
        "  dob: 1990-04-05\n"
        "reservation_id: ZFA04Y\n"
        "insurance: no\n"
        "flights:\n"
        "  - flight_number: HAT136\n"
        "    departs: 14:00:00\n"
        "    gate: 0123\n"
        "  - flight_number: HAT039\n"
        "    departs: 09:05:00\n"
        "    gate: 12\n"
    )

    card = memory.observe(msg.result("r", "get_reservation_details", printed))

    facts = {f.path: f.value for f in card.facts}
    assert facts["reservation_id"] == "ZFA04Y" and facts["insurance"] == "no"  # not false
    assert facts["passenger.first_name"] == "Mia" and facts["passenger.dob"] == "1990-04-05"
    (flights,) = card.tables
    assert flights.columns == ("flight_number", "departs", "gate")
    assert flights.rows == (("HAT136", "14:00:00", "0123"), ("HAT039", "09:05:00", "12"))  # not 50400, 83


@pytest.mark.parametrize(
    "printed",
    [
        "id: A1\nstatus: cancelled\nprice: 100\n\nid: B2\nprice: 200\n",  # YAML: one record, B2 cancelled
        "order_id: #W2378156\nstatus: pending\n",  # YAML: a comment, the id gone
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
    ],
    ids=["blocks repeating a key", "a value starting with #", "aliases"],
)
def test_key_value_lines_yaml_would_misread_stay_text(memory, printed):
    card = memory.observe_tool("lookup", {}, printed)

    assert card.text == printed.strip() and not card.tables
    assert all(f.path == "text" for f in card.facts)


@pytest.mark.parametrize(
    "printed",
    [
        "status: success\nerror: null\nitems: 3",
        "ok: true\nerror: false\ncount: 2",
        "failed: 0\npassed: 12\nskipped: 1",
    ],
)
def test_key_value_lines_that_say_nothing_failed_are_a_result(memory, printed):
    assert memory.observe_tool("run_checks", {}, printed).kind is CardKind.TOOL_RESULT


@pytest.mark.parametrize(
    "payload", [{"Error": "Payment declined", "code": 402}, {"Status": "FAILED", "code": 7}]
)
def test_an_error_key_in_any_case_is_a_tool_error(memory, payload):
    assert memory.observe_tool("pay", {}, payload).kind is CardKind.TOOL_ERROR


def test_a_list_of_records_as_key_value_lines_becomes_a_table(memory, msg):
    memory.observe(msg.call("s", "search_flights", {"date": "2024-05-20"}))
    printed = "- flight_number: HAT136\n  status: sold out\n- flight_number: HAT039\n  status: available\n"

    card = memory.observe(msg.result("s", "search_flights", printed))

    assert card.tables[0].rows == (("HAT136", "sold out"), ("HAT039", "available"))
    assert any("HAT136" in constraint and "sold out" in constraint for constraint in card.constraints)


def test_an_error_printed_as_key_value_lines_is_a_tool_error(memory, msg):
    memory.observe(msg.call("b", "book_flight", {"flight_number": "HAT136"}))

    card = memory.observe(msg.result("b", "book_flight", "Error: payment declined\nCode: 402\n"))

    assert card.kind is CardKind.TOOL_ERROR
    assert {f.path: f.value for f in card.facts}["Code"] == "402"


def test_a_markdown_table_becomes_a_table_and_its_title_a_note(memory, msg):
    memory.observe(msg.call("s", "search_flights", {"date": "2024-05-20"}))
    printed = (
        "Flights on 2024-05-20:\n\n"
        "| flight | departs | seats | note |\n"
        "|:-------|--------:|------:|------|\n"
        "| HAT136 | 14:00 | 0 | a\\|b |\n"
        "| HAT039 | 09:05 | 4 | | extra |\n"
    )

    card = memory.observe(msg.result("s", "search_flights", printed))

    (flights,) = card.tables
    assert flights.columns[:4] == ("flight", "departs", "seats", "note")
    assert flights.rows[0][:4] == ("HAT136", "14:00", "0", "a|b")
    assert "extra" in flights.rows[1]  # a cell past the header is kept, under a column of its own
    assert {f.path: f.value for f in card.facts}["note"] == "Flights on 2024-05-20:"
    assert any("HAT136" in constraint for constraint in card.constraints)  # no seats left


def test_a_markdown_header_naming_a_column_twice_loses_no_column(memory):
    printed = "| a | a | a_2 |\n|---|---|---|\n| x | y | z |\n| p | q | r |"
    (table,) = memory.observe_tool("report", {}, printed).tables

    assert table.columns == ("a", "a_3", "a_2") and table.rows == (("x", "y", "z"), ("p", "q", "r"))


@pytest.mark.parametrize(
    "text",
    [
        "Note: the desk opens at 09:00.",
        "Summary: HAT136 is sold out.\n\nThe next flight, HAT039, leaves at 09:05 and has 4 seats.",
        "A long answer that explains the fare rules in detail before it shows one example.\n" * 5
        + '```json\n{"fare": 129}\n```',
        "---\ntitle: not a table\n---",
        "The fare rules [1] allow one free change before departure; see {terms} for details of refunds.",
        "Flight HAT136 departs at 09:05 from gate [B12].",
        "```\nnot data at all\n```",
        "Sure, I can help\nFirst, the refund",
        "Hello, world\nThanks, see you\nBest, Ann, and the team",
        "Paris, France\nRome, Italy",
    ],
    ids=[
        "one key",
        "key then prose",
        "data in a long explanation",
        "rules",
        "brackets",
        "gate",
        "fence",
        "two lines with a comma",
        "commas in prose",
        "places",
    ],
)
def test_prose_that_holds_a_colon_a_bracket_or_a_small_example_stays_text(memory, msg, text):
    card = looked_up(memory, msg, text)

    assert not card.tables and not any(f.path == "note" for f in card.facts)
    assert card.text == text


# LangChain's SQLDatabaseToolkit: sql_db_schema prints each table's CREATE TABLE statement and three
# sample rows (SQLDatabase.get_table_info), sql_db_list_tables the table names joined by ", ".
SCHEMA = (
    '\nCREATE TABLE "Album" (\n\t"AlbumId" INTEGER NOT NULL, \n\t"Title" NVARCHAR(160) NOT NULL, \n'
    '\t"ArtistId" INTEGER NOT NULL, \n\tPRIMARY KEY ("AlbumId"), \n'
    '\tFOREIGN KEY("ArtistId") REFERENCES "Artist" ("ArtistId")\n)\n\n/*\n3 rows from Album table:\n'
    "AlbumId\tTitle\tArtistId\n1\tFor Those About To Rock We Salute You\t1\n2\tBalls to the Wall\t2\n"
    '3\tRestless and Wild\t2\n*/\n\n\nCREATE TABLE "Invoice" (\n\t"InvoiceId" INTEGER NOT NULL, \n'
    '\t"CustomerId" INTEGER NOT NULL, \n\t"InvoiceDate" DATETIME NOT NULL, \n'
    '\t"BillingCountry" NVARCHAR(40), \n\t"Total" NUMERIC(10, 2) NOT NULL, \n'
    '\tPRIMARY KEY ("InvoiceId"), \n\tFOREIGN KEY("CustomerId") REFERENCES "Customer" ("CustomerId")\n'
    ")\n\n/*\n3 rows from Invoice table:\nInvoiceId\tCustomerId\tInvoiceDate\tBillingCountry\tTotal\n"
    "1\t2\t2021-01-01 00:00:00\tGermany\t1.98\n2\t1\t2021-01-02 00:00:00\tBrazil\t3.96\n"
    "3\t3\t2021-01-03 00:00:00\tCanada\t5.94\n*/"
)


def test_a_schema_s_column_names_are_its_facts_not_its_sql_words(memory, msg):
    memory.observe(msg.call("s", "sql_db_schema", {"table_names": "Album, Invoice"}))
    card = memory.observe(msg.result("s", "sql_db_schema", SCHEMA))

    stated = {fact.value for fact in card.facts}
    assert {"AlbumId", "ArtistId", "InvoiceId", "CustomerId", "BillingCountry"} <= stated  # a query's names
    assert stated.isdisjoint({"CREATE", "TABLE", "NOT", "NULL", "NVARCHAR", "INTEGER", "PRIMARY", "KEY"})
    assert {"albumid", "customerid", "invoicedate"} <= card.terms  # found by a focus that names them
    summary = memory.compressor.render(card)
    assert all(name in summary for name in ("AlbumId", "ArtistId", "CustomerId", "InvoiceId"))


def test_every_listed_table_is_a_search_term(memory, msg):
    memory.observe(msg.call("t", "sql_db_list_tables", {"tool_input": ""}))
    listed = "Album, Artist, Customer, Genre, Invoice, InvoiceLine, MediaType, PlaylistTrack, Track"
    card = memory.observe(msg.result("t", "sql_db_list_tables", listed))

    assert {name.lower() for name in listed.split(", ")} <= card.terms
    assert memory.compressor.render(card, detail="skeleton").endswith(f"-> {listed}")


def fetched(memory, msg, name, arguments, content):
    memory.observe(msg.call("call_1", name, arguments))
    return memory.observe(msg.result("call_1", name, content))


STATUS_FEED = """<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0">
<channel>
 <title>Acme Status</title>
 <link>https://status.acme.com</link>
 <description>Incidents and maintenance</description>
 <item>
  <title>Checkout API degraded</title>
  <link>https://status.acme.com/incidents/INC-2041</link>
  <guid isPermaLink="false">INC-2041</guid>
  <pubDate>Wed, 01 May 2024 09:12:00 GMT</pubDate>
 </item>
 <item>
  <title>Scheduled database maintenance</title>
  <link>https://status.acme.com/incidents/INC-2039</link>
  <guid isPermaLink="false">INC-2039</guid>
  <pubDate>Tue, 30 Apr 2024 22:00:00 GMT</pubDate>
 </item>
</channel>
</rss>"""


def test_an_rss_feed_is_its_channel_s_fields_and_a_table_of_its_items(memory, msg):
    card = fetched(memory, msg, "read_feed", {"url": "https://status.acme.com/history.rss"}, STATUS_FEED)

    assert {f.path: f.value for f in card.facts}["link"] == "https://status.acme.com"
    (items,) = card.tables
    assert (items.path, items.columns) == (
        "item",
        ("title", "link", "guid.isPermaLink", "guid.guid", "pubDate"),
    )
    assert items.rows[0][1:4] == ("https://status.acme.com/incidents/INC-2041", "false", "INC-2041")
    key = memory._renderer.render(card, None, "key").summary
    assert "INC-2039" in key and "Tue, 30 Apr 2024 22:00:00 GMT" in key
    assert "<item>" not in key


ARXIV_PAGE = """<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/"
      xmlns:arxiv="http://arxiv.org/schemas/atom">
  <title type="html">ArXiv Query: search_query=all:electron&amp;start=0&amp;max_results=2</title>
  <id>http://arxiv.org/api/cHxbiOdZaP56ODnBPIenZhzg5f8</id>
  <opensearch:totalResults>181923</opensearch:totalResults>
  <opensearch:startIndex>0</opensearch:startIndex>
  <entry>
    <id>http://arxiv.org/abs/hep-ex/0307015v1</id>
    <published>2003-07-07T13:46:39-04:00</published>
    <title>Multi-Electron Production at High Transverse Momenta in ep Collisions at HERA</title>
    <summary>Multi-electron production is studied at high electron transverse momentum.</summary>
    <author><name>H1 Collaboration</name></author>
    <arxiv:primary_category term="hep-ex" scheme="http://arxiv.org/schemas/atom"/>
    <link href="http://arxiv.org/abs/hep-ex/0307015v1" rel="alternate" type="text/html"/>
  </entry>
  <entry>
    <id>http://arxiv.org/abs/2405.00123v2</id>
    <published>2024-04-30T12:00:00Z</published>
    <title>Electron transport in graphene</title>
    <summary>We study electron transport.</summary>
    <author><name>A. Author</name></author>
    <author><name>B. Author</name></author>
    <arxiv:primary_category term="cond-mat.mes-hall" scheme="http://arxiv.org/schemas/atom"/>
    <link href="http://arxiv.org/abs/2405.00123v2" rel="alternate" type="text/html"/>
  </entry>
</feed>"""


def test_an_atom_feed_s_entries_are_rows_of_the_same_columns_without_namespaces(memory, msg):
    card = fetched(
        memory, msg, "arxiv_search", {"search_query": "all:electron", "max_results": 2}, ARXIV_PAGE
    )

    facts = {f.path: f.value for f in card.facts}
    assert facts["totalResults"] == "181923"  # opensearch:totalResults, as written
    (entries,) = card.tables
    assert entries.columns == (
        "id",
        "published",
        "title",
        "summary",
        "author",  # one author or two: one column
        "primary_category.term",
        "primary_category.scheme",
        "link.href",
        "link.rel",
        "link.type",
    )
    assert entries.rows[1][:3] == (
        "http://arxiv.org/abs/2405.00123v2",
        "2024-04-30T12:00:00Z",
        "Electron transport in graphene",
    )
    assert entries.rows[1][4] == "name=A. Author; name=B. Author"
    assert "hep-ex" in memory._renderer.render(card, None, "key").summary


def test_a_soap_response_is_the_record_its_body_wraps(memory, msg):
    response = """<?xml version="1.0"?>
<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/">
  <soap:Body>
    <m:GetOrderStatusResponse xmlns:m="http://example.com/orders">
      <m:OrderId>ORD-99812</m:OrderId>
      <m:Status>BACKORDERED</m:Status>
      <m:ExpectedShipDate>2024-06-03</m:ExpectedShipDate>
      <m:Total currency="USD">412.50</m:Total>
    </m:GetOrderStatusResponse>
  </soap:Body>
</soap:Envelope>"""

    card = fetched(memory, msg, "get_order_status", {"order_id": "ORD-99812"}, response)

    facts = {f.path: (f.value, f.kind) for f in card.facts}
    assert facts["OrderId"] == ("ORD-99812", "id")
    assert facts["Status"] == ("BACKORDERED", "status")
    assert facts["ExpectedShipDate"] == ("2024-06-03", "date")
    assert facts["Total.Total"] == ("412.50", "amount") and facts["Total.currency"][0] == "USD"
    assert card.entity_keys[0][0] == "ORD-99812"


@pytest.mark.parametrize(
    "text",
    [
        "<no output>",
        "<b>Note</b>: the export finished with 3 warnings.",
        '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaaaaaaaa">]><r><v>&a;&a;</v></r>',
        "<orders><order id='1'><total>5</total></orders>",  # not well-formed
        "<p>Order <b>ORD-1</b> shipped on 2024-05-01</p>",
        "<message>Order ORD-1 was placed and will ship on 2024-05-01.</message>",
    ],
    ids=[
        "angle brackets",
        "markup in prose",
        "entity declarations",
        "broken",
        "html fragment",
        "one element",
    ],
)
def test_text_that_holds_no_xml_records_stays_text(memory, msg, text):
    card = fetched(memory, msg, "export", {}, text)

    assert not card.tables and card.text == text


def test_an_xml_list_of_records_is_a_table_named_by_its_element(memory, msg):
    orders = """<orders count="2">
  <order id="A-1001"><total>58.20</total><status>shipped</status></order>
  <order id="A-1002"><total>12.00</total><status>cancelled</status></order>
</orders>"""

    card = fetched(memory, msg, "list_orders", {"customer": "c_77"}, orders)

    (table,) = card.tables
    assert (table.path, table.columns) == ("order", ("id", "total", "status"))
    assert table.rows == (("A-1001", "58.20", "shipped"), ("A-1002", "12.00", "cancelled"))
    assert "A-1002: status=cancelled" in card.constraints


def test_xml_nested_deeper_than_the_stack_is_read_as_its_words(memory, msg):
    nested = "<tree>" + "<node>" * 5000 + "<id>LEAF-7</id>" + "</node>" * 5000 + "</tree>"

    card = fetched(memory, msg, "dump_tree", {}, nested)

    assert "LEAF-7" in card.summary


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        (
            "<soap:Fault><faultcode>soap:Client</faultcode>"
            "<faultstring>Order ORD-1 was not found in region eu-west</faultstring></soap:Fault>",
            "Order ORD-1 was not found in region eu-west",
        ),
        (
            "<env:Fault><env:Code><env:Value>env:Sender</env:Value></env:Code>"
            '<env:Reason><env:Text xml:lang="en">Order ORD-1 was not found in region eu-west</env:Text>'
            "</env:Reason></env:Fault>",
            "Order ORD-1 was not found in region eu-west",
        ),
    ],
    ids=["soap 1.1", "soap 1.2"],
)
def test_a_soap_fault_is_a_failed_call_that_says_why_at_key_detail(memory, msg, fault, why):
    envelope = (
        '<env:Envelope xmlns:env="http://www.w3.org/2003/05/soap-envelope" '
        'xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"><env:Body>'
        f"{fault}</env:Body></env:Envelope>"
    )

    card = fetched(memory, msg, "get_order_status", {"order_id": "ORD-1"}, envelope)

    assert card.kind is CardKind.TOOL_ERROR
    assert why in memory._renderer.render(card, None, "key").summary


def test_an_xml_error_document_is_a_failed_call(memory, msg):
    s3_error = """<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>
<Key>reports/2024-06.csv</Key><RequestId>4442587FB7D0A2F9</RequestId></Error>"""

    card = fetched(
        memory, msg, "s3_get_object", {"Bucket": "acme-reports", "Key": "reports/2024-06.csv"}, s3_error
    )

    assert card.kind is CardKind.TOOL_ERROR
    key = memory._renderer.render(card, None, "key").summary
    assert "NoSuchKey" in key and "The specified key does not exist." in key
