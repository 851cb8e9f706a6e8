"""DamcLLM with a real model: LlamaIndex's OpenAILike talking to a local OpenAI-compatible server
(llama-cpp-python with the bundled SmolLM2-135M) on loopback.

The 135M model picks poor arguments, so the caller's own loop names each step's tool (a
grammar-constrained ``tool_choice``), and a ``FunctionAgent`` is made to open with a lookup and then
left to the model. The tests check what does not depend on the model's wits: every context DAMC
assembled was accepted by a real endpoint and carried the memory section and the compressed
results, while the history the caller or the agent keeps stays verbatim.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_index.llms.openai_like", reason="needs llama-index-llms-openai-like (dev extra)")
pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")

import httpx
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike

from damc_core import DecisionMemory, InMemoryStore, MemorySettings, testing
from damc_llamaindex import DamcLLM, DamcMemoryBlock, offline_tokenizer

from .scenario import call, run

PLAN = [name for name, _, _ in testing.BOOKING_STEPS]
QUESTION = "Book HAT107 on 2024-05-20 for mia_li_3668"


def local_model(url, transport):
    return OpenAILike(
        api_base=url,
        api_key="local",
        model="smollm2",
        is_chat_model=True,
        is_function_calling_model=True,
        context_window=4096,
        temperature=0,
        max_tokens=160,
        max_retries=0,
        http_client=httpx.Client(transport=transport),
        async_http_client=httpx.AsyncClient(transport=transport),
    )


def booking_tools(short_arguments):
    return {
        f.__name__: FunctionTool.from_defaults(f, fn_schema=short_arguments(f)) for f in testing.BOOKING_TOOLS
    }


def test_a_real_endpoint_accepts_every_context_damc_assembles(
    chat_server, recorded_http, short_arguments, assert_valid_context
):
    tools = booking_tools(short_arguments)
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600))
    llm = DamcLLM(llm=local_model(chat_server, recorded_http), memory=memory)
    history = [
        ChatMessage(role="system", content="You book flights."),
        ChatMessage(role="user", content=QUESTION),
    ]

    for name in PLAN:  # the caller's own loop: ask, run the call, append both
        response = llm.chat_with_tools(list(tools.values()), chat_history=history, tool_choice=name)
        history.append(response.message)
        (call,) = llm.get_tool_calls_from_response(response)
        assert call.tool_name == name
        output = tools[name](**call.tool_kwargs)
        history.append(
            ChatMessage(role="tool", content=str(output), additional_kwargs={"tool_call_id": call.tool_id})
        )

    assert recorded_http.statuses == [200, 200, 200]
    for sent in recorded_http.requests:
        assert_valid_context(sent["messages"])
        assert sent["messages"][0]["content"].startswith("You book flights.")
    # the request leads the newest call and result; what came before them is in the memory section
    second = recorded_http.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert "<memory>" in recorded_http.requests[2]["messages"][0]["content"]
    # the flight list reaches the model as its card; the caller's history keeps it whole
    newest = recorded_http.requests[2]["messages"][-1]
    assert newest["role"] == "tool" and newest["content"].startswith("[c4]")
    assert json.loads(history[5].content) == testing.BOOKING_FLIGHTS
    assert len(newest["content"]) < len(history[5].content)
    # the memory saw each event the model was sent once, and keeps it verbatim
    assert [c.id for c in memory.cards()] == [f"c{i}" for i in range(5)]
    assert memory.recall("c4")["content"] == history[5].content


def test_a_function_agent_runs_on_a_real_model_through_damc(
    chat_server, recorded_http, short_arguments, assert_valid_context
):
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600))
    agent = FunctionAgent(
        tools=list(booking_tools(short_arguments).values()),
        llm=DamcLLM(llm=local_model(chat_server, recorded_http), memory=memory),
        system_prompt="You book flights.",
        initial_tool_choice="get_user_details",
        # llama-cpp-python's server repeats a call's id and name in every streamed chunk, which
        # llama-index-llms-openai joins ("get_user_detailsget_user_details..."): no such tool
        streaming=False,
    )

    run(agent, QUESTION, max_iterations=4, early_stopping_method="generate")

    requests = recorded_http.requests
    assert len(requests) >= 2 and recorded_http.statuses == [200] * len(requests)
    for sent in requests:
        assert_valid_context(sent["messages"])
        assert sent["messages"][0]["content"].startswith("You book flights.")
    assert [m["role"] for m in requests[1]["messages"]] == ["system", "user", "assistant", "tool"]
    # the user's profile reaches the model as its card, and the memory keeps the tool's output whole
    looked_up = requests[1]["messages"][-1]
    assert looked_up["role"] == "tool" and looked_up["content"].startswith("[c2]")
    raw = memory.recall("c2")["content"]
    assert json.loads(raw)["payment_methods"] and len(looked_up["content"]) < len(raw)
    kinds = [c.kind.value for c in memory.cards()]
    assert kinds[:3] == ["user_instruction", "tool_call", "tool_result"]
    assert kinds.count("tool_call") == kinds.count("tool_result")  # every call the agent ran, with its result


def test_memory_with_a_damc_block_runs_on_a_real_model(chat_server, recorded_http, short_arguments):
    damc = DecisionMemory(store=InMemoryStore())
    chat_memory = Memory.from_defaults(
        token_limit=400,
        chat_history_token_ratio=0.2,
        memory_blocks=[DamcMemoryBlock(memory=damc, budget=300)],
        tokenizer_fn=offline_tokenizer(),
    )
    earlier = [  # an earlier run: Memory's queue flushes it to the block
        ChatMessage(role="user", content=QUESTION),
        call("get_user_details", {"user_id": "mia_li_3668"}, "call_1"),
        ChatMessage(
            role="tool",
            content=testing.get_user_details("mia_li_3668"),
            additional_kwargs={"tool_call_id": "call_1", "name": "get_user_details"},
        ),
        ChatMessage(role="assistant", content="Your profile has a visa card. Which flight?"),
    ]
    chat_memory.put_messages(earlier)
    agent = FunctionAgent(
        tools=list(booking_tools(short_arguments).values()),
        llm=local_model(chat_server, recorded_http),
        system_prompt="You book flights.",
        streaming=False,
    )

    run(
        agent,
        "Which card is on my profile?",
        memory=chat_memory,
        max_iterations=1,
        early_stopping_method="generate",
    )

    assert recorded_http.statuses == [200] * len(recorded_http.requests)
    sent = recorded_http.requests[0]["messages"]
    section = next(m["content"] for m in sent if m["role"] == "system" and "<damc>" in m["content"])
    assert "credit_card_4421486" in section  # the profile, flushed from Memory's queue, as its card
    assert sent[-1] == {"role": "user", "content": "Which card is on my profile?"}
    assert "Which card is on my profile?" not in section
    session = damc.for_session(chat_memory.session_id)  # Memory's session is one of the user's
    assert [session.recall(c.id)["content"] for c in session.cards()][2] == earlier[2].content
