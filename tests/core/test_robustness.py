"""Bad input never crashes ``DecisionMemory.observe``; the raw event is stored first and recallable,
and ``build()`` still returns a context an OpenAI-style API accepts."""

from __future__ import annotations

import base64
import functools
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from damc_core import (
    Card,
    CardKind,
    ConfigError,
    DecisionMemory,
    DefaultAssembler,
    DefaultEncoder,
    InMemoryStore,
    MemorySettings,
    SQLiteStore,
    Supersession,
    TemplateCompressor,
)
from damc_core.render import CardRenderer

DEEP_JSON = "[" * 10_000 + "]" * 10_000

CASES: dict[str, Callable[[Any], list[Any]]] = {  # msg builders -> events
    "invalid JSON tool output": lambda m: [
        m.call("call_1", "get_order_details", {"order_id": "#W4923227"}),
        m.result("call_1", "get_order_details", '{"order_id": "#W4923227", "status": '),
    ],
    "10,000-deep nested JSON text": lambda m: [
        m.call("call_1", "get_tree", {}),
        m.result("call_1", "get_tree", DEEP_JSON),
    ],
    "unknown role": lambda m: [
        {"role": "critic", "content": "The plan forgot the refund for order #W2378156."}
    ],
    "event without a role": lambda m: [{"content": "stray text"}],
    "empty event": lambda m: [{}],
    "tool result whose tool_call_id matches no call": lambda m: [
        m.user("What is my balance?"),
        m.result("call_nowhere", "get_balance", {"balance": 1200}),
    ],
    "tool call with invalid JSON arguments": lambda m: [
        m.call("call_1", "book_reservation", '{"flight_number": "HAT0'),
        m.result("call_1", "book_reservation", {"reservation_id": "HATHAT", "status": "confirmed"}),
    ],
    "tool output given as a Python object": lambda m: [
        m.call("call_1", "list_orders", {}),
        {"role": "tool", "tool_call_id": "call_1", "content": [{"order_id": "#W1", "total": 12.5}]},
    ],
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_event_is_stored_and_build_still_works(memory, msg, case, assert_valid_context):
    for event in CASES[case](msg):
        card = memory.observe(event)

        assert isinstance(card, Card)
        stored = memory.recall(card.id)
        if isinstance(event.get("content"), list):  # JSON payloads are stored as their JSON text
            assert json.loads(stored["content"]) == event["content"]
            assert {k: v for k, v in stored.items() if k != "content"} == {
                k: v for k, v in event.items() if k != "content"
            }
        elif "role" in event:
            assert stored == event
        else:
            assert stored == {"role": "unknown", **event}

    built = memory.build()
    assert_valid_context(built.messages)
    assert built.total_tokens > 0


@pytest.mark.parametrize("event", ["just a string", 42, None, ["a", "list"]], ids=repr)
def test_non_dict_event_becomes_a_note_and_is_stored(memory, event, assert_valid_context):
    card = memory.observe(event)

    assert card.kind is CardKind.SYSTEM_NOTE
    stored = memory.recall(card.id)
    assert stored["role"] == "unknown"
    if event is None or isinstance(event, str):
        assert stored["content"] == event
    else:
        assert json.loads(stored["content"]) == event
    assert_valid_context(memory.build().messages)


def test_deep_json_text_is_kept_as_text_not_parsed(memory, msg):
    memory.observe(msg.call("call_1", "get_tree", {}))
    card = memory.observe(msg.result("call_1", "get_tree", DEEP_JSON))

    assert card.kind is CardKind.TOOL_RESULT
    assert card.tables == ()
    assert memory.handle_recall({"card_id": card.id}) == DEEP_JSON


def test_invalid_json_arguments_are_kept_raw(memory):
    card = memory.observe(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "book", "arguments": "{not json"}}
            ],
        }
    )

    assert card.kind is CardKind.TOOL_CALL
    assert card.arguments == {"_raw": "{not json"}


def test_orphan_tool_result_is_remembered_but_not_sent_as_a_tool_message(
    memory, msg, assert_valid_context, memory_text
):
    memory.observe(msg.user("What is my balance?"))
    card = memory.observe(msg.result("call_nowhere", "get_balance", {"balance": 1200}))

    assert card.tool_name == "get_balance"
    assert "balance=1200" in card.summary
    built = memory.build()
    assert_valid_context(built.messages)
    assert all(m["role"] != "tool" for m in built.messages)
    # the newest event, yet not a message an API takes: it reaches the model as its card
    assert "balance=1200" in memory_text(built.messages)
    (decision,) = [d for d in built.decisions if d.card_id == card.id]
    assert decision.kept and "recent dialogue" not in decision.reason


@pytest.mark.parametrize("call_id", [None, ""])
def test_a_call_without_an_id_and_its_result_reach_the_model_as_cards(
    memory, msg, assert_valid_context, memory_text, call_id
):
    memory.observe(msg.user("Any flight to Seattle on May 20?"))
    call = msg.call("call", "search_direct_flight", {"destination": "SEA", "date": "2024-05-20"})
    call["tool_calls"][0]["id"] = call_id  # a chat API cannot pair such a call with its result
    memory.observe(call)
    memory.observe(msg.result(call_id, "search_direct_flight", [{"flight_number": "HAT136"}]))

    built = memory.build(budget=1000, recent_messages=2)  # a window of the call and its result

    assert_valid_context(built.messages)
    assert [m["role"] for m in built.messages] == ["system", "user"]  # the request, not only a prompt
    assert "HAT136" in memory_text(built.messages)


def test_a_conversation_opened_by_the_assistant_is_sent_from_the_users_turn(
    make_memory, msg, assert_valid_context
):
    memory = make_memory(settings=MemorySettings(recent_messages=2))
    memory.observe(msg.assistant("Hello! How can I help you today?"))
    memory.observe(msg.user("Book flight HAT136 for me."))

    built = memory.build(budget=1000)

    assert_valid_context(built.messages)  # some chat APIs reject a dialogue opened by the assistant
    assert built.messages[0] == msg.user("Book flight HAT136 for me.")


def test_binary_content_is_stored_as_base64_of_the_original_bytes(memory, msg, assert_valid_context):
    payload = b"\x89PNG\r\n\x1a\n\xff\xfe\xfd" + bytes(range(256)) * 4
    memory.observe(msg.call("call_1", "download_receipt", {"order_id": "#W4923227"}))

    card = memory.observe(msg.result("call_1", "download_receipt", payload))

    stored = memory.recall(card.id)["content"]
    prefix = f"[binary content, {len(payload)} bytes, base64] "
    assert stored.startswith(prefix)
    assert base64.b64decode(stored[len(prefix) :]) == payload
    assert_valid_context(memory.build().messages)


def test_utf8_bytes_are_decoded(memory, msg):
    memory.observe(msg.call("call_1", "get_note", {}))
    card = memory.observe(msg.result("call_1", "get_note", "Café ☕ order #W1".encode()))

    assert memory.recall(card.id)["content"] == "Café ☕ order #W1"


def test_a_numpy_array_is_stored_whole_and_read_as_rows(memory, msg):
    seats = np.arange(4000).reshape(2000, 2)  # its repr prints "..." for all but the first and last rows
    memory.observe(msg.call("call_1", "seat_map", {"flight": "HAT136"}))

    card = memory.observe({"role": "tool", "tool_call_id": "call_1", "name": "seat_map", "content": seats})

    assert json.loads(memory.recall(card.id)["content"]) == seats.tolist()
    (table,) = card.tables
    assert len(table.rows) + table.left_out == 2000
    assert table.rows[0] == ("0", "1")


@pytest.mark.parametrize("role", ["user", "assistant", "tool"])
def test_none_content_is_stored_and_build_does_not_crash(memory, msg, role, assert_valid_context):
    if role == "tool":
        memory.observe(msg.call("call_1", "ping", {}))
        event = {"role": "tool", "tool_call_id": "call_1", "name": "ping", "content": None}
    else:
        event = {"role": role, "content": None}

    card = memory.observe(event)

    assert memory.recall(card.id) == event
    assert_valid_context(memory.build().messages, content=False)


@pytest.mark.parametrize("role", ["user", "assistant", "tool"])
def test_none_content_is_stored_as_text_in_every_local_store(make_memory, msg, role):
    """Every store refuses a record without a text body; ``observe`` never hands one over: a
    message whose content is ``None`` is stored as its JSON, ``"content": null`` and all."""
    event: dict[str, Any] = {"role": role, "content": None}
    if role == "tool":
        event.update(tool_call_id="call_1", name="ping")
    for store in (InMemoryStore(), SQLiteStore(":memory:")):
        memory = make_memory(store=store)
        if role == "tool":
            memory.observe(msg.call("call_1", "ping", {}))

        card = memory.observe(event)

        assert memory.recall(card.id) == event
        assert json.loads(store.records(memory.namespace)[-1].body) == event


@pytest.mark.parametrize(
    "role",
    [
        pytest.param(
            "user",
        ),
        pytest.param(
            "assistant",
        ),
        "tool",
    ],
)
def test_none_content_never_reaches_the_model_as_null(memory, msg, role, assert_valid_context):
    memory.observe(msg.user("Hello"))
    if role == "tool":
        memory.observe(msg.call("call_1", "ping", {}))
        memory.observe({"role": "tool", "tool_call_id": "call_1", "name": "ping", "content": None})
    else:
        memory.observe({"role": role, "content": None})

    assert_valid_context(memory.build().messages)


def test_text_cut_inside_an_emoji_is_stored_verbatim_and_sent_as_valid_text(
    db_path, counter, clock, msg, assert_valid_context
):
    """A lone surrogate (JSON cut between the two halves of an emoji) is not UTF-8: the record keeps
    it escaped, the card and the model see a replacement character."""
    review = json.loads('{"review": "Great stay \\ud83d", "confirmation": "CONF-777"}')
    with SQLiteStore(db_path) as store:
        memory = DecisionMemory(store=store, counter=counter, clock=clock)
        memory.observe(msg.user("Get the review of H1"))
        card = memory.observe_tool("get_review", {"hotel": "H1"}, review)

        assert json.loads(memory.recall(card.id)["content"]) == review
        assert "CONF-777" in card.summary and "\ufffd" in card.summary
        sent = memory.build(recent_messages=0).messages
        assert_valid_context(sent)
        assert "CONF-777" in str(sent)

    with SQLiteStore(db_path) as store:
        assert DecisionMemory(store=store, counter=counter, clock=clock).card(card.id).summary == card.summary


def test_json_text_with_an_escaped_half_emoji_is_stored_and_reopened(db_path, counter, clock, msg):
    """What JavaScript's JSON.stringify writes for a string cut inside an emoji is ASCII text whose
    parsed value is not UTF-8: in a result or in call arguments, it makes a card all the same."""
    review = '{"review": "Great stay \\ud83d", "confirmation": "CONF-777"}'
    with SQLiteStore(db_path) as store:
        memory = DecisionMemory(store=store, counter=counter, clock=clock)
        memory.observe(msg.user("Get the review of H1"))
        arguments = '{"q": "stay \\ud83d"}'
        memory.observe({"role": "assistant", "content": None, "tool_calls": [_call("r1", arguments)]})
        card = memory.observe({"role": "tool", "tool_call_id": "r1", "content": review})

        assert memory.recall(card.id)["content"] == review
        assert "CONF-777" in card.summary and "\ufffd" in card.summary
        assert "stay \ufffd" in memory.build(recent_messages=0).messages[0]["content"]

    with SQLiteStore(db_path) as store:
        assert DecisionMemory(store=store, counter=counter, clock=clock).card(card.id).summary == card.summary


def _call(call_id: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "get_review", "arguments": arguments}}


def test_legacy_function_calls_are_recorded_as_tool_calls(make_memory, msg, assert_valid_context):
    """OpenAI's older function calling: an assistant's ``function_call``, then a ``function`` result."""
    memory = make_memory()
    memory.observe(msg.user("Where is order #W100?"))
    asked = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "get_order", "arguments": '{"order_id": "#W100"}'},
    }
    call = memory.observe(asked)
    result = memory.observe({"role": "function", "name": "get_order", "content": '{"status": "delivered"}'})

    assert call.summary == f"[{call.id}] assistant called get_order(order_id=#W100)"
    assert result.summary == f"[{result.id}] get_order(order_id=#W100) -> status=delivered"
    assert memory.recall(call.id) == asked  # the record keeps the message as sent
    sent = memory.build(recent_messages=2).messages
    assert_valid_context(sent)
    assert sent[-1]["role"] == "tool" and "delivered" in sent[-1]["content"]
    assert make_memory().build(recent_messages=2).messages == sent  # reopened: read the same way


def test_the_items_of_openais_responses_api_are_read_as_the_messages_they_stand_for(
    make_memory, assert_valid_context
):
    """The Responses API gives calls and their outputs as items without a role, and text as
    ``input_text`` / ``output_text`` parts; the records keep the items as they came."""
    order = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_order",
        "arguments": json.dumps({"order_id": "#W100"}),
        "status": "completed",
    }
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Where is order #W100? Count them."}]},
        order,
        {"type": "function_call_output", "call_id": "call_1", "output": json.dumps({"status": "delivered"})},
        {
            "type": "custom_tool_call",
            "call_id": "call_2",
            "name": "run_sql",
            "input": "SELECT count(*) FROM t",
        },
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "17"},
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Delivered; 17 rows.", "annotations": []}],
        },
    ]
    memory = make_memory()

    cards = [memory.observe(item) for item in items]

    assert [card.summary for card in cards] == [
        "[c0] user: Where is order #W100? Count them.",
        "[c1] assistant called get_order(order_id=#W100)",
        "[c2] get_order(order_id=#W100) -> status=delivered",
        "[c3] assistant called run_sql(_raw=SELECT count(*) FROM t)",
        "[c4] run_sql(_raw=SELECT count(*) FROM t) -> 17",
        "[c5] assistant: Delivered; 17 rows.",
    ]
    assert memory.recall("c1") == {**order, "role": "unknown"}  # as it came (no role: unknown)
    sent = memory.build(recent_messages=4).messages
    assert_valid_context(sent)
    assert sent[-1] == {"role": "assistant", "content": [{"type": "text", "text": "Delivered; 17 rows."}]}
    assert make_memory().build(recent_messages=4).messages == sent  # reopened: read the same way


def test_responses_items_an_older_release_stored_as_notes_are_read_as_calls_on_reopen(
    make_memory, store, counter, assert_valid_context
):
    """A release before Responses API items were read stored a card of each call and output as a
    note of an event of no role (``[c1] unknown: ``); reopened, the record is read as the call or
    result it is, so its card is made again from it, not sent as the note in the result's place."""
    memory = make_memory()
    memory.observe({"role": "user", "content": "Refund order #W100."})
    memory.observe(
        {"type": "function_call", "call_id": "call_1", "name": "refund", "arguments": '{"order_id": "#W100"}'}
    )
    memory.observe({"type": "function_call_output", "call_id": "call_1", "output": '{"refund_id": "RF-9"}'})
    namespace = memory.namespace
    renderer = CardRenderer(TemplateCompressor(), counter)
    as_stored_then = [
        renderer.summarized(
            DefaultEncoder().encode(
                json.loads(record.body), record=record, card_id=f"c{record.seq}", call=None
            )
        )
        for record in store.records(namespace)[1:]
    ]
    assert [card.summary for card in as_stored_then] == ["[c1] unknown: ", "[c2] unknown: "]
    store.put_cards(namespace, as_stored_then)

    reopened = make_memory()

    assert [card.kind for card in reopened.cards()] == [
        CardKind.USER_INSTRUCTION,
        CardKind.TOOL_CALL,
        CardKind.TOOL_RESULT,
    ]
    sent = reopened.build(recent_messages=3).messages
    assert_valid_context(sent)
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "[c2] -> refund_id=RF-9"}
    assert [card.summary for card in store.cards(namespace)] == [card.summary for card in reopened.cards()]


def test_the_openai_sdks_responses_output_items_are_read_as_the_calls_they_hold(
    make_memory, assert_valid_context
):
    """``client.responses.create(...).output`` holds pydantic items; a function or custom tool
    call among them has no role, and is still the assistant's call its output answers."""
    responses = pytest.importorskip("openai.types.responses")
    output = [
        responses.ResponseFunctionToolCall(
            type="function_call",
            id="fc_1",
            call_id="call_1",
            name="get_order",
            arguments=json.dumps({"order_id": "#W100"}),
            status="completed",
        ),
        responses.ResponseCustomToolCall(
            type="custom_tool_call", id="ctc_1", call_id="call_2", name="run_sql", input="SELECT 1"
        ),
    ]
    memory = make_memory()
    memory.observe({"role": "user", "content": "Where is order #W100?"})

    call = memory.observe(output[0])
    result = memory.observe(
        {"type": "function_call_output", "call_id": "call_1", "output": json.dumps({"status": "delivered"})}
    )
    custom = memory.observe(output[1])
    memory.observe({"type": "custom_tool_call_output", "call_id": "call_2", "output": "1"})

    assert call.summary == "[c1] assistant called get_order(order_id=#W100)"
    assert result.summary == "[c2] get_order(order_id=#W100) -> status=delivered"
    assert custom.summary == "[c3] assistant called run_sql(_raw=SELECT 1)"
    assert memory.recall("c1") == {**output[0].model_dump(exclude_none=True), "role": "unknown"}
    sent = memory.build(recent_messages=5).messages
    assert_valid_context(sent)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "tool"]
    assert sent[1]["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_order", "arguments": '{"order_id": "#W100"}'},
        }
    ]
    assert sent[3]["tool_calls"] == [
        {"id": "call_2", "type": "custom", "custom": {"name": "run_sql", "input": "SELECT 1"}}
    ]
    assert sent[4]["tool_call_id"] == "call_2"


def test_parallel_calls_of_the_responses_api_go_back_as_one_assistant_message_with_their_results(
    make_memory, assert_valid_context
):
    """The Responses API gives each of a step's parallel calls as an item of its own, then their
    outputs: the calls are one assistant message in Chat Completions, each output after them."""
    memory = make_memory()
    memory.observe({"role": "user", "content": "Where are orders #W100 and #W200?"})
    for n, order in ((1, "#W100"), (2, "#W200")):
        memory.observe(
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": "get_order",
                "arguments": json.dumps({"order_id": order}),
            }
        )
    for n, status in ((1, "shipped"), (2, "delivered")):
        memory.observe({"type": "function_call_output", "call_id": f"call_{n}", "output": status})

    sent = memory.build(recent_messages=5).messages

    assert_valid_context(sent)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [call["id"] for call in sent[1]["tool_calls"]] == ["call_1", "call_2"]
    assert [(m["tool_call_id"], m["content"]) for m in sent[2:]] == [
        ("call_1", "[c3] -> shipped"),  # its call is in the message before: not repeated
        ("call_2", "[c4] -> delivered"),
    ]


def test_a_step_of_parallel_responses_api_calls_enters_the_recent_window_or_leaves_it_whole(make_memory):
    """The window opens at the step's first call, not at its last one; cut from the oldest end to
    fit, it loses the whole step (its results go to the memory section), never a call of it alone,
    which would leave that call's result in neither."""
    memory = make_memory()
    memory.observe({"role": "user", "content": "Where are orders #W100 and #W200?"})
    for n in (1, 2):
        arguments = json.dumps({"order_id": f"#W{n}00"})
        memory.observe(
            {"type": "function_call", "call_id": f"call_{n}", "name": "get_order", "arguments": arguments}
        )
    notes = " ".join(f"word{i}" for i in range(150))
    for n in (1, 2):
        output = json.dumps({"status": "shipped", "tracking": f"1Z{n}99", "notes": notes})
        memory.observe({"type": "function_call_output", "call_id": f"call_{n}", "output": output})

    sent = memory.build().messages  # the newest two messages: both results
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == ["call_1", "call_2"]
    memory.observe({"role": "assistant", "content": "Both have shipped."})
    for budget in range(300, 1500, 20):
        sent = json.dumps(memory.build(budget=budget, recent_messages=5).messages)
        assert "1Z199" in sent and "1Z299" in sent, budget


def test_a_reasoning_item_of_the_responses_api_is_its_summary_and_no_turn_of_the_dialogue(
    make_memory, assert_valid_context, memory_text
):
    """A reasoning model's ``response.output`` opens with a reasoning item (its summary, and the
    encrypted reasoning when asked for), which Chat Completions has no message for."""
    responses = pytest.importorskip("openai.types.responses")
    thought, call = responses.Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1_715_785_200,
            "model": "o4-mini",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "I should look up order #W100."}],
                    "encrypted_content": "gAAAAB" + "Qk9PSw" * 200,
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "get_order",
                    "arguments": json.dumps({"order_id": "#W100"}),
                },
            ],
        }
    ).output
    unsummarized = responses.ResponseReasoningItem(type="reasoning", id="rs_2", summary=[])
    memory = make_memory()
    memory.observe({"role": "user", "content": "Where is order #W100?"})

    cards = [
        memory.observe(thought),
        memory.observe(call),
        memory.observe({"type": "function_call_output", "call_id": "call_1", "output": "shipped"}),
        memory.observe(unsummarized.model_dump()),
        memory.observe({"role": "assistant", "content": "Order #W100 has shipped."}),
    ]
    memory.observe({"role": "user", "content": "Thanks!"})

    assert cards[0].summary == "[c1] reasoning: I should look up order #W100."
    assert cards[3].summary == "[c4] reasoning: "
    assert memory.recall("c1") == {**thought.model_dump(exclude_none=True), "role": "unknown"}
    sent = memory.build(recent_messages=7).messages
    assert_valid_context(sent)
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert "Qk9PSw" not in json.dumps(sent)
    assert "[c1] reasoning: I should look up order #W100." in memory_text(sent)
    assert "[c4]" not in memory_text(sent)  # nothing to show


def test_a_responses_api_file_or_image_part_is_the_chat_part_it_stands_for(make_memory, assert_valid_context):
    """A user turn of ``input_text`` with an ``input_file`` (a PDF by its file id or inline) or an
    ``input_image`` at low detail goes back as Chat Completions' ``file`` and ``image_url`` parts."""
    memory = make_memory()
    pdf = "data:application/pdf;base64,JVBERi0xLjQK"
    card = memory.observe(
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Refund invoice INV-88 of order #W100."},
                {"type": "input_file", "file_id": "file-abc123", "filename": "invoice.pdf"},
                {"type": "input_file", "file_data": pdf, "filename": "receipt.pdf"},
                {"type": "input_image", "image_url": "https://example.com/parcel.png", "detail": "low"},
            ],
        }
    )

    assert card.summary.startswith("[c0] user: Refund invoice INV-88 of order #W100.")
    sent = memory.build(budget=4000).messages  # room for the media (765 tokens each)
    assert_valid_context(sent)
    assert sent[-1]["content"] == [
        {"type": "text", "text": "Refund invoice INV-88 of order #W100."},
        {"type": "file", "file": {"file_id": "file-abc123", "filename": "invoice.pdf"}},
        {"type": "file", "file": {"file_data": pdf, "filename": "receipt.pdf"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/parcel.png", "detail": "low"}},
    ]


def test_the_tools_the_provider_runs_are_cards_of_what_they_were_asked_and_found_and_no_turn(
    make_memory, assert_valid_context, memory_text
):
    """A Responses API ``response.output`` holds an item for each tool OpenAI ran itself (web and
    file search, remote MCP servers, code, images), which Chat Completions has no message for."""
    responses = pytest.importorskip("openai.types.responses")
    generated = "iVBORw0KGgo" + "QUFB" * 2000
    output = responses.Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1_715_785_200,
            "model": "gpt-4.1",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "web_search_call",
                    "id": "ws_1",
                    "status": "completed",
                    "action": {
                        "type": "search",
                        "query": "HAT069 JFK SEA delay",
                        "sources": [{"type": "url", "url": "https://status.example.com/HAT069"}],
                    },
                },
                {
                    "type": "file_search_call",
                    "id": "fs_1",
                    "status": "completed",
                    "queries": ["baggage allowance"],
                    "results": [
                        {
                            "file_id": "file-7",
                            "filename": "policy.pdf",
                            "score": 0.91,
                            "text": "Two bags free.",
                        }
                    ],
                },
                {
                    "type": "mcp_call",
                    "id": "mcp_1",
                    "server_label": "crm",
                    "name": "get_user",
                    "arguments": json.dumps({"user_id": "mia_li_3668"}),
                    "output": json.dumps({"membership": "gold"}),
                },
                {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": generated},
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "HAT069 is on time.", "annotations": []}],
                },
            ],
        }
    ).output
    memory = make_memory()
    memory.observe({"role": "user", "content": "Is HAT069 on time, and how many bags are free?"})

    cards = [memory.observe(item) for item in output]

    assert [card.kind for card in cards[:4]] == [CardKind.TOOL_RESULT] * 4
    assert [card.tool_name for card in cards[:4]] == [
        "web_search",
        "file_search",
        "get_user",
        "image_generation",
    ]
    assert cards[0].arguments == {"action": "search", "query": "HAT069 JFK SEA delay"}
    assert "https://status.example.com/HAT069" in cards[0].summary
    assert '"Two bags free."' in cards[1].summary
    assert cards[2].summary == "[c3] get_user(server_label=crm, user_id=mia_li_3668) -> membership=gold"
    assert memory.recall("c2") == {**output[1].model_dump(exclude_none=True), "role": "unknown"}
    assert generated in json.dumps(memory.recall("c4"))  # the record keeps the image; no card carries it
    sent = memory.build(recent_messages=6).messages
    assert_valid_context(sent)
    assert [m["role"] for m in sent] == ["system", "user", "assistant"]
    assert "QUFB" not in json.dumps(sent)
    assert "[c1] web_search(action=search, query=HAT069 JFK SEA delay)" in memory_text(sent)
    assert "Two bags free." in memory_text(sent)


def test_an_audio_reply_goes_back_by_its_id_until_it_expires_then_as_its_transcript(
    make_memory, assert_valid_context, clock
):
    """Chat Completions takes an earlier audio reply back as ``audio: {"id"}`` only, while the
    provider keeps it (``expires_at``); the SDK's message also holds the audio's base64."""
    chat = pytest.importorskip("openai.types.chat")
    spoken = "UklGRiQAAABXQVZF" * 4000
    completion = chat.ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_715_785_200,
            "model": "gpt-4o-audio-preview",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "audio": {
                            "id": "audio_abc123",
                            "data": spoken,
                            "expires_at": int(clock()) + 3600,
                            "transcript": "HAT069 leaves at 14:05 from gate B12.",
                        },
                    },
                }
            ],
        }
    )
    memory = make_memory()
    memory.observe({"role": "user", "content": "When does HAT069 leave?"})
    memory.observe(completion)
    memory.observe({"role": "user", "content": "Which gate?"})

    fresh = memory.build().messages
    clock.advance(2 * 3600)
    expired = memory.build().messages

    assert_valid_context(fresh)
    assert fresh[-2]["audio"] == {"id": "audio_abc123"}
    assert "audio" not in expired[-2]
    assert expired[-2]["content"] == "HAT069 leaves at 14:05 from gate B12."
    assert spoken not in json.dumps([fresh, expired])
    assert memory.recall("c1")["audio"]["data"] == spoken


def test_reasoning_items_take_no_place_in_the_recent_window(make_memory, assert_valid_context):
    """``recent_messages`` counts the messages sent: a reasoning model's turns each bring a
    reasoning item, which is never sent, and would otherwise shrink the window."""
    memory = make_memory()
    memory.observe({"role": "user", "content": "Where is order #W100?"})
    memory.observe({"role": "assistant", "content": "It shipped on May 2."})
    memory.observe({"role": "user", "content": "And order #W200?"})
    memory.observe(
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}]}
    )
    memory.observe({"role": "assistant", "content": "It is still pending."})

    sent = memory.build(recent_messages=3).messages

    assert_valid_context(sent)
    assert [m["content"] for m in sent[-3:]] == [
        "It shipped on May 2.",
        "And order #W200?",
        "It is still pending.",
    ]


def test_a_responses_api_message_is_sent_with_the_fields_of_a_chat_message_only(
    make_memory, assert_valid_context
):
    """A Responses API message item has fields no chat message has (``phase``, which newer models
    set, ``id``, ``status``); Chat Completions rejects a message with fields it does not know."""
    responses = pytest.importorskip("openai.types.responses")
    chat = pytest.importorskip("openai.types.chat")
    answer = responses.ResponseOutputMessage.model_validate(
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "phase": "final_answer",
            "content": [{"type": "output_text", "text": "Order #W100 has shipped.", "annotations": []}],
        }
    )
    memory = make_memory()
    memory.observe({"role": "user", "content": "Where is order #W100?"})
    memory.observe(answer)
    memory.observe(answer.model_dump())  # with its unset fields as None
    memory.observe({"role": "user", "content": "Thanks!"})

    sent = memory.build(recent_messages=4).messages

    assert_valid_context(sent)
    answered = {"role": "assistant", "content": [{"type": "text", "text": "Order #W100 has shipped."}]}
    assert sent[1:3] == [answered, answered]
    assert set(sent[1]) <= chat.ChatCompletionAssistantMessageParam.__annotations__.keys()
    assert memory.recall("c1") == answer.model_dump(exclude_none=True)  # the record keeps it as it came


def test_a_pydantic_object_that_is_no_message_is_kept_as_its_repr(memory):
    """Only a message or a tool call is read as its fields; a record of the user's own with an
    ``id`` is an unknown event whose text is its repr, as any object is."""
    from pydantic import BaseModel

    class Quote(BaseModel):
        id: str
        price: int

    card = memory.observe(Quote(id="Q1", price=5))

    assert card.summary == f"[{card.id}] unknown: Quote(id='Q1', price=5)"


def test_the_openai_sdks_message_objects_are_recorded_as_the_messages_they_hold(
    make_memory, msg, assert_valid_context
):
    """OpenAI's docs append ``response.choices[0].message`` to the messages as it is, or put its
    ``tool_calls`` into a dict: pydantic objects, not dicts."""
    response = _chat_completion(
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": '{"order_id": "#W100"}'},
                }
            ],
        },
        finish_reason="tool_calls",
    )
    reply = response.choices[0].message
    memory = make_memory()
    memory.observe(msg.user("Where is order #W100?"))

    call = memory.observe(reply)
    result = memory.observe(msg.result("call_1", "get_order", {"status": "delivered"}))
    again = memory.observe({"role": "assistant", "content": None, "tool_calls": reply.tool_calls})

    assert call.summary == f"[{call.id}] assistant called get_order(order_id=#W100)"
    assert result.summary == f"[{result.id}] get_order(order_id=#W100) -> status=delivered"
    assert again.summary == f"[{again.id}] assistant called get_order(order_id=#W100)"
    assert memory.recall(call.id) == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_order", "arguments": '{"order_id": "#W100"}'},
            }
        ],
    }
    memory.observe(msg.result("call_1", "get_order", {"status": "delivered"}))
    sent = memory.build(recent_messages=4).messages
    assert_valid_context(sent)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "tool"]
    assert make_memory().build(recent_messages=4).messages == sent  # reopened: read the same way


def test_a_whole_chat_completion_is_recorded_as_the_reply_it_brings(make_memory, assert_valid_context):
    """``observe(client.chat.completions.create(...))``, or its ``model_dump()``, records the first
    choice's message: it was the reply's repr, sent back to the model as a user turn."""
    completion = _chat_completion(
        {"role": "assistant", "content": "Order #W100 has shipped.", "refusal": None}, finish_reason="stop"
    )
    memory = make_memory()
    memory.observe({"role": "user", "content": "Where is order #W100?"})

    cards = [memory.observe(completion), memory.observe(completion.model_dump())]
    memory.observe({"role": "user", "content": "Thanks!"})

    assert [card.summary for card in cards] == [
        "[c1] assistant: Order #W100 has shipped.",
        "[c2] assistant: Order #W100 has shipped.",
    ]
    assert memory.recall("c1") == completion.choices[0].message.model_dump(exclude_none=True)
    sent = memory.build(recent_messages=4).messages
    assert_valid_context(sent)
    assert [m["role"] for m in sent] == ["user", "assistant", "assistant", "user"]


def test_an_assistant_reply_without_text_content_keeps_its_refusal_or_audio_transcript(memory, msg):
    memory.observe(msg.user("What is the gate of HAT107, and who else is booked on it?"))
    spoken = memory.observe(
        {
            "role": "assistant",
            "content": None,
            "audio": {
                "id": "audio_1",
                "data": "UklGRiQAAABXQVZF" * 50,
                "expires_at": 1_715_788_800,
                "transcript": "HAT107 boards at gate B12.",
            },
        }
    )
    refused = memory.observe(
        {"role": "assistant", "content": None, "refusal": "I can't share other passengers' bookings."}
    )
    refused_in_parts = memory.observe(
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't share that either."}]}
    )

    assert spoken.summary == f"[{spoken.id}] assistant: HAT107 boards at gate B12."
    assert {"hat107", "b12"} <= spoken.terms
    assert refused.summary == f"[{refused.id}] assistant: I can't share other passengers' bookings."
    assert refused_in_parts.summary == f"[{refused_in_parts.id}] assistant: I can't share that either."


def test_a_custom_tool_call_is_read_by_its_name_and_input(memory, msg, assert_valid_context):
    """OpenAI's custom tools: a call is ``{"type": "custom", "custom": {"name", "input"}}``, its
    input free text, not a function's JSON arguments."""
    query = "SELECT count(*) FROM orders WHERE status='pending'"
    memory.observe(msg.user("How many orders are pending?"))
    call = memory.observe(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "custom",
                    "custom": {"name": "run_sql", "input": query},
                }
            ],
        }
    )
    result = memory.observe({"role": "tool", "tool_call_id": "call_1", "content": "17"})

    assert call.tool_name == "run_sql"
    assert call.arguments == {"_raw": query}
    assert result.tool_name == "run_sql"
    assert result.summary == f"[{result.id}] run_sql(_raw={query}) -> 17"
    assert_valid_context(memory.build().messages)


def test_the_newest_custom_tool_call_goes_with_its_result_as_chat_completions_takes_it(
    memory, msg, assert_valid_context
):
    """Chat Completions takes a custom tool's call back in an assistant message, so the newest one
    stays in the recent dialogue with its result, as a function call would; one without its input
    text, which the API would reject, goes as cards."""
    patch = "*** Begin Patch\n*** Update File: app.py\n-retries = 1\n+retries = 3\n*** End Patch"
    memory.observe(msg.user("Raise the retries in app.py to 3"))
    made = {"id": "call_9", "type": "custom", "custom": {"name": "apply_patch", "input": patch}}
    memory.observe({"role": "assistant", "content": None, "tool_calls": [made]})
    memory.observe({"role": "tool", "tool_call_id": "call_9", "content": "Done: app.py, 1 hunk"})

    sent = memory.build().messages

    assert_valid_context(sent)
    assert sent[-2]["tool_calls"] == [made]
    assert sent[-1]["tool_call_id"] == "call_9" and "Done: app.py, 1 hunk" in sent[-1]["content"]

    memory.observe(msg.user("And in worker.py"))
    memory.observe(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{**made, "id": "call_10", "custom": {"name": "apply_patch"}}],
        }
    )
    memory.observe({"role": "tool", "tool_call_id": "call_10", "content": "Error: no input"})
    sent = memory.build().messages
    assert_valid_context(sent)
    assert not any(m.get("tool_calls") for m in sent[1:]) and "Error: no input" in sent[0]["content"]


def test_tool_calls_that_are_not_a_list_are_kept_in_the_record_only(memory, assert_valid_context):
    event = {"role": "assistant", "content": "Checking.", "tool_calls": 5}

    card = memory.observe(event)

    assert memory.recall(card.id) == event
    assert card.summary == "[c0] assistant: Checking."
    assert_valid_context(memory.build().messages)


@pytest.mark.parametrize(
    "payload",
    [[{"type": "economy"}, {"type": "business"}], [{"type": "gift_card", "text": "GC-1"}, {"type": "visa"}]],
)
def test_a_json_list_with_type_keys_is_data_not_content_parts(memory, payload):
    card = memory.observe_tool("list_options", {"flight": "HAT1"}, payload)

    assert all(option["type"] in card.summary for option in payload)


def test_deeply_nested_python_object_does_not_crash(memory, assert_valid_context):
    nested = functools.reduce(lambda inner, _: [inner], range(10_000), [])

    card = memory.observe_tool("get_tree", {}, nested)

    assert memory.recall(card.id) is not None
    assert_valid_context(memory.build().messages)


def test_tool_call_with_null_function_does_not_crash(memory, assert_valid_context):
    event = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": None}],
    }

    card = memory.observe(event)

    assert memory.recall(card.id) == event
    assert_valid_context(memory.build().messages)


def test_long_single_word_output_is_encoded_quickly(memory, msg):
    memory.observe(msg.call("call_1", "get_sequence", {"gene": "BRCA1"}))
    sequence = "acgt" * 1_000  # a DNA read, a minified slug, a lowercase hash: no digit, no space

    started = time.perf_counter()
    card = memory.observe(msg.result("call_1", "get_sequence", sequence))
    elapsed = time.perf_counter() - started

    assert memory.recall(card.id)["content"] == sequence
    assert elapsed < 0.3, f"observe took {elapsed:.2f} s for a 4,000-character output"


def test_polling_one_record_for_a_long_session_looks_only_at_the_poll_before(make_memory):
    """Each newer poll supersedes the one before; a card once superseded is not looked at again,
    so observe costs the same after 2,000 polls as at the first (it walked every earlier poll)."""
    looked_at: list[int] = []

    class CountingSupersession(Supersession):
        def superseded(self, new, older):
            looked_at.append(len(older))
            return super().superseded(new, older)

    memory = make_memory(store=InMemoryStore())
    memory.supersession = CountingSupersession()
    for seats in range(2_000):
        memory.observe_tool(
            "get_flight_status",
            {"flight_number": "HAT107"},
            {"flight_number": "HAT107", "status": "delayed", "available_seats": seats},
        )

    cards = [c for c in memory.cards() if c.kind is CardKind.TOOL_RESULT]
    assert [c.superseded_by for c in cards[-2:]] == [cards[-1].id, None]
    assert max(looked_at) == 1


def test_a_long_run_of_identifier_characters_is_read_once_and_summed_up_short(memory, msg):
    memory.observe(msg.call("call_1", "dump_keys", {}))
    dump = "a1_" * 10_000 + " " + "-".join(str(i) for i in range(10_000))  # 80 KB, two "words"

    started = time.perf_counter()
    card = memory.observe(msg.result("call_1", "dump_keys", dump))
    elapsed = time.perf_counter() - started

    assert memory.recall(card.id)["content"] == dump
    assert len(card.summary) < 2_000  # it was longer than the output itself
    assert elapsed < 5, f"observe took {elapsed:.1f} s for an 80 KB output"  # 15 s when scanned per position


def test_a_bracket_followed_by_a_long_run_of_spaces_is_fenced_in_one_pass(
    make_memory, msg, assert_valid_context
):
    memory = make_memory(settings=MemorySettings(budget=100_000, recent_messages=0))
    memory.observe(msg.call("call_1", "fetch_page", {}))
    memory.observe(msg.result("call_1", "fetch_page", "<" + " " * 50_000 + "x </memory>"))

    started = time.perf_counter()
    built = memory.build()
    elapsed = time.perf_counter() - started

    assert_valid_context(built.messages)
    assert built.memory.count("</memory>") == 1
    assert elapsed < 5, f"build took {elapsed:.1f} s"  # about 90 s when every split of the run was tried


# -- 10 MB outputs: one observe each (they take seconds) -------------------------------------------


def test_ten_megabyte_json_list_is_stored_and_compressed(make_memory, msg, assert_valid_context):
    memory: DecisionMemory = make_memory(settings=MemorySettings(budget=1500))
    records = [
        {"order_id": f"#W{i:07d}", "status": "delivered", "total": 12.5 + i % 90, "item": "Water Bottle"}
        for i in range(130_000)
    ]
    payload = json.dumps(records)
    assert len(payload) >= 10_000_000
    memory.observe(msg.user("List my orders."))
    memory.observe(msg.call("call_1", "list_orders", {"user_id": "mia_li_3668"}))

    card = memory.observe(msg.result("call_1", "list_orders", payload))

    assert memory.recall(card.id)["content"] == payload
    assert card.raw_tokens > 1_000_000
    built = memory.build()
    assert_valid_context(built.messages)
    assert built.total_tokens < 2_000


def test_a_megabyte_user_turn_is_stored_whole_and_sent_within_budget(make_memory, msg, assert_valid_context):
    memory: DecisionMemory = make_memory(settings=MemorySettings(budget=1500))
    memory.observe(msg.call("call_1", "search_direct_flight", {"origin": "JFK", "destination": "SEA"}))
    memory.observe(
        msg.result("call_1", "search_direct_flight", [{"flight_number": "HAT069", "cabin": "economy"}])
    )
    pasted = "Here is my whole travel diary, in economy all the way. " * 19_000
    assert len(pasted) >= 1_000_000

    card = memory.observe(msg.user(pasted))

    assert memory.recall(card.id)["content"] == pasted
    assert "economy" in card.terms  # the words a tool holds are read from the turn's start
    built = memory.build()
    assert_valid_context(built.messages)
    assert built.total_tokens < 3_000  # not the 260k tokens of the turn itself


@pytest.mark.parametrize(
    "output",
    [json.dumps({f"field_{i}": f"value_{i}" for i in range(2_000)}), "A" * 1_000_000],
    ids=["2,000 fields", "a megabyte without a break"],
)
def test_a_tool_output_on_one_long_line_is_sent_within_budget(make_memory, msg, assert_valid_context, output):
    memory: DecisionMemory = make_memory(settings=MemorySettings(budget=500, recent_messages=2))
    memory.observe(msg.user("Dump the config."))
    memory.observe(msg.call("call_1", "dump_config", {}))
    memory.observe({"role": "tool", "tool_call_id": "call_1", "content": output})

    built = memory.build()

    assert_valid_context(built.messages)
    assert built.messages[-1]["role"] == "tool"
    assert built.total_tokens <= 500


def test_ten_megabyte_plain_text_is_read_at_its_start_and_end_and_stored_whole(
    make_memory, msg, assert_valid_context
):
    memory: DecisionMemory = make_memory(settings=MemorySettings(budget=1500))
    filler = "The warehouse log continues with routine scans and nothing of note happened here. "
    opening = "Log of depot D-7731 for 2024-05-14. "
    middle = "Pallet P-55120 was moved to bay 12. "
    ending = "Refund R-88213 of $154.30 for order #W4923227 was approved. "
    payload = opening + filler * 62_000 + middle + filler * 62_000 + ending
    assert len(payload) >= 10_000_000
    memory.observe(msg.call("call_1", "read_warehouse_log", {"day": "2024-05-14"}))

    card = memory.observe(msg.result("call_1", "read_warehouse_log", payload))

    assert memory.recall(card.id)["content"] == payload
    for value in ("D-7731", "R-88213", "#W4923227", "$154.30"):  # a log's head and its outcome
        assert value in card.summary
    assert "P-55120" not in card.summary  # the middle is not read: the card says so, recall has it
    assert (
        f"read the first and last 500,000 of {len(payload.strip()):,} characters; recall {card.id}"
        in card.summary
    )
    assert "500,000" not in card.terms and "500" not in card.terms  # the note is not a fact of the log
    built = memory.build()
    assert_valid_context(built.messages)
    assert built.total_tokens < 2_000


def test_a_ten_megabyte_user_paste_keeps_the_values_of_its_start_and_end(make_memory, msg):
    memory: DecisionMemory = make_memory()
    pasted = (
        "Booking ZX9QK2 for Alice. "
        + "Nothing to add in this line, really. " * 280_000
        + "Pay with card 4417."
    )

    card = memory.observe(msg.user(pasted))

    assert memory.recall(card.id)["content"] == pasted
    assert {"zx9qk2", "4417"} <= card.terms
    assert "recall " + card.id in card.text


@pytest.mark.parametrize("budget", [300, 1000])
def test_one_long_line_of_emoji_and_its_recall_stay_within_the_budget(make_memory, msg, budget):
    reactions = "😀🚀🎉🔥💡🧪🛫🛬🧳🏨" * 2000  # several tokens to a character: no fixed ratio cuts it right
    memory = make_memory(settings=MemorySettings(budget=budget))
    memory.observe(msg.user("Show the reactions"))
    memory.observe(msg.call("call_1", "reactions", {}))
    card = memory.observe(msg.result("call_1", "reactions", reactions))
    assert memory.build().total_tokens <= budget

    memory.observe(msg.call("call_2", "recall", {"card_id": card.id}))
    memory.observe(msg.result("call_2", "recall", memory.handle_recall({"card_id": card.id})))
    built = memory.build()

    assert built.total_tokens <= budget and built.messages[-1]["content"].startswith("😀🚀🎉")


def test_a_message_with_a_malformed_media_block_is_a_card_and_the_memory_reopens(db_path, msg):
    store = SQLiteStore(db_path)
    memory = DecisionMemory(store=store)
    card = memory.observe({"role": "user", "content": "See the scan.", "blocks": [{"block_type": ["image"]}]})
    memory.observe(msg.user("Book HAT107."))

    assert memory.recall(card.id)["blocks"] == [{"block_type": ["image"]}]
    reopened = DecisionMemory(store=SQLiteStore(db_path))
    assert [c.id for c in reopened.cards()] == [c.id for c in memory.cards()]
    assert "Book HAT107." in json.dumps(reopened.build().messages)


class _Unprintable:
    def __repr__(self) -> str:
        raise AttributeError("no repr today")

    def __str__(self) -> str:
        raise AttributeError("no str either")


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {"order_id": "#W1"}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    "result",
    [_Unprintable(), {"order_id": "#W1", "note": _Unprintable()}, _circular()],
    ids=["object whose repr raises", "dict holding one", "circular dict"],
)
def test_a_result_that_cannot_be_printed_is_stored_and_the_agent_goes_on(
    memory, result, assert_valid_context
):
    card = memory.observe_tool("get_order", {"order_id": "#W1"}, result, call_id="call_1")

    assert memory.recall(card.id)["tool_call_id"] == "call_1"
    assert_valid_context(memory.build().messages)


@pytest.mark.parametrize(
    "arguments",
    [_circular(), {("db", 1): "hit"}, {"n": 7**6000}, {"who": _Unprintable()}],
    ids=["circular", "a key that is not text", "a number too long to print", "a value whose str raises"],
)
def test_call_arguments_json_cannot_hold_are_kept_as_text(memory, arguments, assert_valid_context):
    card = memory.observe_tool("lookup", arguments, {"status": "ok"}, call_id="call_1")

    call = memory.recall(f"c{card.seq - 1}")["tool_calls"][0]
    assert call["id"] == "call_1" and isinstance(call["function"]["arguments"], str)
    assert_valid_context(memory.build().messages)


def test_a_field_json_cannot_hold_is_stored_as_its_repr_and_the_rest_as_sent(memory, msg):
    call = msg.call("call_1", "get_order", {"order_id": "#W1"})
    card = memory.observe({**call, "content": "Looking it up.", "meta": {("db", 1): "hit"}})

    stored = memory.recall(card.id)
    assert stored["tool_calls"] == call["tool_calls"] and stored["content"] == "Looking it up."
    assert stored["meta"] == repr({("db", 1): "hit"})


@pytest.mark.parametrize("call_id", [["call_1"], {"id": "call_1"}], ids=["list", "dict"])
def test_a_result_whose_call_id_is_not_text_is_a_card_not_a_message(
    memory, msg, call_id, assert_valid_context
):
    memory.observe(msg.call("call_1", "get_order", {"order_id": "#W1"}))
    memory.observe({"role": "tool", "tool_call_id": call_id, "content": '{"status": "shipped"}'})

    built = memory.build(recent_messages=2)
    assert_valid_context(built.messages)
    assert "shipped" in built.memory


@pytest.mark.parametrize("recent", [1.5, "2", -1, True])
def test_a_recent_window_that_is_no_count_of_messages_is_a_clear_error(memory, msg, recent):
    memory.observe(msg.user("Hi"))

    with pytest.raises(ConfigError, match="recent_messages must be a whole number >= 0"):
        memory.build(recent_messages=recent)


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ({"store": "memory.sqlite3"}, r"store must be a store such as SQLiteStore\(path\).*'memory.sqlite3'"),
        ({"namespace": "u-42"}, r"namespace must be a Namespace\(user=\.\.\., session=\.\.\.\), got 'u-42'"),
        ({"settings": {"budget": 800}}, r"settings must be MemorySettings\(\.\.\.\), got \{'budget': 800\}"),
        ({"clock": time.time()}, r"clock must be a function giving Unix seconds \(time.time\)"),
        ({"selector": "topk"}, r"selector must be an object with a method select\(\), got 'topk'"),
        ({"assembler": DefaultAssembler}, r"assembler must be an object with a method assemble\(\)"),
        ({"valuator": object()}, r"valuator must be an object with a method value\(\)"),
    ],
    ids=[
        "store as a path",
        "namespace as a user id",
        "settings as a dict",
        "clock as a time",
        "selector as a name",
        "assembler as its class",
        "valuator of no kind",
    ],
)
def test_a_memory_given_the_wrong_kind_of_argument_says_which_when_made(given, match):
    """Each would make the memory, or its first ``observe``, fail with an ``AttributeError`` or a
    ``TypeError`` that names no argument."""
    with pytest.raises(ConfigError, match=match):
        DecisionMemory(**{"store": InMemoryStore(), **given})


def test_a_store_of_ones_own_needs_only_what_the_memory_calls():
    class Audited:
        """A proxy that logs writes and leaves closing to the store it wraps (it has no close)."""

        def __init__(self, inner: InMemoryStore) -> None:
            self.inner, self.writes = inner, 0
            self.record, self.records, self.cards = inner.record, inner.records, inner.cards

        def append(self, record):
            self.writes += 1
            self.inner.append(record)

        def put_cards(self, namespace, cards):
            self.writes += 1
            self.inner.put_cards(namespace, cards)

    store = Audited(InMemoryStore())
    memory = DecisionMemory(store=store)
    memory.observe({"role": "user", "content": "Book HAT107"})

    assert memory.messages() == [{"role": "user", "content": "Book HAT107"}]
    assert store.writes == 2  # the record, then its card


def test_a_text_part_without_text_is_sent_as_empty_text(memory, assert_valid_context):
    said = [{"type": "text", "text": None}, {"type": "text", "text": "Book HAT107."}]
    card = memory.observe({"role": "user", "content": said})

    assert memory.recall(card.id)["content"] == said
    (sent,) = memory.build().messages
    assert sent["content"] == [{"type": "text", "text": ""}, {"type": "text", "text": "Book HAT107."}]
    assert_valid_context([sent])


def _chat_completion(message: dict[str, Any], *, finish_reason: str) -> Any:
    """The OpenAI SDK's ``ChatCompletion`` of one choice holding ``message``, as a client returns it."""
    chat = pytest.importorskip("openai.types.chat")
    return chat.ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_715_785_200,
            "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": finish_reason, "message": message}],
        }
    )


def test_a_langchain_or_llamaindex_message_observed_as_it_is_is_kept_and_named_in_a_warning(
    make_memory, caplog, assert_valid_context
):
    """``observe`` reads OpenAI-style messages; a framework's own message (its text in ``blocks``,
    its role in ``type``) would become a note without the user's words. It is stored and carded as
    any event, and a warning says how to convert it, once per memory and framework."""
    messages = pytest.importorskip("langchain_core.messages")
    llms = pytest.importorskip("llama_index.core.llms")
    memory = make_memory()

    with caplog.at_level("WARNING", logger="damc"):
        memory.observe(messages.HumanMessage("Refund order #W100."))
        memory.observe(messages.HumanMessage("And order #W101."))
        memory.observe({"type": "human", "content": "And #W102."})
        memory.observe(llms.ChatMessage(role="user", content="Refund order #W103."))

    warnings = [r.getMessage() for r in caplog.records if r.name == "damc"]
    assert len(warnings) == 2
    assert "LangChain message" in warnings[0] and "convert_to_openai_messages" in warnings[0]
    assert "LlamaIndex ChatMessage" in warnings[1] and "to_openai_message_dicts" in warnings[1]
    assert len(memory.messages()) == 4  # every event is in the record all the same
    assert_valid_context(memory.build().messages)
