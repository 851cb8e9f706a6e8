"""DamcMiddleware with a real model: LangChain's ChatOpenAI talking to a local OpenAI-compatible
server (llama-cpp-python with the bundled SmolLM2-135M) on loopback.

The 135M model picks poor arguments, so the test names the tool of each step (a grammar-constrained
``tool_choice``) and checks what does not depend on the model's wits: every context DAMC assembled
was accepted by a real endpoint, carried the memory section and the compressed results, and the
memory and the agent state hold every event verbatim.
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("langchain")
pytest.importorskip("langchain_openai", reason="needs langchain-openai (dev extra)")
pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")

import httpx
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI

from damc_core import DecisionMemory, InMemoryStore, MemorySettings, testing
from damc_core.counterfactual.judge import LLMJudgeValuator
from damc_core.types import DecisionFocus
from damc_core.value import ValuationContext
from damc_langchain import ChatModelJudge, DamcMiddleware

PLAN = [name for name, _, _ in testing.BOOKING_STEPS]


def local_model(url, transport):
    return ChatOpenAI(
        base_url=url,
        api_key="local",
        model="smollm2",
        temperature=0,
        max_retries=0,
        extra_body={"max_tokens": 160},  # the server reads max_tokens, not max_completion_tokens
        http_client=httpx.Client(transport=transport),
        http_async_client=httpx.AsyncClient(transport=transport),
    )


class FollowPlan(AgentMiddleware):
    """Names the tool of the next step, as a test harness does with a model too small to choose."""

    def wrap_model_call(self, request, handler):
        return handler(self._named(request))

    async def awrap_model_call(self, request, handler):
        return await handler(self._named(request))

    @staticmethod
    def _named(request):
        made = sum(1 for m in request.messages if isinstance(m, AIMessage) and m.tool_calls)
        return request.override(tool_choice=PLAN[made]) if made < len(PLAN) else request


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_real_endpoint_accepts_every_context_damc_assembles(
    mode, chat_server, recorded_http, short_arguments, assert_valid_context
):
    tools = [StructuredTool.from_function(f, args_schema=short_arguments(f)) for f in testing.BOOKING_TOOLS]
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600))
    agent = create_agent(
        local_model(chat_server, recorded_http),
        tools,
        system_prompt="You book flights.",
        middleware=[
            FollowPlan(),
            DamcMiddleware(memory),
            ModelCallLimitMiddleware(run_limit=3, exit_behavior="end"),
        ],
    )

    question = {"messages": [{"role": "user", "content": "Book HAT107 on 2024-05-20 for mia_li_3668"}]}

    state = agent.invoke(question) if mode == "sync" else asyncio.run(agent.ainvoke(question))

    assert recorded_http.statuses == [200, 200, 200]
    calls = [c["name"] for m in state["messages"] if isinstance(m, AIMessage) for c in m.tool_calls]
    assert calls == PLAN  # the model's own calls, run by the agent
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 3
    for sent in recorded_http.requests:
        assert_valid_context(sent["messages"])
        assert sent["messages"][0]["content"].startswith("You book flights.")
    # the request leads the newest call and result; what came before them is in the memory section
    second = recorded_http.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert "<memory>" in recorded_http.requests[2]["messages"][0]["content"]
    # the newest result reaches the model as its card, shorter than the raw output the state keeps
    newest = recorded_http.requests[2]["messages"][-1]
    assert newest["role"] == "tool" and newest["content"].startswith("[c4]")
    assert len(newest["content"]) < len(results[1].content)
    assert json.loads(results[1].content) == testing.BOOKING_FLIGHTS
    # every event of the run is a card whose raw record is the message verbatim, down to the
    # message the call limit ends the run with
    assert [c.id for c in memory.cards()] == [f"c{i}" for i in range(8)]
    assert memory.recall("c4")["content"] == results[1].content
    assert memory.recall("c7")["content"] == state["messages"][-1].content


def test_a_real_chat_model_judges_a_card(chat_server, recorded_http):
    memory = DecisionMemory(store=InMemoryStore())
    memory.observe_tool(
        "get_user_details", {"user_id": "mia_li_3668"}, testing.get_user_details("mia_li_3668")
    )
    card = memory.cards()[-1]

    scored = LLMJudgeValuator(ChatModelJudge(local_model(chat_server, recorded_http))).value(
        [card], context=ValuationContext(DecisionFocus(query="Book HAT107 with my visa"), 2, 0.0)
    )

    assert recorded_http.statuses == [200]
    (request,) = recorded_http.requests
    prompt = request["messages"][-1]["content"]
    assert card.summary in prompt and "Book HAT107 with my visa" in prompt
    # the reply was read: a rating, or the default with why the reply had none; never a failed call
    (score,) = scored[0].scores
    assert score.provenance.startswith("judge langchain:openai") and " failed (" not in score.provenance
    assert 0.0 <= scored[0].value <= 1.0
