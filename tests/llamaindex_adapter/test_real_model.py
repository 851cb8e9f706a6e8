"""DamcLLM with a real model: LlamaIndex's OpenAILike talking to a local OpenAI-compatible server
(llama-cpp-python with the bundled SmolLM2-135M) on loopback.

The 135M model picks poor arguments, so each step names its tool (a grammar-constrained
``tool_choice``); the test checks what does not depend on the model's wits: every context DAMC
assembled was accepted by a real endpoint and carried the memory section and the compressed
results, while the chat history the caller keeps stays verbatim.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_index.llms.openai_like", reason="needs llama-index-llms-openai-like (dev extra)")
pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")

import httpx
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai_like import OpenAILike

from damc_core import DecisionMemory, InMemoryStore, MemorySettings, testing
from damc_llamaindex import DamcLLM

PLAN = [name for name, _, _ in testing.BOOKING_STEPS]


def test_a_real_endpoint_accepts_every_context_damc_assembles(
    chat_server, recorded_http, short_arguments, assert_valid_context
):
    tools = {
        f.__name__: FunctionTool.from_defaults(f, fn_schema=short_arguments(f)) for f in testing.BOOKING_TOOLS
    }
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600))
    llm = DamcLLM(
        llm=OpenAILike(
            api_base=chat_server,
            api_key="local",
            model="smollm2",
            is_chat_model=True,
            is_function_calling_model=True,
            context_window=4096,
            temperature=0,
            max_tokens=160,
            max_retries=0,
            http_client=httpx.Client(transport=recorded_http),
        ),
        memory=memory,
    )
    history = [
        ChatMessage(role="system", content="You book flights."),
        ChatMessage(role="user", content="Book HAT107 on 2024-05-20 for mia_li_3668"),
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
    assert all("<memory>" in sent["messages"][0]["content"] for sent in recorded_http.requests[1:])
    # the flight list reaches the model as its card; the caller's history keeps it whole
    newest = recorded_http.requests[2]["messages"][-1]
    assert newest["role"] == "tool" and newest["content"].startswith("[c4]")
    assert json.loads(history[5].content) == testing.BOOKING_FLIGHTS
    assert len(newest["content"]) < len(history[5].content)
    # the memory saw each event the model was sent once, and keeps it verbatim
    assert [c.id for c in memory.cards()] == [f"c{i}" for i in range(5)]
    assert memory.recall("c4")["content"] == history[5].content
