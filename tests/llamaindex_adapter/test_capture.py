"""Tool results captured from instrumentation spans and from the workflow event stream."""

from __future__ import annotations

import asyncio
import json

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.tools import FunctionTool, RetrieverTool

from damc_llamaindex import DamcEventRecorder, DamcLLM, DamcMemory, DamcSpanHandler, offline_tokenizer

from .scenario import (
    ANSWER,
    FLIGHTS,
    FUNCTION_SCRIPT,
    QUESTION,
    REACT_SCRIPT,
    TOOLS,
    call,
    damc,
    react,
    react_answer,
    run,
    text,
)

CARDS = {"alice": "4242", "bob": "9999"}


def get_account(user_id: str) -> dict:
    """Look up an account."""
    return {"user_id": user_id, "card_last4": CARDS[user_id]}


@pytest.fixture
def spans():
    handlers = []

    def attach(memory, *scope):
        handlers.append(DamcSpanHandler.attach(memory, *scope))
        return handlers[-1]

    yield attach
    for handler in handlers:
        handler.detach()


def tool_results(memory):
    return [c for c in memory.cards() if c.kind.value in ("tool_result", "tool_error")]


def test_spans_record_each_result_with_its_call_while_the_agent_keeps_its_own_memory(recording_llm, spans):
    memory = damc()
    agent = FunctionAgent(tools=TOOLS, llm=recording_llm(*FUNCTION_SCRIPT))
    spans(memory, agent)
    buffer = ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())

    run(agent, QUESTION, memory=buffer)

    results = tool_results(memory)
    assert [(c.tool_name, c.tool_call_id) for c in results] == [
        ("get_user_details", "c1"),
        ("search_flights", "c2"),
        ("book", "c3"),
    ]
    assert results[1].arguments == {"date": "2024-05-20"}
    assert json.loads(memory.recall(results[1].id)["content"]) == FLIGHTS


def test_structured_outputs_and_errors_are_kept_as_data(recording_llm, spans):
    def quote(flight_number: str) -> dict:
        """Price a flight."""
        return {"flight_number": flight_number, "price": 149, "currency": "USD"}

    def cancel(reservation_id: str) -> str:
        """Cancel a reservation."""
        raise RuntimeError(f"reservation {reservation_id} is not cancellable")

    memory = damc()
    llm = recording_llm(
        call("quote", {"flight_number": "HAT107"}, "q1"),
        call("cancel", {"reservation_id": "4WQ150"}, "x1"),
        FUNCTION_SCRIPT[-1],
    )
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(quote), FunctionTool.from_defaults(cancel)], llm=llm
    )
    spans(memory, agent)

    run(agent, "price and cancel")

    priced, failed = tool_results(memory)
    # ToolOutput.content is the Python repr of the dict; DAMC keeps the data as JSON
    assert json.loads(memory.recall(priced.id)["content"]) == quote("HAT107")
    assert "price=149" in priced.summary
    assert failed.kind.value == "tool_error" and "4WQ150" in failed.summary


def test_pydantic_outputs_are_kept_as_data(recording_llm):
    from pydantic import BaseModel

    class Fare(BaseModel):
        cabin: str
        price: int

    class Quote(BaseModel):
        flight_number: str
        fares: list[Fare]

    def quote(flight_number: str) -> Quote:
        """Price a flight."""
        return Quote(flight_number=flight_number, fares=[Fare(cabin="economy", price=149)])

    def fares(flight_number: str) -> list[Fare]:
        """List a flight's fares."""
        return [Fare(cabin="economy", price=149), Fare(cabin="business", price=610)]

    memory = damc()
    llm = recording_llm(
        call("quote", {"flight_number": "HAT107"}, "q1"),
        call("fares", {"flight_number": "HAT107"}, "q2"),
        FUNCTION_SCRIPT[-1],
    )
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(quote), FunctionTool.from_defaults(fares)], llm=llm
    )

    run(agent, "price HAT107", memory=DamcMemory(memory=memory))

    priced, listed = tool_results(memory)
    # ToolOutput.content is the model's str (flight_number='HAT107' fares=[Fare(...)]); DAMC keeps its data
    assert json.loads(memory.recall(priced.id)["content"]) == quote("HAT107").model_dump()
    assert json.loads(memory.recall(listed.id)["content"]) == [f.model_dump() for f in fares("HAT107")]
    assert "Fare(" not in priced.summary + listed.summary


def test_a_retriever_tools_nodes_are_remembered_as_the_text_the_model_was_given(recording_llm):
    class Policies(BaseRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            node = TextNode(
                text="Refunds are possible within 30 days of purchase.",
                metadata={"file_name": "policy.md"},
                embedding=[0.125] * 64,
            )
            return [NodeWithScore(node=node, score=0.87)]

    search = RetrieverTool.from_defaults(Policies(), name="search_policy", description="Search the policy.")
    memory = damc()
    llm = recording_llm(
        call("search_policy", {"input": "refund"}, "s1"),
        ChatMessage(role="assistant", content="Within 30 days."),
    )
    agent = FunctionAgent(tools=[search], llm=llm)

    run(agent, "Can I get a refund?", memory=DamcMemory(memory=memory))

    (found,) = tool_results(memory)
    sent = llm.received[-1][-1].content  # the tool message the model read
    assert memory.recall(found.id)["content"] == sent
    assert "Refunds are possible within 30 days" in found.summary
    # the nodes' storage form (their embedding, templates, class names) is no part of the card
    assert "0.125" not in found.summary and "text_template" not in found.summary


def test_a_tool_returning_a_picture_is_remembered_as_having_returned_one(recording_llm):
    import base64

    from llama_index.core.base.llms.types import ImageBlock

    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )

    def chart(metric: str) -> ImageBlock:
        """Draw a chart of a metric."""
        return ImageBlock(image=png, image_mimetype="image/png")

    memory = damc()
    llm = recording_llm(
        call("chart", {"metric": "sales"}, "k1"), ChatMessage(role="assistant", content="Here.")
    )
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(chart)], llm=llm)

    run(agent, "Chart the sales.", memory=DamcMemory(memory=memory))

    (charted,) = tool_results(memory)
    assert charted.summary == "[c2] chart(metric=sales) -> [image]"  # not "-> (empty)"
    assert memory.recall(charted.id)["blocks"][0]["image_mimetype"] == "image/png"


def test_a_tool_returning_a_tool_output_is_remembered_as_the_text_the_model_was_given(recording_llm):
    from llama_index.core.base.llms.types import ImageBlock
    from llama_index.core.tools import ToolOutput

    def chart(metric: str) -> ToolOutput:
        """Draw a chart of a metric, with its peak."""
        blocks = [
            TextBlock(text=f"Chart of {metric}:"),
            ImageBlock(image=b"\x89PNG-chart", image_mimetype="image/png"),
            TextBlock(text="peak 42 in May"),
        ]
        return ToolOutput(tool_name="chart", raw_input={"metric": metric}, raw_output=None, blocks=blocks)

    memory = damc()
    llm = recording_llm(
        call("chart", {"metric": "sales"}, "k1"), ChatMessage(role="assistant", content="Peaked in May.")
    )
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(chart)], llm=DamcLLM(llm=llm, memory=memory))

    run(agent, "Chart the sales.")

    # FunctionTool gives the model the text of the ToolOutput its function returned
    sent = next(m for m in llm.received[1] if m.role.value == "tool")
    (charted,) = tool_results(memory)
    assert charted.summary == "[c2] chart(metric=sales) -> Chart of sales:\npeak 42 in May"
    assert memory.recall(charted.id)["content"] == "Chart of sales:\npeak 42 in May"
    # not the ToolOutput's fields, the picture's base64 among them
    assert "is_error" not in str(sent.content) and "raw_input" not in str(sent.content)


def test_a_tool_called_outside_an_agent_is_recorded_too(spans):
    memory = damc()
    spans(memory, TOOLS[2])

    output = asyncio.run(TOOLS[2].acall(flight_number="HAT107", payment_id="credit_card_4421486"))

    (card,) = tool_results(memory)
    assert card.tool_name == "book" and "4WQ150" in card.summary
    assert memory.recall(card.id)["content"] == output.content


def test_a_tool_called_directly_with_positional_arguments_is_recorded_with_their_names(spans):
    memory = damc()
    spans(memory, TOOLS[2])

    TOOLS[2].call("HAT107", payment_id="credit_card_4421486")
    asyncio.run(TOOLS[2].acall("HAT108", "credit_card_4421486"))

    assert [c.arguments for c in tool_results(memory)] == [
        {"flight_number": "HAT107", "payment_id": "credit_card_4421486"},
        {"flight_number": "HAT108", "payment_id": "credit_card_4421486"},
    ]


def test_with_damc_memory_each_result_is_recorded_once_and_sent_once(recording_llm, spans):
    memory = damc()
    llm = recording_llm(*FUNCTION_SCRIPT)
    agent = FunctionAgent(tools=TOOLS, llm=llm)
    spans(memory, agent)

    run(agent, QUESTION, memory=DamcMemory(memory=memory))

    assert [c.tool_call_id for c in tool_results(memory)] == ["c1", "c2", "c3"]
    for prompt in llm.received:
        ids = [m.additional_kwargs.get("tool_call_id") for m in prompt if m.role.value == "tool"]
        assert len(ids) == len(set(ids))
    assert llm.received[1][-2].blocks[0].tool_call_id == "c1"


def test_react_results_come_from_spans_exactly_once(recording_llm, spans):
    memory = damc()
    agent = ReActAgent(tools=TOOLS, llm=recording_llm(*REACT_SCRIPT))
    spans(memory, agent)

    run(agent, QUESTION, memory=DamcMemory(memory=memory))

    assert [c.tool_name for c in tool_results(memory)] == ["get_user_details", "search_flights", "book"]


def test_the_event_stream_is_relayed_unchanged_and_recorded(recording_llm):
    memory = damc()
    recorder = DamcEventRecorder(memory)
    agent = FunctionAgent(tools=TOOLS, llm=recording_llm(*FUNCTION_SCRIPT))

    async def go():
        handler = agent.run(QUESTION)
        seen = [event async for event in recorder.relay(handler.stream_events())]
        await handler
        return seen

    seen = asyncio.run(go())

    assert sum(isinstance(e, ToolCallResult) for e in seen) == 3
    assert [c.tool_call_id for c in tool_results(memory)] == ["c1", "c2", "c3"]


@pytest.mark.parametrize("agent_class", [FunctionAgent, ReActAgent])
def test_the_answer_is_recorded_from_events_read_after_the_run_finished(recording_llm, agent_class):
    """The agent adds the run's tool results to its final output once it is in the stream: a
    consumer that reads it later (a UI that buffers events) sees them listed with the answer."""
    memory = damc()
    recorder = DamcEventRecorder(memory)
    if agent_class is FunctionAgent:
        model = recording_llm(*FUNCTION_SCRIPT)
    else:
        model = recording_llm(*REACT_SCRIPT, function_calling=False)
    agent = agent_class(tools=TOOLS, llm=model)

    async def go():
        handler = agent.run(QUESTION)
        events = [event async for event in handler.stream_events()]
        await handler
        for event in events:
            recorder.record(event)

    asyncio.run(go())

    assert [c.tool_name for c in tool_results(memory)] == ["get_user_details", "search_flights", "book"]
    said = [m for m in memory.messages() if m["role"] == "assistant" and not m.get("tool_calls")]
    answers = [m["content"] for m in said]
    assert answers == [ANSWER]


def test_an_answer_made_at_the_iteration_limit_is_recorded_once_with_memory_and_event_stream(recording_llm):
    memory = damc()
    recorder = DamcEventRecorder(memory)
    model = recording_llm(*FUNCTION_SCRIPT[:2], ChatMessage(role="assistant", content="I ran out of steps."))
    agent = FunctionAgent(tools=TOOLS, llm=model, early_stopping_method="generate")

    async def go():
        handler = agent.run(QUESTION, memory=DamcMemory(memory=memory), max_iterations=2)
        async for _ in recorder.relay(handler.stream_events()):
            pass
        return await handler

    assert str(asyncio.run(go())) == "I ran out of steps."
    assert [m["content"] for m in memory.messages()].count("I ran out of steps.") == 1


def test_a_react_observation_with_surrounding_whitespace_is_still_matched(recording_llm, spans):
    def status(flight_number: str) -> str:
        """Flight status."""
        return f"\n  {flight_number}: on time, gate B7  \n"

    memory = damc()
    llm = recording_llm(
        react("status", {"flight_number": "HAT107"}),
        react_answer("HAT107 is on time."),
        function_calling=False,
    )
    agent = ReActAgent(tools=[FunctionTool.from_defaults(status)], llm=llm)
    spans(memory, agent)

    run(agent, "status?", memory=DamcMemory(memory=memory))

    assert [c.tool_name for c in tool_results(memory)] == ["status"]


@pytest.mark.parametrize("agent_class", [FunctionAgent, ReActAgent])
def test_concurrent_sessions_each_record_only_their_own_tool_results(recording_llm, spans, agent_class):
    def session(user):
        memory = damc()
        spans(memory)
        if agent_class is FunctionAgent:
            replies = [
                call("get_account", {"user_id": user}, f"{user}-1"),
                *[ChatMessage(role="assistant", content="ok")] * 2,
            ]
            model = recording_llm(*replies)
        else:
            replies = [react("get_account", {"user_id": user}), react_answer("ok"), react_answer("ok")]
            model = recording_llm(*replies, function_calling=False)
        agent = agent_class(
            tools=[FunctionTool.from_defaults(get_account)], llm=DamcLLM(llm=model, memory=memory)
        )
        return memory, model, agent, DamcMemory(memory=memory)

    sessions = {user: session(user) for user in CARDS}

    async def go():
        for question in ("Which card do I have?", "And its last digits again?"):
            await asyncio.gather(*(agent.run(question, memory=dm) for _, _, agent, dm in sessions.values()))

    asyncio.run(go())

    for user, (memory, model, _, _) in sessions.items():
        other = next(name for name in CARDS if name != user)
        assert [json.loads(memory.recall(c.id)["content"])["user_id"] for c in tool_results(memory)] == [user]
        assert CARDS[user] in text(model.received[-1])
        assert CARDS[other] not in text(model.received[-1])


def test_a_handler_scoped_to_an_agent_leaves_other_agents_runs_alone(recording_llm, spans):
    memory = damc()
    mine = FunctionAgent(tools=TOOLS, llm=recording_llm(*FUNCTION_SCRIPT))
    other = FunctionAgent(tools=TOOLS, llm=recording_llm(*FUNCTION_SCRIPT))
    spans(memory, mine)

    async def go():
        await asyncio.gather(mine.run(QUESTION), other.run(QUESTION))

    asyncio.run(go())

    assert [c.tool_call_id for c in tool_results(memory)] == ["c1", "c2", "c3"]


def test_in_a_workflow_each_agent_records_its_own_steps_as_data_in_its_own_memory(recording_llm):
    def refund(user_id: str, amount: float) -> dict:
        """Refund a user's card."""
        return {"refund_id": "R-77", "user_id": user_id, "amount": amount, "status": "refunded"}

    triage_memory, billing_memory = damc(), damc()
    triage = FunctionAgent(
        name="triage",
        description="Finds the account.",
        tools=[FunctionTool.from_defaults(get_account)],
        can_handoff_to=["billing"],
        llm=DamcLLM(
            memory=triage_memory,
            llm=recording_llm(
                call("get_account", {"user_id": "alice"}, "t1"),
                call("handoff", {"to_agent": "billing", "reason": "refund"}, "t2"),
            ),
        ),
    )
    billing = FunctionAgent(
        name="billing",
        description="Refunds.",
        tools=[FunctionTool.from_defaults(refund)],
        llm=DamcLLM(
            memory=billing_memory,
            llm=recording_llm(
                call("refund", {"user_id": "alice", "amount": 42.5}, "b1"),
                ChatMessage(role="assistant", content="Refunded 42.5 (R-77)."),
            ),
        ),
    )

    run(AgentWorkflow(agents=[triage, billing], root_agent="triage"), "Refund alice 42.5")

    (account, handoff) = tool_results(triage_memory)
    assert json.loads(triage_memory.recall(account.id)["content"]) == get_account("alice")
    assert handoff.tool_name == "handoff"
    refunded = tool_results(billing_memory)[-1]
    assert refunded.tool_name == "refund" and refunded.tool_call_id == "b1"
    assert json.loads(billing_memory.recall(refunded.id)["content"])["refund_id"] == "R-77"
    assert "refund" not in [c.tool_name for c in tool_results(triage_memory)]


def recorded_tool_turns(memory):
    """The recorded calls and results: (role, text, call ids) per message, as DAMC stored them."""
    return [
        (
            m["role"],
            m.get("content"),
            [c["id"] for c in m.get("tool_calls") or ()] or [m.get("tool_call_id")],
        )
        for m in memory.messages()
        if m.get("tool_calls") or m["role"] == "tool"
    ]


def run_and_record(agent, memory, surface, spans):
    """Run ``agent`` once, recorded by the span handler, by ``DamcMemory``, or by the event stream."""
    if surface == "span handler":
        spans(memory, agent)
        run(agent, QUESTION)
    elif surface == "DamcMemory":
        run(agent, QUESTION, memory=DamcMemory(memory=memory))
    else:
        recorder = DamcEventRecorder(memory)

        async def go():
            handler = agent.run(QUESTION)
            async for _ in recorder.relay(handler.stream_events()):
                pass
            await handler

        asyncio.run(go())


SURFACES = ["span handler", "DamcMemory", "event stream"]


@pytest.mark.parametrize("surface", SURFACES)
def test_parallel_calls_are_recorded_as_the_one_reply_that_made_them(recording_llm, spans, surface):
    both = ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text="I will look up the flights and the cards at once."),
            ToolCallBlock(tool_call_id="p1", tool_name="search_flights", tool_kwargs={"date": "2024-05-20"}),
            ToolCallBlock(
                tool_call_id="p2", tool_name="get_user_details", tool_kwargs={"user_id": "mia_li_3668"}
            ),
        ],
    )
    memory = damc()
    agent = FunctionAgent(tools=TOOLS, llm=recording_llm(both, ChatMessage(role="assistant", content="ok")))

    run_and_record(agent, memory, surface, spans)

    reply, *results = recorded_tool_turns(memory)
    assert reply == ("assistant", "I will look up the flights and the cards at once.", ["p1", "p2"])
    assert sorted((role, ids) for role, _, ids in results) == [("tool", ["p1"]), ("tool", ["p2"])]


@pytest.mark.parametrize("surface", SURFACES)
def test_a_react_thought_is_kept_with_the_call_it_led_to(recording_llm, spans, surface):
    thought = "Mia must pay with a card she owns, so I check her payment methods first."
    step = ChatMessage(
        role="assistant",
        content=f'Thought: {thought}\nAction: get_user_details\nAction Input: {{"user_id": "mia_li_3668"}}',
    )
    memory = damc()
    agent = ReActAgent(tools=TOOLS, llm=recording_llm(step, react_answer("ok"), function_calling=False))

    run_and_record(agent, memory, surface, spans)

    call_turn, result = recorded_tool_turns(memory)
    assert call_turn[:2] == ("assistant", thought)
    assert result[0] == "tool" and result[2] == call_turn[2]


@pytest.mark.parametrize("agent_class", [FunctionAgent, ReActAgent])
@pytest.mark.parametrize("surface", ["spans", "events"])
def test_the_answer_a_return_direct_tool_gives_is_recorded_once(recording_llm, spans, agent_class, surface):
    def order_status(order_id: str) -> str:
        """The shipping status of an order."""
        return f"Order {order_id} shipped on 2024-05-20."

    if agent_class is FunctionAgent:
        model = recording_llm(call("order_status", {"order_id": "W1"}, "s1"))
    else:
        model = recording_llm(react("order_status", {"order_id": "W1"}), function_calling=False)
    agent = agent_class(tools=[FunctionTool.from_defaults(order_status, return_direct=True)], llm=model)
    memory = damc()
    recorder = DamcEventRecorder(memory)
    if surface == "spans":
        spans(memory, agent)

    async def go():
        handler = agent.run("Where is order W1?")
        events = handler.stream_events()
        async for _ in recorder.relay(events) if surface == "events" else events:
            pass
        return await handler

    answer = asyncio.run(go())

    said = [m["content"] for m in memory.messages() if m["role"] == "assistant" and not m.get("tool_calls")]
    assert said == [str(answer)] == ["Order W1 shipped on 2024-05-20."]
