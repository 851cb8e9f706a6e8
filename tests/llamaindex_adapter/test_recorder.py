"""Translation details: ReAct transcripts, parallel tool calls, the public names."""

from __future__ import annotations

import json

from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock

import damc_llamaindex
from damc_llamaindex import DamcMemory
from damc_llamaindex._recorder import parse_react

from .scenario import FLIGHTS, TOOLS, damc


def test_public_names():
    assert damc_llamaindex.__all__ == sorted(damc_llamaindex.__all__)
    assert set(damc_llamaindex.__all__) == {
        "DamcEventRecorder",
        "DamcLLM",
        "DamcMemory",
        "DamcSpanHandler",
        "offline_tokenizer",
    }


def test_a_react_transcript_is_split_into_calls_observations_and_the_answer():
    transcript = "\n".join(
        [
            "Thought: I need the flights.",
            "Action: search_flights",
            "Action Input: {'date': '2024-05-20'}",
            "Observation: " + json.dumps(FLIGHTS[:2], indent=2),
            "Thought: HAT107 is available.",
            "Answer: Booked HAT107.",
        ]
    )

    action, observation, answer = parse_react(transcript)

    assert (action.kind, action.tool, action.arguments) == (
        "action",
        "search_flights",
        {"date": "2024-05-20"},
    )
    assert json.loads(observation.text) == FLIGHTS[:2]
    assert (answer.kind, answer.answer) == ("answer", "Booked HAT107.")
    assert parse_react("Thought: just musing") is None
    assert parse_react("Booked HAT107.") is None


def test_an_observation_with_thought_and_observation_lines_stays_whole():
    output = "Thought: this log line comes from the tool\nObservation: so does this one\nstatus=ok"
    transcript = "\n".join(
        [
            "Thought: I need the log.",
            "Action: read_log",
            "Action Input: {'day': '2024-05-20'}",
            f"Observation: {output}",
            "Thought: The log is fine.",
            "Answer: All good.",
        ]
    )

    action, observation, answer = parse_react(transcript)

    assert (action.kind, action.tool) == ("action", "read_log")
    assert (observation.kind, observation.text) == ("observation", output)
    assert (answer.kind, answer.answer) == ("answer", "All good.")


def test_parallel_calls_stay_together_with_their_results():
    both = ChatMessage(
        role="assistant",
        blocks=[
            ToolCallBlock(tool_call_id="p1", tool_name="search_flights", tool_kwargs={"date": "2024-05-20"}),
            ToolCallBlock(
                tool_call_id="p2", tool_name="get_user_details", tool_kwargs={"user_id": "mia_li_3668"}
            ),
        ],
    )
    memory = DamcMemory(memory=damc(budget=1200))
    memory.put_messages(
        [
            ChatMessage(role="user", content="Find flights on 2024-05-20 and my cards, I am mia_li_3668"),
            both,
            ChatMessage(role="tool", content=json.dumps(FLIGHTS), additional_kwargs={"tool_call_id": "p1"}),
            ChatMessage(
                role="tool", content=TOOLS[0].fn("mia_li_3668"), additional_kwargs={"tool_call_id": "p2"}
            ),
        ]
    )

    *_, call, first, second = memory.get()

    assert call is both
    assert [first.additional_kwargs["tool_call_id"], second.additional_kwargs["tool_call_id"]] == ["p1", "p2"]
    assert len(first.content) < len(json.dumps(FLIGHTS)) and "HAT100" in first.content
    assert "credit_card_4421486" in second.content
    # with too small a budget the pair moves to the memory section whole: no result without its call
    small = DamcMemory(memory=damc(budget=150))
    small.put_messages(memory.get_all())
    assert [m.role.value for m in small.get()] == ["user"]
    section = small.get()[0].content
    assert "HAT100" in section or "credit_card_4421486" in section  # the result that fits, as a card
