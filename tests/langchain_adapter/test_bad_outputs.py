"""Every LangChain surface keeps the agent running on None, huge and non-JSON tool outputs."""

from __future__ import annotations

import asyncio
import warnings

import pytest

pytest.importorskip("langchain_classic")

from langchain.agents import create_agent
from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import tool
from pydantic import ValidationError

from damc_core import ConfigError, DecisionMemory, InMemoryStore, MemorySettings
from damc_langchain import DamcCallbackHandler, DAMCMemory, DamcMiddleware, damc_pre_model_hook, wrap

from .scenario import BusyStore, call

OUTPUTS = {
    "none": None,
    "huge": "row " * 500_000,
    "not json": "{'oops': [1, 2,, \x00\x01 binary-ish \ud800?",
    "deep": "[" * 5000 + "]" * 5000,
}
PROMPT = ChatPromptTemplate.from_messages(
    [("system", "You help."), ("human", "{input}"), MessagesPlaceholder("agent_scratchpad")]
)


def make_tool(output):
    @tool
    def lookup(query: str) -> str:
        """Returns whatever the backend sent."""
        return output  # type: ignore[return-value]

    return lookup


def memory():
    return DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=400))


def script():
    return (call("lookup", {"query": "x"}, "b1"), AIMessage("done"))


def run_surface(surface, model, lookup):
    question = "look it up"
    if surface == "middleware":
        agent = create_agent(model, [lookup], middleware=[DamcMiddleware(memory())])
        return agent.invoke({"messages": [HumanMessage(question)]})["messages"][-1].content
    if surface == "pre_model_hook":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent

            agent = create_react_agent(model, [lookup], pre_model_hook=damc_pre_model_hook(memory()))
        return asyncio.run(agent.ainvoke({"messages": [HumanMessage(question)]}))["messages"][-1].content
    executor = AgentExecutor(agent=create_tool_calling_agent(model, [lookup], PROMPT), tools=[lookup])
    if surface == "wrap":
        return wrap(executor, memory()).invoke({"input": question})["output"]
    chunks = list(executor.stream({"input": question}, config={"callbacks": [DamcCallbackHandler(memory())]}))
    return chunks[-1]["output"]


@pytest.mark.parametrize("surface", ["middleware", "pre_model_hook", "wrap", "callback_handler"])
@pytest.mark.parametrize("output", list(OUTPUTS), ids=list(OUTPUTS))
def test_the_agent_finishes(surface, output, recording_model):
    model = recording_model(*script())

    assert run_surface(surface, model, make_tool(OUTPUTS[output])) == "done"
    assert len(model.received) == 2


def test_a_call_whose_arguments_did_not_parse_reaches_the_model_with_its_error(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver

    truncated = AIMessage(
        "",
        invalid_tool_calls=[
            {"type": "invalid_tool_call", "id": "b1", "name": "lookup", "args": '{"query": "', "error": None}
        ],
    )
    model = recording_model(truncated, AIMessage("It did not go through."), AIMessage("Try again?"))
    # a window of four: the first question, the broken call, its error and the new question
    damc = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=400, recent_messages=4))
    agent = create_agent(
        model, [make_tool("found")], middleware=[DamcMiddleware(damc)], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "t1"}}

    agent.invoke({"messages": [HumanMessage("look it up")]}, thread)  # the run ends at the broken call
    agent.invoke({"messages": [HumanMessage("did it work?")]}, thread)

    # LangChain answers the broken call with an error; the model gets both, paired, and the question
    *_, call_sent, error_sent, question = model.received[1]
    assert call_sent.tool_calls == [] and call_sent.invalid_tool_calls[0]["id"] == "b1"
    assert call_sent.invalid_tool_calls[0]["args"] == '{"query": "'
    assert error_sent.tool_call_id == "b1" and "malformed or truncated" in error_sent.content
    assert question.content == "did it work?"
    kinds = [c.kind.value for c in damc.for_session("t1").cards()]
    assert kinds[:4] == ["user_instruction", "tool_call", "tool_error", "user_instruction"]
    assert kinds[4:] == ["assistant_conclusion"]  # the answer, recorded as it comes

    agent.invoke({"messages": [HumanMessage("and now?")]}, thread)  # the state holds the error now

    kinds = [c.kind.value for c in damc.for_session("t1").cards()]
    assert kinds.count("tool_error") == 1 and kinds[5:] == ["user_instruction", "assistant_conclusion"]


def test_a_result_the_store_could_not_take_is_recorded_once_the_store_is_back(recording_model, tmp_path):
    from damc_core import SQLiteStore

    busy = BusyStore(tmp_path / "memory.sqlite3")
    model = recording_model(*busy.SCRIPT)
    memory = DecisionMemory(store=SQLiteStore(busy.path, timeout=0.1), settings=MemorySettings(budget=400))
    agent = create_agent(model, busy.tools, middleware=[DamcMiddleware(memory)])

    agent.invoke({"messages": [HumanMessage("Check in ABC123")]})

    results = [c for c in memory.cards() if c.kind.value == "tool_result"]
    assert [c.tool_name for c in results] == ["get_reservation", "check_in"]
    assert "gift_card_7777" in "\n".join(str(m.content) for m in model.received[-1])


def test_a_record_json_cannot_encode_still_becomes_a_structured_card(recording_model):
    from datetime import datetime
    from decimal import Decimal

    from damc_core import CardKind

    @tool
    def get_reservation(reservation_id: str) -> dict:
        """Look up a reservation."""
        departs = datetime(2024, 5, 20, 9, 5)
        return {"reservation_id": reservation_id, "departs": departs, "fare": Decimal("129.50")}

    model = recording_model(call("get_reservation", {"reservation_id": "ZFA04Y"}, "t1"), AIMessage("done"))
    damc = memory()
    agent = create_agent(model, [get_reservation], middleware=[DamcMiddleware(damc)])

    agent.invoke({"messages": [HumanMessage("look up ZFA04Y")]})

    (card,) = [c for c in damc.cards() if c.kind is CardKind.TOOL_RESULT]
    facts = {fact.path: fact.value for fact in card.facts}
    assert facts == {"reservation_id": "ZFA04Y", "departs": "2024-05-20T09:05:00", "fare": "129.50"}


@pytest.mark.parametrize("budget", [0, -50, "800", 2.5, True])
def test_a_budget_that_is_no_token_count_is_refused_when_the_surface_is_made(budget, recording_model):
    """Found at the first model call, it would only be logged and the model sent the full history."""
    lookup = make_tool("ok")
    model = recording_model(AIMessage("done"))
    executor = AgentExecutor(agent=create_tool_calling_agent(model, [lookup], PROMPT), tools=[lookup])
    surfaces = [
        lambda: DamcMiddleware(memory(), budget=budget),
        lambda: damc_pre_model_hook(memory(), budget=budget),
        lambda: wrap(executor, memory(), budget=budget),
    ]
    for make in surfaces:
        with pytest.raises(ConfigError, match="budget must be a whole number of tokens > 0"):
            make()


def test_the_conversation_memory_refuses_a_budget_below_one_token():
    with pytest.raises(ValidationError, match="budget"):
        DAMCMemory(memory=memory(), budget=0)

    assert DAMCMemory(memory=memory(), budget=300).budget == 300
