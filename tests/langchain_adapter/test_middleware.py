"""DamcMiddleware on a real ``create_agent`` agent: what the model receives, sync and async."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest

pytest.importorskip("langchain")

from conftest import PATCH, observe_custom_tool_step
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool

from damc_core import ConfigError, DecisionMemory, InMemoryStore, MemorySettings, SQLiteStore
from damc_langchain import DamcMiddleware

from .conftest import RecordingChatModel
from .scenario import FLIGHTS, SCRIPT, book, call, get_user_details, search_flights, text


def agent_with(model, middleware=()):
    return create_agent(
        model,
        [get_user_details, search_flights, book],
        system_prompt="You book flights.",
        middleware=list(middleware),
    )


def memory(budget=600):
    return DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=budget))


def test_the_model_sees_damc_context_with_the_ids_it_needs(recording_model):
    bare, damc = recording_model(*SCRIPT), recording_model(*SCRIPT)
    question = {"messages": [HumanMessage("Book HAT107 on 2024-05-20 for mia_li_3668 with my visa")]}

    agent_with(bare).invoke(question)
    result = agent_with(damc, [DamcMiddleware(memory())]).invoke(question)

    booking_prompt = damc.received[2]
    assert isinstance(booking_prompt[0], SystemMessage)
    assert booking_prompt[0].content.startswith("You book flights.")
    assert "<memory>" in booking_prompt[0].content
    sent = text(booking_prompt)
    assert "credit_card_4421486" in sent and "HAT107" in sent and "mia_li_3668" in sent
    assert len(sent) < len(text(bare.received[2]))
    assert result["messages"][-1].content == "Booked HAT107, reservation 4WQ150."


def test_the_agent_state_keeps_every_message_verbatim(recording_model):
    model = recording_model(*SCRIPT)
    result = agent_with(model, [DamcMiddleware(memory(budget=200))]).invoke(
        {"messages": [HumanMessage("Book HAT107 for mia_li_3668")]}
    )

    tool_outputs = [m.content for m in result["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(tool_outputs[1]) == FLIGHTS  # the state is untouched by compression


def test_every_prompt_is_a_valid_tool_sequence(recording_model):
    model = recording_model(*SCRIPT)
    agent_with(model, [DamcMiddleware(memory(budget=300))]).invoke({"messages": [HumanMessage("go")]})

    for prompt in model.received:
        open_calls = set()
        for message in prompt:
            if isinstance(message, AIMessage):
                open_calls = {c["id"] for c in message.tool_calls}
            if isinstance(message, ToolMessage):
                assert message.tool_call_id in open_calls


def test_each_tool_result_is_recorded_once(recording_model):
    damc = memory()
    agent_with(recording_model(*SCRIPT), [DamcMiddleware(damc)]).invoke({"messages": [HumanMessage("go")]})

    tool_cards = [c for c in damc.cards() if c.kind.value in ("tool_result", "tool_error")]
    assert [c.tool_name for c in tool_cards] == ["get_user_details", "search_flights", "book"]


def test_async_agent_gets_the_same_context(recording_model):
    model = recording_model(*SCRIPT)
    agent = agent_with(model, [DamcMiddleware(memory())])

    asyncio.run(agent.ainvoke({"messages": [HumanMessage("Book HAT107 for mia_li_3668")]}))

    assert "credit_card_4421486" in text(model.received[2])


def test_streaming_runs_through_the_middleware(recording_model):
    model = recording_model(*SCRIPT)
    chunks = list(agent_with(model, [DamcMiddleware(memory())]).stream({"messages": [HumanMessage("go")]}))

    assert chunks and "<memory>" in model.received[2][0].content


def test_a_broken_tool_output_does_not_stop_the_agent(recording_model):
    @tool
    def flaky(date: str) -> str:
        """Returns garbage."""
        return "\x00\x01{not json" + "x" * 200_000

    model = recording_model(call("flaky", {"date": "2024-05-20"}, "c1"), AIMessage("done"))
    agent = create_agent(model, [flaky], middleware=[DamcMiddleware(memory())])

    result = agent.invoke({"messages": [HumanMessage("go")]})

    assert result["messages"][-1].content == "done"
    assert len(text(model.received[1])) < 200_000


def test_damc_keeps_the_ids_that_clearing_old_tool_results_drops(recording_model):
    from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware

    question = {"messages": [HumanMessage("Book HAT107 for mia_li_3668 with my visa")]}
    clearing, damc = recording_model(*SCRIPT), recording_model(*SCRIPT)
    editing = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=200, keep=1)])

    agent_with(clearing, [editing]).invoke(question)
    agent_with(damc, [DamcMiddleware(memory(budget=600))]).invoke(question)

    assert "[cleared]" in text(clearing.received[2])
    assert "credit_card_4421486" not in text(clearing.received[2])
    assert "credit_card_4421486" in text(damc.received[2])
    assert len(text(damc.received[2])) < len(text(clearing.received[2]))


def test_the_model_sees_the_result_of_its_last_call_with_the_call_itself(recording_model):
    model = recording_model(*SCRIPT)
    damc = memory()
    agent_with(model, [DamcMiddleware(damc)]).invoke(
        {"messages": [HumanMessage("Book HAT107 for mia_li_3668")]}
    )

    second = model.received[1]
    assert isinstance(second[-1], ToolMessage) and second[-1].tool_call_id == "c1"
    assert isinstance(second[-2], AIMessage) and second[-2].tool_calls[0]["id"] == "c1"
    profile = next(
        c for c in damc.cards() if c.tool_name == "get_user_details" and c.kind.value == "tool_result"
    )
    assert profile.arguments == {"user_id": "mia_li_3668"}


def test_damc_keeps_the_ids_a_summary_drops(recording_model):
    from langchain.agents.middleware import SummarizationMiddleware

    summarizer = recording_model(
        *[AIMessage("The user is booking a flight; their profile and flights were looked up.")] * 4
    )
    question = {"messages": [HumanMessage("Book HAT107 for mia_li_3668 with my visa")]}
    summarized, damc = recording_model(*SCRIPT), recording_model(*SCRIPT)
    summarizing = SummarizationMiddleware(
        summarized, summarizer=summarizer, trigger=("tokens", 300), keep=("messages", 2)
    )

    agent_with(summarized, [summarizing]).invoke(question)
    agent_with(damc, [DamcMiddleware(memory(budget=600))]).invoke(question)

    assert summarizer.received, "the summary middleware ran"
    assert "credit_card_4421486" not in text(summarized.received[2])
    assert "credit_card_4421486" in text(damc.received[2])


def test_each_checkpointer_thread_is_its_own_session(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver

    model = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "c1"), AIMessage("Found."), AIMessage("Hi!")
    )
    middleware = DamcMiddleware(memory())
    agent = create_agent(model, [get_user_details], middleware=[middleware], checkpointer=InMemorySaver())

    agent.invoke({"messages": [HumanMessage("I am mia_li_3668")]}, {"configurable": {"thread_id": "mia"}})
    agent.invoke({"messages": [HumanMessage("Hello, I am Bob")]}, {"configurable": {"thread_id": "bob"}})

    assert "mia_li_3668" not in text(model.received[2])  # Bob's first prompt
    assert [c.kind.value for c in middleware.memory_for("mia").cards()] == [
        "user_instruction",
        "tool_call",
        "tool_result",
        "assistant_conclusion",  # the final answer, recorded as it comes
    ]
    assert [c.text for c in middleware.memory_for("bob").cards()] == ["Hello, I am Bob", "Hi!"]
    assert middleware.memory_for("mia").namespace.session == "mia"
    assert middleware.memory.cards() == []  # runs without a thread id would go here


def test_a_user_message_edited_in_a_fork_of_the_thread_reaches_the_model_as_edited(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver

    model = recording_model(AIMessage("Booking HAT107."), AIMessage("Booking HAT205."))
    middleware = DamcMiddleware(memory())
    agent = create_agent(model, [book], middleware=[middleware], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("Book HAT107", id="m1")]}, thread)

    # a chat app edits the user's message: the same message, from the checkpoint before it
    before = list(agent.get_state_history(thread))[-1].config
    agent.invoke({"messages": [HumanMessage("Book HAT205", id="m1")]}, before)

    assert model.received[-1][-1].content == "Book HAT205"
    assert [c.text for c in middleware.memory_for("t").cards()] == [
        "Book HAT107",
        "Booking HAT107.",
        "Book HAT205",
        "Booking HAT205.",
    ]


def test_an_answer_regenerated_from_the_checkpoint_before_it_is_asked_anew(recording_model):
    """A chat app's "regenerate" runs the thread again from the checkpoint before the model call:
    the model gets the user's turn last, as without DAMC, not its discarded answer to continue."""
    from langgraph.checkpoint.memory import InMemorySaver

    model = recording_model(
        AIMessage("Roses are red."), AIMessage("Old pond, frog leaps in."), AIMessage("Glad!")
    )
    middleware = DamcMiddleware(memory())
    agent = create_agent(model, [], middleware=[middleware], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("Write a haiku")]}, thread)

    before_the_answer = next(s for s in agent.get_state_history(thread) if s.next == ("model",))
    agent.invoke(None, before_the_answer.config)
    agent.invoke({"messages": [HumanMessage("Thanks")]}, thread)

    regenerating = model.received[1]
    assert isinstance(regenerating[-1], HumanMessage) and regenerating[-1].content == "Write a haiku"
    assert [m.content for m in model.received[2][-3:]] == [
        "Write a haiku",
        "Old pond, frog leaps in.",
        "Thanks",
    ]
    assert [m["role"] for m in middleware.memory_for("t").messages()] == [
        "user",
        "assistant",
        "user",  # asked anew: the discarded answer stays in memory, as a branch's tool calls do
        "assistant",
        "user",
        "assistant",
    ]


def test_a_thread_resumed_by_a_new_process_is_not_recorded_twice(recording_model, tmp_path):
    from langgraph.checkpoint.memory import InMemorySaver

    from damc_core import SQLiteStore

    checkpointer, thread = InMemorySaver(), {"configurable": {"thread_id": "t1"}}
    replies = (
        call("get_user_details", {"user_id": "mia_li_3668"}, "c1"),
        AIMessage("Found."),
        AIMessage("Bye."),
    )
    first = DamcMiddleware(DecisionMemory(store=SQLiteStore(tmp_path / "m.sqlite3")))
    create_agent(
        recording_model(*replies), [get_user_details], middleware=[first], checkpointer=checkpointer
    ).invoke({"messages": [HumanMessage("I am mia_li_3668")]}, thread)

    model = recording_model(*replies[2:])
    second = DamcMiddleware(DecisionMemory(store=SQLiteStore(tmp_path / "m.sqlite3")))  # a new process
    create_agent(model, [get_user_details], middleware=[second], checkpointer=checkpointer).invoke(
        {"messages": [HumanMessage("Thanks")]}, thread
    )

    kinds = [c.kind.value for c in second.memory_for("t1").cards()]
    assert kinds == [
        "user_instruction",
        "tool_call",
        "tool_result",
        "assistant_conclusion",
        "user_instruction",
        "assistant_conclusion",
    ]
    assert text(model.received[0]).count("I am mia_li_3668") == 1


def test_reused_tool_call_ids_record_every_result_with_its_own_call(recording_model):
    @tool
    def get_order(order_id: str) -> str:
        """Look up an order."""
        return json.dumps({"order_id": order_id, "status": "shipped" if order_id == "O-1" else "cancelled"})

    model = recording_model(
        call("get_order", {"order_id": "O-1"}, "call_0"),  # servers that number calls per step
        call("get_order", {"order_id": "O-2"}, "call_0"),
        AIMessage("O-1 shipped, O-2 cancelled."),
    )
    damc = memory()
    create_agent(model, [get_order], middleware=[DamcMiddleware(damc)]).invoke(
        {"messages": [HumanMessage("Status of O-1 and O-2?")]}
    )

    results = [c for c in damc.cards() if c.kind.value == "tool_result"]
    assert [c.arguments for c in results] == [{"order_id": "O-1"}, {"order_id": "O-2"}]
    assert "status=shipped" in results[0].summary and "status=cancelled" in results[1].summary
    last_prompt = text(model.received[2])
    assert "shipped" in last_prompt and "cancelled" in last_prompt


def test_a_system_prompt_in_content_blocks_keeps_its_blocks(recording_model):
    blocks = [{"type": "text", "text": "You are AcmeBot.", "cache_control": {"type": "ephemeral"}}]
    model = recording_model(*SCRIPT)
    agent = create_agent(
        model,
        [get_user_details, search_flights, book],
        system_prompt=SystemMessage(blocks),
        middleware=[DamcMiddleware(memory())],
    )

    agent.invoke({"messages": [HumanMessage("Book HAT107 for mia_li_3668")]})

    system = model.received[2][0]
    assert system.content[0] == blocks[0]
    assert system.content[1]["text"].startswith("<memory>")


def test_a_system_prompt_in_content_blocks_among_the_messages_keeps_its_blocks(recording_model):
    blocks = [{"type": "text", "text": "You are AcmeBot.", "cache_control": {"type": "ephemeral"}}]
    model = recording_model(*SCRIPT)
    agent = create_agent(
        model, [get_user_details, search_flights, book], middleware=[DamcMiddleware(memory())]
    )

    agent.invoke({"messages": [SystemMessage(blocks), HumanMessage("Book HAT107 for mia_li_3668")]})

    assert model.received[0][0].content == blocks  # nothing remembered yet: the prompt as it was
    system = model.received[2][0]
    assert system.content[0] == blocks[0]
    assert (
        system.content[1]["text"].startswith("<memory>")
        and "You are AcmeBot" not in system.content[1]["text"]
    )


def test_async_and_streamed_threads_stay_apart(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver

    model = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "c1"), AIMessage("Found."), AIMessage("Hi!")
    )
    middleware = DamcMiddleware(memory())
    agent = create_agent(model, [get_user_details], middleware=[middleware], checkpointer=InMemorySaver())

    async def two_threads():
        await agent.ainvoke(
            {"messages": [HumanMessage("I am mia_li_3668")]}, {"configurable": {"thread_id": "mia"}}
        )
        async for _ in agent.astream(
            {"messages": [HumanMessage("Hello, I am Bob")]}, {"configurable": {"thread_id": "bob"}}
        ):
            pass

    asyncio.run(two_threads())

    assert "mia_li_3668" not in text(model.received[2])
    assert [c.kind.value for c in middleware.memory_for("mia").cards()] == [
        "user_instruction",
        "tool_call",
        "tool_result",
        "assistant_conclusion",
    ]
    assert [c.text for c in middleware.memory_for("bob").cards()] == ["Hello, I am Bob", "Hi!"]


def test_any_thread_id_works_an_empty_one_is_the_memorys_own(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver

    model = recording_model(call("get_user_details", {"user_id": "mia_li_3668"}, "c1"), AIMessage("Found."))
    middleware = DamcMiddleware(memory())
    agent = create_agent(model, [get_user_details], middleware=[middleware], checkpointer=InMemorySaver())

    empty = {"configurable": {"thread_id": ""}}
    state = agent.invoke({"messages": [HumanMessage("I am mia_li_3668")]}, empty)

    assert state["messages"][-1].content == "Found."
    kinds = [c.kind.value for c in middleware.memory.cards()]
    assert kinds == ["user_instruction", "tool_call", "tool_result", "assistant_conclusion"]
    assert middleware.memory_for(42).namespace.session == "42"  # an int id, as its text


@pytest.mark.parametrize("thread", [None, "chat-7"], ids=["no thread id", "a thread id"])
def test_a_caller_resending_the_whole_chat_records_each_message_once(recording_model, thread):
    """Without a checkpointer every run gets the history the caller sends, with new ids; a
    thread id in the config then names the session only."""
    model = recording_model(*(AIMessage(f"answer {turn}") for turn in range(3)))
    middleware = DamcMiddleware(memory())
    agent = create_agent(model, [], middleware=[middleware])
    chat: list[dict[str, str]] = []

    for turn in range(3):
        chat.append({"role": "user", "content": f"question {turn}"})
        config = {"configurable": {"thread_id": thread}} if thread else {}
        reply = agent.invoke({"messages": list(chat)}, config)["messages"][-1]
        chat.append({"role": "assistant", "content": reply.content})

    recorded = [(m["role"], m["content"]) for m in middleware.memory_for(thread).messages()]
    assert recorded == [(m["role"], m["content"]) for m in chat]  # once each, answers included
    assert text(model.received[-1]).count("question 0") == 1


def test_a_final_answer_is_remembered_by_the_next_run_without_a_checkpointer(recording_model):
    model = recording_model(AIMessage("Your order O-1 has shipped."), AIMessage("Tomorrow."))
    agent = create_agent(model, [], middleware=[DamcMiddleware(memory())])

    agent.invoke({"messages": [HumanMessage("Where is order O-1?")]})
    agent.invoke({"messages": [HumanMessage("And when will it arrive?")]})

    assert "Your order O-1 has shipped." in text(model.received[-1])


@pytest.mark.parametrize("resend", [False, True], ids=["new turn only", "whole chat"])
def test_a_user_turn_repeating_an_earlier_ones_words_is_a_new_turn(recording_model, resend):
    model = recording_model(AIMessage("Book HAT069? Say yes."), AIMessage("Add insurance? Say yes."))
    middleware = DamcMiddleware(memory())
    agent = create_agent(model, [], middleware=[middleware])
    chat: list[dict[str, str]] = []

    for _ in range(2):
        chat.append({"role": "user", "content": "yes"})
        reply = agent.invoke({"messages": list(chat) if resend else chat[-1:]})["messages"][-1]
        chat.append({"role": "assistant", "content": reply.content})

    recorded = [(m["role"], m["content"]) for m in middleware.memory.messages()]
    assert recorded == [(m["role"], m["content"]) for m in chat]
    assert model.received[-1][-1].content == "yes"


@pytest.mark.parametrize("resend", [False, True], ids=["new turn only", "whole chat"])
def test_a_run_retried_after_the_model_failed_records_its_request_once(recording_model, resend):
    class RateLimited(RecordingChatModel):
        failures: int = 1

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if self.failures:
                self.failures -= 1
                raise RuntimeError("429 rate limited")
            return super()._generate(messages, stop, run_manager, **kwargs)

    middleware = DamcMiddleware(memory())
    agent = create_agent(
        RateLimited(script=[AIMessage("Hi Mia."), AIMessage("Booked.")]), [], middleware=[middleware]
    )
    chat = [{"role": "user", "content": "I am Mia"}]
    with pytest.raises(RuntimeError, match="429"):
        agent.invoke({"messages": list(chat)})

    chat.append(
        {"role": "assistant", "content": agent.invoke({"messages": list(chat)})["messages"][-1].content}
    )
    chat.append({"role": "user", "content": "Book HAT107"})
    agent.invoke({"messages": list(chat) if resend else chat[-1:]})

    recorded = [(m["role"], m["content"]) for m in middleware.memory.messages()]
    assert recorded == [
        ("user", "I am Mia"),
        ("assistant", "Hi Mia."),
        ("user", "Book HAT107"),
        ("assistant", "Booked."),
    ]


def test_a_run_that_failed_after_a_tool_call_records_its_request_once_when_retried(recording_model):
    class FailsOnce(RecordingChatModel):
        failed: bool = False

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if len(self.received) == 1 and not self.failed:  # the call after the tool's result
                self.failed = True
                raise RuntimeError("503 overloaded")
            return super()._generate(messages, stop, run_manager, **kwargs)

    model = FailsOnce(
        script=[call("get_user_details", {"user_id": "mia_li_3668"}, "c1"), AIMessage("Mia Li.")]
    )
    middleware = DamcMiddleware(memory())
    agent = create_agent(model, [get_user_details], middleware=[middleware])
    question = {"messages": [{"role": "user", "content": "Who is mia_li_3668?"}]}
    with pytest.raises(RuntimeError, match="503"):
        agent.invoke(question)

    model.received.clear()
    model.script = [call("get_user_details", {"user_id": "mia_li_3668"}, "c2"), AIMessage("Mia Li.")]
    agent.invoke(question)

    users = [m["content"] for m in middleware.memory.messages() if m["role"] == "user"]
    assert users == ["Who is mia_li_3668?"]


def test_the_same_words_after_a_reply_the_store_lost_are_a_new_turn(recording_model):
    from damc_core import StoreError

    class LocksOnAReply(InMemoryStore):
        """Refuses the next assistant message once armed, as a file locked for a moment does."""

        armed: bool = False

        def append(self, record):
            if self.armed and '"role": "assistant"' in record.body:
                self.armed = False
                raise StoreError("database is locked")
            super().append(record)

    store = LocksOnAReply()
    model = recording_model(
        AIMessage("Cancel W1, are you sure?"), AIMessage("Refund to your gift card too?"), AIMessage("Done.")
    )
    agent = create_agent(model, [], middleware=[middleware := DamcMiddleware(DecisionMemory(store=store))])
    agent.invoke({"messages": [{"role": "user", "content": "Cancel order W1"}]})
    store.armed = True
    agent.invoke({"messages": [{"role": "user", "content": "yes"}]})  # its reply is lost

    agent.invoke({"messages": [{"role": "user", "content": "yes"}]})  # the app sends the new turn only

    users = [m["content"] for m in middleware.memory.messages() if m["role"] == "user"]
    assert users == ["Cancel order W1", "yes", "yes"]


def test_a_summary_of_the_conversation_is_not_recorded_as_a_user_turn():
    from damc_langchain._recorder import MessageRecorder

    recorder = MessageRecorder(memory())
    summary = HumanMessage(  # as langchain's SummarizationMiddleware puts it in the state
        "Here is a summary of the conversation to date:\n\nMia booked HAT107.",
        additional_kwargs={"lc_source": "summarization"},
        id="s1",
    )

    recorder.observe([summary, HumanMessage("And a hotel?", id="h2")])

    assert [m["content"] for m in recorder.memory.messages()] == ["And a hotel?"]


def test_a_tool_answering_with_a_command_is_recorded_as_it_returns():
    from langgraph.types import Command

    from damc_langchain._recorder import MessageRecorder

    recorder = MessageRecorder(memory())
    recorder.observe([HumanMessage("Refund O-1", id="h1"), call("refund", {"order_id": "O-1"}, "r1")])
    result = ToolMessage("refunded", tool_call_id="r1")

    recorder.record_tool_result(Command(update={"messages": [result], "refunded": True}))

    assert [m["role"] for m in recorder.memory.messages()] == ["user", "assistant", "tool"]


def test_a_message_another_middleware_adds_for_one_call_is_sent_but_not_remembered(recording_model):
    from langchain.agents.middleware import wrap_model_call

    @wrap_model_call
    def remind(request, handler):  # dynamic context, for this call only
        return handler(request.override(messages=[*request.messages, HumanMessage("Reminder: be brief.")]))

    model = recording_model(*SCRIPT)
    damc = DamcMiddleware(memory())
    agent_with(model, [remind, damc]).invoke({"messages": [HumanMessage("Book HAT107 for mia_li_3668")]})

    assert all(prompt[-1].content == "Reminder: be brief." for prompt in model.received)
    assert all(text(prompt).count("Reminder") == 1 for prompt in model.received)
    recorded = [m["content"] for m in damc.memory.messages() if m["role"] == "user"]
    assert recorded == ["Book HAT107 for mia_li_3668"]


def test_listed_before_human_review_damc_records_the_result_of_the_edited_call(recording_model):
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    @tool
    def refund(order_id: str, amount: int) -> str:
        """Refund an order."""
        return f"refunded {amount} on {order_id}"

    model = recording_model(call("refund", {"order_id": "O-1", "amount": 500}, "r1"), AIMessage("Done."))
    damc = DamcMiddleware(memory())
    review = HumanInTheLoopMiddleware(interrupt_on={"refund": True})
    agent = create_agent(model, [refund], middleware=[damc, review], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [HumanMessage("Refund O-1")]}, thread)

    edit = {"type": "edit", "edited_action": {"name": "refund", "args": {"order_id": "O-1", "amount": 5}}}
    agent.invoke(Command(resume={"decisions": [edit]}), thread)

    result = damc.memory_for("t1").messages()[2]
    assert result["role"] == "tool" and "refunded 5 on O-1" in result["content"]
    assert '"amount": 5' in result["content"]  # the reviewer's note: not the call the model made
    assert '"amount": 5' in text(model.received[1])


def test_a_structured_answer_is_remembered_by_the_next_run_without_a_checkpointer(recording_model):
    from langchain.agents.structured_output import ToolStrategy
    from pydantic import BaseModel

    class Booking(BaseModel):
        """The booking made."""

        reservation_id: str

    model = recording_model(call("Booking", {"reservation_id": "4WQ150"}, "b1"), AIMessage("It was 4WQ150."))
    damc = DamcMiddleware(memory())
    structured = create_agent(model, [], middleware=[damc], response_format=ToolStrategy(Booking))
    structured.invoke({"messages": [HumanMessage("Book HAT107 for mia_li_3668")]})

    create_agent(model, [], middleware=[damc]).invoke({"messages": [HumanMessage("Which reservation?")]})

    assert "4WQ150" in text(model.received[1])
    assert [m["role"] for m in damc.memory.messages()] == ["user", "assistant", "tool", "user", "assistant"]


def test_a_sub_agent_run_by_a_tool_keeps_a_conversation_of_its_own(recording_model):
    damc = DamcMiddleware(memory())  # one middleware, for the supervisor and its sub-agent alike
    profile_model = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "s1"), AIMessage("Mia pays by visa.")
    )
    profile_agent = create_agent(profile_model, [get_user_details], middleware=[damc])

    @tool
    def ask_profiles(question: str) -> str:
        """Ask the profiles agent."""
        return profile_agent.invoke({"messages": [HumanMessage(question)]})["messages"][-1].content

    supervisor_model = recording_model(
        call("ask_profiles", {"question": "payment of mia_li_3668"}, "p1"), AIMessage("Visa it is.")
    )
    create_agent(supervisor_model, [ask_profiles], middleware=[damc]).invoke(
        {"messages": [HumanMessage("How do I pay?")]}
    )

    assert [m.type for m in profile_model.received[0]] == ["human"]  # not the supervisor's question
    *_, asked, answered = supervisor_model.received[1]
    assert (asked.type, answered.type) == ("ai", "tool") and answered.content.endswith("Mia pays by visa.")
    said = [m["content"] for m in damc.memory.messages() if m["role"] == "user"]
    assert said == ["How do I pay?"]


def test_two_middlewares_on_one_memory_record_each_message_once(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    shared = memory()
    finder = recording_model(
        call("get_user_details", {"user_id": "mia_li_3668"}, "u1"), AIMessage("Found."), AIMessage("No.")
    )
    writer = recording_model(AIMessage("Noted."), AIMessage("Still noted."))
    graph = StateGraph(MessagesState)
    graph.add_node("finder", create_agent(finder, [get_user_details], middleware=[DamcMiddleware(shared)]))
    graph.add_node("writer", create_agent(writer, [], middleware=[DamcMiddleware(shared)]))
    graph.add_edge(START, "finder")
    graph.add_edge("finder", "writer")
    graph.add_edge("writer", END)
    app = graph.compile(checkpointer=InMemorySaver())

    app.invoke({"messages": [HumanMessage("Find mia_li_3668")]}, {"configurable": {"thread_id": "t1"}})
    app.invoke({"messages": [HumanMessage("Anything else?")]}, {"configurable": {"thread_id": "t1"}})

    recorded = [m.get("content") for m in shared.for_session("t1").messages()]
    assert recorded.count("Found.") == recorded.count("Noted.") == 1
    assert len(recorded) == 8  # two requests, the call and its result, four answers


def test_a_models_thinking_goes_back_to_it_with_its_tool_call_and_stays_out_of_the_card(recording_model):
    thinking = {"type": "thinking", "thinking": "mia wants her profile", "signature": "c2lnbmF0dXJl"}
    reply = AIMessage(
        content=[thinking, {"type": "text", "text": "Looking her up."}],
        tool_calls=[{"name": "get_user_details", "args": {"user_id": "mia_li_3668"}, "id": "toolu_1"}],
    )
    model = recording_model(reply, AIMessage("Found her."))
    middleware = DamcMiddleware(memory())

    agent_with(model, [middleware]).invoke({"messages": [HumanMessage("Look up mia_li_3668")]})

    sent_back = next(m for m in model.received[1] if isinstance(m, AIMessage))
    assert thinking in sent_back.content
    call_card = next(c for c in middleware.memory.cards() if c.kind.value == "tool_call")
    assert call_card.summary.endswith("(Looking her up.)")


def test_an_image_a_tool_returns_reaches_the_model_beside_its_card(recording_model):
    pixels = "iVBORw0KGgoAAAANSUhEUg" * 20

    @tool
    def screenshot(page: str) -> list:
        """Take a screenshot of a page."""
        return [
            {"type": "text", "text": f"checkout page {page}"},
            {"type": "image", "base64": pixels, "mime_type": "image/png"},
        ]

    model = recording_model(call("screenshot", {"page": "P7"}, "s1"), AIMessage("The total is $42."))
    create_agent(model, [screenshot], middleware=[DamcMiddleware(memory())]).invoke(
        {"messages": [HumanMessage("What does checkout P7 show?")]}
    )

    (sent,) = [m for m in model.received[1] if isinstance(m, ToolMessage)]
    assert [part["type"] for part in sent.content] == ["text", "image_url"]
    assert (
        sent.content[0]["text"].endswith("checkout page P7\n[image_url]")
        and pixels in sent.content[1]["image_url"]["url"]
    )


@pytest.mark.parametrize("form", ["updates", "openai"])
def test_a_tool_answering_with_updates_is_remembered_when_the_call_beside_it_raises(recording_model, form):
    """A tool may return several updates at once (``[Command(...), ToolMessage(...)]``), or a
    Command whose answer is in OpenAI's form: its answer is recorded as it returns, so a call beside
    it that ends the run does not lose it."""
    from langchain.agents import AgentState
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    class SeatState(AgentState):
        seat: str

    @tool
    async def hold_seat(seat: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> list:
        """Hold a seat for ten minutes."""
        if form == "openai":
            answer = {"role": "tool", "content": f"seat {seat} held", "tool_call_id": tool_call_id}
            return Command(update={"seat": seat, "messages": [answer]})
        return [Command(update={"seat": seat}), ToolMessage(f"seat {seat} held", tool_call_id=tool_call_id)]

    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        await asyncio.sleep(0.01)
        raise ConnectionError("weather service down")

    both = AIMessage(
        "",
        tool_calls=[
            {"name": "hold_seat", "args": {"seat": "12A"}, "id": "s1"},
            {"name": "weather", "args": {"city": "Paris"}, "id": "w1"},
        ],
    )
    model = recording_model(both, AIMessage("Seat 12A is held."))
    damc = DamcMiddleware(memory())
    agent = create_agent(
        model, [hold_seat, weather], middleware=[damc], state_schema=SeatState, checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}

    async def run():
        with pytest.raises(ConnectionError):
            await agent.ainvoke({"messages": [HumanMessage("Hold 12A; weather in Paris?")]}, config)
        await agent.ainvoke({"messages": [HumanMessage("Is my seat held?")]}, config)

    asyncio.run(run())

    assert tool_results(damc.memory_for("t")) == [
        ("seat 12A held", None),
        ("Error: ConnectionError: weather service down", "error"),
    ]
    answers = {m.tool_call_id: m.content for m in model.received[-1] if isinstance(m, ToolMessage)}
    assert answers["s1"].endswith("seat 12A held")


def test_a_file_by_url_a_tool_returns_is_recorded_and_the_thread_goes_on_remembered(recording_model):
    """LangChain's file block by URL (Anthropic reads it) has no OpenAI form: converting it raises."""
    from langgraph.checkpoint.memory import InMemorySaver

    @tool
    async def fetch_invoice(order_id: str) -> list:
        """An order's invoice, as a link to its PDF."""
        pdf = {
            "type": "file",
            "url": f"https://shop.example/invoices/{order_id}.pdf",
            "mime_type": "application/pdf",
        }
        return [{"type": "text", "text": f"invoice of {order_id}: total $20"}, pdf]

    model = recording_model(
        call("fetch_invoice", {"order_id": "W1"}, "i1"), AIMessage("Here it is."), AIMessage("$20.")
    )
    damc = DamcMiddleware(memory())
    agent = create_agent(model, [fetch_invoice], middleware=[damc], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}

    async def two_turns():
        await agent.ainvoke({"messages": [HumanMessage("Invoice for W1?")]}, config)
        await agent.ainvoke({"messages": [HumanMessage("What was the total?")]}, config)

    asyncio.run(two_turns())

    (result,) = [c for c in damc.memory_for("t").cards() if c.kind.value == "tool_result"]
    assert "total $20" in result.summary and "invoices/W1.pdf" in result.summary
    assert "https://shop.example/invoices/W1.pdf" in damc.memory_for("t").recall(result.id)["content"]
    turns = [c.text for c in damc.memory_for("t").cards() if c.kind.value != "tool_result"][-3:]
    assert turns == ["Here it is.", "What was the total?", "$20."]
    assert "<memory>" in text(model.received[-1])  # DAMC's context, not the request unchanged


@pytest.mark.parametrize(
    "media",
    [
        {"type": "video", "base64": "AAAAIGZ0eXBpc29t", "mime_type": "video/mp4"},
        {"type": "image", "file_id": "file-7Qm2"},
        {"type": "image", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}},
    ],
    ids=["video", "image by file id", "Anthropic image by file"],
)
def test_media_openais_format_has_no_part_for_is_recorded_and_sent_as_the_user_gave_it(
    recording_model, media, caplog
):
    question = HumanMessage([{"type": "text", "text": "Is seat 12A on HAT107 in this?"}, media])
    model = recording_model(call("get_user_details", {"user_id": "mia_li_3668"}, "u1"), AIMessage("Yes."))
    middleware = DamcMiddleware(memory())
    create_agent(model, [get_user_details], middleware=[middleware]).invoke({"messages": [question]})

    kinds = [c.kind.value for c in middleware.memory.cards()]
    assert kinds == ["user_instruction", "tool_call", "tool_result", "assistant_conclusion"]
    (sent,) = [m for m in model.received[1] if isinstance(m, HumanMessage)]
    assert sent.content[1] == media and "building the context failed" not in caplog.text


def test_a_tools_artifact_is_kept_in_the_record(recording_model):
    @tool(response_format="content_and_artifact")
    def find_order(order_id: str) -> tuple[str, dict]:
        """Find an order; the rows go to the app, not the model."""
        return f"found {order_id}", {"order_id": order_id, "rows": [1, 2, 3]}

    model = recording_model(call("find_order", {"order_id": "W123"}, "f1"), AIMessage("Found it."))
    middleware = DamcMiddleware(memory())
    create_agent(model, [find_order], middleware=[middleware]).invoke(
        {"messages": [HumanMessage("Find W123")]}
    )

    (result,) = [c for c in middleware.memory.cards() if c.kind.value == "tool_result"]
    assert middleware.memory.recall(result.id)["artifact"] == {"order_id": "W123", "rows": [1, 2, 3]}
    assert "rows" not in text(model.received[1])


def test_two_workers_serving_one_thread_in_turns_record_each_message_once(recording_model, tmp_path):
    from langgraph.checkpoint.memory import InMemorySaver

    from damc_core import SQLiteStore

    checkpointer = InMemorySaver()  # shared, as a Postgres checkpointer is by two processes
    workers = []
    for _ in range(2):
        memory = DecisionMemory(store=SQLiteStore(tmp_path / "memory.sqlite3"))
        model = recording_model(*(AIMessage(f"answer {turn}") for turn in range(6)))
        workers.append(
            create_agent(model, [], middleware=[DamcMiddleware(memory)], checkpointer=checkpointer)
        )
    thread = {"configurable": {"thread_id": "T"}}

    for turn in range(4):
        workers[turn % 2].invoke({"messages": [HumanMessage(f"turn {turn}")]}, thread)

    reopened = DecisionMemory(store=SQLiteStore(tmp_path / "memory.sqlite3")).for_session("T")
    said = [m["content"] for m in reopened.messages()]
    assert said == ["turn 0", "answer 0", "turn 1", "answer 0", "turn 2", "answer 1", "turn 3", "answer 1"]


def test_a_tool_result_the_locked_store_refused_is_remembered_before_the_answer(recording_model, tmp_path):
    import sqlite3

    from damc_core import SQLiteStore

    path = tmp_path / "memory.sqlite3"
    other_process = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    @tool
    def lookup_order(order_id: str) -> dict:
        """Look up an order."""
        other_process.execute("BEGIN IMMEDIATE")  # a backup takes the file's write lock meanwhile
        return {"order_id": order_id, "status": "delivered"}

    class AnswersOnceTheLockIsGone(RecordingChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if other_process.in_transaction:
                other_process.execute("ROLLBACK")
            return super()._generate(messages, stop, run_manager, **kwargs)

    model = AnswersOnceTheLockIsGone(
        script=[call("lookup_order", {"order_id": "W1"}, "call_1"), AIMessage("W1 was delivered.")]
    )
    damc = DamcMiddleware(DecisionMemory(store=SQLiteStore(path, timeout=0.05)))
    agent = create_agent(model, [lookup_order], middleware=[damc])

    agent.invoke({"messages": [{"role": "user", "content": "Where is order W1?"}]})

    recorded = [(m["role"], m.get("content") or "") for m in damc.memory.messages()]
    assert [role for role, _ in recorded] == ["user", "assistant", "tool", "assistant"]
    assert "delivered" in recorded[2][1] and recorded[3][1] == "W1 was delivered."


def test_an_imported_history_a_summary_shortens_before_the_first_call_is_remembered_whole(recording_model):
    from langchain.agents.middleware import SummarizationMiddleware

    history = []
    for n in range(4):
        history += [HumanMessage(f"Order O-{n} needs change {n}"), AIMessage(f"Noted change {n} for O-{n}.")]
    summarizer = recording_model(AIMessage("Orders O-0 to O-3 have changes."))
    model = recording_model(AIMessage("Four changes are pending."))
    summary = SummarizationMiddleware(summarizer, trigger=("messages", 6), keep=("messages", 3))
    agent = create_agent(model, [], middleware=[summary, damc := DamcMiddleware(memory())])

    agent.invoke({"messages": [*history, HumanMessage("Which changes are pending?")]})

    recorded = [m["content"] for m in damc.memory.messages()]
    assert recorded == [m.content for m in history] + [
        "Which changes are pending?",
        "Four changes are pending.",
    ]
    assert "Order O-0 needs change 0" in text(model.received[0])  # from the cards, not the summary


@pytest.mark.parametrize("damc_first", [True, False], ids=["listed first", "listed last"])
def test_an_input_a_middleware_redacts_reaches_the_model_and_the_memory_redacted(recording_model, damc_first):
    from langchain.agents.middleware import PIIMiddleware

    model = recording_model(AIMessage("I will book it and mail the ticket."))
    redact = PIIMiddleware("email", strategy="redact")
    damc = DamcMiddleware(memory())
    agent = create_agent(model, [book], middleware=[damc, redact] if damc_first else [redact, damc])

    agent.invoke({"messages": [HumanMessage("Book HAT107, my email is mia.li@example.com")]})

    assert [m.content for m in model.received[0]] == ["Book HAT107, my email is [REDACTED_EMAIL]"]
    assert [m["content"] for m in damc.memory.messages()] == [
        "Book HAT107, my email is [REDACTED_EMAIL]",
        "I will book it and mail the ticket.",
    ]


@pytest.mark.parametrize("damc_first", [True, False], ids=["listed first", "listed last"])
def test_a_reply_a_middleware_redacts_is_remembered_and_sent_again_redacted(recording_model, damc_first):
    """A hook that edits the model's reply after the call runs after DAMC's when listed before it:
    what is recorded is the reply the state keeps, never the one the caller was not shown."""
    from langchain.agents.middleware import PIIMiddleware
    from langgraph.checkpoint.memory import InMemorySaver

    model = recording_model(
        AIMessage("Write to mia.li@example.com for the ticket."), AIMessage("You are welcome.")
    )
    redact = PIIMiddleware("email", strategy="redact", apply_to_input=False, apply_to_output=True)
    damc = DamcMiddleware(memory())
    agent = create_agent(
        model, [], middleware=[damc, redact] if damc_first else [redact, damc], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "t1"}}

    shown = agent.invoke({"messages": [HumanMessage("Who do I write to?")]}, thread)["messages"][-1]
    agent.invoke({"messages": [HumanMessage("Thanks")]}, thread)

    assert shown.content == "Write to [REDACTED_EMAIL] for the ticket."
    assert "mia.li@example.com" not in json.dumps(damc.memory_for("t1").messages())
    assert "Write to [REDACTED_EMAIL] for the ticket." in text(model.received[1])
    assert "mia.li@example.com" not in text(model.received[1])


def test_the_messages_a_limit_ends_the_run_with_are_remembered(recording_model):
    from langchain.agents.middleware import ToolCallLimitMiddleware

    model = recording_model(
        call("search_flights", {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"}, "call_1"),
        call("search_flights", {"origin": "JFK", "destination": "SFO", "date": "2024-05-20"}, "call_2"),
    )
    limit = ToolCallLimitMiddleware(run_limit=1, exit_behavior="end")
    agent = create_agent(model, [search_flights], middleware=[damc := DamcMiddleware(memory()), limit])

    state = agent.invoke({"messages": [HumanMessage("Find me a flight from JFK on May 20")]})

    recorded = damc.memory.messages()
    assert len(recorded) == len(state["messages"]) == 6
    assert [m.get("tool_call_id") for m in recorded if m["role"] == "tool"] == ["call_1", "call_2"]
    assert recorded[-1]["content"] == state["messages"][-1].content  # the limit's closing message


def test_parallel_results_are_remembered_in_the_calls_order_and_a_resent_chat_adds_nothing(recording_model):
    import time

    from langchain_core.messages import convert_to_openai_messages

    @tool
    def slow_lookup(q: str) -> str:
        """A lookup that takes a while."""
        time.sleep(0.2)
        return f"slow result {q}"

    @tool
    def fast_lookup(q: str) -> str:
        """A lookup that answers at once."""
        return f"fast result {q}"

    def both(run: int) -> AIMessage:
        return AIMessage(
            "",
            tool_calls=[
                {"name": "slow_lookup", "args": {"q": str(run)}, "id": f"slow_{run}"},
                {"name": "fast_lookup", "args": {"q": str(run)}, "id": f"fast_{run}"},
            ],
        )

    model = recording_model(both(0), AIMessage("Answer 0."), both(1), AIMessage("Answer 1."))
    agent = create_agent(model, [slow_lookup, fast_lookup], middleware=[damc := DamcMiddleware(memory())])
    chat: list = []
    for run in range(2):  # no checkpointer: the app keeps the chat as OpenAI dicts and resends it
        chat.append({"role": "user", "content": f"Question {run}?"})
        chat = convert_to_openai_messages(agent.invoke({"messages": list(chat)})["messages"])

    recorded = [(m["role"], m.get("tool_call_id")) for m in damc.memory.messages()]
    assert recorded == [(m["role"], m.get("tool_call_id")) for m in chat]
    assert [r for r in recorded if r[0] == "tool"] == [
        ("tool", "slow_0"),
        ("tool", "fast_0"),
        ("tool", "slow_1"),
        ("tool", "fast_1"),
    ]


def a_booking_beside_a_receipt_that_fails(recording_model):
    """An agent whose one step books a flight and emails its receipt, which fails while the
    booking still runs."""
    import threading
    import time

    booking = threading.Event()

    @tool
    def book_flight(flight: str) -> str:
        """Book a flight."""
        booking.set()
        time.sleep(0.1)
        return f"booked {flight}: reservation R-7"

    @tool
    def send_receipt(email: str) -> str:
        """Email the receipt."""
        booking.wait(timeout=5)
        raise RuntimeError("mail server down")

    parallel = AIMessage(
        "",
        tool_calls=[
            {"name": "book_flight", "args": {"flight": "HAT107"}, "id": "call_book"},
            {"name": "send_receipt", "args": {"email": "mia@example.com"}, "id": "call_mail"},
        ],
    )
    model = recording_model(parallel, AIMessage("The receipt could not be sent."))
    damc = DamcMiddleware(memory(budget=4000))  # room to send the last run as it happened
    return model, damc, create_agent(model, [book_flight, send_receipt], middleware=[damc])


def tool_results(memory):
    return [(m["content"], m.get("status")) for m in memory.messages() if m["role"] == "tool"]


def the_model_sees_every_call_answered(prompt):
    calls = [call["id"] for m in prompt if isinstance(m, AIMessage) for call in m.tool_calls]
    results = {m.tool_call_id: m for m in prompt if isinstance(m, ToolMessage)}
    assert calls == list(results) == ["call_book", "call_mail"]
    assert results["call_mail"].status == "error" and "mail server down" in results["call_mail"].content
    return results["call_book"]


def test_a_call_that_raised_is_remembered_with_its_error_beside_the_others_results(recording_model):
    model, damc, agent = a_booking_beside_a_receipt_that_fails(recording_model)

    with pytest.raises(RuntimeError, match="mail server down"):
        agent.invoke({"messages": [HumanMessage("Book HAT107 and email me the receipt")]})

    assert tool_results(damc.memory) == [  # the booking went through: never lost for the receipt
        ("booked HAT107: reservation R-7", None),
        ("Error: RuntimeError: mail server down", "error"),
    ]
    agent.invoke({"messages": [HumanMessage("Did it work?")]})
    booking = the_model_sees_every_call_answered(model.received[-1])
    assert "booked HAT107: reservation R-7" in booking.content


def test_an_async_step_a_call_ended_is_remembered_every_call_answered(recording_model):
    model, damc, agent = a_booking_beside_a_receipt_that_fails(recording_model)

    async def run():
        with pytest.raises(RuntimeError, match="mail server down"):  # the booking is cancelled
            await agent.ainvoke({"messages": [HumanMessage("Book HAT107 and email me the receipt")]})
        remembered = tool_results(damc.memory)
        await agent.ainvoke({"messages": [HumanMessage("Did it work?")]})
        return remembered

    assert asyncio.run(run()) == [
        (STOPPED, "error"),
        ("Error: RuntimeError: mail server down", "error"),
    ]
    booking = the_model_sees_every_call_answered(model.received[-1])
    assert booking.status == "error" and STOPPED in booking.content


STOPPED = (
    "Error: CancelledError: the run stopped before the tool returned; whether it took effect is not known"
)


def test_a_stream_the_caller_leaves_remembers_the_calls_it_stopped_as_stopped(recording_model):
    """A chat client that disconnects mid-stream closes the stream: langgraph cancels the tools
    still running, with a cancel message of its own that means nothing to a model."""
    from contextlib import aclosing

    from langgraph.checkpoint.memory import InMemorySaver

    @tool
    async def book(flight: str) -> str:
        """Book a flight (slowly)."""
        await asyncio.sleep(5)
        return f"booked {flight}"

    @tool
    async def seat_map(flight: str) -> str:
        """A flight's free seats."""
        return f"{flight}: 12A, 14C free"

    both = AIMessage(
        "",
        tool_calls=[
            {"name": "book", "args": {"flight": "HAT107"}, "id": "b1"},
            {"name": "seat_map", "args": {"flight": "HAT107"}, "id": "s1"},
        ],
    )
    model = recording_model(both, AIMessage("Was it booked?"))
    damc = DamcMiddleware(memory())
    agent = create_agent(model, [book, seat_map], middleware=[damc], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}

    async def leave_then_ask_again():
        async with aclosing(agent.astream({"messages": [HumanMessage("Book HAT107")]}, config)) as updates:
            async for update in updates:
                if "tools" in update:  # the seat map is back, the booking still running
                    break
        await agent.ainvoke({"messages": [HumanMessage("Did it work?")]}, config)

    asyncio.run(leave_then_ask_again())

    assert tool_results(damc.memory_for("t")) == [(STOPPED, "error"), ("HAT107: 12A, 14C free", None)]
    answers = {m.tool_call_id: m.content for m in model.received[-1] if isinstance(m, ToolMessage)}
    assert answers["b1"].endswith(STOPPED) and "object at" not in answers["b1"]


def test_two_calls_that_raised_beside_a_slow_one_are_remembered_in_the_calls_order(recording_model):
    import threading
    import time

    from langchain.agents.middleware import AgentMiddleware

    class Throttle(AgentMiddleware):
        """Starts one tool call every 30 ms (an API's rate limit)."""

        def __init__(self):
            super().__init__()
            self.lock, self.next_start = threading.Lock(), 0.0

        def wrap_tool_call(self, request, handler):
            with self.lock:
                time.sleep(max(0.0, self.next_start - time.monotonic()))
                self.next_start = time.monotonic() + 0.03
            try:
                return handler(request)
            finally:
                if request.tool_call["id"] == "c3":
                    lookup_back.set()

    lookup_back = threading.Event()  # the booking returns once both lookups raised

    @tool
    def book_flight(flight: str) -> str:
        """Book a flight."""
        lookup_back.wait(timeout=5)
        return f"booked {flight}: reservation R-7"

    @tool
    def find_hotel(city: str) -> str:
        """Find a hotel."""
        raise RuntimeError(f"no hotels in {city}")

    parallel = AIMessage(
        "",
        tool_calls=[
            {"name": "find_hotel", "args": {"city": "Paris"}, "id": "c1"},
            {"name": "book_flight", "args": {"flight": "HAT107"}, "id": "c2"},
            {"name": "find_hotel", "args": {"city": "Lyon"}, "id": "c3"},
        ],
    )
    damc = DamcMiddleware(memory(budget=4000))
    agent = create_agent(recording_model(parallel), [book_flight, find_hotel], middleware=[Throttle(), damc])

    with pytest.raises(RuntimeError, match="no hotels"):
        agent.invoke({"messages": [HumanMessage("Book HAT107 and a hotel in Paris or Lyon")]})

    assert tool_results(damc.memory) == [
        ("Error: RuntimeError: no hotels in Paris", "error"),
        ("booked HAT107: reservation R-7", None),
        ("Error: RuntimeError: no hotels in Lyon", "error"),
    ]


def test_listed_after_a_retrying_middleware_damc_remembers_the_retry_that_succeeded(recording_model, caplog):
    from langchain.agents.middleware import ToolRetryMiddleware

    attempts = []

    @tool
    def book_flight(flight: str) -> str:
        """Book a flight."""
        attempts.append(flight)
        if len(attempts) == 1:
            raise TimeoutError("booking service timed out")
        return f"booked {flight}: reservation R-7"

    model = recording_model(
        call("book_flight", {"flight": "HAT107"}, "c1"), AIMessage("Booked: R-7."), AIMessage("Yes, R-7.")
    )
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0.01, retry_on=(TimeoutError,))
    damc = DamcMiddleware(memory(budget=4000))
    agent = create_agent(model, [book_flight], middleware=[retry, damc])  # DAMC should come first

    agent.invoke({"messages": [HumanMessage("Book HAT107")]})
    agent.invoke({"messages": [HumanMessage("Is it booked?")]})

    assert tool_results(damc.memory) == [  # the call failed, was made again, and went through
        ("Error: TimeoutError: booking service timed out", "error"),
        ("booked HAT107: reservation R-7", None),
    ]
    prompt = model.received[-1]
    made = [c["id"] for m in prompt if isinstance(m, AIMessage) for c in m.tool_calls]
    answered = [m.tool_call_id for m in prompt if isinstance(m, ToolMessage)]
    assert set(answered) <= set(made)
    assert "reservation R-7" in text(prompt)
    assert sum("retries tool calls" in r.getMessage() for r in caplog.records) == 1


def booking_that_times_out() -> tuple[Any, list[bool]]:
    """A booking tool whose service times out while ``service_down[0]`` holds."""
    service_down = [True]

    @tool
    def book_flight(flight: str) -> str:
        """Book a flight."""
        if service_down[0]:
            raise TimeoutError("booking service timed out")
        return f"booked {flight}: reservation R-7"

    return book_flight, service_down


def test_a_run_resumed_after_its_tool_raised_remembers_the_call_made_again_without_a_warning(
    recording_model, caplog
):
    from langgraph.checkpoint.memory import InMemorySaver

    book_flight, service_down = booking_that_times_out()

    model = recording_model(call("book_flight", {"flight": "HAT107"}, "c1"), AIMessage("Booked: R-7."))
    damc = DamcMiddleware(memory(budget=4000))
    agent = create_agent(model, [book_flight], middleware=[damc], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(TimeoutError):
        agent.invoke({"messages": [HumanMessage("Book HAT107")]}, config)

    service_down[0] = False
    agent.invoke(None, config)  # the caller runs the failed step again

    assert tool_results(damc.memory_for("t")) == [
        ("Error: TimeoutError: booking service timed out", "error"),
        ("booked HAT107: reservation R-7", None),
    ]
    assert "reservation R-7" in text(model.received[-1])
    assert not [r for r in caplog.records if "retries tool calls" in r.getMessage()]  # no middleware retried


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_call_that_raised_made_again_by_a_new_process_reaches_the_model_with_its_result(
    recording_model, tmp_path, run
):
    """The caller runs the failed step again after a restart: the new process's middleware knows
    the call it makes again from the store, as the one that recorded the error would."""
    from langgraph.checkpoint.memory import InMemorySaver

    book_flight, service_down = booking_that_times_out()

    checkpointer, config = InMemorySaver(), {"configurable": {"thread_id": "t"}}
    first = DamcMiddleware(DecisionMemory(store=SQLiteStore(tmp_path / "m.sqlite3")))
    agent = create_agent(
        recording_model(call("book_flight", {"flight": "HAT107"}, "c1")),
        [book_flight],
        middleware=[first],
        checkpointer=checkpointer,
    )
    with pytest.raises(TimeoutError):
        agent.invoke({"messages": [HumanMessage("Book HAT107")]}, config)

    service_down[0] = False
    model = recording_model(AIMessage("Booked: R-7."))
    second = DamcMiddleware(DecisionMemory(store=SQLiteStore(tmp_path / "m.sqlite3")))  # a new process
    resumed = create_agent(model, [book_flight], middleware=[second], checkpointer=checkpointer)
    if run == "sync":
        resumed.invoke(None, config)
    else:
        asyncio.run(resumed.ainvoke(None, config))

    assert "reservation R-7" in text(model.received[0])  # not only the timeout: the booking went through
    remembered = second.memory_for("t")
    assert [(m["role"], m.get("tool_call_id")) for m in remembered.messages()[1:]] == [
        ("assistant", None),
        ("tool", "c1"),
        ("assistant", None),
        ("tool", "c1~retry1"),
        ("assistant", None),
    ]
    made_again, result = model.received[0][-2:]
    assert [c["args"] for c in made_again.tool_calls] == [{"flight": "HAT107"}]
    assert result.tool_call_id == made_again.tool_calls[0]["id"] and result.status != "error"


def test_the_error_of_a_call_that_raised_reaches_the_caller_unchanged(recording_model):
    failure = RuntimeError("mail server down")

    @tool
    def send_receipt(email: str) -> str:
        """Email the receipt."""
        raise failure

    model = recording_model(call("send_receipt", {"email": "mia@example.com"}, "call_mail"))
    agent = create_agent(model, [send_receipt], middleware=[damc := DamcMiddleware(memory())])

    with pytest.raises(RuntimeError) as raised:
        agent.invoke({"messages": [HumanMessage("Email me the receipt")]})

    assert raised.value is failure
    assert tool_results(damc.memory) == [("Error: RuntimeError: mail server down", "error")]


def test_a_tool_that_waits_for_a_human_is_not_remembered_as_failed(recording_model):
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    @tool
    def book_flight(flight: str) -> str:
        """Book a flight once a human approves."""
        return f"booked {flight}, confirmation ABC123" if interrupt(f"Book {flight}?") else "rejected"

    model = recording_model(call("book_flight", {"flight": "HAT1"}, "c1"), AIMessage("Booked: ABC123."))
    agent = create_agent(
        model, [book_flight], middleware=[damc := DamcMiddleware(memory())], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("Book HAT1.")]}, config)
    agent.invoke(Command(resume=True), config)  # the human approves

    assert tool_results(damc.memory_for("t")) == [("booked HAT1, confirmation ABC123", None)]


def test_a_thread_resumed_at_its_tool_by_a_new_process_is_read_off_the_event_loop(recording_model, tmp_path):
    """A tool waiting for a human is resumed by another worker (a restarted server): the run
    starts at the tool, and the thread's stored events are read in a worker thread, so the
    other conversations the event loop serves go on meanwhile."""
    import threading

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt

    readers: list[int] = []

    class WatchedStore(SQLiteStore):
        """A SQLite store noting which threads read a session's records."""

        def records(self, namespace, *, since=0):
            readers.append(threading.get_ident())
            return super().records(namespace, since=since)

    @tool
    async def book_flight(flight: str) -> str:
        """Book a flight once a human approves."""
        return f"booked {flight}, confirmation ABC123" if interrupt(f"Book {flight}?") else "rejected"

    def agent_on(model):
        damc = DamcMiddleware(DecisionMemory(store=WatchedStore(tmp_path / "memory.sqlite3")))
        return damc, create_agent(model, [book_flight], middleware=[damc], checkpointer=checkpointer)

    checkpointer, config = InMemorySaver(), {"configurable": {"thread_id": "t"}}
    _, first = agent_on(recording_model(call("book_flight", {"flight": "HAT1"}, "c1")))
    asyncio.run(first.ainvoke({"messages": [HumanMessage("Book HAT1.")]}, config))
    damc, resumed = agent_on(model := recording_model(AIMessage("Booked: ABC123.")))

    async def resume() -> int:
        readers.clear()
        await resumed.ainvoke(Command(resume=True), config)  # the human approves
        return threading.get_ident()

    loop = asyncio.run(resume())

    assert readers and loop not in readers
    assert tool_results(damc.memory_for("t")) == [("booked HAT1, confirmation ABC123", None)]
    assert "ABC123" in text(model.received[0])


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_an_error_result_the_tool_node_returns_is_remembered_once(recording_model, run):
    model = recording_model(
        call("book", {"flight_number": "HAT107"}, "c1"), AIMessage("I need a payment id.")
    )
    agent = create_agent(model, [book], middleware=[damc := DamcMiddleware(memory())])
    question = {"messages": [HumanMessage("Book HAT107")]}

    state = agent.invoke(question) if run == "invoke" else asyncio.run(agent.ainvoke(question))

    (answer,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]  # a missing argument
    assert answer.status == "error"
    assert tool_results(damc.memory) == [(answer.content, "error")]


def test_parallel_calls_sharing_an_id_are_remembered_each_with_its_own_result(recording_model):
    # Some servers name calls after their tool: two parallel lookups then share the id "lookup".
    @tool
    async def lookup(order: str) -> str:
        """Look up an order."""
        await asyncio.sleep({"W111": 0.0, "W222": 0.02}[order])
        return {"W111": "status=delivered", "W222": "status=CANCELLED"}[order]

    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        await asyncio.sleep(0.05)
        return f"sunny in {city}"

    calls = AIMessage(
        "",
        tool_calls=[
            {"name": "lookup", "args": {"order": "W111"}, "id": "lookup"},
            {"name": "lookup", "args": {"order": "W222"}, "id": "lookup"},
            {"name": "weather", "args": {"city": "Paris"}, "id": "weather"},
        ],
    )
    damc = DamcMiddleware(memory())
    agent = create_agent(recording_model(calls, AIMessage("Done.")), [lookup, weather], middleware=[damc])
    asyncio.run(agent.ainvoke({"messages": [HumanMessage("Status of W111 and W222?")]}))

    results = [c.summary for c in damc.memory.cards() if c.kind.value == "tool_result"]
    assert results == [
        "[c2] lookup(order=W111) -> status=delivered",
        "[c3] lookup(order=W222) -> status=CANCELLED",
        "[c4] weather(city=Paris) -> sunny in Paris",
    ]


def test_an_agent_two_tools_down_keeps_a_conversation_of_its_own(recording_model):
    damc = DamcMiddleware(memory())  # one middleware for a supervisor, a lead and the lead's worker
    worker_model = recording_model(AIMessage("WORKER ANSWER: 42"))
    worker = create_agent(worker_model, [get_user_details], middleware=[damc])

    @tool
    def ask_worker(question: str) -> str:
        """Ask the worker."""
        return worker.invoke({"messages": [HumanMessage(question)]})["messages"][-1].content

    lead_model = recording_model(call("ask_worker", {"question": "compute"}, "w1"), AIMessage("Lead: 42."))
    lead = create_agent(lead_model, [ask_worker], middleware=[damc])

    @tool
    def ask_lead(question: str) -> str:
        """Ask the team lead."""
        return lead.invoke({"messages": [HumanMessage(question)]})["messages"][-1].content

    supervisor_model = recording_model(call("ask_lead", {"question": "plan"}, "l1"), AIMessage("42."))
    create_agent(supervisor_model, [ask_lead], middleware=[damc]).invoke({"messages": [HumanMessage("Go.")]})

    assert [m.content for m in worker_model.received[0]] == ["compute"]  # not the lead's question
    plan, asked, answered = lead_model.received[1]
    assert plan.content == "plan" and asked.tool_calls[0]["id"] == "w1"
    assert answered.tool_call_id == "w1" and answered.content.endswith("WORKER ANSWER: 42")


def test_an_assistant_message_an_earlier_middleware_rebuilt_is_not_sent_twice(recording_model):
    from langchain.agents.middleware import AgentMiddleware

    class DropReasoning(AgentMiddleware):
        """Rebuilds every assistant message from its text and calls, as a sanitizer might: the
        copies have no id."""

        def wrap_model_call(self, request, handler):
            def clean(message):
                if isinstance(message, AIMessage):
                    return AIMessage(message.text, tool_calls=message.tool_calls)
                return message

            return handler(request.override(messages=[clean(m) for m in request.messages]))

    model = recording_model(call("get_user_details", {"user_id": "mia_li_3668"}, "c1"), AIMessage("Done."))
    agent = create_agent(model, [get_user_details], middleware=[DropReasoning(), DamcMiddleware(memory())])
    agent.invoke({"messages": [HumanMessage("Who am I?")]})

    sent = [(m.type, getattr(m, "tool_call_id", None)) for m in model.received[1]]
    assert sent == [("human", None), ("ai", None), ("tool", "c1")]


def test_a_tool_of_the_agents_own_named_recall_is_pointed_out_once(recording_model, caplog):
    @tool
    def recall(card_id: str) -> str:
        """Recall a saved note."""
        return f"note {card_id}"

    model = recording_model(AIMessage("Hello."), AIMessage("Hello again."))
    agent = create_agent(model, [recall], middleware=[DamcMiddleware(memory())])

    with caplog.at_level("WARNING", logger="damc.langchain"):
        agent.invoke({"messages": [HumanMessage("Hi")]})
        agent.invoke({"messages": [HumanMessage("Hi again")]})

    said = [r.getMessage() for r in caplog.records if "named 'recall'" in r.getMessage()]
    assert len(said) == 1 and "recall=False" in said[0]


def test_a_custom_tool_call_the_memory_holds_reaches_the_model_with_its_result(recording_model, caplog):
    damc = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600, recent_messages=4))
    observe_custom_tool_step(damc)
    model = recording_model(AIMessage("Patched app.py."))

    create_agent(model, [], middleware=[DamcMiddleware(damc)]).invoke({"messages": [HumanMessage("Done?")]})

    assert "building the context failed" not in caplog.text
    (prompt,) = model.received
    made, result = prompt[-3], prompt[-2]
    assert [(c["name"], c["args"], c["id"]) for c in made.invalid_tool_calls] == [
        ("apply_patch", PATCH, "call_9")
    ]
    assert result.tool_call_id == "call_9" and "Done: app.py, 1 hunk" in result.content


@pytest.mark.parametrize("given", ["store", "nothing"])
def test_a_middleware_given_no_decision_memory_says_what_it_needs(tmp_path, given):
    """A store passed where the memory goes would leave every run without memory, the failures
    only logged; the mistake is pointed out when the agent is built."""
    wrong = SQLiteStore(tmp_path / "memory.sqlite3") if given == "store" else None

    with pytest.raises(ConfigError, match=r"needs a DecisionMemory, got (SQLiteStore|NoneType)") as raised:
        DamcMiddleware(wrong)

    assert given != "store" or "DecisionMemory(store=...)" in str(raised.value)


def test_a_middleware_dropped_by_the_server_frees_its_memory_and_every_threads_session(recording_model):
    import gc
    import weakref

    from langgraph.checkpoint.memory import InMemorySaver

    model = recording_model(AIMessage("Hi!"), AIMessage("Hi again!"))
    middleware = DamcMiddleware(memory())
    threaded = create_agent(model, [], middleware=[middleware], checkpointer=InMemorySaver())
    threaded.invoke({"messages": [HumanMessage("Hello")]}, {"configurable": {"thread_id": "mia"}})
    agent_with(model, [middleware]).invoke({"messages": [HumanMessage("Hello")]})  # the memory's own
    gone = [weakref.ref(middleware.memory), weakref.ref(middleware.memory_for("mia"))]
    assert [c.text for c in middleware.memory.cards()] == ["Hello", "Hi again!"]

    del middleware, threaded
    gc.collect()

    assert [ref() for ref in gone] == [None, None]
