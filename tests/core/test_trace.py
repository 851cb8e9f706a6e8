"""Reading traces: the three file shapes load; truncated or mis-shaped files give a TraceError that
says where; a trajectory cut after a tool call still builds a valid context."""

from __future__ import annotations

import json

import pytest

from damc_core import TraceError
from damc_core.encode import HOSTED_TOOL
from damc_core.trace import load_trajectories


def write_jsonl(path, items):
    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    return path


def test_json_list_of_messages_is_one_trajectory(tmp_path, airline_messages):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(airline_messages), encoding="utf-8")

    assert load_trajectories(path) == [airline_messages]


def test_jsonl_of_messages_is_one_trajectory(tmp_path, airline_messages):
    path = write_jsonl(tmp_path / "trace.jsonl", airline_messages)

    assert load_trajectories(path) == [airline_messages]


def test_tau_bench_results_give_one_trajectory_per_item(tmp_path, airline_messages):
    path = tmp_path / "results.json"
    items = [
        {"task_id": 0, "reward": 1.0, "traj": airline_messages},
        {"task_id": 1, "reward": 0.0, "traj": airline_messages[:4]},
    ]
    path.write_text(json.dumps(items), encoding="utf-8")

    assert load_trajectories(str(path)) == [airline_messages, airline_messages[:4]]


def test_jsonl_of_traj_objects_gives_one_trajectory_per_line(tmp_path, airline_messages):
    path = write_jsonl(
        tmp_path / "results.jsonl", [{"traj": airline_messages}, {"traj": airline_messages[:3]}]
    )

    assert load_trajectories(path) == [airline_messages, airline_messages[:3]]


def test_single_traj_object_is_accepted(tmp_path, airline_messages):
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"task_id": 3, "traj": airline_messages}), encoding="utf-8")

    assert load_trajectories(path) == [airline_messages]


def test_jsonl_with_a_truncated_last_line_names_the_line(tmp_path, airline_messages):
    path = write_jsonl(tmp_path / "cut.jsonl", airline_messages)
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) - 25], encoding="utf-8")  # the writer died mid-line
    last_line = len(airline_messages)

    with pytest.raises(TraceError, match=rf"cut\.jsonl:{last_line}: invalid JSON line \(truncated trace\?\)"):
        load_trajectories(path)


@pytest.mark.parametrize("comma_from", [0, 2], ids=["every line", "from line 3"])
def test_jsonl_with_commas_after_its_lines_names_the_comma(tmp_path, airline_messages, comma_from):
    """Lines copied out of a JSON array keep their commas: JSONL has nothing after a line's value."""
    path = tmp_path / "trace.jsonl"
    lines = [json.dumps(m) + ("," if i >= comma_from else "") for i, m in enumerate(airline_messages)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    with pytest.raises(
        TraceError, match=rf"trace.jsonl:{comma_from + 1}: a comma after the line's JSON value"
    ):
        load_trajectories(path)


def test_trace_error_is_a_value_error(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text('{"role": "user", "content": "hi"}\n{"role": "assis', encoding="utf-8")

    with pytest.raises(ValueError, match=r":2:"):
        load_trajectories(path)


def test_dict_without_traj_is_rejected(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model": "gpt-4o", "messages_file": "elsewhere.json"}), encoding="utf-8")

    with pytest.raises(TraceError, match="expected a non-empty list"):
        load_trajectories(path)


HI = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "non-empty list"),
        ("[]", "non-empty list"),
        ("not json at all", "neither JSON nor JSONL"),
        (json.dumps([{"traj": "not a list"}]), "item 0: no message list"),
        (json.dumps([[HI, "oops"]]), "item 0: message 1: str, expected a message"),
        (json.dumps([HI, {"content": "?"}]), "item 1: a message without 'role'"),
        (json.dumps([HI, None]), "item 1: NoneType, expected a message"),
        (f"{json.dumps(HI)}\n5\n", r"\.json:2: int, expected a message"),
        ("[" * 100_000 + "]" * 100_000, "JSON that cannot be read .RecursionError"),
        (f'[{{"role": "user", "content": "hi", "n": {"7" * 5000}}}]', "JSON that cannot be read .ValueError"),
        (f"{json.dumps(HI)}\n{'[' * 100_000}{']' * 100_000}\n", r"\.json:2: JSON that cannot be read"),
    ],
    ids=[
        "empty file",
        "empty list",
        "not JSON",
        "traj not a list",
        "non-object message",
        "message without a role",
        "trailing null",
        "JSONL line not a message",
        "nested past the interpreter's depth",
        "a number of 5,000 digits",
        "a JSONL line nested past the depth",
    ],
)
def test_malformed_traces_raise_trace_error(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(TraceError, match=match):
        load_trajectories(path)


def test_a_trace_written_with_a_byte_order_mark_is_read(tmp_path, airline_messages):
    path = tmp_path / "windows.json"
    path.write_text(json.dumps(airline_messages), encoding="utf-8-sig")

    assert load_trajectories(path) == [airline_messages]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_a_trace_written_as_utf_16_with_its_byte_order_mark_is_read(tmp_path, airline_messages, encoding):
    """Windows PowerShell's ``>`` and ``Out-File`` write UTF-16 with a byte order mark."""
    path = tmp_path / "powershell.jsonl"
    bom = {"utf-16-be": "\ufeff"}.get(encoding, "")  # Python's utf-16 and utf-32 write their own
    path.write_bytes((bom + "".join(json.dumps(m) + "\r\n" for m in airline_messages)).encode(encoding))

    assert load_trajectories(path) == [airline_messages]


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_a_trace_that_is_not_utf_8_is_an_error_naming_the_encoding(tmp_path, bom):
    path = tmp_path / "latin1.json"
    path.write_bytes(
        bom + json.dumps([{"role": "user", "content": "Jos\u00e9"}], ensure_ascii=False).encode("latin-1")
    )

    with pytest.raises(TraceError, match=r"latin1.json is not UTF-8 text .*byte 0xe9"):
        load_trajectories(path)


def test_missing_file_raises_trace_error(tmp_path):
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trajectories(tmp_path / "nowhere.json")


def test_trajectory_ending_with_an_unanswered_tool_call_builds_a_valid_context(
    tmp_path, memory, airline_messages, assert_valid_context
):
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(airline_messages[:9]), encoding="utf-8")  # ends with book_reservation call
    (trajectory,) = load_trajectories(path)
    assert trajectory[-1]["tool_calls"][0]["function"]["name"] == "book_reservation"

    for message in trajectory:
        memory.observe(message)
    built = memory.build()

    assert_valid_context(built.messages)
    sent_calls = [c["id"] for m in built.messages for c in m.get("tool_calls") or ()]
    assert "call_3" not in sent_calls
    assert "HAT069" in json.dumps(built.messages)


def test_openai_messages_objects_give_one_trajectory_each(tmp_path, airline_messages):
    """The shape of OpenAI chat fine-tuning files and many eval logs: {"messages": [...]}."""
    single = tmp_path / "one.json"
    single.write_text(json.dumps({"messages": airline_messages}), encoding="utf-8")
    lines = write_jsonl(
        tmp_path / "many.jsonl", [{"messages": airline_messages}, {"messages": airline_messages[:3]}]
    )
    listed = tmp_path / "many.json"
    listed.write_text(json.dumps([{"messages": airline_messages[:3]}, {"messages": airline_messages}]))

    assert load_trajectories(single) == [airline_messages]
    assert load_trajectories(lines) == [airline_messages, airline_messages[:3]]
    assert load_trajectories(listed) == [airline_messages[:3], airline_messages]


ANTHROPIC = [
    {"role": "user", "content": "Cancel ZFA04Y"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking it up."},
            {"type": "tool_use", "id": "tu_1", "name": "get_reservation_details", "input": {"id": "ZFA04Y"}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "confirmed"}]},
]
LANGCHAIN_DUMP = [
    {"type": "human", "data": {"content": "Cancel ZFA04Y"}},
    {"type": "ai", "data": {"content": "", "tool_calls": [{"name": "cancel", "args": {}, "id": "c1"}]}},
]
LLAMAINDEX_DUMP = [  # [m.model_dump(mode="json") for m in chat_history]
    {"role": "user", "additional_kwargs": {}, "blocks": [{"block_type": "text", "text": "Cancel ZFA04Y"}]},
    {
        "role": "assistant",
        "additional_kwargs": {
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "cancel", "arguments": "{}"}}
            ]
        },
        "blocks": [{"block_type": "text", "text": ""}],
    },
]
LANGCHAIN_MODEL_DUMP = [
    {"type": "human", "content": "Cancel ZFA04Y"},
    {"type": "ai", "content": "", "tool_calls": [{"name": "cancel", "args": {}, "id": "c1"}]},
]


@pytest.mark.parametrize(
    ("items", "match"),
    [
        (ANTHROPIC, r"item 1: .*Anthropic-style 'tool_use' content block"),
        (ANTHROPIC[2:], r"item 0: .*Anthropic-style 'tool_result' content block"),
        ([{"traj": ANTHROPIC}], r"item 0: message 1: .*Anthropic-style 'tool_use'"),
        (LANGCHAIN_DUMP, r"item 0: a LangChain message \(type 'human'\).*convert_to_openai_messages"),
        (LANGCHAIN_MODEL_DUMP, r"item 0: a LangChain message \(type 'human'\)"),
        ([{"traj": [HI, *LANGCHAIN_MODEL_DUMP]}], r"item 0: message 1: a LangChain message \(type 'human'\)"),
        (LLAMAINDEX_DUMP, r"item 0: a LlamaIndex ChatMessage .*to_openai_message_dicts"),
        ([HI, *LLAMAINDEX_DUMP[1:]], r"item 1: a LlamaIndex ChatMessage"),
        ([{"role": "User", "content": "hi"}], r"item 0: role 'User'; .*lower case \('user'\)"),
        ([HI, {"role": "assistant", "tool_calls": "cancel(ZFA04Y)"}], r"item 1: 'tool_calls' is a str"),
    ],
    ids=[
        "anthropic tool_use",
        "anthropic tool_result",
        "anthropic in traj",
        "langchain dump",
        "langchain model_dump",
        "langchain in traj",
        "llamaindex dump",
        "llamaindex call after a chat message",
        "capitalised role",
        "tool_calls not a list",
    ],
)
def test_other_message_formats_are_named_rather_than_read_as_no_tool_calls(tmp_path, items, match):
    """Tool calls in another format than OpenAI's would otherwise be read as plain text: a trace
    with no decision points, or a list taken for trajectories."""
    path = tmp_path / "other.json"
    path.write_text(json.dumps(items), encoding="utf-8")

    with pytest.raises(TraceError, match=match):
        load_trajectories(path)


RESPONSES_ITEMS = [
    {"role": "user", "content": "Cancel reservation ZFA04Y and EHGLP3."},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look both up."}]},
    {"type": "function_call", "call_id": "fc_1", "name": "get_reservation", "arguments": '{"id": "ZFA04Y"}'},
    {"type": "function_call", "call_id": "fc_2", "name": "get_reservation", "arguments": '{"id": "EHGLP3"}'},
    {"type": "function_call_output", "call_id": "fc_1", "output": '{"id": "ZFA04Y", "status": "confirmed"}'},
    {"type": "function_call_output", "call_id": "fc_2", "output": '{"id": "EHGLP3", "status": "confirmed"}'},
    {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Both are confirmed; cancelling."}],
    },
    {
        "type": "function_call",
        "call_id": "fc_3",
        "name": "cancel_reservation",
        "arguments": '{"id": "ZFA04Y"}',
    },
]


def test_responses_api_items_are_read_as_the_chat_messages_they_stand_for(tmp_path):
    """A trace saved from the Responses API (``input`` plus each ``response.output``): its calls
    are decisions, a step's parallel calls one assistant message, as ``observe`` reads them."""
    path = tmp_path / "responses.json"
    path.write_text(json.dumps(RESPONSES_ITEMS), encoding="utf-8")

    (trajectory,) = load_trajectories(path)

    assert [m["role"] for m in trajectory] == [
        "user",
        "reasoning",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "assistant",
    ]
    assert [c["id"] for c in trajectory[2]["tool_calls"]] == ["fc_1", "fc_2"]
    assert trajectory[3] == {"role": "tool", "tool_call_id": "fc_1", "content": RESPONSES_ITEMS[4]["output"]}
    assert trajectory[5] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Both are confirmed; cancelling."}],
    }
    assert trajectory[6]["tool_calls"][0]["function"] == {
        "name": "cancel_reservation",
        "arguments": '{"id": "ZFA04Y"}',
    }


def test_a_responses_trace_with_a_provider_run_tool_is_read_as_one_trajectory(tmp_path):
    """A web search the provider ran is an item without a role, like a call: the file is still
    one trajectory, the search a card of what it was asked and found."""
    web_search = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "PyCon 2027 dates"},
    }
    path = tmp_path / "responses.json"
    path.write_text(json.dumps([RESPONSES_ITEMS[0], web_search, *RESPONSES_ITEMS[1:]]), encoding="utf-8")

    (trajectory,) = load_trajectories(path)

    assert [m["role"] for m in trajectory][:3] == ["user", HOSTED_TOOL, "reasoning"]
    assert trajectory[1]["arguments"]["query"] == "PyCon 2027 dates"
    assert len(trajectory) == 8


def test_a_trace_of_legacy_function_calls_has_its_calls_as_tool_calls(tmp_path):
    """OpenAI's older ``function_call`` / ``function`` messages, which ``observe`` also reads."""
    items = [
        {"role": "user", "content": "Cancel ZFA04Y"},
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "cancel", "arguments": '{"id": "ZFA04Y"}'},
        },
        {"role": "function", "name": "cancel", "content": "cancelled"},
    ]
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(items), encoding="utf-8")

    (trajectory,) = load_trajectories(path)

    call = trajectory[1]["tool_calls"][0]
    assert call["function"] == {"name": "cancel", "arguments": '{"id": "ZFA04Y"}'}
    assert trajectory[2] == {
        "role": "tool",
        "name": "cancel",
        "content": "cancelled",
        "tool_call_id": call["id"],
    }
