"""DAMCMemory in place of ConversationBufferMemory on a langchain-classic AgentExecutor."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("langchain_classic")

from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from damc_core import DecisionMemory, InMemoryStore, MemorySettings
from damc_langchain import DAMCMemory, recall_tool

from .scenario import SCRIPT, book, get_user_details, search_flights, text

PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You book flights."),
        MessagesPlaceholder("history"),
        ("human", "{input}"),
        MessagesPlaceholder("agent_scratchpad"),
    ]
)


def executor(model, memory):
    tools = [get_user_details, search_flights, book]
    agent = create_tool_calling_agent(model, tools, PROMPT)
    return AgentExecutor(agent=agent, tools=tools, memory=memory, return_intermediate_steps=True)


def damc_memory(**fields):
    decision = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=500))
    options = {"return_messages": True, "input_key": "input", "output_key": "output", **fields}
    return DAMCMemory(memory=decision, **options)


def test_a_second_run_sees_the_first_runs_tool_results_as_cards(recording_model):
    model = recording_model(*SCRIPT, AIMessage("Your card is credit_card_4421486."))
    memory = damc_memory()
    agent = executor(model, memory)

    agent.invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})
    agent.invoke({"input": "Which card did I use?"})

    second_run = model.received[-1]
    history = text(second_run)
    assert "<memory>" in history and "credit_card_4421486" in history and "4WQ150" in history
    assert second_run[-1].content == "Which card did I use?"
    kinds = [c.kind.value for c in memory.memory.cards()]
    assert kinds.count("tool_result") == 3 and kinds.count("user_instruction") == 2


@pytest.mark.parametrize("offered", [True, False], ids=["recall offered", "no recall tool"])
def test_the_section_mentions_recall_only_when_the_memory_is_told_the_agent_has_it(recording_model, offered):
    model = recording_model(*SCRIPT, AIMessage("Your card is credit_card_4421486."))
    decision = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=500))
    memory = DAMCMemory(memory=decision, return_messages=True, input_key="input", recall_tool=offered)
    tools = [get_user_details, search_flights, book, *([recall_tool(decision)] if offered else [])]
    agent = create_tool_calling_agent(model, tools, PROMPT)
    agent = AgentExecutor(agent=agent, tools=tools, memory=memory, return_intermediate_steps=True)

    agent.invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})
    agent.invoke({"input": "Which card did I use?"})

    prompt, section = [m.content for m in model.received[-1] if isinstance(m, SystemMessage)]
    assert prompt == "You book flights."
    assert "<memory>" in section and "credit_card_4421486" in section
    assert ("recall(id)" in section) is offered
    assert ("recall(" in section) is offered
    assert ("recall" in model.tools_offered) is offered


def test_a_short_conversation_loads_exactly_as_conversation_buffer_memory_does():
    from langchain_classic.memory import ConversationBufferMemory

    damc, buffer = damc_memory(return_messages=False), ConversationBufferMemory()
    for memory in (damc, buffer):
        memory.save_context({"input": "Book HAT107 for mia_li_3668"}, {"output": "Which card?"})

    loaded = damc.load_memory_variables({"input": "my visa"})["history"]

    assert (
        loaded
        == buffer.load_memory_variables({})["history"]
        == "Human: Book HAT107 for mia_li_3668\nAI: Which card?"
    )


def test_async_save_and_load(recording_model):
    memory = damc_memory()

    async def run():
        await memory.asave_context({"input": "my id is mia_li_3668"}, {"output": "noted"})
        return await memory.aload_memory_variables({"input": "again"})

    loaded = asyncio.run(run())["history"]
    assert all(isinstance(m, BaseMessage) for m in loaded)
    assert "mia_li_3668" in text(loaded)


def test_clear_forgets_the_conversation():
    memory = damc_memory()
    memory.save_context({"input": "my id is mia_li_3668"}, {"output": "noted"})

    memory.clear()

    assert "mia_li_3668" not in text(memory.load_memory_variables({"input": "x"})["history"])


def test_ambiguous_inputs_need_an_input_key():
    memory = DAMCMemory(memory=DecisionMemory(store=InMemoryStore()))
    with pytest.raises(ValueError, match="input_key"):
        memory.save_context({"a": "1", "b": "2"}, {"output": "x"})


def test_streaming_an_executor_with_damc_memory(recording_model):
    model = recording_model(*SCRIPT, AIMessage("You used credit_card_4421486."))
    memory = damc_memory()
    agent = executor(model, memory)

    list(agent.stream({"input": "Book HAT107 for mia_li_3668 with my visa"}))
    chunks = list(agent.stream({"input": "Which card did I use?"}))

    assert chunks[-1]["output"] == "You used credit_card_4421486."
    assert "credit_card_4421486" in text(model.received[-1])


def test_a_tool_returning_a_dict_is_recorded_as_json(recording_model):
    from langchain_core.tools import tool

    from .scenario import call

    @tool
    def get_reservation(reservation_id: str) -> dict:
        """Look up a reservation."""
        return {"reservation_id": reservation_id, "status": "confirmed", "flights": ["HAT107"] * 20}

    model = recording_model(
        call("get_reservation", {"reservation_id": "4WQ150"}, "r1"), AIMessage("Confirmed.")
    )
    memory = damc_memory()
    tools = [get_reservation]
    agent = AgentExecutor(
        agent=create_tool_calling_agent(model, tools, PROMPT),
        tools=tools,
        memory=memory,
        return_intermediate_steps=True,
    )

    agent.invoke({"input": "Is 4WQ150 confirmed?"})

    result = next(c for c in memory.memory.cards() if c.kind.value == "tool_result")
    assert json.loads(memory.memory.recall(result.id)["content"]) == get_reservation.invoke("4WQ150")
    assert "status=confirmed" in result.summary


@pytest.mark.parametrize("intermediate_steps", [True, False])
def test_damc_memory_with_the_callback_handler_records_each_event_once(recording_model, intermediate_steps):
    from damc_langchain import DamcCallbackHandler

    model = recording_model(*SCRIPT, AIMessage("Your card is credit_card_4421486."))
    memory = damc_memory()
    agent = executor(model, memory)
    agent.return_intermediate_steps = intermediate_steps
    handler = DamcCallbackHandler(memory.memory)

    agent.invoke({"input": "Book HAT107 for mia_li_3668 with my visa"}, config={"callbacks": [handler]})
    agent.invoke({"input": "Which card did I use?"}, config={"callbacks": [handler]})

    events = [_identity(m) for m in memory.memory.messages()]
    assert len(events) == len(set(events)), events
    kinds = [c.kind.value for c in memory.memory.cards()]
    assert kinds.count("tool_result") == 3 and kinds.count("user_instruction") == 2
    assert kinds.count("assistant_conclusion") == 2


@pytest.mark.parametrize("with_handler", [False, True], ids=["alone", "with the callback handler"])
def test_odd_outputs_and_a_block_answer_are_recorded_once_as_the_memory_keeps_them(
    recording_model, with_handler
):
    from langchain_core.tools import tool

    from damc_langchain import DamcCallbackHandler

    from .scenario import call

    @tool
    def scan(code: str) -> bytes:
        """Read a boarding pass."""
        return b"\x00\xffHAT107"

    model = recording_model(
        call("scan", {"code": "BP1"}, "s1"), AIMessage([{"type": "text", "text": "Scanned."}])
    )
    memory = damc_memory()
    agent = AgentExecutor(
        agent=create_tool_calling_agent(model, [scan], PROMPT),
        tools=[scan],
        memory=memory,
        return_intermediate_steps=True,
    )
    callbacks = [DamcCallbackHandler(memory.memory)] if with_handler else []

    agent.invoke({"input": "Scan BP1"}, config={"callbacks": callbacks})

    summaries = [c.summary for c in memory.memory.cards()]
    assert [s for s in summaries if "binary content" in s] == [summaries[2]]
    assert summaries[-1] == "[c3] assistant: Scanned."


def _identity(event):
    calls = tuple(c["id"] for c in event.get("tool_calls") or ())
    return event["role"], calls or event.get("tool_call_id") or event["content"]


@pytest.mark.parametrize("with_handler", [False, True], ids=["alone", "with the callback handler"])
def test_a_call_of_a_tool_the_executor_lacks_is_recorded_as_that_calls_error(recording_model, with_handler):
    from damc_langchain import DamcCallbackHandler

    from .scenario import call

    model = recording_model(call("notify", {"to": "mia"}, "n1"), AIMessage("I cannot notify you."))
    memory = damc_memory()
    callbacks = [DamcCallbackHandler(memory.memory)] if with_handler else []

    executor(model, memory).invoke({"input": "Notify me"}, config={"callbacks": callbacks})

    (call_card, answer) = [c for c in memory.memory.cards() if c.tool_name]
    assert (call_card.kind.value, call_card.tool_call_id) == ("tool_call", "n1")
    assert (answer.kind.value, answer.tool_name, answer.tool_call_id) == ("tool_error", "notify", "n1")
    assert answer.constraints[0].startswith("notify failed: notify is not a valid tool")


def test_a_reply_the_executor_could_not_parse_is_recorded_as_an_error(recording_model):
    from .scenario import unparsable_call

    model = recording_model(unparsable_call("book", '{"flight": "HAT1', "b1"), AIMessage("Please retry."))
    memory = damc_memory()
    agent = executor(model, memory)
    agent.handle_parsing_errors = True

    agent.invoke({"input": "Book HAT1"})

    (failed,) = [c for c in memory.memory.cards() if c.tool_name and c.kind.value != "tool_call"]
    assert (failed.kind.value, failed.tool_name) == ("tool_error", "_Exception")
    assert failed.text == "Invalid or incomplete response"


def test_a_run_the_store_refuses_returns_its_answer_and_is_recorded_once_the_store_is_back(
    recording_model, tmp_path, caplog
):
    import sqlite3

    from damc_core import SQLiteStore

    path = tmp_path / "memory.sqlite3"
    decision = DecisionMemory(store=SQLiteStore(path, timeout=0.1), settings=MemorySettings(budget=500))
    memory = DAMCMemory(memory=decision, return_messages=True, input_key="input", output_key="output")
    model = recording_model(*SCRIPT, AIMessage("Your card is credit_card_4421486."))
    agent = executor(model, memory)
    other_process = sqlite3.connect(path, isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")  # another process holds the file for the whole run

    first = agent.invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})

    assert first["output"] == "Booked HAT107, reservation 4WQ150."
    assert decision.event_count == 0 and "recording the run waits for the store" in caplog.text
    other_process.execute("COMMIT")

    agent.invoke({"input": "Which card did I use?"})

    assert "credit_card_4421486" in text(model.received[-1])  # the first run, in order, then this one
    kinds = [c.kind.value for c in decision.cards()]
    assert kinds == [
        "user_instruction",
        *["tool_call", "tool_result"] * 3,
        "assistant_conclusion",
        "user_instruction",
        "assistant_conclusion",
    ]


def test_a_build_that_fails_gives_the_executor_the_whole_conversation_and_it_goes_on(recording_model, caplog):
    from damc_core import HeuristicValuator

    class FailingValuator(HeuristicValuator):
        def value(self, cards, *, context):
            raise RuntimeError("valuator bug")

    model = recording_model(AIMessage("Noted."), AIMessage("It is #W1111111."))
    decision = DecisionMemory(store=InMemoryStore(), valuator=FailingValuator())
    agent = executor(model, DAMCMemory(memory=decision, return_messages=True, input_key="input"))

    agent.invoke({"input": "My order is #W1111111."})
    reply = agent.invoke({"input": "Which order is mine?"})

    assert reply["output"] == "It is #W1111111."
    assert [m.content for m in model.received[-1]] == [
        "You book flights.",
        "My order is #W1111111.",
        "Noted.",
        "Which order is mine?",
    ]
    assert "building the context failed" in caplog.text
