"""Every LlamaIndex surface keeps the agent running on None, huge, non-JSON and deep tool outputs."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import numpy as np
import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.tools import FunctionTool

from damc_core import CardKind, DecisionMemory, InMemoryStore, MemorySettings
from damc_llamaindex import DamcLLM, DamcMemory, DamcSpanHandler

from .scenario import ChatMessage as Message
from .scenario import call, react, react_answer, run


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


OUTPUTS = {
    "none": None,
    "2 MB": "row " * 500_000,
    "not json": "{'oops': [1, 2,, \x00\x01 binary-ish \ud800?",
    "deep text": "[" * 5000 + "]" * 5000,
    "deep data": deep(5000),
}


def make_tool(output, name="lookup"):
    def lookup(query: str):
        """Returns whatever the backend sent."""
        return output

    return FunctionTool.from_defaults(lookup, name=name)


def memory():
    return DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=400))


def run_on(surface, agent, damc, question="look it up"):
    """Run ``agent`` once with DAMC on ``surface``: as its memory, or as a span handler attached
    for the run (for ``llm``, the agent's model is a ``DamcLLM`` already)."""
    handler = DamcSpanHandler.attach(damc, agent) if surface == "spans" else None
    try:
        return run(agent, question, memory=DamcMemory(memory=damc) if surface == "memory" else None)
    finally:
        if handler is not None:
            handler.detach()


@pytest.mark.parametrize("agent_kind", ["function", "react"])
@pytest.mark.parametrize("surface", ["memory", "llm", "spans"])
@pytest.mark.parametrize("output", list(OUTPUTS), ids=list(OUTPUTS))
def test_the_agent_finishes(recording_llm, agent_kind, surface, output):
    if agent_kind == "function":
        model = recording_llm(call("lookup", {"query": "x"}, "b1"), Message(role="assistant", content="done"))
    else:
        model = recording_llm(react("lookup", {"query": "x"}), react_answer("done"), function_calling=False)
    damc = memory()
    llm = DamcLLM(llm=model, memory=damc) if surface == "llm" else model
    agent = (FunctionAgent if agent_kind == "function" else ReActAgent)(
        tools=[make_tool(OUTPUTS[output])], llm=llm
    )
    result = run_on(surface, agent, damc)

    assert str(result) == "done"
    assert len(model.received) == 2
    assert any(c.kind.value in ("tool_result", "tool_error") for c in damc.cards())
    if surface == "llm":  # only the proxy sees the running task's results (memory and spans do not)
        assert sum(len(str(m.content)) for m in model.received[1]) < 200_000


@pytest.mark.parametrize("surface", ["memory", "llm", "spans"])
def test_a_record_json_cannot_encode_still_becomes_a_structured_card(recording_llm, surface):
    departs = datetime(2024, 5, 20, 9, 5)
    reservation = {"reservation_id": "ZFA04Y", "departs": departs, "fare": Decimal("129.50")}
    answer = Message(role="assistant", content="done")
    model = recording_llm(call("lookup", {"query": "ZFA04Y"}, "b1"), answer)
    damc = memory()
    llm = DamcLLM(llm=model, memory=damc) if surface == "llm" else model
    agent = FunctionAgent(tools=[make_tool(reservation)], llm=llm)
    run_on(surface, agent, damc)

    (card,) = [c for c in damc.cards() if c.kind is CardKind.TOOL_RESULT]
    facts = {fact.path: fact.value for fact in card.facts}
    assert facts == {"reservation_id": "ZFA04Y", "departs": "2024-05-20T09:05:00", "fare": "129.50"}


@pytest.mark.parametrize("agent_kind", ["function", "react"])
@pytest.mark.parametrize("surface", ["memory", "llm", "spans"])
def test_bytes_are_read_as_text_and_an_array_as_rows(recording_llm, agent_kind, surface):
    """As the LangChain adapter reads them; ``ToolOutput.content`` is ``b'...'`` and the array's
    printout, which has no commas to read rows from."""
    fares = np.array([[129, 2], [99, 0]])
    if agent_kind == "function":
        replies = [call("receipt", {"query": "ZFA04Y"}, "b1"), call("fares", {"query": "HAT136"}, "b2")]
        model = recording_llm(*replies, Message(role="assistant", content="done"))
    else:
        replies = [react("receipt", {"query": "ZFA04Y"}), react("fares", {"query": "HAT136"})]
        model = recording_llm(*replies, react_answer("done"), function_calling=False)
    damc = memory()
    llm = DamcLLM(llm=model, memory=damc) if surface == "llm" else model
    tools = [make_tool(b"PNR ZFA04Y confirmed", "receipt"), make_tool(fares, "fares")]
    agent = (FunctionAgent if agent_kind == "function" else ReActAgent)(tools=tools, llm=llm)
    run_on(surface, agent, damc)

    receipt, table = [c for c in damc.cards() if c.kind is CardKind.TOOL_RESULT]
    assert receipt.text == "PNR ZFA04Y confirmed"
    assert table.tables[0].rows == (("129", "2"), ("99", "0"))


@pytest.mark.parametrize("agent_kind", ["function", "react"])
@pytest.mark.parametrize("surface", ["memory", "llm", "spans"])
def test_a_result_the_store_refused_goes_in_after_its_call_once_the_store_is_back(
    recording_llm, agent_kind, surface, tmp_path
):
    import sqlite3

    from damc_core import SQLiteStore, valid_sequence

    path = tmp_path / "memory.sqlite3"
    other_process = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def get_reservation(reservation_id: str) -> dict:
        """Look up a reservation."""
        other_process.execute("BEGIN IMMEDIATE")  # another process writes the file meanwhile
        return {"reservation_id": reservation_id, "payment": "gift_card_7777"}

    def check_in(reservation_id: str) -> str:
        """Check in."""
        other_process.execute("COMMIT")
        return "checked in"

    args = {"reservation_id": "ABC123"}
    if agent_kind == "function":
        replies = [call("get_reservation", args, "t1"), call("check_in", args, "t2")]
        model = recording_llm(*replies, Message(role="assistant", content="Checked in."))
    else:
        replies = [react("get_reservation", args), react("check_in", args)]
        model = recording_llm(*replies, react_answer("Checked in."), function_calling=False)
    damc = DecisionMemory(store=SQLiteStore(path, timeout=0.1), settings=MemorySettings(budget=400))
    llm = DamcLLM(llm=model, memory=damc) if surface == "llm" else model
    tools = [FunctionTool.from_defaults(get_reservation), FunctionTool.from_defaults(check_in)]
    agent = (FunctionAgent if agent_kind == "function" else ReActAgent)(tools=tools, llm=llm)
    result = run_on(surface, agent, damc, "Check in ABC123")

    assert str(result) == "Checked in."
    events = damc.messages()
    tool_of = {c["id"]: c["function"]["name"] for e in events for c in e.get("tool_calls") or ()}
    steps = [
        ("call", e["tool_calls"][0]["function"]["name"])
        if e.get("tool_calls")
        else ("result", tool_of[e["tool_call_id"]])
        for e in events
        if e["role"] == "tool" or e.get("tool_calls")
    ]
    assert steps == [
        ("call", "get_reservation"),
        ("result", "get_reservation"),  # answered before the next call, as it was
        ("call", "check_in"),
        ("result", "check_in"),
    ]
    assert valid_sequence(events) == events
    assert "gift_card_7777" in str([e["content"] for e in events if e["role"] == "tool"])
