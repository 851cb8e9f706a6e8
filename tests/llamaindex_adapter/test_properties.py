"""Any LlamaIndex chat history put into ``DamcMemory`` comes back as messages a chat model accepts.

Hypothesis makes random histories (calls as ``ToolCallBlock``s or in ``additional_kwargs``, calls
without ids or with ids given twice, results answering no call), puts them into the drop-in
memory at a random budget and window, and checks that what ``get`` hands the agent converts, as
llama-index-llms-openai converts it, to an OpenAI-style list a chat API takes (``check_context``).
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from conftest import check_context, memory_in_ram, openai_tool_calls
from hypothesis import HealthCheck, given, settings
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock

from damc_llamaindex import DamcMemory

openai_utils = pytest.importorskip("llama_index.llms.openai.utils", reason="needs the dev extra")

CALL_IDS = ["call_1", "call_2", "", None]
TOOLS = ["search_flights", "book_reservation"]

text = st.text(max_size=40)
arguments = st.dictionaries(st.sampled_from(["reservation_id", "date"]), st.text(max_size=8), max_size=2)
call_block = st.builds(
    lambda call_id, name, args: ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs=args),
    st.sampled_from(CALL_IDS),
    st.sampled_from(TOOLS),
    st.one_of(arguments, st.text(max_size=10)),
)
openai_call = openai_tool_calls(CALL_IDS, TOOLS, st.text(max_size=20))
message = st.one_of(
    st.builds(lambda said: ChatMessage(role=MessageRole.USER, content=said), text),
    st.builds(lambda said: ChatMessage(role=MessageRole.SYSTEM, content=said), text),
    st.builds(
        lambda said, calls: ChatMessage(
            role=MessageRole.ASSISTANT, blocks=[*([TextBlock(text=said)] if said else []), *calls]
        ),
        text,
        st.lists(call_block, max_size=2),
    ),
    st.builds(
        lambda said, calls: ChatMessage(
            role=MessageRole.ASSISTANT, content=said, additional_kwargs={"tool_calls": calls} if calls else {}
        ),
        text,
        st.lists(openai_call, max_size=2),
    ),
    st.builds(
        lambda output, call_id, name: ChatMessage(
            role=MessageRole.TOOL, content=output, additional_kwargs={"tool_call_id": call_id, "name": name}
        ),
        text,
        st.sampled_from(CALL_IDS),
        st.sampled_from(TOOLS),
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(message, max_size=12), recent=st.integers(0, 5), budget=st.integers(50, 2000))
def test_any_history_comes_back_as_messages_a_chat_model_accepts(
    history: list[ChatMessage], recent: int, budget: int
) -> None:
    chat_memory = DamcMemory.from_defaults(memory=memory_in_ram(recent_messages=recent), budget=budget)
    for item in history:
        chat_memory.put(item)

    sent = chat_memory.get()

    check_context(openai_utils.to_openai_message_dicts(sent))


def _memory() -> DamcMemory:
    return DamcMemory.from_defaults(memory=memory_in_ram(recent_messages=4), budget=1000)


def test_a_call_without_an_id_is_not_paired_with_a_result_without_one():
    chat_memory = _memory()
    chat_memory.put(ChatMessage(role=MessageRole.USER, content="Any flight to Seattle on May 20?"))
    call = {"id": None, "type": "function", "function": {"name": "search_flights", "arguments": "{}"}}
    chat_memory.put(
        ChatMessage(role=MessageRole.ASSISTANT, content="", additional_kwargs={"tool_calls": [call]})
    )
    chat_memory.put(
        ChatMessage(
            role=MessageRole.TOOL,
            content='[{"flight_number": "HAT136"}]',
            additional_kwargs={"tool_call_id": None},
        )
    )

    sent = openai_utils.to_openai_message_dicts(chat_memory.get())

    check_context(sent)  # the call and its result reach the model as cards, not as "None" ids
    assert all(m["role"] != "tool" and not m.get("tool_calls") for m in sent)
    assert any("HAT136" in str(m["content"]) for m in sent)


def test_a_message_repeating_a_known_call_is_sent_with_its_new_calls_only():
    chat_memory = _memory()
    chat_memory.put(ChatMessage(role=MessageRole.USER, content="Find flights."))
    first = ToolCallBlock(tool_call_id="call_1", tool_name="search_flights", tool_kwargs={})
    chat_memory.put(ChatMessage(role=MessageRole.ASSISTANT, blocks=[first]))
    again = ToolCallBlock(
        tool_call_id="call_1", tool_name="search_flights", tool_kwargs={"date": "2024-05-20"}
    )
    chat_memory.put(ChatMessage(role=MessageRole.ASSISTANT, blocks=[first, again]))
    chat_memory.put(
        ChatMessage(role=MessageRole.TOOL, content="[]", additional_kwargs={"tool_call_id": "call_1"})
    )

    check_context(openai_utils.to_openai_message_dicts(chat_memory.get()))
