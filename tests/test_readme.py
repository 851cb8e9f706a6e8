"""The README's self-contained Python examples run as written."""

from __future__ import annotations

import ast
import asyncio
import re
import warnings
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def example(first_line: str) -> str:
    """The README's Python block that starts with ``first_line``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    (found,) = [b for b in blocks if b.startswith(first_line)]
    return found


def run(code: str, **given: object) -> dict[str, object]:
    """Run ``code`` with ``given`` defined, as the README's text around it defines them."""
    namespace: dict[str, object] = {"__name__": "readme_example", **given}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace


def test_the_quickstart_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    names = run(example("from damc_core import DecisionMemory, Namespace, SQLiteStore, explain"))

    printed = capsys.readouterr().out
    assert "kept: recent dialogue, sent as a message" in printed and "HAT083" in printed
    assert names["memory"].recall("c2")["content"].count("HAT069") == 1
    assert (tmp_path / "memory.sqlite3").exists()


def test_the_chroma_example_runs_as_written(tmp_path, monkeypatch):
    pytest.importorskip("chromadb")
    monkeypatch.chdir(tmp_path)

    names = run(example("from damc_core import DecisionMemory, Namespace\nfrom damc_core.retrieval"))
    memory = names["memory"]
    memory.observe({"role": "user", "content": "Refund order #W4923227 to my gift card"})

    assert "#W4923227" in memory.build(budget=300).messages[-1]["content"]
    assert (tmp_path / "memory-chroma").is_dir()


def test_the_chat_history_example_runs_as_written(tmp_path):
    """The snippet's ``prompt``, ``model`` and ``memory`` as its comment describes them; the model
    records what the chain sends it."""
    pytest.importorskip("langchain_core")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

    from damc_core import DecisionMemory, SQLiteStore

    received: list[list[object]] = []

    class RecordingModel(GenericFakeChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            received.append(list(messages))
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    prompt = ChatPromptTemplate.from_messages(
        [("system", "You book flights."), MessagesPlaceholder("history"), ("human", "{input}")]
    )
    model = RecordingModel(messages=iter([AIMessage("Which date?"), AIMessage("Booked HAT069.")]))
    memory = DecisionMemory(store=SQLiteStore(tmp_path / "memory.sqlite3"))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # langchain-core 1.x deprecates RunnableWithMessageHistory
        names = run(
            example("from langchain_core.runnables.history import RunnableWithMessageHistory"),
            prompt=prompt,
            model=model,
            memory=memory,
        )
    chain, config = names["chain"], {"configurable": {"session_id": "trip-7"}}
    chain.invoke({"input": "Book HAT069 for mia_li_3668"}, config)
    chain.invoke({"input": "May 20"}, config)

    second = received[-1]
    assert isinstance(second[0], SystemMessage) and second[0].content == "You book flights."
    assert [m.content for m in second[-3:]] == ["Book HAT069 for mia_li_3668", "Which date?", "May 20"]
    assert not any(isinstance(m, SystemMessage) for m in second[1:])
    assert isinstance(second[-1], HumanMessage)
    assert [m["content"] for m in memory.for_session("trip-7").messages()] == [
        "Book HAT069 for mia_li_3668",
        "Which date?",
        "May 20",
        "Booked HAT069.",
    ]


def run_async(code: str, **given: object) -> dict[str, object]:
    """Run ``code``, whose top-level ``await`` a notebook cell runs, with ``given`` defined."""
    namespace: dict[str, object] = {"__name__": "readme_example", **given}
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    asyncio.run(eval(compile(code, str(README), "exec", flags=flags), namespace))
    return namespace


def test_the_langchain_agent_example_runs_as_written(tmp_path, monkeypatch):
    """``model`` and ``tools`` are the user's: a scripted chat model that records what it is sent."""
    pytest.importorskip("langchain")
    from langchain_adapter.conftest import RecordingChatModel
    from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def book_reservation(flight_number: str, user_id: str) -> dict:
        """Book a flight for a user."""
        return {"reservation_id": "ZFA04Y", "flight_number": flight_number, "status": "confirmed"}

    call = {"name": "book_reservation", "args": {"flight_number": "HAT107", "user_id": "mia_li_3668"}}
    model = RecordingChatModel(
        script=[AIMessage("", tool_calls=[{**call, "id": "call_1"}]), AIMessage("Booked.")]
    )
    monkeypatch.chdir(tmp_path)

    run(example("from langchain.agents import create_agent"), model=model, tools=[book_reservation])

    system, *_, result = model.received[-1]
    assert isinstance(system, SystemMessage) and system.content == "You book flights."
    assert isinstance(result, ToolMessage) and result.content.startswith("[c2] -> reservation_id=ZFA04Y")
    assert model.tools_offered == ["recall", "book_reservation"]  # the middleware adds the recall tool
    assert (tmp_path / "memory.sqlite3").exists()


def _llamaindex_agent_given(tmp_path):
    """The user's ``llm`` (a scripted one that records its input), ``tools`` and ``memory``."""
    from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
    from llama_index.core.tools import FunctionTool
    from llamaindex_adapter.conftest import RecordingLLM

    from damc_core import DecisionMemory, SQLiteStore

    def book_reservation(flight_number: str, user_id: str) -> dict:
        """Book a flight for a user."""
        return {"reservation_id": "ZFA04Y", "flight_number": flight_number, "status": "confirmed"}

    call = ToolCallBlock(
        tool_call_id="call_1",
        tool_name="book_reservation",
        tool_kwargs={"flight_number": "HAT107", "user_id": "mia_li_3668"},
    )
    llm = RecordingLLM(
        script=[
            ChatMessage(role="assistant", blocks=[call]),
            ChatMessage(role="assistant", content="Booked: ZFA04Y."),
            ChatMessage(role="assistant", content="The card on file."),
        ]
    )
    memory = DecisionMemory(store=SQLiteStore(tmp_path / "memory.sqlite3"))
    return llm, [FunctionTool.from_defaults(book_reservation)], memory


def test_the_llamaindex_agent_example_runs_as_written(tmp_path, monkeypatch):
    pytest.importorskip("llama_index.core")
    llm, tools, _ = _llamaindex_agent_given(tmp_path)
    monkeypatch.chdir(tmp_path)

    names = run_async(
        example("from llama_index.core.agent.workflow import FunctionAgent"), llm=llm, tools=tools
    )

    *_, result = llm.received[-1]
    assert result.role == "tool" and result.content.startswith("[c2] -> reservation_id=ZFA04Y")
    recorded = names["memory"].messages()
    assert [m["role"] for m in recorded] == ["user", "assistant", "tool", "assistant"]  # each once
    assert recorded[-1]["content"] == "Booked: ZFA04Y."


def test_the_memory_block_example_runs_as_written(tmp_path):
    pytest.importorskip("llama_index.core")
    from llama_index.core.agent.workflow import FunctionAgent

    llm, tools, memory = _llamaindex_agent_given(tmp_path)

    names = run_async(
        example("from llama_index.core.memory import Memory"),
        FunctionAgent=FunctionAgent,
        llm=llm,
        tools=tools,
        memory=memory,
    )

    assert [m.content for m in llm.received[-1]][-2:] == ["Booked: ZFA04Y.", "Which card did I use?"]
    block = names["chat_memory"].memory_blocks[0]
    recorded = block.memory_for("trip-7").messages()  # the block's record of the Memory's session
    assert [m["role"] for m in recorded] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
