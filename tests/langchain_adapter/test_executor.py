"""wrap(agent_executor): the model sees DAMC's context at every step; the original executor is intact."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("langchain_classic")

from langchain_core.messages import AIMessage, SystemMessage, ToolMessage

from damc_core import CardKind, DecisionMemory, InMemoryStore, MemorySettings
from damc_langchain import recall_tool, wrap

from .scenario import (
    FLIGHTS,
    HISTORY_PROMPT,
    SCRIPT,
    BusyStore,
    book,
    call,
    executor,
    get_user_details,
    search_flights,
    text,
)


def memory():
    return DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=500))


def test_every_step_sees_damc_context_including_this_runs_tool_results(recording_model):
    model = recording_model(*SCRIPT)
    result = wrap(executor(model), memory()).invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})

    booking = model.received[2]
    assert isinstance(booking[0], SystemMessage) and booking[0].content.startswith("You book flights.")
    assert "<memory>" in booking[0].content
    assert "credit_card_4421486" in text(booking) and "HAT107" in text(booking)
    assert len(text(booking)) < len(json.dumps(FLIGHTS))
    assert json.loads(result["intermediate_steps"][1][1]) == FLIGHTS
    assert result["output"] == "Booked HAT107, reservation 4WQ150."


def test_the_memory_section_speaks_of_recall_when_the_agent_has_the_tool(recording_model):
    damc = memory()
    with_recall = recording_model(*SCRIPT)
    tools = (get_user_details, search_flights, book, recall_tool(damc))
    wrap(executor(with_recall, tools=tools), damc).invoke({"input": "Book HAT107 for mia_li_3668"})
    without = recording_model(*SCRIPT)
    wrap(executor(without), memory()).invoke({"input": "Book HAT107 for mia_li_3668"})

    assert "recall(id)" in with_recall.received[2][0].content
    assert "<memory>" in without.received[2][0].content and "recall(" not in without.received[2][0].content


def test_the_original_executor_is_untouched(recording_model):
    original = executor(recording_model(*SCRIPT))
    wrap(original, memory())

    original.invoke({"input": "Book HAT107"})

    raw = next(
        m
        for m in original.agent.runnable.steps[2].received[2]
        if isinstance(m, ToolMessage) and m.tool_call_id == "c2"
    )
    assert json.loads(raw.content) == FLIGHTS


def test_a_later_run_remembers_an_earlier_one(recording_model):
    model = recording_model(*SCRIPT, AIMessage("You used credit_card_4421486."))
    wrapped = wrap(executor(model), memory())

    wrapped.invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})
    wrapped.invoke({"input": "Which card did I use?"})

    assert "credit_card_4421486" in text(model.received[-1])
    assert model.received[-1][-1].content == "Which card did I use?"


def test_async_and_streaming_runs(recording_model):
    model = recording_model(*SCRIPT)
    asyncio.run(wrap(executor(model), memory()).ainvoke({"input": "go"}))
    assert "<memory>" in model.received[2][0].content

    streamed = recording_model(*SCRIPT)
    chunks = list(wrap(executor(streamed), memory()).stream({"input": "go"}))
    assert chunks and "<memory>" in streamed.received[2][0].content


def test_an_agent_that_is_not_a_runnable_sequence_is_refused(recording_model):
    plain = executor(recording_model(*SCRIPT))
    odd = plain.model_copy(update={"agent": plain.agent.model_copy(update={"runnable": recording_model()})})
    with pytest.raises(TypeError, match="DamcCallbackHandler"):
        wrap(odd, memory())


def test_an_openai_tools_agent_is_wrapped_the_same_way(recording_model):
    from langchain_classic.agents import AgentExecutor, create_openai_tools_agent

    from .scenario import SCRATCHPAD_PROMPT, book, get_user_details, search_flights

    model = recording_model(*SCRIPT)
    tools = [get_user_details, search_flights, book]
    original = AgentExecutor(agent=create_openai_tools_agent(model, tools, SCRATCHPAD_PROMPT), tools=tools)

    result = wrap(original, memory()).invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})

    assert result["output"] == "Booked HAT107, reservation 4WQ150."
    assert "<memory>" in model.received[2][0].content
    assert "credit_card_4421486" in text(model.received[2])


def test_a_later_run_sees_the_earlier_runs_final_answer(recording_model):
    model = recording_model(*SCRIPT, AIMessage("Your reservation is 4WQ150."))
    wrapped = wrap(executor(model), memory())

    wrapped.invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})
    wrapped.invoke({"input": "What did you book?"})

    assert "Booked HAT107, reservation 4WQ150." in text(model.received[-1])


def test_a_caller_kept_chat_history_is_neither_recorded_twice_nor_hides_the_new_question(recording_model):
    model = recording_model(*SCRIPT, AIMessage("Refunded to GC-555."))
    damc = memory()
    wrapped = wrap(executor(model, HISTORY_PROMPT), damc)
    first = "Book HAT107 for mia_li_3668 with my visa"

    answer = wrapped.invoke({"input": first, "chat_history": []})["output"]
    wrapped.invoke(
        {"input": "Refund it to my gift card GC-555", "chat_history": [("human", first), ("ai", answer)]}
    )

    sent = model.received[-1]
    assert sent[-1].content == "Refund it to my gift card GC-555"
    said = [(m["role"], m.get("content")) for m in damc.messages() if m.get("content")]
    assert said.count(("user", first)) == 1 and said.count(("assistant", answer)) == 1
    assert said[-1] == ("assistant", "Refunded to GC-555.")


def test_a_chat_history_the_memory_never_saw_is_recorded_on_the_first_run(recording_model):
    model = recording_model(AIMessage("Your reservation is 4WQ150."))
    damc = memory()

    wrap(executor(model, HISTORY_PROMPT), damc).invoke(
        {
            "input": "What is my reservation?",
            "chat_history": [("human", "Hi"), ("ai", "Booked 4WQ150 for you.")],
        }
    )

    assert [m["content"] for m in damc.messages()] == [
        "Hi",
        "Booked 4WQ150 for you.",
        "What is my reservation?",
        "Your reservation is 4WQ150.",
    ]
    assert "4WQ150" in text(model.received[0])


def test_a_text_react_agent_is_refused(recording_model):
    from langchain_classic.agents import AgentExecutor, create_react_agent
    from langchain_core.prompts import PromptTemplate

    from .scenario import search_flights

    prompt = PromptTemplate.from_template(
        "Tools: {tools} ({tool_names})\nQuestion: {input}\n{agent_scratchpad}"
    )
    react = AgentExecutor(
        agent=create_react_agent(recording_model(), [search_flights], prompt), tools=[search_flights]
    )

    with pytest.raises(TypeError, match=r"ReActSingleInputOutputParser.*DamcCallbackHandler"):
        wrap(react, memory())


def test_a_system_prompt_in_content_blocks_keeps_its_blocks(recording_model):
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

    from .scenario import book, get_user_details, search_flights

    blocks = [{"type": "text", "text": "You are AcmeBot.", "cache_control": {"type": "ephemeral"}}]
    prompt = ChatPromptTemplate.from_messages(
        [SystemMessage(blocks), ("human", "{input}"), MessagesPlaceholder("agent_scratchpad")]
    )
    model = recording_model(*SCRIPT)
    tools = [get_user_details, search_flights, book]
    agent = AgentExecutor(agent=create_tool_calling_agent(model, tools, prompt), tools=tools)

    wrap(agent, memory()).invoke({"input": "Book HAT107 for mia_li_3668"})

    system = model.received[2][0]
    assert system.content[0] == blocks[0]
    assert system.content[1]["text"].startswith("<memory>")


def test_a_run_retried_after_the_model_failed_records_its_request_once(recording_model):
    from .conftest import RecordingChatModel

    class FailsOnItsSecondCall(RecordingChatModel):
        failed: bool = False

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if len(self.received) == 1 and not self.failed:
                self.failed = True
                raise RuntimeError("503 overloaded")
            return super()._generate(messages, stop, run_manager, **kwargs)

    model = FailsOnItsSecondCall(
        script=[
            call("get_user_details", {"user_id": "mia_li_3668"}, "call_1"),
            call("get_user_details", {"user_id": "mia_li_3668"}, "call_2"),
            AIMessage("You have a visa."),
            AIMessage("Booked."),
        ]
    )
    damc = memory()
    wrapped = wrap(executor(model), damc)
    with pytest.raises(RuntimeError, match="503"):
        wrapped.invoke({"input": "Which cards do I have? I am mia_li_3668"})

    wrapped.invoke({"input": "Which cards do I have? I am mia_li_3668"})  # the app retries
    wrapped.invoke({"input": "Which cards do I have? I am mia_li_3668"})  # answered: a new turn

    users = [m["content"] for m in damc.messages() if m["role"] == "user"]
    assert users == ["Which cards do I have? I am mia_li_3668"] * 2


def test_a_request_said_again_after_a_return_direct_tool_answered_is_a_new_turn(recording_model):
    from langchain_core.tools import tool

    @tool(return_direct=True)
    def status(order: str) -> str:
        """Order status."""
        return f"order {order}: shipped"

    model = recording_model(call("status", {"order": "A1"}, "c1"), call("status", {"order": "A1"}, "c2"))
    damc = memory()
    wrapped = wrap(executor(model, tools=[status]), damc)

    wrapped.invoke({"input": "Status of A1?"})
    wrapped.invoke({"input": "Status of A1?"})  # asked again later

    assert model.received[-1][-1].content == "Status of A1?"
    said = [(m["role"], m["content"]) for m in damc.messages() if m["role"] != "tool"]
    assert said == [("user", "Status of A1?"), ("assistant", ""), ("assistant", "order A1: shipped")] * 2


def test_a_request_said_again_after_the_iteration_limit_stopped_the_run_is_a_new_turn(recording_model):
    from langchain_core.tools import tool

    @tool
    def poll(job: str) -> str:
        """Poll a job."""
        return f"job {job}: running"

    model = recording_model(call("poll", {"job": "J"}, "c1"), AIMessage("It is done now."))
    damc = memory()
    agent = executor(model, tools=[poll]).model_copy(update={"max_iterations": 1})
    wrapped = wrap(agent, damc)

    stopped = wrapped.invoke({"input": "continue"})["output"]
    wrapped.invoke({"input": "continue"})

    assert model.received[-1][-1].content == "continue"
    said = [(m["role"], m["content"]) for m in damc.messages() if m["role"] != "tool"]
    assert said == [
        ("user", "continue"),
        ("assistant", ""),
        ("assistant", stopped),
        ("user", "continue"),
        ("assistant", "It is done now."),
    ]


def test_a_step_calling_a_tool_the_executor_lacks_keeps_every_result_when_the_run_stops_after_it(
    recording_model,
):
    from langchain_core.tools import tool

    @tool
    def book(flight: str) -> str:
        """Book a flight."""
        return f"booked {flight}, confirmation ZX9"

    calls = [
        {"name": "book", "args": {"flight": "HAT1"}, "id": "c1"},
        {"name": "notify", "args": {"to": "me"}, "id": "c2"},  # no such tool
    ]
    model = recording_model(AIMessage("", tool_calls=calls), AIMessage("Your confirmation is ZX9."))
    damc = memory()
    agent = executor(model, tools=[book]).model_copy(update={"max_iterations": 1})
    wrapped = wrap(agent, damc)

    wrapped.invoke({"input": "Book HAT1 and notify me"})  # stops after the step
    wrapped.invoke({"input": "What is my confirmation?"})

    assert "confirmation ZX9" in text(model.received[-1])
    step = [(m["role"], m.get("tool_call_id"), m["content"], m.get("status")) for m in damc.messages()[1:4]]
    assert step == [
        ("assistant", None, "", None),
        ("tool", "c1", "booked HAT1, confirmation ZX9", None),
        ("tool", "c2", "notify is not a valid tool, try one of [book].", "error"),
    ]


def booking_that_fails(recording_model, error):
    """An executor whose model looks the user up and books in one step, and whose booking tool
    fails with ``error`` after a while; its model then answers the next run's question."""
    import time

    from langchain_core.tools import tool

    from .scenario import get_user_details

    @tool
    def book(flight_number: str, payment_id: str) -> str:
        """Book a flight."""
        time.sleep(0.1)  # the lookup beside it returns meanwhile
        raise error

    lookup = {"name": "get_user_details", "args": {"user_id": "mia_li_3668"}, "id": "c1"}
    visa = "credit_card_4421486"
    booking = {"name": "book", "args": {"flight_number": "HAT107", "payment_id": visa}, "id": "c2"}
    model = recording_model(
        AIMessage("", tool_calls=[lookup, booking]),  # both at once
        AIMessage("The booking did not go through: the gateway timed out."),
    )
    return model, executor(model, tools=[get_user_details, book])


def assert_the_step_is_remembered(prompt, error="payment gateway timed out"):
    """The next run's model sees the step the tool ended: both calls, each with its result."""
    calls = [call["id"] for m in prompt if isinstance(m, AIMessage) for call in m.tool_calls]
    results = {m.tool_call_id: m for m in prompt if isinstance(m, ToolMessage)}
    assert calls == ["c1", "c2"] and list(results) == calls
    assert "credit_card_4421486" in results["c1"].content
    assert results["c2"].status == "error" and error in results["c2"].content
    assert prompt[-1].content == "Did the booking go through?"


def test_a_tool_that_raises_leaves_its_step_in_memory(recording_model):
    model, agent = booking_that_fails(recording_model, RuntimeError("payment gateway timed out"))
    wrapped = wrap(agent, memory(), budget=4000)  # room to send the last run as it happened

    with pytest.raises(RuntimeError, match="payment gateway timed out"):
        wrapped.invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})
    wrapped.invoke({"input": "Did the booking go through?"})

    assert_the_step_is_remembered(model.received[-1])


def test_an_async_run_that_a_tool_ended_leaves_its_step_in_memory(recording_model):
    model, agent = booking_that_fails(recording_model, RuntimeError("payment gateway timed out"))
    wrapped = wrap(agent, memory(), budget=4000)  # room to send the last run as it happened

    with pytest.raises(RuntimeError, match="payment gateway timed out"):
        asyncio.run(wrapped.ainvoke({"input": "Book HAT107 for mia_li_3668 with my visa"}))
    asyncio.run(wrapped.ainvoke({"input": "Did the booking go through?"}))

    assert_the_step_is_remembered(model.received[-1])


def test_an_interrupted_run_leaves_what_came_back_in_memory_and_still_stops(recording_model):
    ctrl_c = KeyboardInterrupt()  # pressed while the booking waits on the gateway
    model, agent = booking_that_fails(recording_model, ctrl_c)
    wrapped = wrap(agent, memory(), budget=4000)

    with pytest.raises(KeyboardInterrupt) as raised:
        wrapped.invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})
    assert raised.value is ctrl_c
    wrapped.invoke({"input": "Did the booking go through?"})

    assert_the_step_is_remembered(model.received[-1], error="KeyboardInterrupt")


def test_a_tool_that_waits_for_a_human_is_not_recorded_as_failed(recording_model):
    from typing import TypedDict

    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import StateGraph
    from langgraph.types import Command, interrupt

    @tool
    def book_flight(flight: str) -> str:
        """Book a flight once a human approves."""
        return f"booked {flight}, confirmation ABC123" if interrupt(f"Book {flight}?") else "rejected"

    class Chat(TypedDict, total=False):
        question: str
        answer: str

    booking = call("book_flight", {"flight": "HAT1"}, "c1")
    model = recording_model(booking, booking.model_copy(), AIMessage("Booked: ABC123."))  # again on resume
    damc = memory()
    agent = wrap(executor(model, tools=[book_flight]), damc)
    graph = StateGraph(Chat)
    graph.add_node("agent", lambda chat: {"answer": agent.invoke({"input": chat["question"]})["output"]})
    graph.set_entry_point("agent")
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"question": "Book HAT1."}, config)
    app.invoke(Command(resume=True), config)  # the human approves

    results = [(m["content"], m.get("status")) for m in damc.messages() if m["role"] == "tool"]
    assert results == [("booked HAT1, confirmation ABC123", None)]


def replies_without_ids(*replies):
    """A scripted model whose replies carry no message id, as some providers give them."""
    from .conftest import RecordingChatModel

    class RepliesWithoutIds(RecordingChatModel):
        def invoke(self, input, config=None, **kwargs):
            return super().invoke(input, config, **kwargs).model_copy(update={"id": None})

        async def ainvoke(self, input, config=None, **kwargs):
            reply = await super().ainvoke(input, config, **kwargs)
            return reply.model_copy(update={"id": None})

    return RepliesWithoutIds(script=list(replies))


def test_a_step_whose_reply_has_no_id_is_recorded_as_it_goes_when_a_tool_raises():
    model, agent = booking_that_fails(replies_without_ids, RuntimeError("payment gateway timed out"))
    damc = memory()
    wrapped = wrap(agent, damc, budget=4000)

    with pytest.raises(RuntimeError, match="payment gateway timed out"):
        wrapped.invoke({"input": "Book HAT107 for mia_li_3668 with my visa"})

    step = [(m["role"], m.get("tool_call_id"), m.get("status")) for m in damc.messages()]
    assert step == [
        ("user", None, None),
        ("assistant", None, None),
        ("tool", "c1", None),
        ("tool", "c2", "error"),
    ]
    wrapped.invoke({"input": "Did the booking go through?"})
    assert_the_step_is_remembered(model.received[-1])


def test_an_async_step_whose_reply_has_no_id_is_recorded_as_it_goes_when_a_tool_raises():
    model, agent = booking_that_fails(replies_without_ids, RuntimeError("payment gateway timed out"))
    wrapped = wrap(agent, memory(), budget=4000)

    with pytest.raises(RuntimeError, match="payment gateway timed out"):
        asyncio.run(wrapped.ainvoke({"input": "Book HAT107 for mia_li_3668 with my visa"}))
    asyncio.run(wrapped.ainvoke({"input": "Did the booking go through?"}))

    assert_the_step_is_remembered(model.received[-1])


def test_a_step_whose_reply_has_no_id_is_kept_when_the_iteration_limit_stops_the_run():
    from langchain_core.tools import tool

    @tool
    def book(flight: str) -> str:
        """Book a flight."""
        return f"booked {flight}, confirmation ZX9"

    model = replies_without_ids(
        call("book", {"flight": "HAT1"}, "c1"), AIMessage("Your confirmation is ZX9.")
    )
    damc = memory()
    wrapped = wrap(executor(model, tools=[book]).model_copy(update={"max_iterations": 1}), damc)

    stopped = wrapped.invoke({"input": "Book HAT1"})["output"]
    wrapped.invoke({"input": "What is my confirmation?"})

    assert "confirmation ZX9" in text(model.received[-1])
    said = [(m["role"], m.get("tool_call_id"), m["content"]) for m in damc.messages()]
    assert said[:4] == [
        ("user", None, "Book HAT1"),
        ("assistant", None, ""),
        ("tool", "c1", "booked HAT1, confirmation ZX9"),
        ("assistant", None, stopped),
    ]


def test_replies_without_ids_are_recorded_once_each_as_replies_with_ids_are(recording_model):
    with_ids, without = memory(), memory()
    wrap(executor(recording_model(*SCRIPT)), with_ids).invoke({"input": "Book HAT107 for mia_li_3668"})
    script = [reply.model_copy(update={"id": None}) for reply in SCRIPT]
    wrap(executor(replies_without_ids(*script)), without).invoke({"input": "Book HAT107 for mia_li_3668"})

    def said(damc):
        return [{k: v for k, v in m.items() if k != "id"} for m in damc.messages()]

    assert len(said(without)) == 1 + 2 * 3 + 1 and said(without) == said(with_ids)


def test_a_call_that_raised_after_the_call_beside_it_returned_is_recorded_in_the_calls_order(
    recording_model,
):
    import time

    from langchain_core.tools import tool

    @tool
    def book(flight: str) -> str:
        """Book a flight."""
        time.sleep(0.1)  # the lookup beside it returns meanwhile
        raise RuntimeError("payment gateway timed out")

    @tool
    def lookup(user_id: str) -> str:
        """Look a user up."""
        return f"{user_id}: visa credit_card_4421486"

    calls = [
        {"name": "book", "args": {"flight": "HAT107"}, "id": "c1"},
        {"name": "lookup", "args": {"user_id": "mia_li_3668"}, "id": "c2"},
    ]
    damc = memory()
    wrapped = wrap(executor(recording_model(AIMessage("", tool_calls=calls)), tools=[book, lookup]), damc)

    with pytest.raises(RuntimeError, match="payment gateway timed out"):
        asyncio.run(wrapped.ainvoke({"input": "Book HAT107 for mia_li_3668"}))

    results = [(m["tool_call_id"], m.get("status")) for m in damc.messages() if m["role"] == "tool"]
    assert results == [("c1", "error"), ("c2", None)]


def seat_check(handle_tool_error):
    """A tool that reports a sold-out flight as a ``ToolException`` its ``handle_tool_error``
    turns into its output, and finds seats on any other flight."""
    from langchain_core.tools import ToolException, tool

    @tool
    def check_seats(flight: str) -> str:
        """Check a flight's seats."""
        if flight == "HAT107":
            raise ToolException("HAT107 has no seats left on 2024-05-20")
        return f"{flight}: 4 seats"

    check_seats.handle_tool_error = handle_tool_error
    return check_seats


@pytest.mark.parametrize(
    ("handle_tool_error", "output"),
    [
        (True, "HAT107 has no seats left on 2024-05-20"),
        ("Seat check unavailable, try another flight.", "Seat check unavailable, try another flight."),
        (lambda e: f"Could not check: {e}", "Could not check: HAT107 has no seats left on 2024-05-20"),
    ],
)
def test_an_error_the_tool_turns_into_its_output_is_recorded_as_an_error(
    recording_model, handle_tool_error, output
):
    check_seats = seat_check(handle_tool_error)
    calls = [{"name": "check_seats", "args": {"flight": "HAT107"}, "id": "c1"}]
    model = recording_model(AIMessage("", tool_calls=calls), AIMessage("HAT107 is full."))
    damc = memory()

    wrap(executor(model, tools=[check_seats]), damc).invoke({"input": "Any seats on HAT107?"})

    (result,) = [m for m in model.received[1] if isinstance(m, ToolMessage)]
    assert "FAILED" in result.content and output in result.content  # the handler's words, as a failure
    (card,) = [c for c in damc.cards() if c.tool_name == "check_seats" and c.kind is not CardKind.TOOL_CALL]
    assert card.kind is CardKind.TOOL_ERROR
    assert card.constraints[0] == f"check_seats failed: {output}"
    assert check_seats.handle_tool_error is handle_tool_error  # the executor's own tool is unchanged


def test_parallel_runs_of_one_tool_record_only_the_failed_one_as_an_error(recording_model):
    calls = [
        {"name": "check_seats", "args": {"flight": "HAT107"}, "id": "c1"},
        {"name": "check_seats", "args": {"flight": "HAT215"}, "id": "c2"},
    ]
    model = recording_model(AIMessage("", tool_calls=calls), AIMessage("Only HAT215 has seats."))
    damc = memory()
    wrapped = wrap(executor(model, tools=[seat_check(True)]), damc)

    asyncio.run(wrapped.ainvoke({"input": "Seats on HAT107 or HAT215?"}))

    results = [
        (m["tool_call_id"], m["content"], m.get("status")) for m in damc.messages() if m["role"] == "tool"
    ]
    assert results == [
        ("c1", "HAT107 has no seats left on 2024-05-20", "error"),
        ("c2", "HAT215: 4 seats", None),
    ]


def test_arguments_the_tool_handles_as_invalid_are_recorded_as_an_error(recording_model):
    from langchain_core.tools import tool

    @tool
    def check_seats(flight: str, passengers: int) -> str:
        """Check a flight's seats for a party."""
        return f"{flight}: seats for {passengers}"

    check_seats.handle_validation_error = True
    calls = [{"name": "check_seats", "args": {"flight": "HAT107", "passengers": "a few"}, "id": "c1"}]
    model = recording_model(AIMessage("", tool_calls=calls), AIMessage("How many of you travel?"))
    damc = memory()

    wrap(executor(model, tools=[check_seats]), damc).invoke({"input": "Seats on HAT107?"})

    (card,) = [c for c in damc.cards() if c.tool_name == "check_seats" and c.kind is not CardKind.TOOL_CALL]
    assert card.kind is CardKind.TOOL_ERROR and card.text == "Tool input validation error"


def test_a_result_the_store_refused_goes_in_before_the_next_call_once_the_store_is_back(
    recording_model, tmp_path
):
    from langchain_core.callbacks import BaseCallbackHandler

    from damc_core import SQLiteStore, valid_sequence

    busy = BusyStore(tmp_path / "memory.sqlite3")

    class WriteEnds(BaseCallbackHandler):
        """The other process commits while the model thinks about its next step."""

        def on_chat_model_start(self, serialized, messages, **kwargs):
            busy.release()

    model = recording_model(*busy.SCRIPT)
    memory = DecisionMemory(store=SQLiteStore(busy.path, timeout=0.1), settings=MemorySettings(budget=400))
    agent = wrap(executor(model, tools=busy.tools), memory)

    agent.invoke({"input": "Check in ABC123"}, config={"callbacks": [WriteEnds()]})

    events = memory.messages()
    assert [(e["role"], e.get("tool_call_id")) for e in events] == [
        ("user", None),
        ("assistant", None),  # calls t1
        ("tool", "t1"),  # answered before the model's next call
        ("assistant", None),  # calls t2
        ("tool", "t2"),
        ("assistant", None),
    ]
    assert valid_sequence(events) == events
