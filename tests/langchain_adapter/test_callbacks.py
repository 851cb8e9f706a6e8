"""DamcCallbackHandler: tool runs recorded by run id; rebuilt scratchpad tool messages compressed."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import pytest

pytest.importorskip("langchain_classic")

from langchain.agents import create_agent
from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, ToolException, tool
from langgraph.prebuilt import InjectedState
from langgraph.types import Command

from damc_core import CardKind, DecisionMemory, InMemoryStore
from damc_langchain import DamcCallbackHandler, DamcMiddleware

from .scenario import (
    FLIGHTS,
    SCRATCHPAD_PROMPT,
    SCRIPT,
    BusyStore,
    book,
    call,
    executor,
    get_user_details,
    search_flights,
    text,
)


def test_tool_runs_become_cards_paired_by_run_id(recording_model):
    memory = DecisionMemory(store=InMemoryStore())
    handler = DamcCallbackHandler(memory)

    executor(recording_model(*SCRIPT)).invoke(
        {"input": "Book HAT107 for mia_li_3668"}, config={"callbacks": [handler]}
    )

    results = [c for c in memory.cards() if c.kind is CardKind.TOOL_RESULT]
    assert [(c.tool_name, c.tool_call_id) for c in results] == [
        ("get_user_details", "c1"),
        ("search_flights", "c2"),
        ("book", "c3"),
    ]
    assert results[0].arguments == {"user_id": "mia_li_3668"}
    assert [c.text for c in memory.cards() if c.kind is CardKind.USER_INSTRUCTION] == [
        "Book HAT107 for mia_li_3668"
    ]


def test_scratchpad_tool_messages_reach_the_model_compressed_and_the_run_keeps_raw_output(recording_model):
    model = recording_model(*SCRIPT)
    handler = DamcCallbackHandler(DecisionMemory(store=InMemoryStore()))

    result = executor(model).invoke({"input": "Book HAT107"}, config={"callbacks": [handler]})

    search = next(m for m in model.received[2] if isinstance(m, ToolMessage) and m.tool_call_id == "c2")
    assert search.content.startswith("[c")  # the card, not the raw JSON list
    assert "HAT107" in search.content and len(search.content) < len(json.dumps(FLIGHTS))
    assert json.loads(result["intermediate_steps"][1][1]) == FLIGHTS


def test_messages_of_an_agent_state_are_never_edited(recording_model):
    model = recording_model(*SCRIPT)
    handler = DamcCallbackHandler(DecisionMemory(store=InMemoryStore()))
    agent = create_agent(model, [get_user_details, search_flights, book])

    result = agent.invoke({"messages": [HumanMessage("go")]}, config={"callbacks": [handler]})

    sent = next(m for m in model.received[2] if isinstance(m, ToolMessage) and m.tool_call_id == "c2")
    assert json.loads(sent.content) == FLIGHTS
    assert (
        json.loads(
            next(
                m for m in result["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "c2"
            ).content
        )
        == FLIGHTS
    )


def test_a_failing_tool_is_recorded_as_an_error_card_before_the_error_propagates(recording_model):
    @tool
    def fail(date: str) -> str:
        """Always fails."""
        raise ToolException("no seats on 2024-05-20")

    memory = DecisionMemory(store=InMemoryStore())
    model = recording_model(call("fail", {"date": "2024-05-20"}, "e1"), AIMessage("sorry"))
    agent = AgentExecutor(agent=create_tool_calling_agent(model, [fail], SCRATCHPAD_PROMPT), tools=[fail])

    with pytest.raises(ToolException):
        agent.invoke({"input": "go"}, config={"callbacks": [DamcCallbackHandler(memory)]})

    errors = [c for c in memory.cards() if c.kind is CardKind.TOOL_ERROR]
    assert errors and "no seats on 2024-05-20" in errors[0].summary
    assert errors[0].tool_call_id == "e1"


def test_a_call_of_a_tool_the_executor_lacks_is_recorded_as_that_calls_error(recording_model):
    memory = DecisionMemory(store=InMemoryStore())
    model = recording_model(call("notify", {"to": "mia"}, "n1"), AIMessage("I cannot notify you."))

    executor(model).invoke({"input": "Notify me"}, config={"callbacks": [DamcCallbackHandler(memory)]})

    (answer,) = [c for c in memory.cards() if c.kind is CardKind.TOOL_ERROR]
    assert (answer.tool_name, answer.tool_call_id, answer.arguments) == ("notify", "n1", {"to": "mia"})
    assert answer.text == "notify is not a valid tool, try one of [get_user_details, search_flights, book]."
    assert not [c for c in memory.cards() if c.kind is CardKind.TOOL_RESULT]


def test_a_reply_the_executor_could_not_parse_is_recorded_as_an_error(recording_model):
    from .scenario import unparsable_call

    memory = DecisionMemory(store=InMemoryStore())
    model = recording_model(unparsable_call("book", '{"flight": "HAT1', "b1"), AIMessage("Please retry."))
    agent = executor(model).model_copy(update={"handle_parsing_errors": "Your call did not parse."})

    agent.invoke({"input": "Book HAT1"}, config={"callbacks": [DamcCallbackHandler(memory)]})

    (failed,) = [
        c for c in memory.cards() if c.tool_name == "_Exception" and c.kind is not CardKind.TOOL_CALL
    ]
    assert failed.kind is CardKind.TOOL_ERROR and failed.text == "Your call did not parse."


def test_an_error_a_tool_turns_into_its_output_is_recorded_as_an_error_when_its_text_says_so(recording_model):
    @tool
    def check_seats(flight: str) -> str:
        """Check a flight's seats."""
        raise ToolException(f"{flight} has no seats left")

    # the executor runs tools without a call id: the handled error reaches the handler as output
    check_seats.handle_tool_error = lambda e: f"Error: {e}"
    memory = DecisionMemory(store=InMemoryStore())
    model = recording_model(call("check_seats", {"flight": "HAT107"}, "s1"), AIMessage("HAT107 is full."))

    executor(model, tools=[check_seats]).invoke(
        {"input": "Seats on HAT107?"}, config={"callbacks": [DamcCallbackHandler(memory)]}
    )

    (failed,) = [c for c in memory.cards() if c.tool_call_id == "s1" and c.kind is not CardKind.TOOL_CALL]
    assert failed.kind is CardKind.TOOL_ERROR and failed.text == "Error: HAT107 has no seats left"


def test_async_runs_are_recorded_too(recording_model):
    memory = DecisionMemory(store=InMemoryStore())
    handler = DamcCallbackHandler(memory)

    asyncio.run(executor(recording_model(*SCRIPT)).ainvoke({"input": "go"}, config={"callbacks": [handler]}))

    assert len([c for c in memory.cards() if c.kind is CardKind.TOOL_RESULT]) == 3
    assert "HAT107" in text([m for m in [AIMessage(c.summary) for c in memory.cards()]])


def test_a_handler_on_the_model_records_the_conversation_it_sees_and_its_answer(recording_model):
    memory = DecisionMemory(store=InMemoryStore())
    model = recording_model(AIMessage("Hello Mia."))
    model.callbacks = [DamcCallbackHandler(memory)]

    model.invoke([HumanMessage("Hi, I am mia_li_3668"), AIMessage("Welcome!"), HumanMessage("Book HAT107")])

    assert [c.text for c in memory.cards()] == [
        "Hi, I am mia_li_3668",
        "Welcome!",
        "Book HAT107",
        "Hello Mia.",
    ]


def test_plain_text_llm_prompts_are_recorded_not_changed():
    from langchain_core.language_models.fake import FakeListLLM

    memory = DecisionMemory(store=InMemoryStore())
    llm = FakeListLLM(responses=["ok"], callbacks=[DamcCallbackHandler(memory)])

    assert llm.invoke("Which card did mia_li_3668 use for 4WQ150?") == "ok"
    assert memory.cards()[0].text == "Which card did mia_li_3668 use for 4WQ150?"


def test_reused_call_ids_pair_each_scratchpad_message_with_its_own_run(recording_model):
    model = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "call_0"),
        call("search_flights", {"date": "2024-05-20"}, "call_0"),
        AIMessage("HAT107 is available."),
    )
    handler = DamcCallbackHandler(DecisionMemory(store=InMemoryStore()))

    executor(model).invoke({"input": "Find a flight for mia_li_3668"}, config={"callbacks": [handler]})

    user, flights = (m.content for m in model.received[2] if isinstance(m, ToolMessage))
    assert user.startswith("[c") and "get_user_details" in user and "credit_card_4421486" in user
    assert flights.startswith("[c") and "search_flights" in flights and "HAT107" in flights


@pytest.mark.filterwarnings("ignore:The class `InMemoryChatMessageHistory` was deprecated")
def test_tool_messages_kept_in_a_chat_history_are_never_edited(recording_model):
    from langchain_core.chat_history import InMemoryChatMessageHistory

    memory = DecisionMemory(store=InMemoryStore())
    config = {"callbacks": [DamcCallbackHandler(memory)]}
    model = recording_model(call("search_flights", {"date": "2024-05-20"}, "k1"), AIMessage("HAT100."))
    history = InMemoryChatMessageHistory()
    history.add_message(HumanMessage("Cheapest flight on 2024-05-20?"))

    reply = model.invoke(history.messages, config)
    history.add_message(reply)
    history.add_messages([search_flights.invoke(tool_call, config) for tool_call in reply.tool_calls])
    model.invoke(history.messages, config)

    assert json.loads(history.messages[-1].content) == FLIGHTS
    assert json.loads(model.received[1][-1].content) == FLIGHTS
    assert [c.tool_call_id for c in memory.cards() if c.kind is CardKind.TOOL_RESULT] == ["k1"]


def test_a_user_who_says_the_same_thing_twice_is_recorded_twice(recording_model):
    memory = DecisionMemory(store=InMemoryStore())
    config = {"callbacks": [DamcCallbackHandler(memory)]}
    model = recording_model(
        AIMessage("Cancel ABC123?"), AIMessage("Cancelled. XYZ789 too?"), AIMessage("Done.")
    )
    conversation = [HumanMessage("Cancel my reservations ABC123 and XYZ789")]

    conversation.append(model.invoke(conversation, config))
    for answer in ("yes", "yes"):
        conversation.append(HumanMessage(answer))
        conversation.append(model.invoke(conversation, config))

    assert [c.text for c in memory.cards()] == [
        "Cancel my reservations ABC123 and XYZ789",
        "Cancel ABC123?",
        "yes",
        "Cancelled. XYZ789 too?",
        "yes",
        "Done.",
    ]


def test_a_new_run_with_the_same_input_as_an_earlier_one_is_recorded_again(recording_model):
    memory = DecisionMemory(store=InMemoryStore())
    config = {"callbacks": [DamcCallbackHandler(memory)]}
    agent = executor(recording_model(AIMessage("Shipped."), AIMessage("Delivered.")))

    agent.invoke({"input": "Where is order #W123?"}, config)
    agent.invoke({"input": "Where is order #W123?"}, config)  # a day later, no chat history

    assert [(c.kind, c.text) for c in memory.cards()] == [
        (CardKind.USER_INSTRUCTION, "Where is order #W123?"),
        (CardKind.ASSISTANT_CONCLUSION, "Shipped."),
        (CardKind.USER_INSTRUCTION, "Where is order #W123?"),
        (CardKind.ASSISTANT_CONCLUSION, "Delivered."),
    ]


def rate_limited_once(recording_model, *replies):
    """A recording model whose first call fails as a provider's rate limit does."""

    class RateLimitedOnce(type(recording_model())):
        limited: bool = True

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if self.limited:
                self.limited = False
                raise RuntimeError("429 rate limited")
            return super()._generate(messages, stop, run_manager, **kwargs)

    return RateLimitedOnce(script=list(replies))


def test_a_run_retried_after_the_model_failed_records_its_input_once(recording_model):
    memory = DecisionMemory(store=InMemoryStore())
    config = {"callbacks": [DamcCallbackHandler(memory)]}
    agent = executor(rate_limited_once(recording_model, AIMessage("Shipped."), AIMessage("Delivered.")))

    with pytest.raises(RuntimeError, match="429"):
        agent.invoke({"input": "Where is order #W123?"}, config)
    agent.invoke({"input": "Where is order #W123?"}, config)  # the caller tries again
    agent.invoke({"input": "Where is order #W123?"}, config)  # answered: asked again, a new turn

    assert [(c.kind, c.text) for c in memory.cards()] == [
        (CardKind.USER_INSTRUCTION, "Where is order #W123?"),
        (CardKind.ASSISTANT_CONCLUSION, "Shipped."),
        (CardKind.USER_INSTRUCTION, "Where is order #W123?"),
        (CardKind.ASSISTANT_CONCLUSION, "Delivered."),
    ]


def test_a_sub_agent_run_by_a_tool_speaks_to_the_conversation_through_its_result(recording_model):
    profile_model = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "s1"), AIMessage("Mia pays by visa.")
    )
    profile_agent = create_agent(profile_model, [get_user_details], system_prompt="You read profiles.")

    @tool
    def ask_profiles(question: str) -> str:
        """Ask the profiles agent."""
        return profile_agent.invoke({"messages": [HumanMessage(question)]})["messages"][-1].content

    supervisor_model = recording_model(
        call("ask_profiles", {"question": "payment of mia_li_3668"}, "p1"), AIMessage("Visa it is.")
    )
    supervisor = create_agent(supervisor_model, [ask_profiles], system_prompt="You book flights.")
    memory = DecisionMemory(store=InMemoryStore())
    handler = DamcCallbackHandler(memory)

    supervisor.invoke({"messages": [HumanMessage("How do I pay?")]}, {"callbacks": [handler]})

    turns = [(m["role"], m["content"]) for m in memory.messages() if m["role"] != "tool" and m["content"]]
    assert turns == [("user", "How do I pay?"), ("assistant", "Visa it is.")]
    assert "credit_card_4421486" in str(memory.build().messages)  # the sub-agent's lookup is a card


def test_a_command_answer_and_an_image_result_become_the_cards_they_stand_for(recording_model):
    screenshot = "iVBORw0KGgo" * 500

    @tool
    def cancel(order_id: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Cancel an order."""
        message = ToolMessage(f"order {order_id} cancelled", tool_call_id=tool_call_id)
        return Command(update={"messages": [message]})

    @tool
    def snapshot(order_id: str) -> list:
        """Photograph an order's parcel."""
        return [
            {"type": "text", "text": f"parcel of {order_id}"},
            {"type": "image", "base64": screenshot, "mime_type": "image/png"},
        ]

    calls = AIMessage(
        "",
        tool_calls=[
            {"name": "cancel", "args": {"order_id": "W1"}, "id": "t1"},
            {"name": "snapshot", "args": {"order_id": "W2"}, "id": "t2"},
        ],
    )
    memory = DecisionMemory(store=InMemoryStore())
    agent = create_agent(recording_model(calls, AIMessage("Done.")), [cancel, snapshot])

    agent.invoke(
        {"messages": [HumanMessage("Cancel W1, photograph W2")]}, {"callbacks": [DamcCallbackHandler(memory)]}
    )

    results = {c.tool_name: c for c in memory.cards() if c.kind is CardKind.TOOL_RESULT}
    assert results["cancel"].summary.endswith("-> order W1 cancelled")
    assert (
        results["snapshot"].summary.endswith("-> parcel of W2\n[image]")
        and screenshot not in results["snapshot"].text
    )
    assert memory.recall(results["snapshot"].id)["content"][1]["base64"] == screenshot  # kept in the record


def test_a_command_answering_in_openai_form_is_recorded_as_its_answer(recording_model):
    @tool
    async def hold_seat(seat: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Hold a seat for ten minutes."""
        answer = {"role": "tool", "content": f"seat {seat} held", "tool_call_id": tool_call_id}
        return Command(update={"messages": [answer]})  # langgraph reads it as a ToolMessage

    model = recording_model(call("hold_seat", {"seat": "12A"}, "s1"), AIMessage("Seat 12A is held."))
    memory = DecisionMemory(store=InMemoryStore())

    asyncio.run(
        create_agent(model, [hold_seat]).ainvoke(
            {"messages": [HumanMessage("Hold 12A")]}, {"callbacks": [DamcCallbackHandler(memory)]}
        )
    )

    (result,) = [c for c in memory.cards() if c.kind is CardKind.TOOL_RESULT]
    assert memory.recall(result.id)["content"] == "seat 12A held"  # not the repr of the Command
    assert [m.content for m in model.received[1] if isinstance(m, ToolMessage)] == ["seat 12A held"]


def test_a_tool_answering_with_a_list_of_updates_is_recorded_as_its_answer(recording_model):
    from langchain.agents import AgentState

    class SeatState(AgentState):
        seat: str

    @tool
    async def hold_seat(seat: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> list:
        """Hold a seat for ten minutes."""
        return [Command(update={"seat": seat}), ToolMessage(f"seat {seat} held", tool_call_id=tool_call_id)]

    model = recording_model(call("hold_seat", {"seat": "12A"}, "s1"), AIMessage("Seat 12A is held."))
    memory = DecisionMemory(store=InMemoryStore())
    agent = create_agent(model, [hold_seat], state_schema=SeatState)

    state = asyncio.run(
        agent.ainvoke({"messages": [HumanMessage("Hold 12A")]}, {"callbacks": [DamcCallbackHandler(memory)]})
    )

    assert state["seat"] == "12A"
    (result,) = [c for c in memory.cards() if c.kind is CardKind.TOOL_RESULT]
    assert memory.recall(result.id)["content"] == "seat 12A held"  # not the repr of the updates


def test_a_tools_artifact_is_kept_in_the_record_in_an_async_run(recording_model):
    @tool(response_format="content_and_artifact")
    async def find_order(order_id: str) -> tuple[str, dict]:
        """Find an order; the rows go to the app, not the model."""
        return f"found {order_id}", {"order_id": order_id, "rows": [1, 2, 3]}

    model = recording_model(call("find_order", {"order_id": "W123"}, "f1"), AIMessage("Found it."))
    memory = DecisionMemory(store=InMemoryStore())
    agent = create_agent(model, [find_order])

    asyncio.run(
        agent.ainvoke({"messages": [HumanMessage("Find W123")]}, {"callbacks": [DamcCallbackHandler(memory)]})
    )

    (result,) = [c for c in memory.cards() if c.kind is CardKind.TOOL_RESULT]
    assert result.summary.endswith("-> found W123")
    assert memory.recall(result.id)["artifact"] == {"order_id": "W123", "rows": [1, 2, 3]}
    assert "rows" not in text(model.received[1])


@pytest.mark.parametrize("surface", ["callbacks", "middleware"])
def test_a_handoff_that_returns_the_state_records_only_its_own_answer(recording_model, surface):
    """A handoff tool answers with a Command carrying the whole conversation plus its own message."""

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        return json.dumps({"order_id": order_id, "status": "shipped"})

    @tool
    def transfer_to_billing(
        state: Annotated[dict, InjectedState], tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> Command:
        """Hand the customer to billing."""
        handed = ToolMessage("Transferred to billing", tool_call_id=tool_call_id)
        return Command(update={"messages": [*state["messages"], handed]})

    memory = DecisionMemory(store=InMemoryStore())
    model = recording_model(
        call("lookup", {"order_id": "O-1"}, "k1"),
        call("transfer_to_billing", {}, "h1"),
        AIMessage("Billing here."),
    )
    question = {"messages": [HumanMessage("Where is O-1? Then billing, please.")]}
    if surface == "callbacks":
        create_agent(model, [lookup, transfer_to_billing]).invoke(
            question, {"callbacks": [DamcCallbackHandler(memory)]}
        )
    else:
        create_agent(model, [lookup, transfer_to_billing], middleware=[DamcMiddleware(memory)]).invoke(
            question
        )

    results = [(m["tool_call_id"], m["content"]) for m in memory.messages() if m["role"] == "tool"]
    assert results == [("k1", '{"order_id": "O-1", "status": "shipped"}'), ("h1", "Transferred to billing")]


def test_a_summarizing_middlewares_own_model_call_is_not_the_conversation(recording_model):
    from langchain.agents.middleware import SummarizationMiddleware
    from langgraph.checkpoint.memory import InMemorySaver

    summarizer = recording_model(*(AIMessage(f"Summary {n}.") for n in range(3)))
    replies = [
        m
        for n in range(3)
        for m in (call("get_user_details", {"user_id": f"u{n}"}, f"call_{n}"), AIMessage(f"Answer {n}."))
    ]
    summary = SummarizationMiddleware(summarizer, trigger=("messages", 6), keep=("messages", 3))
    agent = create_agent(
        recording_model(*replies), [get_user_details], middleware=[summary], checkpointer=InMemorySaver()
    )
    memory = DecisionMemory(store=InMemoryStore())
    config = {"configurable": {"thread_id": "t1"}, "callbacks": [DamcCallbackHandler(memory)]}

    for n in range(3):
        agent.invoke({"messages": [HumanMessage(f"Question {n}?")]}, config)

    assert len(summarizer.received) >= 1  # the history was summarized
    turns = [
        m["content"]
        for m in memory.messages()
        if m["role"] == "user" or (m["role"] == "assistant" and not m.get("tool_calls"))
    ]
    assert turns == [turn for n in range(3) for turn in (f"Question {n}?", f"Answer {n}.")]


def test_parallel_runs_of_one_tool_in_an_async_executor_keep_their_own_call_ids(recording_model):
    from langchain_core.callbacks import AsyncCallbackHandler

    @tool
    async def get_order(order_id: str) -> dict:
        """An order's details."""
        return {"order_id": order_id, "status": {"W111": "delivered", "W222": "cancelled"}[order_id]}

    class SlowTracer(AsyncCallbackHandler):
        """A tracer that takes a moment over the first action: the second tool starts first."""

        async def on_agent_action(self, action, **kwargs):
            await asyncio.sleep(0.05 if action.tool_call_id == "c1" else 0.0)

    both = AIMessage(
        "",
        tool_calls=[
            {"name": "get_order", "args": {"order_id": "W111"}, "id": "c1"},
            {"name": "get_order", "args": {"order_id": "W222"}, "id": "c2"},
        ],
    )
    model = recording_model(both, AIMessage("Done."))
    agent = AgentExecutor(
        agent=create_tool_calling_agent(model, [get_order], SCRATCHPAD_PROMPT), tools=[get_order]
    )
    memory = DecisionMemory(store=InMemoryStore())
    config = {"callbacks": [DamcCallbackHandler(memory), SlowTracer()]}
    asyncio.run(agent.ainvoke({"input": "Show both orders."}, config))

    answers = {m.tool_call_id: m.content for m in model.received[1] if isinstance(m, ToolMessage)}
    assert "order_id=W111" in answers["c1"] and "W222" not in answers["c1"]
    assert "order_id=W222" in answers["c2"] and "W111" not in answers["c2"]


def test_a_tool_that_waits_for_a_human_is_not_recorded_as_failed(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import interrupt

    @tool
    def book_flight(flight: str) -> str:
        """Book a flight once a human approves."""
        return f"booked {flight}, confirmation ABC123" if interrupt(f"Book {flight}?") else "rejected"

    memory = DecisionMemory(store=InMemoryStore())
    model = recording_model(call("book_flight", {"flight": "HAT1"}, "c1"), AIMessage("Booked: ABC123."))
    agent = create_agent(model, [book_flight], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}, "callbacks": [DamcCallbackHandler(memory)]}
    agent.invoke({"messages": [HumanMessage("Book HAT1.")]}, config)
    agent.invoke(Command(resume=True), config)  # the human approves

    results = [c for c in memory.cards() if c.kind in (CardKind.TOOL_RESULT, CardKind.TOOL_ERROR)]
    assert [(c.kind, c.summary) for c in results] == [
        (CardKind.TOOL_RESULT, "[c2] book_flight(flight=HAT1) -> booked HAT1, confirmation ABC123")
    ]


def test_a_run_given_an_earlier_runs_id_records_its_input_again(recording_model):
    import uuid

    memory = DecisionMemory(store=InMemoryStore())
    agent = executor(recording_model(AIMessage("Cancel A?"), AIMessage("Cancelled A.")))
    config = {"callbacks": [DamcCallbackHandler(memory)], "run_id": uuid.uuid4()}
    for _ in range(2):  # a caller that passes its own run id, the same one twice
        agent.invoke({"input": "yes"}, config)

    assert [m["content"] for m in memory.messages() if m["role"] == "user"] == ["yes", "yes"]


def test_a_handler_made_for_each_run_of_a_thread_records_each_turn_once(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver

    memory = DecisionMemory(store=InMemoryStore())
    agent = create_agent(
        recording_model(
            call("get_user_details", {"user_id": "mia_li_3668"}, "c1"),
            AIMessage("Mia pays by visa."),
            AIMessage("Yes, visa."),
            AIMessage("Still visa."),
        ),
        [get_user_details],
        checkpointer=InMemorySaver(),
    )
    for question in ("How does mia_li_3668 pay?", "Sure?", "Sure?"):
        # a server makes the thread's handler per request (or starts again after a restart)
        handler = DamcCallbackHandler(memory.for_session("thread-7"))
        agent.invoke(
            {"messages": [HumanMessage(question)]},
            {"configurable": {"thread_id": "thread-7"}, "callbacks": [handler]},
        )

    turns = [
        (m["role"], m["content"])
        for m in memory.for_session("thread-7").messages()
        if m["role"] != "tool" and m["content"]
    ]
    assert turns == [
        ("user", "How does mia_li_3668 pay?"),
        ("assistant", "Mia pays by visa."),
        ("user", "Sure?"),
        ("assistant", "Yes, visa."),
        ("user", "Sure?"),
        ("assistant", "Still visa."),
    ]


def test_a_run_retried_with_a_new_handler_after_the_model_failed_records_its_input_once(recording_model):
    memory = DecisionMemory(store=InMemoryStore())
    agent = executor(rate_limited_once(recording_model, AIMessage("Shipped."), AIMessage("Delivered.")))

    with pytest.raises(RuntimeError, match="429"):
        agent.invoke({"input": "Where is order #W123?"}, {"callbacks": [DamcCallbackHandler(memory)]})
    for _ in range(2):  # tried again, then (answered) asked again: a new turn
        agent.invoke({"input": "Where is order #W123?"}, {"callbacks": [DamcCallbackHandler(memory)]})

    assert [(c.kind, c.text) for c in memory.cards()] == [
        (CardKind.USER_INSTRUCTION, "Where is order #W123?"),
        (CardKind.ASSISTANT_CONCLUSION, "Shipped."),
        (CardKind.USER_INSTRUCTION, "Where is order #W123?"),
        (CardKind.ASSISTANT_CONCLUSION, "Delivered."),
    ]


def test_a_result_the_store_refused_goes_in_after_its_call_once_the_store_is_back(recording_model, tmp_path):
    from damc_core import SQLiteStore, valid_sequence

    busy = BusyStore(tmp_path / "memory.sqlite3")
    model = recording_model(*busy.SCRIPT)
    memory = DecisionMemory(store=SQLiteStore(busy.path, timeout=0.1))
    agent = executor(model, tools=busy.tools)

    agent.invoke({"input": "Check in ABC123"}, config={"callbacks": [DamcCallbackHandler(memory)]})

    events = memory.messages()
    assert [(e["role"], e.get("tool_call_id")) for e in events] == [
        ("user", None),
        ("assistant", None),  # calls t1
        ("tool", "t1"),  # kept, in its place
        ("assistant", None),  # calls t2
        ("tool", "t2"),
        ("assistant", None),
    ]
    assert "gift_card_7777" in events[2]["content"] and valid_sequence(events) == events
