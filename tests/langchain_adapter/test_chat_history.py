"""DamcChatMessageHistory behind a real RunnableWithMessageHistory: what the chain's model receives."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from damc_core import ConfigError, DecisionMemory, InMemoryStore, SQLiteStore
from damc_langchain import DamcChatMessageHistory, recall_tool

from .scenario import SCRIPT, book, get_user_details, search_flights, text

PROMPT = ChatPromptTemplate.from_messages(
    [("system", "You book flights."), MessagesPlaceholder("history"), ("human", "{input}")]
)
TOOL_LOOP_PROMPT = ChatPromptTemplate.from_messages(
    [("system", "You book flights."), MessagesPlaceholder("history"), MessagesPlaceholder("input")]
)
"""The prompt of a chain whose caller runs the tools: the input is a user turn or the results."""
TOOLS = {t.name: t for t in (get_user_details, search_flights, book)}


def with_history(runnable, memory, *, recall=False, **keys):
    """``runnable`` keeping each session's history in ``memory`` (sessions by ``session_id``)."""
    from langchain_core.runnables.history import RunnableWithMessageHistory

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of langgraph's persistence
        return RunnableWithMessageHistory(
            runnable,
            lambda session_id: DamcChatMessageHistory(memory, session_id, budget=300, recall_tool=recall),
            **keys,
        )


def chat_chain(model, memory, prompt=PROMPT):
    return with_history(prompt | model, memory, input_messages_key="input", history_messages_key="history")


def session(session_id):
    return {"configurable": {"session_id": session_id}}


def run_tools(chain, reply, config):
    """Answer the model's tool calls with the tools' results until it answers in text."""
    while reply.tool_calls:
        results = [
            ToolMessage(TOOLS[c["name"]].invoke(c["args"]), tool_call_id=c["id"]) for c in reply.tool_calls
        ]
        reply = chain.invoke({"input": results}, config)
    return reply


def memory_in_ram():
    return DecisionMemory(store=InMemoryStore())


def test_after_many_turns_under_a_small_budget_the_model_gets_the_ids_it_needs(
    recording_model, assert_valid_context
):
    chatter = [AIMessage(f"Fact {i}: airports are busy.") for i in range(12)]
    model = recording_model(*SCRIPT, *chatter, AIMessage("credit_card_4421486, reservation 4WQ150."))
    memory = memory_in_ram()
    chain = chat_chain(model, memory, TOOL_LOOP_PROMPT)

    booking = HumanMessage("Book HAT107 on 2024-05-20 for mia_li_3668 with my visa")
    answer = run_tools(chain, chain.invoke({"input": [booking]}, session("mia")), session("mia"))
    for i in range(12):
        chain.invoke({"input": [HumanMessage(f"Tell me airport fact {i}")]}, session("mia"))
    chain.invoke({"input": [HumanMessage("Which card and reservation did I use?")]}, session("mia"))

    assert answer.content == "Booked HAT107, reservation 4WQ150."
    last = model.received[-1]
    system, section = last[0], last[1]
    assert system.content == "You book flights."
    assert [m for m in last if isinstance(m, SystemMessage)] == [system]
    assert isinstance(section, HumanMessage) and section.content.startswith("<memory>")
    assert "credit_card_4421486" in section.content and "4WQ150" in section.content
    assert last[-1].content == "Which card and reservation did I use?"
    assert "975 Sunset Drive " * 20 not in text(last)
    for prompt in model.received:
        assert_valid_context(convert_to_openai_messages(prompt))
    stored = memory.for_session("mia").messages()
    assert len(text(last)) < len("\n".join(str(m["content"]) for m in stored)) / 4
    assert [m["role"] for m in stored[:8]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert len(stored) == 8 + 2 * 12 + 2


def test_the_model_gets_each_tool_result_with_the_call_it_answers(recording_model):
    model = recording_model(*SCRIPT)
    chain = chat_chain(model, memory_in_ram(), TOOL_LOOP_PROMPT)

    run_tools(
        chain,
        chain.invoke({"input": [HumanMessage("Book HAT107 for mia_li_3668")]}, session("a")),
        session("a"),
    )

    booking_prompt = model.received[3]
    result = booking_prompt[-1]
    assert isinstance(result, ToolMessage) and '"4WQ150"' in result.content
    call = booking_prompt[booking_prompt.index(result) - 1]
    assert isinstance(call, AIMessage) and call.tool_calls[0]["id"] == result.tool_call_id == "c3"


def test_two_sessions_are_kept_apart_and_reopen_after_a_restart(recording_model, tmp_path):
    store = tmp_path / "memory.sqlite3"
    model = recording_model(*(AIMessage(f"Noted ({i}).") for i in range(6)))
    chain = chat_chain(model, DecisionMemory(store=SQLiteStore(store)))

    chain.invoke({"input": "My order is #W1111111."}, session("alice"))
    chain.invoke({"input": "My order is #W2222222."}, session("bob"))
    chain.invoke({"input": "Cancel it."}, session("bob"))
    restarted = chat_chain(model, DecisionMemory(store=SQLiteStore(store)))
    restarted.invoke({"input": "Refund it."}, session("alice"))

    bob, alice = text(model.received[2]), text(model.received[3])
    assert "#W2222222" in bob and "#W1111111" not in bob
    assert "#W1111111" in alice and "#W2222222" not in alice and "Cancel it." not in alice


def test_the_recall_tool_of_a_session_answers_with_that_sessions_records(recording_model):
    """A card id is a position in its own session: the caller that runs the chain's tools answers
    ``recall`` from ``memory.for_session(session_id)``, not from another conversation's ``c0``."""
    memory = memory_in_ram()
    memory.observe({"role": "user", "content": "My order is #W1111111."})  # the memory's own session
    recall = recall_tool(memory.for_session("bob"))
    model = recording_model(*SCRIPT, AIMessage("Noted."))
    chain = with_history(
        TOOL_LOOP_PROMPT | model,
        memory,
        input_messages_key="input",
        history_messages_key="history",
        recall=True,
    )

    booking = HumanMessage("Book HAT107 for mia_li_3668")
    run_tools(chain, chain.invoke({"input": [booking]}, session("bob")), session("bob"))
    chain.invoke({"input": [HumanMessage("Thanks")]}, session("bob"))

    assert "recall" in text(model.received[-1])  # the section offers it
    assert recall.invoke({"card_id": "c0"}) == "Book HAT107 for mia_li_3668"
    assert "4WQ150" in recall.invoke({"card_id": "c6"})
    assert recall_tool(memory).invoke({"card_id": "c0"}) == "My order is #W1111111."  # another session's


def test_a_chat_model_wrapped_directly_gets_its_system_message_back_and_records_only_new_messages(
    recording_model,
):
    model = recording_model(*(AIMessage(f"Reply {i}.") for i in range(3)))
    memory = memory_in_ram()
    chain = with_history(model, memory)

    chain.invoke([SystemMessage("Answer briefly."), HumanMessage("I am mia_li_3668.")], session("s"))
    chain.invoke([HumanMessage("Which flights tomorrow?")], session("s"))
    chain.invoke([HumanMessage("And the day after?")], session("s"))

    last = model.received[-1]
    assert last[0] == SystemMessage("Answer briefly.")
    assert [m for m in last if isinstance(m, SystemMessage)] == [last[0]]
    assert "mia_li_3668" in text(last) and last[-1].content == "And the day after?"
    assert [(m["role"], m["content"]) for m in memory.for_session("s").messages()] == [
        ("system", "Answer briefly."),
        ("user", "I am mia_li_3668."),
        ("assistant", "Reply 0."),
        ("user", "Which flights tomorrow?"),
        ("assistant", "Reply 1."),
        ("user", "And the day after?"),
        ("assistant", "Reply 2."),
    ]


def test_async_runs_record_and_read_as_sync_ones_do(recording_model):
    model = recording_model(AIMessage("Noted."), AIMessage("Noted too."), AIMessage("It is #W1111111."))
    memory = memory_in_ram()
    chain = chat_chain(model, memory)

    async def conversation():
        await chain.ainvoke({"input": "My order is #W1111111."}, session("alice"))
        await chain.ainvoke({"input": "My order is #W2222222."}, session("bob"))
        await chain.ainvoke({"input": "Which order is mine?"}, session("alice"))
        return await DamcChatMessageHistory(memory, "alice").aget_messages()

    history = asyncio.run(conversation())

    last = text(model.received[-1])
    assert "#W1111111" in last and "#W2222222" not in last
    assert [m.content for m in history[-2:]] == ["Which order is mine?", "It is #W1111111."]


def test_clear_starts_the_conversation_over_and_keeps_the_records(recording_model):
    model = recording_model(AIMessage("Noted."), AIMessage("What is your order number?"))
    memory = memory_in_ram()
    chain = chat_chain(model, memory)
    chain.invoke({"input": "My order is #W1111111."}, session("alice"))

    history = DamcChatMessageHistory(memory, "alice")
    history.clear()
    chain.invoke({"input": "Cancel my order."}, session("alice"))

    assert [m.content for m in history.messages] == ["Cancel my order.", "What is your order number?"]
    assert "#W1111111" not in text(model.received[-1])
    assert "#W1111111" in str(history.memory.messages())


def test_a_session_stays_open_from_run_to_run_and_no_session_id_is_the_memorys_own():
    memory = memory_in_ram()
    history = DamcChatMessageHistory(memory)

    history.add_messages([HumanMessage("My order is #W1111111."), AIMessage("Noted.")])

    assert history.memory is memory and len(memory.cards()) == 2
    assert [m.content for m in history.messages] == ["My order is #W1111111.", "Noted."]
    alice = DamcChatMessageHistory(memory, "alice").memory
    assert alice.namespace.session == "alice" and DamcChatMessageHistory(memory, "alice").memory is alice


@pytest.mark.parametrize("budget", [0, -5, "800", 2.5, True])
def test_a_budget_that_is_no_token_count_is_refused_when_the_history_is_made(budget):
    with pytest.raises(ConfigError, match="budget must be a whole number of tokens"):
        DamcChatMessageHistory(memory_in_ram(), "alice", budget=budget)


def test_a_history_needs_a_decision_memory():
    with pytest.raises(ConfigError, match="needs a DecisionMemory, got str"):
        DamcChatMessageHistory("memory.sqlite3", "alice")  # type: ignore[arg-type]


class FailingValuator:
    """A valuator with a bug: every build fails."""

    def value(self, cards, *, context):
        raise RuntimeError("valuator bug")


def test_a_build_that_fails_sends_the_whole_conversation_and_the_chain_goes_on(recording_model, caplog):
    model = recording_model(AIMessage("Noted."), AIMessage("It is #W1111111."))
    chain = chat_chain(model, DecisionMemory(store=InMemoryStore(), valuator=FailingValuator()))

    chain.invoke({"input": "My order is #W1111111."}, session("alice"))
    reply = chain.invoke({"input": "Which order is mine?"}, session("alice"))

    assert reply.content == "It is #W1111111."
    assert [m.content for m in model.received[-1]] == [
        "You book flights.",
        "My order is #W1111111.",
        "Noted.",
        "Which order is mine?",
    ]
    assert "building the context failed" in caplog.text


def test_a_turn_the_store_refused_reaches_the_next_run_once_the_store_is_back(
    recording_model, tmp_path, caplog
):
    import sqlite3

    path = tmp_path / "memory.sqlite3"
    model = recording_model(AIMessage("Noted."), AIMessage("It is #W1111111."))
    memory = DecisionMemory(store=SQLiteStore(path, timeout=0.1))
    chain = chat_chain(model, memory)
    other_process = sqlite3.connect(path, isolation_level=None)

    other_process.execute("BEGIN IMMEDIATE")  # another process holds the file as the run ends
    assert chain.invoke({"input": "My order is #W1111111."}, session("alice")).content == "Noted."
    other_process.execute("COMMIT")
    chain.invoke({"input": "Which order is mine?"}, session("alice"))

    assert [m.content for m in model.received[-1]][-3:] == [
        "My order is #W1111111.",
        "Noted.",
        "Which order is mine?",
    ]
    assert [m["content"] for m in memory.for_session("alice").messages()] == [
        "My order is #W1111111.",
        "Noted.",
        "Which order is mine?",
        "It is #W1111111.",
    ]
    assert "waits for the store" in caplog.text
