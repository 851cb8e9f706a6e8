"""The recall tool: the agent reads the raw record behind a card that left something out."""

from __future__ import annotations

import json

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.tools import FunctionTool

from damc_llamaindex import DamcLLM, DamcMemory, recall_tool

from .scenario import FLIGHTS, TOOLS, call, damc, react, react_answer, run, text

LAST = FLIGHTS[-1]


def test_the_agent_recalls_the_rows_a_card_left_out(recording_llm):
    model = recording_llm(
        call("search_flights", {"date": "2024-05-20"}, "t1"),
        call("recall", {"card_id": "c2", "match": LAST["flight_number"]}, "t2"),
        ChatMessage(role="assistant", content=f"{LAST['flight_number']} leaves from gate {LAST['gate']}."),
    )
    memory = damc(budget=350)
    agent = FunctionAgent(tools=[*TOOLS, recall_tool(memory)], llm=DamcLLM(llm=model, memory=memory))

    result = run(
        agent, "Which gate does the last flight on 2024-05-20 leave from?", memory=DamcMemory(memory=memory)
    )

    assert memory.card("c2").tool_name == "search_flights"
    assert shown(model.received[1]) < len(FLIGHTS)  # the search result's card left rows out
    recalled = next(c for c in memory.cards() if c.tool_name == "recall" and c.kind.value == "tool_result")
    answer = memory.recall(recalled.id)["content"]
    assert json.loads(answer) == [LAST]  # the row asked for, verbatim
    assert answer in text(model.received[2])  # and the model read it
    assert "recall(id)" in text(model.received[2])  # beside a memory section that speaks of the tool
    assert str(result).endswith(f"gate {LAST['gate']}.")


def test_without_the_recall_tool_the_memory_section_does_not_speak_of_it(recording_llm):
    model = recording_llm(
        call("search_flights", {"date": "2024-05-20"}, "t1"),
        call("search_flights", {"date": "2024-05-21"}, "t2"),
        ChatMessage(role="assistant", content="Both days have flights."),
    )
    memory = damc(budget=350)
    agent = FunctionAgent(tools=TOOLS, llm=DamcLLM(llm=model, memory=memory))

    run(agent, "Which flights are there on 2024-05-20 and 2024-05-21?", memory=DamcMemory(memory=memory))

    assert "<memory>" in text(model.received[2])
    assert "recall(" not in text(model.received[2])  # no tool to call, so none is spoken of


@pytest.mark.parametrize("with_recall", [True, False])
def test_a_react_agent_is_told_of_recall_when_its_tools_hold_it(recording_llm, with_recall):
    """ReAct's model gets no tool list, only the prompt that describes each tool: that tells
    ``DamcLLM`` whether the memory section may speak of recall."""
    model = recording_llm(
        react("search_flights", {"date": "2024-05-20"}),
        react_answer("There are flights."),
        react_answer("HAT136 is the last one."),
        function_calling=False,
    )
    memory = damc(budget=350)
    tools = [*TOOLS, recall_tool(memory)] if with_recall else TOOLS
    agent = ReActAgent(tools=tools, llm=DamcLLM(llm=model, memory=memory))

    run(agent, "Which flights are there on 2024-05-20?", memory=DamcMemory(memory=memory))
    run(agent, "Which is the last one?", memory=DamcMemory(memory=memory))

    assert "<memory>" in text(model.received[2])
    assert ("recall(id)" in text(model.received[2])) is with_recall


def test_a_react_agent_reads_the_record_it_recalled_whole(recording_llm):
    """ReAct's observations reach the model as their cards when shorter, but not a recall's: the
    model asked for the record behind a card, and its card would leave out again what it needs."""
    log = "\n".join(
        f"10:{i // 60:02d}:{i % 60:02d} worker-{i % 7} heartbeat ok, depth {i * 3 % 17}" for i in range(120)
    )

    def read_log(service: str) -> str:
        """The service's log."""
        return log

    model = recording_llm(
        react("read_log", {"service": "refunds"}),
        react("recall", {"card_id": "c2"}),
        react_answer("The workers are all up."),
        function_calling=False,
    )
    memory = damc(budget=350)
    tools = [FunctionTool.from_defaults(read_log), recall_tool(memory)]
    agent = ReActAgent(tools=tools, llm=DamcLLM(llm=model, memory=memory))

    run(agent, "Are the refund workers up?")

    read, recalled = model.received[2][-3], model.received[2][-1]
    assert log not in read.content  # the log's card stands for it
    assert recalled.content == f"Observation: {log}"


def shown(prompt):
    """How many of the flights a prompt shows."""
    return sum(f["flight_number"] in text(prompt) for f in FLIGHTS)


def test_recall_tool_answers_by_card_id_and_says_when_there_is_none():
    memory = damc()
    card = memory.observe_tool("search_flights", {"date": "2024-05-20"}, FLIGHTS)
    tool = recall_tool(memory)

    assert tool.metadata.name == "recall"
    assert tool.metadata.get_parameters_dict()["required"] == ["card_id"]
    assert json.loads(tool.call(card_id=card.id).content) == FLIGHTS
    assert tool.call(card_id="c99").content == "No memory card 'c99' in this session."
    picked = FLIGHTS[1]["flight_number"]
    assert json.loads(tool.call(card_id=card.id, match=picked).content) == [FLIGHTS[1]]


def test_a_store_that_fails_gives_the_agent_an_answer_not_an_exception():
    memory = damc()
    memory.observe({"role": "user", "content": "hello"})
    memory.store.close()

    answer = recall_tool(memory).call(card_id="c0").content

    assert answer.startswith("Could not recall 'c0': ")


def test_a_call_missing_its_card_id_is_told_what_one_is_and_a_field_too_many_is_ignored(recording_llm):
    memory = damc()
    model = recording_llm(
        call("recall", {"id": "c0"}, "r1"),
        call("recall", {"card_id": "c0", "reason": "check the question"}, "r2"),
        ChatMessage(role="assistant", content="You asked for HAT107."),
    )
    agent = FunctionAgent(tools=[recall_tool(memory)], llm=model)

    run(agent, "Book HAT107", memory=DamcMemory(memory=memory))

    answers = [m.content for m in model.received[-1] if m.role.value == "tool"]
    assert answers[0] == "recall needs a card_id: the id a memory card starts with, such as c12."
    assert answers[1] == "Book HAT107"  # the user turn behind c0
