"""DamcMemory as the memory of real FunctionAgent / ReActAgent runs: what reaches the model."""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context

from damc_core import ConfigError
from damc_llamaindex import DamcLLM, DamcMemory, DamcSpanHandler, offline_tokenizer, recall_tool

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

FOLLOW_UP = "Which card did I use?"
CARD_ANSWER = ChatMessage(role="assistant", content="You used credit_card_4421486.")


def two_runs(agent, memory):
    async def go():
        first = await agent.run(QUESTION, memory=memory)
        second = await agent.run(FOLLOW_UP, memory=memory)
        return str(first), str(second)

    return asyncio.run(go())


def tool_sequence_is_valid(messages: list[ChatMessage]) -> bool:
    open_calls: set[str] = set()
    for message in messages:
        if message.role.value == "tool":
            if message.additional_kwargs.get("tool_call_id") not in open_calls:
                return False
            open_calls.discard(message.additional_kwargs["tool_call_id"])
        else:
            if open_calls:
                return False
            open_calls = {b.tool_call_id for b in message.blocks if isinstance(b, ToolCallBlock)}
    return not open_calls


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "not streaming"])
def test_a_later_run_sees_the_earlier_ids_as_cards(recording_llm, streaming):
    bare, with_damc = (
        recording_llm(*FUNCTION_SCRIPT, CARD_ANSWER),
        recording_llm(*FUNCTION_SCRIPT, CARD_ANSWER),
    )
    buffer = ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())

    two_runs(
        FunctionAgent(tools=TOOLS, llm=bare, system_prompt="You book flights.", streaming=streaming), buffer
    )
    answers = two_runs(
        FunctionAgent(tools=TOOLS, llm=with_damc, system_prompt="You book flights.", streaming=streaming),
        DamcMemory(memory=damc()),
    )

    follow_up = with_damc.received[-1]
    assert answers == (ANSWER, "You used credit_card_4421486.")
    assert follow_up[0].content == "You book flights."
    assert follow_up[1].role.value == "user" and follow_up[1].content.startswith("<memory>")
    assert follow_up[-1].content == FOLLOW_UP
    for fact in ("credit_card_4421486", "HAT107", "4WQ150", "mia_li_3668"):
        assert fact in text(follow_up)
    assert len(text(follow_up)) < len(text(bare.received[-1])) / 3


@pytest.mark.parametrize("offered", [True, False], ids=["recall offered", "no recall tool"])
def test_the_section_mentions_recall_only_when_the_memory_is_told_the_agent_has_it(recording_llm, offered):
    llm = recording_llm(*FUNCTION_SCRIPT, CARD_ANSWER)
    memory = damc()
    tools = [*TOOLS, *([recall_tool(memory)] if offered else [])]
    agent = FunctionAgent(tools=tools, llm=llm, system_prompt="You book flights.")

    two_runs(agent, DamcMemory(memory=memory, recall_tool=offered))

    section = llm.received[-1][1].content
    assert section.startswith("<memory>") and "credit_card_4421486" in section
    assert ("recall(id)" in section) is offered
    assert ("recall(" in section) is offered


def test_react_agent_without_a_system_prompt_still_gets_the_memory_section(recording_llm):
    llm = recording_llm(
        *REACT_SCRIPT, ChatMessage(role="assistant", content="Thought: I know.\nAnswer: visa")
    )

    two_runs(ReActAgent(tools=TOOLS, llm=llm), DamcMemory(memory=damc()))

    follow_up = llm.received[-1]
    assert follow_up[0].role.value == "system" and "## Tools" in follow_up[0].content
    assert follow_up[1].content.startswith("<memory>")
    assert "credit_card_4421486" in follow_up[1].content


def test_react_observations_become_tool_cards(recording_llm):
    memory = damc()
    two_runs(
        ReActAgent(tools=TOOLS, llm=recording_llm(*REACT_SCRIPT, REACT_SCRIPT[-1])), DamcMemory(memory=memory)
    )

    results = [c for c in memory.cards() if c.kind.value == "tool_result"]
    assert [c.tool_name for c in results] == ["get_user_details", "search_flights", "book"]
    assert results[2].arguments == {"flight_number": "HAT107", "payment_id": "credit_card_4421486"}
    assert memory.recall(results[1].id)["content"] == json.dumps(FLIGHTS)
    assert next(c.summary for c in memory.cards() if c.kind.value == "assistant_conclusion").endswith(ANSWER)


def test_the_wrapped_buffer_keeps_every_message_verbatim(recording_llm):
    buffer = ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())
    memory = DamcMemory(memory=damc(), chat_memory=buffer)

    run(FunctionAgent(tools=TOOLS, llm=recording_llm(*FUNCTION_SCRIPT)), QUESTION, memory=memory)

    stored = memory.get_all()
    assert stored == buffer.get_all()
    assert [m.role.value for m in stored] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert json.loads(stored[4].content) == FLIGHTS


def test_sync_methods_and_truncation_keep_calls_with_their_results(recording_llm):
    memory = DamcMemory.from_defaults(memory=damc(budget=250))
    llm = recording_llm(*FUNCTION_SCRIPT)
    run(FunctionAgent(tools=TOOLS, llm=llm), QUESTION, memory=memory)

    memory.put(ChatMessage(role="user", content="And a hotel?"))
    memory.put_messages([ChatMessage(role="assistant", content="Which city?")])
    history = memory.get(input="hotel")

    assert tool_sequence_is_valid(history)
    assert history[-1].content == "Which city?"
    assert "4WQ150" in text(history)
    assert len(memory.get_all()) == 10
    memory.reset()
    assert memory.get_all() == [] and memory.memory.cards() == []


def test_chat_history_passed_to_run_is_recorded_once(recording_llm):
    memory = DamcMemory(memory=damc())
    history = [
        ChatMessage(role="user", content="My user id is mia_li_3668."),
        ChatMessage(role="assistant", content="Noted."),
    ]
    llm = recording_llm(
        ChatMessage(role="assistant", content="ok"), ChatMessage(role="assistant", content="ok")
    )
    agent = FunctionAgent(tools=TOOLS, llm=llm)

    async def go():
        await agent.run("hi", chat_history=history, memory=memory)
        await agent.run("again", chat_history=history, memory=memory)

    asyncio.run(go())

    turns = [c.summary for c in memory.memory.cards() if "mia_li_3668" in c.summary]
    assert len(turns) == 1


def test_history_survives_a_reused_context(recording_llm):
    llm = recording_llm(*FUNCTION_SCRIPT, CARD_ANSWER)
    agent = FunctionAgent(tools=TOOLS, llm=llm, system_prompt="You book flights.")
    memory = DamcMemory(memory=damc())

    async def go():
        ctx = Context(agent)
        await agent.run(QUESTION, ctx=ctx, memory=memory)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydantic may warn that the memory cannot be serialized
            await agent.run(FOLLOW_UP, ctx=ctx, memory=memory)

    asyncio.run(go())

    assert "credit_card_4421486" in text(llm.received[-1])
    assert "4WQ150" in text(llm.received[-1])


def test_a_memory_given_to_the_agent_constructor_is_reported(recording_llm):
    decision_memory = damc()
    memory = DamcMemory(memory=decision_memory)
    agent = FunctionAgent(tools=TOOLS, llm=recording_llm(*FUNCTION_SCRIPT), memory=memory)
    handler = DamcSpanHandler.attach(decision_memory, agent)
    try:
        with pytest.warns(UserWarning, match="memory="):
            run(agent, QUESTION)
    finally:
        handler.detach()

    assert memory.get_all() == []  # llama-index-core dropped it: the warning is the only sign


def test_a_reused_context_drops_its_memory_but_the_wrapped_llm_still_remembers(recording_llm):
    from damc_llamaindex import DamcLLM

    bare = recording_llm(*FUNCTION_SCRIPT, CARD_ANSWER)
    model = recording_llm(*FUNCTION_SCRIPT, CARD_ANSWER)
    memory = damc()

    def twice(agent, first_memory):
        async def go():
            ctx = Context(agent)
            await agent.run(QUESTION, ctx=ctx, memory=first_memory)
            await agent.run(FOLLOW_UP, ctx=ctx)  # no memory= this time: the context lost it

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            asyncio.run(go())
        assert any(type(w.message).__name__ == "UnserializableKeyWarning" for w in caught)

    twice(
        FunctionAgent(tools=TOOLS, llm=bare), ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())
    )
    twice(FunctionAgent(tools=TOOLS, llm=DamcLLM(llm=model, memory=memory)), DamcMemory(memory=memory))

    assert [m.content for m in bare.received[-1]] == [FOLLOW_UP]
    assert "credit_card_4421486" in text(model.received[-1])
    assert model.received[-1][-1].content == FOLLOW_UP


@pytest.mark.parametrize("wrapped_llm", [False, True], ids=["memory", "memory and llm"])
@pytest.mark.parametrize("agent_class", [FunctionAgent, ReActAgent])
def test_a_failing_tool_is_remembered_as_an_error(recording_llm, agent_class, wrapped_llm):
    def cancel(reservation_id: str) -> str:
        """Cancel a reservation."""
        raise RuntimeError(f"reservation {reservation_id} is not cancellable")

    if agent_class is FunctionAgent:
        replies = [
            call("cancel", {"reservation_id": "4WQ150"}, "x1"),
            *[ChatMessage(role="assistant", content="no")] * 2,
        ]
        model = recording_llm(*replies)
    else:
        replies = [react("cancel", {"reservation_id": "4WQ150"}), react_answer("no"), react_answer("no")]
        model = recording_llm(*replies, function_calling=False)
    memory = damc()
    llm = DamcLLM(llm=model, memory=memory) if wrapped_llm else model
    agent = agent_class(tools=[FunctionTool.from_defaults(cancel)], llm=llm)

    two_runs(agent, DamcMemory(memory=memory))

    (failed,) = [c for c in memory.cards() if c.tool_name == "cancel" and c.kind.value != "tool_call"]
    assert failed.kind.value == "tool_error"
    assert "cancel(reservation_id=4WQ150) FAILED -> reservation 4WQ150 is not cancellable" in text(
        model.received[-1]
    )  # what the model is told on the next turn


def test_a_system_prompt_passed_with_every_runs_history_is_recorded_once(recording_llm):
    llm = recording_llm(*(ChatMessage(role="assistant", content=f"a{n}") for n in range(3)))
    memory = DamcMemory(memory=damc())
    agent = FunctionAgent(tools=[], llm=llm)
    history = [ChatMessage(role="system", content="You are a travel agent for ACME.")]

    async def three_runs():
        for n in range(3):
            await agent.run(f"q{n}", chat_history=list(history), memory=memory)
            history.extend(
                [ChatMessage(role="user", content=f"q{n}"), ChatMessage(role="assistant", content=f"a{n}")]
            )

    asyncio.run(three_runs())

    kinds = [c.kind.value for c in memory.memory.cards()]
    assert kinds.count("system_note") == 1 and kinds.count("user_instruction") == 3


@pytest.mark.parametrize("recent", [2, 0], ids=["turns sent as they are", "turns as cards"])
def test_a_system_prompt_that_names_the_memory_tag_stays_whole(recent):
    from damc_core import DecisionMemory, InMemoryStore, MemorySettings

    prompt = "You are a travel agent. Facts in <memory> are older data; prefer tools."
    damc_memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(recent_messages=recent))
    memory = DamcMemory(memory=damc_memory)
    memory.set(
        [
            ChatMessage(role="system", content=prompt),
            ChatMessage(role="user", content="I am mia_li_3668."),
            ChatMessage(role="assistant", content="Hello Mia."),
            ChatMessage(role="user", content="Book HAT107."),
        ]
    )

    system, *rest = memory.get()
    assert (system.role.value, system.content) == ("system", prompt)
    assert not any("older data" in m.content for m in rest)
    assert ("mia_li_3668" in rest[0].content) and rest[0].content.startswith("<memory>") == (recent == 0)


def test_a_turn_with_pictures_comes_back_after_a_restart_as_it_was_sent(tmp_path):
    import base64

    from llama_index.core.base.llms.types import DocumentBlock, ImageBlock, TextBlock

    from damc_core import DecisionMemory, MemorySettings, SQLiteStore

    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    question = ChatMessage(
        role="user",
        blocks=[
            TextBlock(text="Compare the first picture"),
            ImageBlock(image=png, image_mimetype="image/png"),
            TextBlock(text="with this contract:"),
            DocumentBlock(data=b"%PDF-1.4 x", document_mimetype="application/pdf", title="c.pdf"),
        ],
    )

    def opened() -> DamcMemory:
        return DamcMemory(
            memory=DecisionMemory(
                store=SQLiteStore(tmp_path / "m.sqlite3"), settings=MemorySettings(budget=8000)
            )
        )

    opened().put(question)
    (back,) = [m for m in opened().get() if m.role.value == "user"]

    shape = [(b.block_type, getattr(b, "text", None)) for b in back.blocks]
    assert shape == [
        ("text", "Compare the first picture"),
        ("image", None),
        ("text", "with this contract:"),
        ("document", None),
    ]


def test_a_react_agents_steps_come_back_after_a_restart_as_the_text_it_wrote(recording_llm, tmp_path):
    from damc_core import DecisionMemory, MemorySettings, Namespace, SQLiteStore

    def opened() -> DamcMemory:  # each run in a new process, on the same file
        store = SQLiteStore(tmp_path / "m.sqlite3")
        settings = MemorySettings(budget=2000, recent_messages=8)
        return DamcMemory(
            memory=DecisionMemory(store=store, namespace=Namespace("mia", "trip"), settings=settings)
        )

    first = recording_llm(
        react("get_user_details", {"user_id": "mia_li_3668"}),
        react_answer("You are Mia."),
        function_calling=False,
    )
    run(ReActAgent(tools=TOOLS, llm=first), "Who am I? I am mia_li_3668.", memory=opened())
    later = recording_llm(react_answer("Yes."), function_calling=False)
    run(ReActAgent(tools=TOOLS, llm=later), "Sure?", memory=opened())

    sent = later.received[-1]
    assert not any(b.block_type == "tool_call" for m in sent for b in m.blocks)
    assert [m.role.value for m in sent[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert "Action: get_user_details" in sent[2].content and sent[3].content.startswith("Observation:")


def test_the_steps_of_a_stopped_react_run_come_back_as_the_text_it_wrote(recording_llm):
    from llama_index.core.agent.workflow import ToolCallResult

    first = recording_llm(
        react("get_user_details", {"user_id": "mia_li_3668"}),
        react("search_flights", {"date": "2024-05-20"}),
        function_calling=False,
    )
    later = recording_llm(react_answer("Yes."), function_calling=False)
    memory = DamcMemory(memory=damc(budget=2000))

    async def go():
        handler = ReActAgent(tools=TOOLS, llm=first).run("Who am I? I am mia_li_3668.", memory=memory)
        async for event in handler.stream_events():
            if isinstance(event, ToolCallResult):  # the user stops the run after its first step
                break
        await handler.cancel_run()
        with contextlib.suppress(Exception):
            await handler
        await ReActAgent(tools=TOOLS, llm=later).run("Sure?", memory=memory)

    asyncio.run(go())

    sent = later.received[-1]
    assert not any(b.block_type == "tool_call" for m in sent for b in m.blocks)
    assert not any(m.role.value == "tool" for m in sent)  # a ReAct model is sent no tool messages
    assert any("Action: get_user_details" in m.content for m in sent if m.role.value == "assistant")
    assert any(m.content.startswith("Observation:") and "credit_card_4421486" in m.content for m in sent)


def test_a_deep_copy_shares_the_conversation():
    memory = DamcMemory(memory=damc())

    assert memory.model_copy(deep=True).memory is memory.memory  # a handle on the store, like a client


def test_to_json_says_where_the_conversation_is_kept_and_reopening_it_finds_it(tmp_path):
    from damc_core import DecisionMemory, Namespace, SQLiteStore

    store = SQLiteStore(tmp_path / "memory.sqlite3")
    memory = DamcMemory(memory=DecisionMemory(store=store, namespace=Namespace("mia", "trip")))
    memory.put(ChatMessage(role="user", content="Book HAT069"))

    with pytest.raises(TypeError, match="lives in its DecisionMemory's store"):
        memory.to_json()
    reopened = DamcMemory(memory=DecisionMemory(store=store, namespace=Namespace("mia", "trip")))
    assert "Book HAT069" in text(reopened.get())
    assert [m.content for m in reopened.get_all()] == ["Book HAT069"]  # a chat engine's chat_history


def test_a_chat_engine_given_memory_cls_starts_from_its_chat_history(recording_llm, tmp_path, monkeypatch):
    from llama_index.core.chat_engine import SimpleChatEngine

    monkeypatch.chdir(tmp_path)  # DecisionMemory() keeps its records in ./damc-memory.sqlite3
    llm = recording_llm(ChatMessage(role="assistant", content="You are Mia."))
    earlier = [
        ChatMessage(role="user", content="My name is Mia."),
        ChatMessage(role="assistant", content="Hello Mia."),
    ]
    engine = SimpleChatEngine.from_defaults(llm=llm, memory_cls=DamcMemory, chat_history=earlier)

    assert str(engine.chat("What is my name?")) == "You are Mia."
    assert [m.content for m in llm.received[0]] == ["My name is Mia.", "Hello Mia.", "What is my name?"]
    assert [m.content for m in engine.chat_history] == [
        "My name is Mia.",
        "Hello Mia.",
        "What is my name?",
        "You are Mia.",
    ]
    assert (tmp_path / "damc-memory.sqlite3").exists()


def test_a_wrapped_memory_with_blocks_is_refused_and_the_memory_itself_sends_them(recording_llm):
    from llama_index.core.memory import Memory, StaticMemoryBlock

    from damc_llamaindex import DamcMemoryBlock

    def profile() -> StaticMemoryBlock:
        return StaticMemoryBlock(name="profile", static_content="The user is Alice, account ACC-7781.")

    memory = damc()
    # DamcMemory's get replaces the wrapped memory's, so a block there would never reach the model
    with pytest.raises(ValueError, match="memory blocks of this Memory \\('profile'\\)"):
        DamcMemory(memory=memory, chat_memory=Memory.from_defaults(memory_blocks=[profile()]))
    DamcMemory(memory=memory, chat_memory=Memory.from_defaults(session_id="plain"))  # no blocks: taken

    chat_memory = Memory.from_defaults(
        session_id="alice",
        tokenizer_fn=offline_tokenizer(),
        memory_blocks=[profile(), DamcMemoryBlock(memory=memory)],
    )
    llm = recording_llm(ChatMessage(role="assistant", content="Your account is ACC-7781."))
    run(FunctionAgent(tools=[], llm=llm, system_prompt="Help."), "What is my account?", memory=chat_memory)

    assert "account ACC-7781" in text(llm.received[0])


def test_a_chat_store_loaded_back_is_the_history_of_a_memory_that_wraps_it(
    recording_llm, tmp_path, assert_valid_context
):
    from llama_index.core.storage.chat_store import SimpleChatStore

    from damc_core import DecisionMemory, SQLiteStore

    def lookup(name: str) -> dict:
        """Find a traveller's booking."""
        return {"name": name, "pnr": "XK9Q2L"}

    # an earlier conversation, kept in the user's chat store (without DAMC, or with its store lost)
    chat_store = SimpleChatStore()
    chat_store.set_messages(
        "alice",
        [
            ChatMessage(role="user", content="Find my booking, I'm alice."),
            call("lookup", {"name": "alice"}, "t1"),
            ChatMessage(
                role="tool",
                content="{'name': 'alice', 'pnr': 'XK9Q2L'}",
                additional_kwargs={"tool_call_id": "t1"},
            ),
            ChatMessage(role="assistant", content="Found it."),
        ],
    )

    def buffer() -> ChatMemoryBuffer:
        return ChatMemoryBuffer.from_defaults(
            chat_store=chat_store, chat_store_key="alice", tokenizer_fn=offline_tokenizer()
        )

    path = str(tmp_path / "memory.sqlite3")
    llm = recording_llm(
        ChatMessage(role="assistant", content="Your PNR is XK9Q2L."),
        ChatMessage(role="assistant", content="Still XK9Q2L."),
    )
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(lookup)], llm=llm, system_prompt="Help.")
    memory = DecisionMemory(store=SQLiteStore(path))
    run(agent, "What is my PNR?", memory=DamcMemory(memory=memory, chat_memory=buffer()))

    assert "XK9Q2L" in text(llm.received[0])
    # both reopened: each message is recorded once
    reopened = DecisionMemory(store=SQLiteStore(path))
    run(agent, "And again?", memory=DamcMemory(memory=reopened, chat_memory=buffer()))
    assert [m["role"] for m in reopened.messages()] == [
        *("user", "assistant", "tool", "assistant"),
        *("user", "assistant", "user", "assistant"),
    ]
    assert_valid_context(reopened.messages())


def test_chat_engines_given_memory_cls_each_have_a_conversation_of_their_own(
    recording_llm, tmp_path, monkeypatch
):
    """Like ``ChatMemoryBuffer.from_defaults()``, each ``DamcMemory.from_defaults()`` is a new
    conversation; a chat continued later is a session of its own, named by the app."""
    from llama_index.core.chat_engine import SimpleChatEngine

    from damc_core import DecisionMemory, SQLiteStore

    monkeypatch.chdir(tmp_path)
    hello = ChatMessage(role="assistant", content="Hello.")
    mia, other = recording_llm(ChatMessage(role="assistant", content="Noted.")), recording_llm(hello, hello)
    SimpleChatEngine.from_defaults(llm=mia, memory_cls=DamcMemory).chat("I am Mia, card credit_card_4421486.")
    SimpleChatEngine.from_defaults(llm=other, memory_cls=DamcMemory).chat("Who am I?")

    memory = DecisionMemory(store=SQLiteStore(tmp_path / "damc-memory.sqlite3"))  # the same file
    chat = memory.for_session("chat-mia")
    chat.observe({"role": "user", "content": "I am Mia, card credit_card_4421486."})
    SimpleChatEngine.from_defaults(llm=other, memory=DamcMemory(memory=chat)).chat("Who am I?")

    apart, continued = other.received
    assert "credit_card_4421486" not in text(apart)
    assert [m.content for m in apart] == ["Who am I?"]
    assert "credit_card_4421486" in text(continued)


def test_a_token_limit_caps_the_budget_and_must_be_a_number_of_tokens():
    assert DamcMemory.from_defaults(memory=damc(budget=600), token_limit=200_000).budget == 600
    assert DamcMemory.from_defaults(memory=damc(budget=600), token_limit=300).budget == 300
    assert DamcMemory.from_defaults(memory=damc(budget=600), budget=900, token_limit=300).budget == 900
    with pytest.raises(ConfigError, match="token_limit"):
        DamcMemory.from_defaults(memory=damc(), token_limit="4k")


def test_a_budget_below_one_token_is_refused_when_memory_llm_or_block_is_made():
    from llama_index.core.llms import MockLLM
    from pydantic import ValidationError

    from damc_llamaindex import DamcMemoryBlock

    for make in (
        lambda: DamcMemory(memory=damc(), budget=0),
        lambda: DamcLLM(llm=MockLLM(), memory=damc(), budget=-1),
        lambda: DamcMemoryBlock(memory=damc(), budget=0),
    ):
        with pytest.raises(ValidationError, match="greater than 0"):
            make()


def test_a_message_the_store_refused_is_recorded_with_the_next_one(tmp_path):
    import sqlite3

    from damc_core import DecisionMemory, SQLiteStore

    path = tmp_path / "memory.sqlite3"
    memory = DamcMemory(memory=DecisionMemory(store=SQLiteStore(path, timeout=0.1)))
    other_process = sqlite3.connect(path, isolation_level=None)
    memory.put(ChatMessage(role="user", content="Book HAT107"))

    other_process.execute("BEGIN IMMEDIATE")
    memory.put(ChatMessage(role="assistant", content="Which card?"))  # the file is locked: it waits
    other_process.execute("COMMIT")
    memory.put(ChatMessage(role="user", content="credit_card_4421486"))

    assert [m["content"] for m in memory.memory.messages()] == [
        "Book HAT107",
        "Which card?",
        "credit_card_4421486",
    ]
    assert [m.content for m in memory.get_all()] == ["Book HAT107", "Which card?", "credit_card_4421486"]


def test_a_react_transcript_the_store_took_in_part_is_finished_not_repeated():
    from damc_core import DecisionMemory, InMemoryStore, StoreError

    class LockedOnce(InMemoryStore):
        """A store that refuses its third write once, as a file another process holds does."""

        writes = 0

        def append(self, record):
            self.writes += 1
            if self.writes == 3:
                raise StoreError("database is locked")
            super().append(record)

    memory = DamcMemory(memory=DecisionMemory(store=LockedOnce()))
    memory.put(ChatMessage(role="user", content="Where is O-1?"))
    memory.put(  # the call is stored, its result refused: the transcript waits
        ChatMessage(
            role="assistant",
            content='Thought: I need the order.\nAction: get_order\nAction Input: {"id": "O-1"}\n'
            "Observation: shipped\nThought: I can answer.\nAnswer: O-1 has shipped.",
        )
    )
    memory.put(ChatMessage(role="user", content="Thanks"))

    recorded = [(m["role"], m.get("tool_call_id") or m["content"]) for m in memory.memory.messages()]
    call_id = memory.memory.messages()[1]["tool_calls"][0]["id"]
    assert recorded == [
        ("user", "Where is O-1?"),
        ("assistant", "I need the order."),
        ("tool", call_id),
        ("assistant", "O-1 has shipped."),
        ("user", "Thanks"),
    ]


def test_a_closed_store_neither_stops_the_agent_nor_keeps_what_it_cannot_take(caplog):
    memory = DamcMemory(memory=damc())
    memory.put(ChatMessage(role="user", content="Book HAT107"))
    memory.memory.store.close()

    for turn in ("Which card?", "credit_card_4421486"):
        memory.put(ChatMessage(role="user", content=turn))

    assert [m.content for m in memory.get_all()] == ["Book HAT107", "Which card?", "credit_card_4421486"]
    assert caplog.text.count("are not recorded") == 2  # each given up on, none left waiting


def test_a_react_action_input_with_number_keys_is_recorded_and_the_turns_after_it_too():
    memory = DamcMemory(memory=damc())
    memory.put(ChatMessage(role="user", content="Look up matrix M"))
    memory.put(
        ChatMessage(
            role="assistant",
            content="Thought: I need the matrix.\nAction: get_matrix\n"
            "Action Input: {'m': {1: 'row one', 'name': 'M'}}\nObservation: ok\n"
            "Thought: I can answer.\nAnswer: M has one row.",
        )
    )
    memory.put(ChatMessage(role="user", content="Thanks"))

    contents = [m["content"] for m in memory.memory.messages() if not m.get("tool_calls")]
    assert contents == ["Look up matrix M", "ok", "M has one row.", "Thanks"]


def test_an_answer_of_an_earlier_run_does_not_hide_a_later_message_with_its_words(recording_llm):
    model = recording_llm(*(ChatMessage(role="assistant", content="Done.") for _ in range(3)))
    memory = damc()
    agent = FunctionAgent(tools=[], llm=DamcLLM(llm=model, memory=memory), system_prompt="Help.")
    for question in ("Cancel O-1", "Cancel O-2", "Cancel O-3"):
        run(agent, question)  # the agent's own memory: DAMC records each answer as its step ends

    notes = DamcMemory(memory=memory)  # the app goes on with a memory of its own on the conversation
    notes.put(ChatMessage(role="user", content="Cancel O-4"))
    notes.put(ChatMessage(role="assistant", content="Done."))

    assert [m["content"] for m in memory.messages()][-3:] == ["Done.", "Cancel O-4", "Done."]


def test_each_of_two_turns_with_the_same_words_is_sent_with_its_own_image(recording_llm):
    from llama_index.core.base.llms.types import ImageBlock, TextBlock

    llm = recording_llm(
        ChatMessage(role="assistant", content="A cat."), ChatMessage(role="assistant", content="A dog.")
    )
    agent = FunctionAgent(tools=[], llm=llm, system_prompt="Describe pictures.")
    memory = DamcMemory(memory=damc(budget=5000))  # room for both pictures (765 tokens each)

    for picture in (b"\x89PNG-cat", b"\x89PNG-dog"):
        question = ChatMessage(
            role="user",
            blocks=[
                TextBlock(text="What is in this picture?"),
                ImageBlock(image=picture, image_mimetype="image/png"),
            ],
        )
        run(agent, user_msg=question, memory=memory)

    questions = [m for m in llm.received[-1] if m.role == "user"]
    pictures = [b.resolve_image().read() for m in questions for b in m.blocks if isinstance(b, ImageBlock)]
    assert pictures == [b"\x89PNG-cat", b"\x89PNG-dog"]


def test_an_answer_that_writes_a_call_as_text_is_remembered_as_that_text(recording_llm):
    written_call = 'Thought: I would look it up.\nAction: search_orders\nAction Input: {"id": "O1"}'
    model = recording_llm(
        ChatMessage(role="assistant", content=written_call), ChatMessage(role="assistant", content="Bye.")
    )
    memory = damc()
    agent = FunctionAgent(tools=[], llm=DamcLLM(llm=model, memory=memory))
    chat = DamcMemory(memory=memory)

    run(agent, "Where is O1?", memory=chat)
    run(agent, "Thanks", memory=chat)

    recorded = [(m["role"], m["content"]) for m in memory.messages()]
    assert recorded == [
        ("user", "Where is O1?"),
        ("assistant", written_call),
        ("user", "Thanks"),
        ("assistant", "Bye."),
    ]
    assert "search_orders" in text(model.received[1])  # the model sees what it wrote


def test_the_error_of_a_tool_whose_result_is_the_answer_is_recorded_once(recording_llm):
    def cancel(order: str) -> str:
        """Cancel an order (its result is the answer)."""
        raise RuntimeError(f"order {order} cannot be cancelled")

    model = recording_llm(
        call("cancel", {"order": "O1"}, "c1"),
        ChatMessage(role="assistant", content="Sorry, O1 cannot be cancelled."),
        ChatMessage(role="assistant", content="Bye."),
    )
    memory = damc()
    chat = DamcMemory(
        memory=memory, chat_memory=ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())
    )
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(cancel, return_direct=True)], llm=DamcLLM(llm=model, memory=memory)
    )

    run(agent, "Cancel O1", memory=chat)
    run(agent, "Thanks", memory=chat)

    # LlamaIndex puts the error into the run as an assistant message of its own, once
    assert [m.content for m in chat.chat_memory.get_all()].count("order O1 cannot be cancelled") == 2
    assert [m.get("content") for m in memory.messages()].count("order O1 cannot be cancelled") == 2


def test_requests_of_one_session_putting_at_once_record_every_message_once(tmp_path):
    import sys
    import threading

    from damc_core import DecisionMemory, SQLiteStore

    store = SQLiteStore(tmp_path / "m.sqlite3")
    memory = DamcMemory(memory=DecisionMemory(store=store))

    def request(n: int) -> None:  # a user sending again before the first answer came
        for i in range(20):
            memory.put(ChatMessage(role="user", content=f"request {n} turn {i}"))
            memory.get()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as a loaded server's
    try:
        threads = [threading.Thread(target=request, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)

    recorded = [m["content"] for m in DecisionMemory(store=store).messages()]
    assert sorted(recorded) == sorted(f"request {n} turn {i}" for n in range(4) for i in range(20))
    for n in range(4):  # each request's turns in the order it put them
        assert [t for t in recorded if t.startswith(f"request {n} ")] == [
            f"request {n} turn {i}" for i in range(20)
        ]
    assert memory.model_copy(deep=True).memory is memory.memory
