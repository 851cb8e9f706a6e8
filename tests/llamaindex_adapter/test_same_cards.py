"""One core, two adapters: the booking scenario through LangChain and LlamaIndex gives the same cards."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_adapter import scenario as langchain_scenario
from langchain_adapter.conftest import RecordingChatModel
from langchain_core.messages import HumanMessage
from llama_index.core.agent.workflow import FunctionAgent

from damc_langchain import DamcMiddleware
from damc_llamaindex import DamcLLM, DamcMemory, recall_tool

from . import scenario
from .conftest import RecordingLLM


def cards(memory):
    return [(c.kind.value, c.tool_name, c.tool_call_id, c.summary) for c in memory.cards()]


def test_both_adapters_record_the_same_cards():
    langchain_memory, llamaindex_memory = scenario.damc(), scenario.damc()
    tools = [langchain_scenario.get_user_details, langchain_scenario.search_flights, langchain_scenario.book]
    model = RecordingChatModel(script=list(langchain_scenario.SCRIPT))
    agent = create_agent(model, tools, middleware=[DamcMiddleware(langchain_memory)])
    agent.invoke({"messages": [HumanMessage(scenario.QUESTION)]})

    llm = RecordingLLM(script=list(scenario.FUNCTION_SCRIPT))
    scenario.run(
        FunctionAgent(tools=scenario.TOOLS, llm=DamcLLM(llm=llm, memory=llamaindex_memory)),
        scenario.QUESTION,
        memory=DamcMemory(memory=llamaindex_memory),
    )

    llamaindex_cards = cards(llamaindex_memory)
    assert llamaindex_cards[-1][3].endswith(scenario.ANSWER)  # both record the final answer at once
    assert cards(langchain_memory) == llamaindex_cards
    assert len(llamaindex_cards) == 8


def test_both_adapters_send_the_same_memory_section():
    langchain_memory, llamaindex_memory = scenario.damc(), scenario.damc()
    model = RecordingChatModel(script=list(langchain_scenario.SCRIPT))
    tools = [langchain_scenario.get_user_details, langchain_scenario.search_flights, langchain_scenario.book]
    create_agent(model, tools, middleware=[DamcMiddleware(langchain_memory)]).invoke(
        {"messages": [HumanMessage(scenario.QUESTION)]}
    )
    llm = RecordingLLM(script=list(scenario.FUNCTION_SCRIPT))
    agent = FunctionAgent(  # with DAMC's recall tool, as DamcMiddleware gives it by default
        tools=[*scenario.TOOLS, recall_tool(llamaindex_memory)],
        llm=DamcLLM(llm=llm, memory=llamaindex_memory),
    )
    scenario.run(agent, scenario.QUESTION)

    assert model.received[2][0].content == llm.received[2][0].content
    assert "<memory>" in llm.received[2][0].content
