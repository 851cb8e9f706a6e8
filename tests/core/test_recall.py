"""The recall tool: an agent can expand any card back to its raw record."""

from __future__ import annotations

import json
import re

import pytest

from damc_core import RECALL_TOOL, ConfigError, DecisionMemory, MemorySettings


def test_recall_tool_is_a_valid_openai_function_tool():
    assert json.loads(json.dumps(RECALL_TOOL)) == RECALL_TOOL
    assert set(RECALL_TOOL) == {"type", "function"}
    assert RECALL_TOOL["type"] == "function"
    function = RECALL_TOOL["function"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", function["name"])
    assert function["name"] == "recall"
    assert isinstance(function["description"], str) and function["description"]
    parameters = function["parameters"]
    assert parameters["type"] == "object"
    assert parameters["properties"]["card_id"]["type"] == "string"
    assert parameters["required"] == ["card_id"]
    assert parameters["properties"]["match"]["type"] == "string"
    assert set(parameters["required"]) <= set(parameters["properties"])


def test_the_memory_section_speaks_of_recall_only_when_the_model_has_the_tool(remembered):
    without = remembered.build(budget=400)
    offered = remembered.build(budget=400, recall_tool=True)

    assert "recall(" not in without.memory  # a model told of it would call a tool it lacks
    assert "recall(id)" in offered.memory
    assert offered.memory_tokens <= 400 and without.memory_tokens <= 400


@pytest.fixture
def remembered(memory: DecisionMemory, airline_messages) -> DecisionMemory:
    for message in airline_messages:
        memory.observe(message)
    return memory


def test_handle_recall_returns_the_raw_tool_output(remembered, airline_messages):
    assert remembered.card("c3").tool_name == "get_user_details"

    assert remembered.handle_recall('{"card_id": "c3"}') == airline_messages[3]["content"]


@pytest.mark.parametrize(
    "arguments",
    [
        {"card_id": "c5"},
        '{"card_id": " [c5] "}',
        {"card_id": "[c5]"},
        {"card_id": "C5"},
        {"card_id": ["c5"]},
        {"card_id": "5"},  # the number alone, as a model may give it
        {"card_id": 5},
    ],
    ids=repr,
)
def test_handle_recall_accepts_a_dict_and_a_bracketed_id(remembered, airline_messages, arguments):
    assert remembered.handle_recall(arguments) == airline_messages[5]["content"]


def test_handle_recall_of_a_user_turn_returns_its_text(remembered, airline_messages):
    assert remembered.handle_recall({"card_id": "c1"}) == airline_messages[1]["content"]


@pytest.mark.parametrize("card_id", ["c99", "nope"])
def test_unknown_card_id_gives_a_clear_message(remembered, card_id):
    assert remembered.handle_recall({"card_id": card_id}) == f"No memory card {card_id!r} in this session."
    assert remembered.recall(card_id) is None


@pytest.mark.parametrize("card_id", [5, None, b"c1"], ids=repr)
def test_recall_of_an_id_that_is_not_text_is_a_config_error(remembered, card_id):
    with pytest.raises(ConfigError, match=r"recall takes a card id such as 'c12', got"):
        remembered.recall(card_id)


@pytest.mark.parametrize("arguments", [{}, {"card_id": ""}, {"id": "c3"}, '{"card_id": c3'], ids=repr)
def test_a_recall_without_a_readable_card_id_says_what_it_needs(remembered, arguments):
    assert remembered.handle_recall(arguments).startswith("recall needs a card_id")


def test_recall_of_a_calls_card_gives_the_calls(remembered):
    call = next(c for c in remembered.cards() if c.kind.value == "tool_call")

    (function,) = json.loads(remembered.handle_recall({"card_id": call.id}))

    assert function["name"] == call.tool_name and json.loads(function["arguments"]) == call.arguments


def test_recall_of_a_responses_api_call_or_output_gives_what_it_holds(make_memory, msg):
    """A Responses API output item holds its result in ``output`` and a call item its arguments
    beside its name, not in a chat message's ``content`` or ``tool_calls``; a legacy function
    call likewise in ``function_call``."""
    rows = [{"flight_number": f"HAT{100 + i}", "price": 100 + i} for i in range(40)]
    memory = make_memory(settings=MemorySettings(budget=600))
    memory.observe(msg.user("Find flights from JFK, the one at 133 dollars."))
    call = memory.observe(
        {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": '{"origin": "JFK"}'}
    )
    result = memory.observe({"type": "function_call_output", "call_id": "call_1", "output": json.dumps(rows)})
    legacy = memory.observe(
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "book", "arguments": '{"f": "HAT133"}'},
        }
    )

    assert json.loads(memory.handle_recall({"card_id": result.id})) == rows
    assert json.loads(memory.handle_recall({"card_id": result.id, "match": "HAT133"})) == [
        {"flight_number": "HAT133", "price": 133}
    ]
    assert json.loads(memory.handle_recall({"card_id": call.id})) == [
        {"name": "search", "arguments": '{"origin": "JFK"}'}
    ]
    assert json.loads(memory.handle_recall({"card_id": legacy.id})) == [
        {"name": "book", "arguments": '{"f": "HAT133"}'}
    ]


def test_recall_of_a_provider_run_tool_that_found_nothing_gives_what_it_was_asked(make_memory, msg):
    """A Responses API web search that came back without sources reads as an empty result; the
    model that recalls it gets the item it was, its query included, not an empty answer."""
    memory = make_memory()
    memory.observe(msg.user("What is the refund policy?"))
    search = memory.observe(
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "refund policy"},
        }
    )

    answer = memory.handle_recall({"card_id": search.id})

    assert json.loads(answer)["action"] == {"type": "search", "query": "refund policy"}


def test_recall_returns_the_whole_message(remembered, airline_messages):
    for card in remembered.cards():
        assert remembered.recall(card.id) == airline_messages[int(card.id[1:])]


def test_recall_still_works_after_the_in_process_view_is_cleared(remembered, airline_messages):
    remembered.clear()

    assert remembered.recall("c3") == airline_messages[3]


def test_agent_can_recall_the_rows_a_card_left_out(memory, msg):
    rows = [{"item_id": f"{4000000000 + i}", "color": "blue", "price": 20 + i} for i in range(80)]
    memory.observe(msg.user("Which items are there?"))
    memory.observe(msg.call("call_1", "list_items", {"product_id": "8310926033"}))
    card = memory.observe(msg.result("call_1", "list_items", rows))
    assert "4000000079" not in card.summary
    hint = re.search(r"^\[(c\d+)\].*\(\+(\d+) more rows\)", card.summary, re.S)
    assert hint is not None and hint.group(1) == card.id

    answer = memory.handle_recall(json.dumps({"card_id": hint.group(1)}))

    assert json.loads(answer) == rows


def test_messages_since_a_mark_are_the_events_observed_after_it(remembered, airline_messages):
    mark = remembered.event_count
    remembered.observe({"role": "user", "content": "Cancel 4WQ150"})
    remembered.observe({"role": "assistant", "content": "Cancelled."})

    assert [m["content"] for m in remembered.messages(since=mark)] == ["Cancel 4WQ150", "Cancelled."]
    assert remembered.messages(since=remembered.event_count) == []
    assert remembered.messages()[: len(airline_messages)] == airline_messages


def test_history_pairs_each_dialogue_event_of_a_reopened_memory_with_its_card(make_memory, airline_messages):
    first = make_memory()
    for message in airline_messages:
        first.observe(message)
    first.clear()
    first.observe({"role": "system", "content": "You book flights."})
    first.observe({"role": "user", "content": "Cancel 4WQ150"})
    first.observe({"role": "assistant", "content": "Cancelled."})

    reopened = make_memory()

    assert [(card_id, event["content"]) for card_id, event in reopened.history()] == [
        (f"c{len(airline_messages) + 2}", "Cancel 4WQ150"),
        (f"c{len(airline_messages) + 3}", "Cancelled."),
    ]


def test_a_recalled_record_reaches_the_model_as_it_is(make_memory, msg):
    rows = [{"flight_number": f"HAT{100 + i}", "price": 100 + i, "gate": f"B{i}"} for i in range(12)]
    memory = make_memory(settings=MemorySettings(budget=600, recent_messages=4))
    memory.observe(msg.user("Which gates do the flights on May 20 leave from?"))
    memory.observe(msg.call("call_1", "search_flights", {"date": "2024-05-20"}))
    search = memory.observe(msg.result("call_1", "search_flights", rows))
    assert memory.build().messages[-1]["content"].startswith(f"[{search.id}] -> ")  # a result: its card

    memory.observe(msg.call("call_2", "recall", {"card_id": search.id}))
    answer = memory.handle_recall({"card_id": search.id})
    memory.observe(msg.result("call_2", "recall", answer))
    built = memory.build()

    assert built.messages[-1] == {
        "role": "tool",
        "tool_call_id": "call_2",
        "name": "recall",
        "content": answer,
    }
    assert json.loads(answer) == rows  # verbatim, as the model asked


@pytest.mark.parametrize("recent", [2, 0])  # the answer as a message, or in the memory section
def test_a_recalled_list_of_long_notes_reaches_the_model_whole(make_memory, msg, recent):
    notes = [{"id": f"P{i}", "note": " ".join(f"w{j}" for j in range(120)) + f" END{i}"} for i in range(10)]
    memory = make_memory(settings=MemorySettings(budget=4000, recent_messages=recent))
    memory.observe(msg.user("What do the notes of my products end with?"))
    memory.observe(msg.call("call_1", "list_products", {}))
    listing = memory.observe(msg.result("call_1", "list_products", notes))
    assert "END3" not in str(memory.build().messages)  # the card clips each long note

    memory.observe(msg.call("call_2", "recall", {"card_id": listing.id}))
    memory.observe(msg.result("call_2", "recall", memory.handle_recall({"card_id": listing.id})))
    sent = str(memory.build().messages)

    assert all(f"END{i}" in sent for i in range(10))


def test_a_row_past_the_cards_rows_is_recalled_by_match_and_reaches_the_model(make_memory, msg):
    catalog = [{"sku": f"SKU{i:05d}", "name": f"widget {i}", "price": i} for i in range(2000)]
    memory = make_memory(settings=MemorySettings(budget=3000, recent_messages=2))
    memory.observe(msg.call("call_1", "list_catalog", {}))
    listing = memory.observe(msg.result("call_1", "list_catalog", catalog))
    memory.observe(msg.user("What does SKU01500 cost?"))
    assert '"widget 1500"' not in str(memory.build().messages)  # past the rows a card keeps

    memory.observe(msg.call("call_2", "recall", {"card_id": listing.id, "match": "sku01500"}))
    answer = memory.handle_recall({"card_id": listing.id, "match": "sku01500"})
    memory.observe(msg.result("call_2", "recall", answer))

    assert json.loads(answer) == [{"sku": "SKU01500", "name": "widget 1500", "price": 1500}]
    assert "widget 1500" in str(memory.build().messages)


def test_recall_by_match_keeps_the_fields_around_the_rows_that_hold_it(memory, msg):
    order = {
        "order_id": "#W4923227",
        "status": "delivered",
        "items": [{"item_id": "8310926033", "color": "blue"}, {"item_id": "1151293680", "color": "red"}],
        "payment_history": [{"payment_id": "credit_card_3124723", "amount": 120.5}],
    }
    memory.observe(msg.call("call_1", "get_order_details", {"order_id": "#W4923227"}))
    card = memory.observe(msg.result("call_1", "get_order_details", order))

    answer = memory.handle_recall({"card_id": card.id, "match": "BLUE"})

    assert json.loads(answer) == {
        "order_id": "#W4923227",
        "status": "delivered",
        "items": [{"item_id": "8310926033", "color": "blue"}],
    }
    assert memory.handle_recall({"card_id": card.id, "match": "green"}) == (
        f"Nothing in {card.id!r} contains 'green'; recall it without match for all of it."
    )
    assert json.loads(memory.handle_recall({"card_id": card.id, "match": ""})) == order


def test_recall_by_match_of_free_text_gives_its_matching_lines(memory, msg):
    log = "\n".join(f"12:{i:02d} job {i} ok" for i in range(60)) + "\n12:60 job 60 FAILED: disk full"
    memory.observe(msg.call("call_1", "read_log", {"job": "nightly"}))
    card = memory.observe(msg.result("call_1", "read_log", log))

    assert memory.handle_recall({"card_id": card.id, "match": "failed"}) == "12:60 job 60 FAILED: disk full"


def test_recall_by_match_of_a_page_on_one_line_gives_the_part_around_the_text(make_memory, msg):
    items = "".join(
        f'<li><a href="https://shop.example.com/p/{i:05d}?ref=search" data-sku="SKU-{i:05d}">'
        f'<span class="title">Widget {i}</span><span class="price">${10 + i % 50}.99</span></a></li>'
        for i in range(2000)
    )
    page = f"<!DOCTYPE html><html><body><ul>{items}</ul></body></html>"  # minified: one line
    memory = make_memory(settings=MemorySettings(budget=3000, recent_messages=2))
    memory.observe(msg.call("call_1", "requests_get", {"url": "https://shop.example.com/search?q=widget"}))
    card = memory.observe(msg.result("call_1", "requests_get", page))
    memory.observe(msg.user("What does SKU-01500 cost?"))

    memory.observe(msg.call("call_2", "recall", {"card_id": card.id, "match": "SKU-01500"}))
    answer = memory.handle_recall({"card_id": card.id, "match": "SKU-01500"})
    memory.observe(msg.result("call_2", "recall", answer))

    assert len(answer) < 1000 and answer.startswith("… ") and answer.endswith(" …")
    assert '<a href="https://shop.example.com/p/01500?ref=search" data-sku="SKU-01500">' in answer
    assert '<span class="title">Widget 1500</span>' in str(memory.build().messages[-1])


def test_a_recall_from_a_store_that_fails_is_an_answer_not_an_exception(make_memory, msg):
    memory = make_memory()
    memory.observe(msg.user("hello"))
    memory.store.close()

    assert memory.handle_recall({"card_id": "c0"}).startswith("Could not recall 'c0': ")


def test_recalling_part_of_a_record_leaves_the_record_as_it_was(make_memory, msg):
    items = [{"item_id": f"I{i:04d}", "name": f"lamp {i}", "price": 10 + i} for i in range(12)]
    memory = make_memory(settings=MemorySettings(budget=8000, recent_messages=2))
    memory.observe(msg.call("call_1", "get_order_details", {"order_id": "#W1"}))
    order = memory.observe(
        msg.result("call_1", "get_order_details", {"order_id": "#W1", "status": "pending", "items": items})
    )
    memory.observe(msg.call("call_2", "recall", {"card_id": order.id, "match": "I0003"}))
    memory.observe(
        msg.result("call_2", "recall", memory.handle_recall({"card_id": order.id, "match": "I0003"}))
    )

    assert memory.card(order.id).superseded_by is None and memory.card(order.id).stale_rows == ()
    sent = str(memory.build().messages)
    assert all(f"I{i:04d}" in sent for i in range(12))


def test_a_recalled_log_longer_than_its_room_is_cut_as_the_log_not_as_its_card(make_memory, msg):
    log = "\n".join(
        f"2024-05-01T10:{i % 60:02d}:00 INFO worker-{i % 9} processed job J{i:05d}" for i in range(400)
    )
    memory = make_memory(settings=MemorySettings(budget=2000, recent_messages=2))
    memory.observe(msg.user("What happened to job J00001?"))
    memory.observe(msg.call("call_1", "read_log", {}))
    listing = memory.observe(msg.result("call_1", "read_log", log))
    memory.observe(msg.call("call_2", "recall", {"card_id": listing.id}))
    memory.observe(msg.result("call_2", "recall", memory.handle_recall({"card_id": listing.id})))

    built = memory.build()
    answer = built.messages[-1]["content"]

    assert answer.startswith("2024-05-01T10:00:00 INFO worker-0 processed job J00000\n2024-05-01T10:01:00")
    assert "J00001" in answer and built.total_tokens <= 2000
