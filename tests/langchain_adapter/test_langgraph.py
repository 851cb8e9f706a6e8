"""DAMC's hooks on langgraph's create_react_agent: the model input is DAMC's, the state is not."""

from __future__ import annotations

import json
import warnings

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from damc_core import ConfigError, DecisionMemory, InMemoryStore, MemorySettings, SQLiteStore
from damc_langchain import damc_post_model_hook, damc_pre_model_hook, recall_tool

from .scenario import FLIGHTS, SCRIPT, book, get_user_details, search_flights, text


def react_agent(model, memory, tools=(get_user_details, search_flights, book), *, post_hook=True, **options):
    """langgraph's ReAct agent with DAMC's hooks on ``memory``."""
    if post_hook:
        options["post_model_hook"] = damc_post_model_hook(memory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of create_agent
        from langgraph.prebuilt import create_react_agent

        options.setdefault("pre_model_hook", damc_pre_model_hook(memory))
        return create_react_agent(model, list(tools), **options)


def test_model_input_comes_from_damc_and_state_stays_verbatim(recording_model):
    model = recording_model(*SCRIPT)
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600))

    result = react_agent(model, memory).invoke(
        {"messages": [HumanMessage("Book HAT107 for mia_li_3668 with my visa")]}
    )

    booking_prompt = model.received[2]
    assert "<memory>" in text(booking_prompt)
    assert "credit_card_4421486" in text(booking_prompt)
    assert "975 Sunset Drive " * 20 not in text(booking_prompt)
    searches = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.name == "search_flights"]
    assert json.loads(searches[0].content) == FLIGHTS
    assert [c.tool_name for c in memory.cards() if c.kind.value == "tool_result"] == [
        "get_user_details",
        "search_flights",
        "book",
    ]


def test_reused_tool_call_ids_record_every_result(recording_model):
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from .scenario import call

    @tool
    def get_order(order_id: str) -> str:
        """Look up an order."""
        return json.dumps({"order_id": order_id, "status": "shipped" if order_id == "O-1" else "cancelled"})

    model = recording_model(
        call("get_order", {"order_id": "O-1"}, "call_0"),
        call("get_order", {"order_id": "O-2"}, "call_0"),
        AIMessage("O-1 shipped, O-2 cancelled."),
    )
    memory = DecisionMemory(store=InMemoryStore())
    # with a post_model_hook, langgraph takes a reused id's second call as answered and stops
    agent = react_agent(model, memory, tools=[get_order], post_hook=False)

    agent.invoke({"messages": [HumanMessage("Status of O-1 and O-2?")]})

    results = [c for c in memory.cards() if c.kind.value == "tool_result"]
    assert [c.arguments for c in results] == [{"order_id": "O-1"}, {"order_id": "O-2"}]
    assert "cancelled" in text(model.received[2])


def test_threads_are_sessions_and_a_resumed_thread_is_not_recorded_twice(recording_model, tmp_path):
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from damc_core import SQLiteStore

    checkpointer = InMemorySaver()

    def run(thread, message, *replies):
        model = recording_model(*replies)
        memory = DecisionMemory(store=SQLiteStore(tmp_path / "m.sqlite3"))  # a new process each time
        agent = react_agent(model, memory, tools=[get_user_details], checkpointer=checkpointer)
        agent.invoke({"messages": [HumanMessage(message)]}, {"configurable": {"thread_id": thread}})
        return model, memory.for_session(thread)

    run("mia", "I am mia_li_3668", AIMessage("Hello Mia."))
    bob_model, _ = run("bob", "Hello, I am Bob", AIMessage("Hello Bob."))
    _, mia = run("mia", "Thanks", AIMessage("Bye."))

    assert "mia_li_3668" not in text(bob_model.received[0])
    assert [c.text for c in mia.cards()] == ["I am mia_li_3668", "Hello Mia.", "Thanks", "Bye."]


def test_a_user_message_edited_in_the_thread_state_reaches_the_model_as_edited(recording_model):
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    model = recording_model(AIMessage("Which date?"), AIMessage("Booking HAT205 on May 20."))
    memory = DecisionMemory(store=InMemoryStore())
    agent = react_agent(model, memory, tools=[book], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("Book HAT107", id="m1")]}, thread)

    agent.update_state(thread, {"messages": [HumanMessage("Book HAT205", id="m1")]})  # the user's correction
    agent.invoke({"messages": [HumanMessage("On May 20")]}, thread)

    assert "Book HAT205" in text(model.received[-1])
    assert [c.text for c in memory.for_session("t").cards()] == [
        "Book HAT107",
        "Which date?",
        "Book HAT205",
        "On May 20",
        "Booking HAT205 on May 20.",
    ]


def test_without_a_checkpointer_the_post_hook_keeps_each_answer_for_the_next_run(recording_model):
    from langchain_core.messages import AIMessage

    model = recording_model(AIMessage("Your order O-1 has shipped."), AIMessage("It arrives on May 22."))
    memory = DecisionMemory(store=InMemoryStore())
    agent = react_agent(model, memory, tools=[get_user_details])

    agent.invoke({"messages": [HumanMessage("Where is order O-1?")]})
    agent.invoke({"messages": [HumanMessage("And when will it arrive?")]})  # the new turn only

    assert "Your order O-1 has shipped." in text(model.received[1])
    assert [c.text for c in memory.cards()][-1] == "It arrives on May 22."


@pytest.mark.parametrize("offered", [True, False], ids=["recall offered", "no recall tool"])
def test_the_section_mentions_recall_only_when_the_hook_is_told_the_agent_has_it(recording_model, offered):
    model = recording_model(*SCRIPT)
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600))
    tools = [get_user_details, search_flights, book, *([recall_tool(memory)] if offered else [])]
    agent = react_agent(model, memory, tools, pre_model_hook=damc_pre_model_hook(memory, recall_tool=offered))

    agent.invoke({"messages": [HumanMessage("Book HAT107 for mia_li_3668 with my visa")]})

    (section,) = [m.content for m in model.received[-1] if isinstance(m, SystemMessage)]
    assert "<memory>" in section and "credit_card_4421486" in section
    assert ("recall(id)" in section) is offered
    assert ("recall(" in section) is offered
    assert ("recall" in model.tools_offered) is offered


def test_an_agent_whose_state_is_a_pydantic_model_gets_the_same_context(recording_model):
    from langgraph.prebuilt.chat_agent_executor import AgentStatePydantic

    model = recording_model(*SCRIPT)
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600))
    agent = react_agent(model, memory, state_schema=AgentStatePydantic)

    result = agent.invoke({"messages": [HumanMessage("Book HAT107 for mia_li_3668 with my visa")]})

    assert result["messages"][-1].content == "Booked HAT107, reservation 4WQ150."
    assert "credit_card_4421486" in text(model.received[2])
    assert "975 Sunset Drive " * 20 not in text(model.received[2])
    assert [c.text for c in memory.cards()][-1] == "Booked HAT107, reservation 4WQ150."


@pytest.mark.parametrize("make", [damc_pre_model_hook, damc_post_model_hook, recall_tool])
def test_a_hook_or_recall_tool_given_a_store_says_to_wrap_it_in_a_decision_memory(tmp_path, make):
    """Given the store, the hooks would leave the model the full history and record nothing, the
    failures only logged; the mistake is pointed out where the agent is put together."""
    with pytest.raises(
        ConfigError, match=r"needs a DecisionMemory, got SQLiteStore.*DecisionMemory\(store=\.\.\.\)"
    ):
        make(SQLiteStore(tmp_path / "memory.sqlite3"))


def test_hooks_keep_a_memory_only_they_hold_and_free_it_with_the_agent(recording_model):
    import gc
    import weakref

    from langchain_core.messages import AIMessage

    model = recording_model(AIMessage("Order O-1 has shipped."), AIMessage("On May 22."))
    memory = DecisionMemory(store=InMemoryStore())
    agent, gone = react_agent(model, memory, tools=[get_user_details]), weakref.ref(memory)
    del memory
    gc.collect()

    agent.invoke({"messages": [HumanMessage("Where is order O-1?")]})
    agent.invoke({"messages": [HumanMessage("And when will it arrive?")]})
    assert "Order O-1 has shipped." in text(model.received[1])  # the hooks kept the memory
    assert [c.text for c in gone().cards()][-1] == "On May 22."

    del agent
    gc.collect()
    assert gone() is None
