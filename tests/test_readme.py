"""The README's self-contained Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def example(first_line: str) -> str:
    """The README's Python block that starts with ``first_line``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    (found,) = [b for b in blocks if b.startswith(first_line)]
    return found


def run(code: str) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "readme_example"}
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
