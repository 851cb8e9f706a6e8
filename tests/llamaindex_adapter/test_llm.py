"""DamcLLM: the tool results of the running task reach the model compressed, for every agent."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import PATCH, observe_custom_tool_step
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from pydantic import BaseModel

from damc_llamaindex import DamcLLM, DamcMemory, offline_tokenizer

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

FOLLOW_UP = "Which card did I use for HAT107?"


def assert_valid(messages: list[ChatMessage]) -> None:
    open_calls: set[str] = set()
    for message in messages:
        if message.role.value == "tool":
            assert message.additional_kwargs["tool_call_id"] in open_calls
            open_calls.discard(message.additional_kwargs["tool_call_id"])
            continue
        assert not open_calls
        open_calls = {b.tool_call_id for b in message.blocks if isinstance(b, ToolCallBlock)}


def tool_results(memory):
    return [c for c in memory.cards() if c.kind.value == "tool_result"]


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "not streaming"])
def test_function_agent_books_with_a_compressed_scratchpad(recording_llm, streaming):
    bare, model = recording_llm(*FUNCTION_SCRIPT), recording_llm(*FUNCTION_SCRIPT)
    run(
        FunctionAgent(tools=TOOLS, llm=bare, system_prompt="You book flights.", streaming=streaming), QUESTION
    )

    result = run(
        FunctionAgent(
            tools=TOOLS,
            llm=DamcLLM(llm=model, memory=damc()),
            system_prompt="You book flights.",
            streaming=streaming,
        ),
        QUESTION,
    )

    booking = model.received[2]
    assert str(result) == ANSWER
    assert booking[0].content.startswith("You book flights.\n\n<memory>")
    for fact in ("credit_card_4421486", "HAT107", "mia_li_3668", "2024-05-20"):
        assert fact in text(booking)
    assert json.dumps(FLIGHTS) in text(bare.received[2])
    assert len(text(booking)) < len(text(bare.received[2])) / 3
    for prompt in model.received:
        assert_valid(prompt)


def test_react_observations_are_replaced_by_their_cards(recording_llm):
    model = recording_llm(*REACT_SCRIPT, function_calling=False)

    result = run(ReActAgent(tools=TOOLS, llm=DamcLLM(llm=model, memory=damc())), QUESTION)

    booking = model.received[2]
    observations = [m.content for m in booking if m.content and m.content.startswith("Observation:")]
    assert str(result) == ANSWER
    assert len(observations) == 2
    assert json.dumps(FLIGHTS) not in text(booking)
    assert "HAT107" in observations[1] and "credit_card_4421486" in observations[0]
    assert "## Tools" in booking[0].content  # the ReAct header with the tool list is kept


def test_a_react_observation_shorter_than_its_card_is_sent_as_it_is(recording_llm):
    """A card leads with its id and its call, so a small result (a status) is shorter as it came."""

    def get_status(order_id: str) -> str:
        """The status of an order."""
        return "shipped"

    model = recording_llm(
        react("get_status", {"order_id": "W4923227"}), react_answer("It shipped."), function_calling=False
    )

    run(
        ReActAgent(tools=[FunctionTool.from_defaults(get_status)], llm=DamcLLM(llm=model, memory=damc())),
        "W4923227?",
    )

    assert model.received[1][-1].content == "Observation: shipped"


@pytest.mark.parametrize(
    "memory",
    [None, lambda: ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())],
    ids=["the agent's default memory", "a ChatMemoryBuffer"],
)
def test_a_react_agent_s_model_is_sent_the_request_with_every_step(recording_llm, memory):
    model = recording_llm(*REACT_SCRIPT, function_calling=False)
    agent = ReActAgent(tools=TOOLS, llm=DamcLLM(llm=model, memory=damc()))

    result = run(agent, QUESTION, **({"memory": memory()} if memory else {}))

    assert str(result) == ANSWER
    for prompt in model.received:
        assert next(m.content for m in prompt if m.role.value == "user") == QUESTION
    booking = model.received[2]
    assert [m.role.value for m in booking] == ["system", "user", "assistant", "user", "assistant", "user"]


def test_a_react_agent_s_later_run_keeps_the_earlier_run_s_results_in_memory_at_every_step(recording_llm):
    model = recording_llm(
        *REACT_SCRIPT,
        react("get_user_details", {"user_id": "mia_li_3668"}),
        react_answer("credit_card_4421486"),
        function_calling=False,
    )
    memory = damc()
    agent = ReActAgent(tools=TOOLS, llm=DamcLLM(llm=model, memory=memory))
    ctx = Context(agent)  # the agent's own memory holds the first run's turns

    async def go():
        await agent.run(QUESTION, ctx=ctx)
        await agent.run(FOLLOW_UP, ctx=ctx)

    asyncio.run(go())

    (booked,) = [c for c in tool_results(memory) if c.tool_name == "book"]
    first_step, second_step = model.received[-2:]
    assert booked.summary in first_step[0].content
    assert booked.summary in second_step[0].content  # after the run's own step too
    assert FOLLOW_UP in text(second_step)


def test_memory_and_proxy_together_record_once_and_remember_across_runs(recording_llm):
    memory = damc()
    model = recording_llm(*FUNCTION_SCRIPT, ChatMessage(role="assistant", content="credit_card_4421486"))
    agent = FunctionAgent(
        tools=TOOLS, llm=DamcLLM(llm=model, memory=memory), system_prompt="You book flights."
    )
    damc_memory = DamcMemory(memory=memory)

    async def go():
        await agent.run(QUESTION, memory=damc_memory)
        await agent.run("Which card did I use?", memory=damc_memory)

    asyncio.run(go())

    kinds = [(c.kind.value, c.tool_call_id) for c in memory.cards()]
    assert kinds.count(("tool_result", "c2")) == 1
    assert sum(kind == "user_instruction" for kind, _ in kinds) == 2
    assert "credit_card_4421486" in text(model.received[-1])
    assert model.received[-1][-1].content == "Which card did I use?"


def test_agent_workflow_with_a_wrapped_model(recording_llm):
    model = recording_llm(*FUNCTION_SCRIPT)
    booker = FunctionAgent(
        name="booker", description="Books flights.", tools=TOOLS, llm=DamcLLM(llm=model, memory=damc())
    )

    result = run(AgentWorkflow(agents=[booker], root_agent="booker"), QUESTION)

    assert str(result) == ANSWER
    assert "<memory>" in model.received[2][0].content
    assert json.dumps(FLIGHTS) not in text(model.received[2])


def test_sync_calls_and_delegation(recording_llm):
    model = recording_llm(*FUNCTION_SCRIPT)
    llm = DamcLLM(llm=model, memory=damc())
    history = [ChatMessage(role="user", content=QUESTION)]

    response = llm.chat_with_tools(TOOLS, chat_history=history)
    (selection,) = llm.get_tool_calls_from_response(response)
    streamed = list(llm.stream_chat(history))

    assert llm.metadata == model.metadata
    assert (selection.tool_name, selection.tool_kwargs) == ("get_user_details", {"user_id": "mia_li_3668"})
    assert streamed[-1].message.blocks[0].tool_name == "search_flights"
    assert model.received[0][-1].content == QUESTION


def test_a_model_without_function_calling_is_refused_for_tool_calls():
    from llama_index.core.llms.mock import MockLLM

    llm = DamcLLM(llm=MockLLM(), memory=damc())
    with pytest.raises(TypeError, match="ReActAgent"):
        llm.chat_with_tools(TOOLS, user_msg="hi")


def test_a_call_id_reused_for_every_call_still_records_each_result_with_its_own_call(recording_llm):
    def get_order(order_id: str) -> dict:
        """Look up an order."""
        return {"order_id": order_id, "status": {"O-1": "shipped", "O-2": "cancelled"}[order_id]}

    # llama-index-llms-ollama gives every call the tool's name as its id
    model = recording_llm(
        call("get_order", {"order_id": "O-1"}, "get_order"),
        call("get_order", {"order_id": "O-2"}, "get_order"),
        ChatMessage(role="assistant", content="O-1 shipped, O-2 cancelled."),
    )
    memory = damc()
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(get_order)], llm=DamcLLM(llm=model, memory=memory)
    )

    run(agent, "Status of O-1 and O-2?", memory=DamcMemory(memory=memory))

    results = tool_results(memory)
    assert [(c.tool_call_id, c.arguments) for c in results] == [
        ("get_order", {"order_id": "O-1"}),
        ("get_order", {"order_id": "O-2"}),
    ]
    assert [json.loads(memory.recall(c.id)["content"])["status"] for c in results] == ["shipped", "cancelled"]
    last = model.received[-1]
    assert "shipped" in text(last) and "cancelled" in text(last)
    assert_valid(last)


def test_calls_without_ids_named_by_their_tool_are_recorded_once_each(recording_llm):
    from .conftest import RecordingLLM

    class OllamaLike(RecordingLLM):
        """As llama-index-llms-ollama: the reply's call blocks carry no id, and the agent gets
        each call under its tool's name."""

        def get_tool_calls_from_response(self, response, error_on_no_tool_call=True, **kwargs):
            return [
                ToolSelection(
                    tool_id=block.tool_name, tool_name=block.tool_name, tool_kwargs=block.tool_kwargs
                )
                for block in response.message.blocks
                if isinstance(block, ToolCallBlock)
            ]

    def get_order(order_id: str) -> dict:
        """Look up an order."""
        return {"order_id": order_id, "status": {"O-1": "shipped", "O-2": "cancelled"}[order_id]}

    both = ChatMessage(
        role="assistant",
        blocks=[
            ToolCallBlock(tool_name="get_order", tool_kwargs={"order_id": "O-1"}),
            ToolCallBlock(tool_name="get_order", tool_kwargs={"order_id": "O-2"}),
        ],
    )
    model = OllamaLike(script=[both, ChatMessage(role="assistant", content="O-1 shipped, O-2 cancelled.")])
    memory = damc()
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(get_order)], llm=model)

    run(agent, "Status of O-1 and O-2?", memory=DamcMemory(memory=memory))

    calls = [call for event in memory.messages() for call in event.get("tool_calls") or ()]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        {"order_id": "O-1"},
        {"order_id": "O-2"},
    ]
    assert [c.summary.split(" -> ")[1] for c in tool_results(memory)] == [
        "status=shipped",
        "status=cancelled",
    ]


def test_two_calls_alike_under_one_id_are_one_reply_each_answered_by_its_own_result(recording_llm):
    rolled = iter([3, 5])

    def roll(sides: int) -> int:
        """Roll a die."""
        return next(rolled)

    # llama-index-llms-ollama gives every call the tool's name as its id: two rolls are one call twice
    twice = ChatMessage(
        role="assistant",
        blocks=[ToolCallBlock(tool_call_id="roll", tool_name="roll", tool_kwargs={"sides": 6})] * 2,
    )
    model = recording_llm(twice, ChatMessage(role="assistant", content="3 and 5."))
    memory = damc()

    run(
        FunctionAgent(tools=[FunctionTool.from_defaults(roll)], llm=DamcLLM(llm=model, memory=memory)),
        "Roll two",
    )

    (reply,) = [event for event in memory.messages() if event.get("tool_calls")]
    assert len(reply["tool_calls"]) == 2
    answered = [c.tool_call_id for c in tool_results(memory)]
    assert sorted(answered) == sorted(call["id"] for call in reply["tool_calls"])
    rolls = model.received[1]
    assert [m.content.split(" -> ")[1] for m in rolls if m.role.value == "tool"] == ["3", "5"]
    assert_valid(rolls)


def test_a_system_note_put_between_runs_is_recorded_once_and_reaches_the_model(recording_llm):
    model = recording_llm(
        ChatMessage(role="assistant", content="Hello!"),
        call("get_user_details", {"user_id": "mia_li_3668"}, "c1"),
        ChatMessage(role="assistant", content="You are Mia."),
    )
    memory = damc()
    agent = FunctionAgent(
        tools=TOOLS, llm=DamcLLM(llm=model, memory=memory), system_prompt="You book flights."
    )
    chat = ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())

    run(agent, "Hi", memory=chat)
    chat.put(ChatMessage(role="system", content="Note: the caller is verified as mia_li_3668."))
    run(agent, "Who am I?", memory=chat)

    assert [e["content"] for e in memory.messages() if e["role"] == "system"] == [
        "Note: the caller is verified as mia_li_3668."
    ]
    for sent in model.received[1:]:
        assert sent[0].role.value == "system" and "Note: the caller is verified" in sent[0].content


def test_memory_blocks_put_in_the_users_turn_are_sent_with_it_not_recorded(recording_llm):
    from llama_index.core.memory import InsertMethod, Memory, StaticMemoryBlock

    model = recording_llm(
        call("get_user_details", {"user_id": "mia_li_3668"}, "c1"),
        ChatMessage(role="assistant", content="You are Mia."),
        ChatMessage(role="assistant", content="Bye."),
    )
    memory = damc()
    agent = FunctionAgent(
        tools=TOOLS, llm=DamcLLM(llm=model, memory=memory), system_prompt="You book flights."
    )
    chat = Memory.from_defaults(
        session_id="s",
        token_limit=4000,
        tokenizer_fn=offline_tokenizer(),
        memory_blocks=[StaticMemoryBlock(name="profile", static_content="Prefers aisle seats.")],
        insert_method=InsertMethod.USER,
    )

    run(agent, "Who am I? I am mia_li_3668.", memory=chat)
    run(agent, "Thanks.", memory=chat)

    said = [e["content"] for e in memory.messages() if e["role"] == "user"]
    assert said == ["Who am I? I am mia_li_3668.", "Thanks."]
    *earlier, newest = model.received[-1]
    assert newest.role.value == "user" and "Prefers aisle seats." in newest.content
    assert newest.content.endswith("Thanks.")
    assert not any("aisle" in str(m.content) for m in earlier)


def test_a_call_cut_off_at_max_tokens_is_recorded_once(recording_llm):
    def get_order(order_id: str, detail: str | None = None) -> dict:
        """Look up an order."""
        return {"order_id": order_id, "status": "shipped"}

    # the model stopped mid-arguments; the agent runs the call with what had arrived
    truncated = ChatMessage(
        role="assistant",
        blocks=[
            ToolCallBlock(tool_call_id="t1", tool_name="get_order", tool_kwargs='{"order_id": "O-1", "det')
        ],
    )
    memory = damc()
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(get_order)],
        llm=DamcLLM(
            llm=recording_llm(truncated, ChatMessage(role="assistant", content="Shipped.")), memory=memory
        ),
    )

    run(agent, "Status of O-1?", memory=DamcMemory(memory=memory))

    # the span (parsed arguments) and the message (their text) are one call, with its result
    calls = [c for c in memory.cards() if c.kind.value == "tool_call"]
    assert [c.tool_call_id for c in calls] == ["t1"]
    assert [c.tool_call_id for c in tool_results(memory)] == ["t1"]


@pytest.mark.parametrize("agent_class", [FunctionAgent, ReActAgent])
def test_a_tool_returning_data_is_recorded_as_data_without_a_span_handler(recording_llm, agent_class):
    def search_flights(date: str) -> list:
        """Search flights on a date."""
        return FLIGHTS

    if agent_class is FunctionAgent:
        model = recording_llm(
            call("search_flights", {"date": "2024-05-20"}, "s1"),
            ChatMessage(role="assistant", content="HAT107"),
        )
    else:
        model = recording_llm(
            react("search_flights", {"date": "2024-05-20"}), react_answer("HAT107"), function_calling=False
        )
    memory = damc()
    agent = agent_class(
        tools=[FunctionTool.from_defaults(search_flights)], llm=DamcLLM(llm=model, memory=memory)
    )

    run(agent, "Cheapest available flight on 2024-05-20?", memory=DamcMemory(memory=memory))

    (result,) = tool_results(memory)
    assert json.loads(memory.recall(result.id)["content"]) == FLIGHTS
    assert result.tables  # encoded as rows, not as the Python repr FunctionTool makes of a list
    assert str(FLIGHTS[0]) not in text(model.received[1])
    assert "HAT100" in text(model.received[1])


def test_an_instruction_the_agent_appends_for_one_call_reaches_the_model(recording_llm):
    def get_weather(city: str) -> dict:
        """Weather for a city."""
        return {"city": city, "temp_c": 21}

    llm = recording_llm(
        call("get_weather", {"city": "Oslo"}, "w1"),
        call("get_weather", {"city": "Oslo"}, "w2"),
        ChatMessage(role="assistant", content="21C in Oslo."),
    )
    memory = damc()
    tools = [FunctionTool.from_defaults(get_weather)]
    agent = FunctionAgent(tools=tools, llm=DamcLLM(llm=llm, memory=memory), system_prompt="Help.")

    async def go():
        # past its iterations the agent asks for a final answer with a system message at the end
        return await agent.run("Weather?", max_iterations=2, early_stopping_method="generate")

    assert str(asyncio.run(go())) == "21C in Oslo."
    last = llm.received[-1][-1]
    assert last.role.value == "system" and "iterations" in str(last.content)
    assert "iterations" not in " ".join(c.summary for c in memory.cards())  # for that call only


@pytest.mark.parametrize("agent_class", [FunctionAgent, ReActAgent])
def test_an_answer_made_at_the_iteration_limit_is_remembered_by_the_next_run(recording_llm, agent_class):
    def get_weather(city: str) -> dict:
        """Weather for a city."""
        return {"city": city, "temp_c": 21}

    if agent_class is FunctionAgent:
        steps = [call("get_weather", {"city": "Oslo"}, f"w{n}") for n in (1, 2)]
        last = ChatMessage(role="assistant", content="21C in Oslo, ask me about Bergen next.")
    else:
        steps = [react("get_weather", {"city": "Oslo"})] * 2
        last = react_answer("21C in Oslo, ask me about Bergen next.")
    llm = recording_llm(*steps, last, ChatMessage(role="assistant", content="You asked about Oslo."))
    memory = damc()
    agent = agent_class(tools=[FunctionTool.from_defaults(get_weather)], llm=DamcLLM(llm=llm, memory=memory))

    # past its iterations the agent asks for a final answer in a step of its own
    run(agent, "Weather?", max_iterations=2, early_stopping_method="generate")
    run(agent, "What did you tell me?")

    assert "ask me about Bergen next" in text(llm.received[-1])
    answers = [
        m["content"] for m in memory.messages() if m["role"] == "assistant" and not m.get("tool_calls")
    ]
    assert answers == ["21C in Oslo, ask me about Bergen next.", "You asked about Oslo."]


def test_a_structured_answer_is_asked_of_the_model_with_the_agent_s_prompt_as_it_is(recording_llm):
    class Weather(BaseModel):
        city: str
        temp_c: int

    llm = recording_llm(
        ChatMessage(role="assistant", content="Oslo is 21C."),
        call("Weather", {"city": "Oslo", "temp_c": 21}, "s1"),  # the structured answer, as a call
    )
    memory = damc()
    wrapped = DamcLLM(llm=llm, memory=memory)
    agent = FunctionAgent(tools=[], llm=wrapped, system_prompt="Help.", output_cls=Weather)

    result = run(agent, "Weather in Oslo?", memory=DamcMemory(memory=memory))

    assert result.structured_response == {"city": "Oslo", "temp_c": 21}
    system, prompt = llm.received[1]  # LlamaIndex's own prompt, holding the conversation once
    assert system.content == "Help."
    assert "<current_conversation>" in prompt.content and "Weather in Oslo?" in prompt.content
    assert [c.summary for c in memory.cards()] == [
        "[c0] user: Weather in Oslo?",
        "[c1] assistant: Oslo is 21C.",
    ]


def test_a_wrapped_model_alone_remembers_the_agent_s_answer_for_the_next_run(recording_llm):
    llm = recording_llm(
        ChatMessage(role="assistant", content="Your code word is PELICAN."),
        ChatMessage(role="assistant", content="It was PELICAN."),
    )
    memory = damc()
    agent = FunctionAgent(tools=[], llm=DamcLLM(llm=llm, memory=memory), system_prompt="Help.")

    run(agent, "Give me a code word.")
    run(agent, "What was the code word?")  # a new run: the agent's own memory starts empty

    assert "PELICAN" in text(llm.received[1])
    assert [c.kind.value for c in memory.cards()] == [
        "user_instruction",
        "assistant_conclusion",
        "user_instruction",
        "assistant_conclusion",
    ]


@pytest.mark.parametrize(
    ("questions", "answers"),
    [
        (("Cancel 4WQ150.", "Cancel 8XZ222."), ("Done.", "Done.")),
        (("yes", "yes"), ("Book HAT069?", "Insure it?")),
    ],
    ids=["same answer", "same question"],
)
def test_words_said_again_in_a_later_run_are_a_turn_of_their_own(recording_llm, questions, answers):
    llm = recording_llm(*(ChatMessage(role="assistant", content=answer) for answer in answers))
    memory = damc()
    agent = FunctionAgent(tools=[], llm=DamcLLM(llm=llm, memory=memory), system_prompt="Help.")

    for question in questions:
        run(agent, question)  # a new run: the agent's own memory holds this turn only

    assert [m["content"] for m in memory.messages()] == [questions[0], answers[0], questions[1], answers[1]]
    assert llm.received[-1][-1].content == questions[1]


@pytest.mark.parametrize("fails_at", [0, 1], ids=["first step", "after a tool call"])
def test_a_reply_react_could_not_parse_and_its_correction_are_sent_not_recorded(recording_llm, fails_at):
    unparsable = ChatMessage(role="assistant", content="Thought: I will look the user up.")
    script = list(REACT_SCRIPT)
    script.insert(fails_at, unparsable)
    model = recording_llm(*script, function_calling=False)
    memory = damc()
    agent = ReActAgent(tools=TOOLS, llm=DamcLLM(llm=model, memory=memory))

    run(agent, QUESTION, memory=DamcMemory(memory=memory))

    retried = [m.content for m in model.received[fails_at + 1]]
    correction = next(i for i, c in enumerate(retried) if c.startswith("Error while parsing the output:"))
    assert retried[correction - 1] == unparsable.content  # the model sees the retry as the agent made it
    recorded = [(m["role"], m["content"]) for m in memory.messages()]
    assert [c for role, c in recorded if role == "user"] == [QUESTION]  # the correction is no user turn
    assert unparsable.content not in str(recorded) and recorded[-1] == ("assistant", ANSWER)


def test_a_user_pasting_a_parser_error_is_a_user_turn(recording_llm):
    pasted = "Error while parsing the output: unexpected '}' at line 3 of my config.yaml"
    model = recording_llm(
        ChatMessage(role="assistant", content="Hello!"),
        ChatMessage(role="assistant", content="Line 2 lacks a brace."),
    )
    memory = damc()
    agent = FunctionAgent(tools=[], llm=DamcLLM(llm=model, memory=memory), system_prompt="Help.")
    history = ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())

    run(agent, "hi", memory=history)
    run(agent, pasted, memory=history)

    assert [m["content"] for m in memory.messages() if m["role"] == "user"] == ["hi", pasted]
    assert model.received[-1][-1].content == pasted


@pytest.mark.parametrize("with_memory", [True, False], ids=["with DamcMemory", "DamcLLM alone"])
def test_a_react_answer_is_recorded_once(recording_llm, with_memory):
    model = recording_llm(*REACT_SCRIPT, react_answer("credit_card_4421486"), function_calling=False)
    memory = damc()
    agent = ReActAgent(tools=TOOLS, llm=DamcLLM(llm=model, memory=memory))
    damc_memory = (
        DamcMemory(memory=memory)
        if with_memory
        else ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())
    )

    run(agent, QUESTION, memory=damc_memory)
    run(agent, "Which card did I use?", memory=damc_memory)

    answers = [
        m["content"] for m in memory.messages() if m["role"] == "assistant" and not m.get("tool_calls")
    ]
    assert answers == [ANSWER, "credit_card_4421486"]


def test_thinking_and_images_reach_the_model_and_stay_in_the_record(recording_llm):
    from llama_index.core.base.llms.types import ImageBlock, TextBlock, ThinkingBlock

    def photograph(order_id: str) -> list:
        """Photograph an order's parcel."""
        return [
            TextBlock(text=f"parcel of {order_id}"),
            ImageBlock(image=b"\x89PNG-parcel", image_mimetype="image/png"),
        ]

    thinking = ThinkingBlock(content="the user wants to see W123")
    reply = ChatMessage(
        role="assistant",
        blocks=[
            thinking,
            ToolCallBlock(tool_call_id="p1", tool_name="photograph", tool_kwargs={"order_id": "W123"}),
        ],
    )
    model = recording_llm(reply, ChatMessage(role="assistant", content="It is a brown box."))
    memory = damc()
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(photograph)], llm=DamcLLM(llm=model, memory=memory)
    )

    run(agent, "Show me the parcel of W123")

    call_sent, result_sent = model.received[1][-2:]
    assert [b.block_type for b in call_sent.blocks] == ["thinking", "tool_call"]
    assert [b.block_type for b in result_sent.blocks] == ["text", "image"]
    result = next(c for c in memory.cards() if c.kind.value == "tool_result")
    assert result.summary.endswith("parcel of W123\n[image]")  # the picture named, as in a message
    assert memory.recall(result.id)["blocks"][0]["block_type"] == "image"


def test_a_reopened_memory_sends_a_turn_with_its_image(tmp_path, recording_llm):
    from llama_index.core.base.llms.types import ImageBlock, TextBlock

    from damc_core import DecisionMemory, SQLiteStore

    path = tmp_path / "memory.sqlite3"
    question = ChatMessage(
        role="user",
        blocks=[
            TextBlock(text="What is in this picture?"),
            ImageBlock(image=b"\x89PNG-dog", image_mimetype="image/png"),
        ],
    )
    DamcMemory(memory=DecisionMemory(store=SQLiteStore(path))).put(question)

    reopened = DamcMemory(memory=DecisionMemory(store=SQLiteStore(path)))  # a new process
    (image,) = [b for m in reopened.get() for b in m.blocks if isinstance(b, ImageBlock)]

    assert image.resolve_image().read() == b"\x89PNG-dog"


def test_two_workers_serving_one_chat_in_turns_record_each_message_once(recording_llm, tmp_path):
    from llama_index.core.memory import Memory

    from damc_core import DecisionMemory, Namespace, SQLiteStore
    from damc_llamaindex import offline_tokenizer

    chat = Memory.from_defaults(session_id="chat", token_limit=40000, tokenizer_fn=offline_tokenizer())
    workers = []
    for _ in range(2):
        memory = DecisionMemory(namespace=Namespace("mia", "chat"), store=SQLiteStore(tmp_path / "m.sqlite3"))
        model = recording_llm(*(ChatMessage(role="assistant", content=f"answer {turn}") for turn in range(3)))
        workers.append(FunctionAgent(tools=[], llm=DamcLLM(llm=model, memory=memory), system_prompt="Help."))

    for turn in range(4):
        run(workers[turn % 2], f"turn {turn}", memory=chat)  # the chat history lives in a shared store

    reopened = DecisionMemory(namespace=Namespace("mia", "chat"), store=SQLiteStore(tmp_path / "m.sqlite3"))
    said = [m["content"] for m in reopened.messages()]
    assert said == ["turn 0", "answer 0", "turn 1", "answer 0", "turn 2", "answer 1", "turn 3", "answer 1"]


def test_agents_with_memories_of_their_own_record_each_others_same_words(recording_llm):
    def refund(user_id: str, amount: float) -> dict:
        """Refund a user's card."""
        return {"refund_id": "R-77", "user_id": user_id, "amount": amount}

    def handoff(call_id: str) -> ChatMessage:
        return call("handoff", {"to_agent": "billing", "reason": "a refund"}, call_id)

    done = ChatMessage(role="assistant", content="Done.")
    triage_llm = recording_llm(handoff("t1"), done, handoff("t3"))
    billing_llm = recording_llm(
        call("refund", {"user_id": "alice", "amount": 1}, "b1"),
        done,
        ChatMessage(role="assistant", content="Anything else?"),
    )
    triage_memory, billing_memory = damc(), damc()
    triage = FunctionAgent(
        name="triage",
        description="Triage.",
        tools=[],
        can_handoff_to=["billing"],
        llm=DamcLLM(llm=triage_llm, memory=triage_memory),
    )
    billing = FunctionAgent(
        name="billing",
        description="Refunds.",
        tools=[FunctionTool.from_defaults(refund)],
        llm=DamcLLM(llm=billing_llm, memory=billing_memory),
    )
    workflow = AgentWorkflow(agents=[triage, billing], root_agent="triage")
    chat = ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())

    async def three_runs():
        for question in ("Refund alice 1", "Did it work?", "Refund alice 1 again"):
            await workflow.run(question, memory=chat)  # billing answers, then triage, then billing

    asyncio.run(three_runs())

    turns = [
        (m["role"], m["content"])
        for m in billing_memory.messages()
        if m["role"] != "tool" and m.get("content")
    ]
    assert turns == [
        ("user", "Refund alice 1"),
        ("assistant", "Done."),  # billing's
        ("user", "Did it work?"),
        ("assistant", "Done."),  # triage's, which billing learns at its next run
        ("user", "Refund alice 1 again"),
        ("assistant", "Anything else?"),
    ]


def test_a_custom_tool_call_the_memory_holds_reaches_the_model_with_its_result(recording_llm, caplog):
    memory = damc()
    observe_custom_tool_step(memory)
    llm = recording_llm(ChatMessage(role="assistant", content="Patched app.py."))

    run(FunctionAgent(tools=[], llm=DamcLLM(llm=llm, memory=memory), system_prompt="Help."), "Done?")

    assert "assembling the context failed" not in caplog.text
    sent = llm.received[0]
    (call,) = [b for m in sent for b in m.blocks if isinstance(b, ToolCallBlock)]
    assert (call.tool_call_id, call.tool_name, call.tool_kwargs) == ("call_9", "apply_patch", PATCH)
    assert any(m.role.value == "tool" and "1 hunk" in str(m.content) for m in sent)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["predict_and_call", "apredict_and_call"])
def test_predict_and_call_remembers_the_call_and_its_result_for_the_next_call(recording_llm, asynchronous):
    def track(order_id: str) -> dict:
        """Track an order."""
        return {"order_id": order_id, "status": "in transit", "eta": "2024-05-20"}

    memory = damc()
    model = recording_llm(
        call("track", {"order_id": "O-1"}, "t1"), ChatMessage(role="assistant", content="On 2024-05-20.")
    )
    llm = DamcLLM(llm=model, memory=memory)
    tools = [FunctionTool.from_defaults(track)]

    if asynchronous:
        tracked = asyncio.run(llm.apredict_and_call(tools, user_msg="Where is O-1?"))
    else:
        tracked = llm.predict_and_call(tools, user_msg="Where is O-1?")
    llm.chat([ChatMessage(role="user", content="When does it arrive?")])

    assert tracked.sources[0].raw_output["eta"] == "2024-05-20"
    (result,) = tool_results(memory)
    assert (result.tool_name, result.tool_call_id) == ("track", "t1")
    assert json.loads(memory.recall(result.id)["content"]) == track("O-1")
    sent = model.received[1]
    assert "2024-05-20" in text(sent)
    assert [b.tool_call_id for m in sent for b in m.blocks if isinstance(b, ToolCallBlock)] == ["t1"]
    assert_valid(sent)


def test_predict_and_call_remembers_a_tool_that_raised_as_an_error_of_its_call(recording_llm):
    def cancel(order_id: str) -> str:
        """Cancel an order."""
        raise RuntimeError(f"order {order_id} has shipped")

    memory = damc()
    llm = DamcLLM(llm=recording_llm(call("cancel", {"order_id": "O-1"}, "x1")), memory=memory)

    with pytest.raises(ValueError, match="has shipped"):
        llm.predict_and_call([FunctionTool.from_defaults(cancel)], "Cancel O-1", error_on_tool_error=True)

    (failed,) = [c for c in memory.cards() if c.kind.value == "tool_error"]
    assert failed.tool_call_id == "x1"
    assert "order O-1 has shipped" in failed.summary


def test_a_query_engine_on_the_agent_s_model_is_answered_from_its_own_prompt(recording_llm):
    from llama_index.core import PromptHelper, SummaryIndex
    from llama_index.core.schema import TextNode
    from llama_index.core.tools import QueryEngineTool

    model = recording_llm(
        call("policies", {"input": "refund window"}, "p1"),
        ChatMessage(role="assistant", content="Within 30 days."),  # the query engine's answer
        ChatMessage(role="assistant", content="You can get a refund within 30 days."),
    )
    memory = damc()
    llm = DamcLLM(llm=model, memory=memory)
    index = SummaryIndex(nodes=[TextNode(text="Refunds are possible within 30 days of purchase.")])
    engine = index.as_query_engine(llm=llm, prompt_helper=PromptHelper(tokenizer=offline_tokenizer()))
    policies = QueryEngineTool.from_defaults(engine, name="policies", description="Company policies.")

    result = run(FunctionAgent(tools=[policies], llm=llm, system_prompt="You help customers."), "Refund?")

    assert str(result) == "You can get a refund within 30 days."
    question = model.received[1]  # the query engine's own prompt, as it made it
    assert "<memory>" not in text(question) and "Refund?" not in text(question)
    answering = model.received[2]
    assert [m.content for m in answering if m.role.value == "user"] == ["Refund?"]
    assert [c.summary for c in memory.cards() if c.kind.value == "user_instruction"] == ["[c0] user: Refund?"]


@pytest.mark.parametrize("section_role", ["system", "user"])
def test_the_memory_section_reaches_the_model_once_whichever_role_damc_memory_gives_it(
    recording_llm, section_role
):
    memory = damc()
    model = recording_llm(
        *FUNCTION_SCRIPT, ChatMessage(role="assistant", content="With credit_card_4421486.")
    )
    agent = FunctionAgent(tools=TOOLS, llm=DamcLLM(llm=model, memory=memory), system_prompt="You book.")
    damc_memory = DamcMemory(memory=memory, section_role=section_role)

    async def go():
        await agent.run(QUESTION, memory=damc_memory)
        await agent.run(FOLLOW_UP, memory=damc_memory)

    asyncio.run(go())

    follow_up = model.received[-1]
    assert text(follow_up).count("<memory>") == 1
    assert follow_up[0].content.startswith("You book.\n\n<memory>")
    assert follow_up[-1].content == FOLLOW_UP


@pytest.mark.parametrize("agent_kind", ["function", "react"])
@pytest.mark.parametrize("with_memory", [False, True])
def test_the_answer_a_return_direct_tool_gives_is_the_assistant_s_answer(
    recording_llm, agent_kind, with_memory
):
    """The run stops with the tool's output as its answer, and no model call follows to show it."""

    def order_status(order_id: str) -> str:
        """The shipping status of an order."""
        return f"Order {order_id} shipped on 2024-05-20."

    tool = FunctionTool.from_defaults(order_status, return_direct=True)
    if agent_kind == "function":
        replies = [
            call("order_status", {"order_id": "W1"}, "s1"),
            ChatMessage(role="assistant", content="Bye."),
        ]
        model = recording_llm(*replies)
    else:
        model = recording_llm(
            react("order_status", {"order_id": "W1"}), react_answer("Bye."), function_calling=False
        )
    memory = damc()
    agent = (FunctionAgent if agent_kind == "function" else ReActAgent)(
        tools=[tool], llm=DamcLLM(llm=model, memory=memory)
    )
    ctx = Context(agent)
    given = {"memory": DamcMemory(memory=memory)} if with_memory else {}

    async def go():
        answer = await agent.run("Where is order W1?", ctx=ctx, **given)
        await agent.run("Thanks.", ctx=ctx, **given)
        return answer

    answer = asyncio.run(go())

    assert str(answer) == "Order W1 shipped on 2024-05-20."
    assert [c.summary.removeprefix(f"[{c.id}] ") for c in memory.cards() if c.kind.value != "tool_call"] == [
        "user: Where is order W1?",
        "order_status(order_id=W1) -> Order W1 shipped on 2024-05-20.",
        "assistant: Order W1 shipped on 2024-05-20.",
        "user: Thanks.",
        "assistant: Bye.",
    ]
    assert ("assistant", "Order W1 shipped on 2024-05-20.") in [
        (m.role.value, m.content) for m in model.received[1]
    ]
