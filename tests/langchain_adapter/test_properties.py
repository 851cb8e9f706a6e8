"""Any LangChain conversation goes through DAMC and back as messages a chat model accepts.

Hypothesis makes random LangChain histories (calls without ids, calls whose arguments did not
parse, results answering no call, error results, content blocks); each is recorded as DAMC
records it, built at a random budget and window, and turned back into LangChain messages, which
must be, as ChatOpenAI sends them, an OpenAI-style list a chat API takes (see ``check_context``).
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from conftest import check_context, memory_in_ram
from hypothesis import HealthCheck, given, settings
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)

from damc_langchain._recorder import to_event, to_messages

CALL_IDS = ["call_1", "call_2", "", None]

text_block = st.builds(lambda text: {"type": "text", "text": text}, st.text(max_size=20))
content = st.one_of(st.text(max_size=40), st.lists(text_block, min_size=1, max_size=2))
arguments = st.dictionaries(
    st.sampled_from(["reservation_id", "date"]), st.one_of(st.text(max_size=10), st.integers()), max_size=2
)
tool_call = st.builds(
    lambda call_id, name, args: {"id": call_id, "name": name, "args": args},
    st.sampled_from(CALL_IDS),
    st.sampled_from(["search_flights", "book_reservation"]),
    arguments,
)
unparsed_call = st.builds(
    lambda call_id, args: {
        "id": call_id,
        "name": "book_reservation",
        "args": args,
        "error": "bad JSON",
        "type": "invalid_tool_call",
    },
    st.sampled_from(CALL_IDS),
    st.one_of(st.none(), st.text(max_size=10)),
)
message = st.one_of(
    st.builds(HumanMessage, content=content),
    st.builds(SystemMessage, content=content),
    st.builds(
        AIMessage,
        content=content,
        tool_calls=st.lists(tool_call, max_size=2),
        invalid_tool_calls=st.lists(unparsed_call, max_size=1),
    ),
    st.builds(
        ToolMessage,
        content=content,
        tool_call_id=st.sampled_from(["call_1", "call_2", ""]),
        status=st.sampled_from(["success", "error"]),
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(message, max_size=12), recent=st.integers(0, 5), budget=st.integers(50, 2000))
def test_any_history_comes_back_as_messages_a_chat_model_accepts(
    history: list[BaseMessage], recent: int, budget: int
) -> None:
    memory = memory_in_ram(recent_messages=recent)
    for item in history:
        memory.observe(to_event(item))

    sent = to_messages(memory.build(budget=budget).messages)

    check_context(as_chat_openai_sends(sent))


def as_chat_openai_sends(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """langchain-core's OpenAI form of the messages, with the calls whose arguments did not parse
    sent as calls with their raw arguments, as ChatOpenAI sends them."""
    sent = convert_to_openai_messages(messages)
    for message, converted in zip(messages, sent, strict=True):
        if isinstance(message, AIMessage) and message.invalid_tool_calls:
            unparsed = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["args"]},
                }
                for call in message.invalid_tool_calls
            ]
            converted["tool_calls"] = [*converted.get("tool_calls", ()), *unparsed]
    return sent


def test_a_call_whose_arguments_did_not_parse_goes_back_with_its_error_result():
    memory = memory_in_ram(recent_messages=1)
    unparsed = {"id": "call_2", "name": "book_reservation", "args": "0", "error": "bad JSON"}
    memory.observe(
        to_event(AIMessage(content="", invalid_tool_calls=[{**unparsed, "type": "invalid_tool_call"}]))
    )
    memory.observe(to_event(ToolMessage(content="Error: not a JSON object", tool_call_id="call_2")))

    sent = to_messages(memory.build(budget=50).messages)

    check_context(as_chat_openai_sends(sent))
    assert sent[0].invalid_tool_calls[0]["args"] == "0"
