"""The README's self-contained Python examples run as written."""

from __future__ import annotations

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
