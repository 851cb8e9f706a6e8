"""The recall tool: the agent reads the raw record behind a card that left something out."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from damc_core import DecisionMemory, InMemoryStore, MemorySettings
from damc_langchain import DamcMiddleware, recall_tool

from .scenario import FLIGHTS, book, call, get_user_details, search_flights, text

LAST = FLIGHTS[-1]


def memory(budget=250):
    return DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=budget))


def test_the_agent_recalls_the_rows_a_card_left_out(recording_model):
    model = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "t1"),
        call("search_flights", {"date": "2024-05-20"}, "t2"),
        AIMessage("Which one?"),
        call("recall", {"card_id": "c4", "match": LAST["flight_number"]}, "t3"),
        AIMessage(f"{LAST['flight_number']} leaves from gate {LAST['gate']}."),
    )
    damc = memory()
    agent = create_agent(model, [get_user_details, search_flights, book], middleware=[DamcMiddleware(damc)])

    state = agent.invoke({"messages": [HumanMessage("Find me a flight on 2024-05-20, I am mia_li_3668")]})
    state = agent.invoke(
        {"messages": [*state["messages"], HumanMessage("Which gate does the last flight leave from?")]}
    )

    assert "recall" in model.tools_offered
    assert damc.card("c4").tool_name == "search_flights"
    assert shown(model.received[2]) < len(FLIGHTS)  # the search result's card left rows out
    assert "recall(id)" in text(model.received[2])  # and the memory section says the tool is there
    assert f"{LAST['flight_number']} available" not in text(model.received[2])
    recalled = next(m for m in state["messages"] if isinstance(m, ToolMessage) and m.name == "recall")
    assert json.loads(recalled.content) == [LAST]  # the row asked for, verbatim
    assert recalled.content in text(model.received[-1])  # and the model read it


def shown(prompt):
    """How many of the flights a prompt shows."""
    return sum(f["flight_number"] in text(prompt) for f in FLIGHTS)


def test_recall_reads_the_session_of_the_running_thread(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver

    model = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "t1"),
        AIMessage("Found."),
        call("recall", {"card_id": "c2"}, "t2"),
        AIMessage("Nothing there."),
    )
    middleware = DamcMiddleware(memory())
    agent = create_agent(model, [get_user_details], middleware=[middleware], checkpointer=InMemorySaver())

    agent.invoke({"messages": [HumanMessage("I am mia_li_3668")]}, {"configurable": {"thread_id": "mia"}})
    bob = agent.invoke({"messages": [HumanMessage("Show me c2")]}, {"configurable": {"thread_id": "bob"}})

    assert middleware.memory_for("mia").card("c2").tool_name == "get_user_details"
    answer = next(m for m in bob["messages"] if isinstance(m, ToolMessage)).content
    assert answer == "No memory card 'c2' in this session."  # Mia's profile stays hers


def test_recall_false_leaves_the_agents_tools_as_they_are(recording_model):
    model = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "t1"), AIMessage("Found you."), AIMessage("Hi!")
    )
    agent = create_agent(model, [get_user_details], middleware=[DamcMiddleware(memory(), recall=False)])

    state = agent.invoke({"messages": [HumanMessage("hello, I am mia_li_3668")]})
    agent.invoke({"messages": [*state["messages"], HumanMessage("Which payment methods do I have?")]})

    assert model.tools_offered == ["get_user_details"]
    assert "<memory>" in text(model.received[2])
    assert "recall(" not in text(model.received[2])  # no tool to call, so none is spoken of


def test_recall_tool_answers_from_a_memory_for_any_agent():
    damc = memory()
    damc.observe_tool("search_flights", {"date": "2024-05-20"}, FLIGHTS)
    result_card = damc.cards()[-1]
    tool = recall_tool(damc)

    assert tool.name == "recall" and "card_id" in tool.args
    assert json.loads(tool.invoke({"card_id": result_card.id})) == FLIGHTS
    assert json.loads(tool.invoke({"card_id": f"[{result_card.id}]"})) == FLIGHTS  # as the card shows it
    assert tool.invoke({"card_id": "c99"}) == "No memory card 'c99' in this session."
    picked = FLIGHTS[1]["flight_number"]
    assert json.loads(tool.invoke({"card_id": result_card.id, "match": picked})) == [FLIGHTS[1]]


def test_a_store_that_fails_gives_the_agent_an_answer_not_an_exception():
    damc = memory()
    damc.observe({"role": "user", "content": "hello"})
    damc.store.close()

    answer = recall_tool(damc).invoke({"card_id": "c0"})

    assert answer.startswith("Could not recall 'c0': ")


@pytest.mark.parametrize("arguments", [{"id": "c2"}, {}])
def test_a_recall_without_a_card_id_tells_the_model_and_the_run_goes_on(recording_model, arguments):
    model = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "call_1"),
        call("recall", arguments, "call_2"),
        AIMessage("Which card do you mean?"),
    )
    agent = create_agent(
        model, [get_user_details], middleware=[DamcMiddleware(DecisionMemory(store=InMemoryStore()))]
    )

    state = agent.invoke({"messages": [HumanMessage("Which cards do I have? I am mia_li_3668")]})

    error = next(m for m in state["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "call_2")
    assert error.status == "error" and "card_id" in error.content
    assert state["messages"][-1].content == "Which card do you mean?"


@pytest.mark.parametrize("arguments", [{"id": "c0"}, {"card_id": 0}])
def test_an_agent_executor_whose_model_calls_recall_wrongly_goes_on(recording_model, arguments):
    from .scenario import executor

    damc = memory()
    damc.observe({"role": "user", "content": "I am mia_li_3668"})
    model = recording_model(call("recall", arguments, "call_1"), AIMessage("Which card do you mean?"))
    agent = executor(model, tools=[recall_tool(damc)])

    result = agent.invoke({"input": "What did I tell you?"})

    assert result["output"] == "Which card do you mean?"
    (answer,) = [m for m in model.received[-1] if isinstance(m, ToolMessage)]
    assert answer.tool_call_id == "call_1" and answer.content.startswith("Error: ")
    assert "card_id" in answer.content and "such as c12" in answer.content
