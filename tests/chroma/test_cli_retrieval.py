"""``damc replay``, ``eval`` and ``inspect --chroma DIR``: a retrieval valuator on an embedded index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from damc_core import Namespace
from damc_core.cli import main
from damc_core.retrieval import CardIndex, HashingEmbedder
from damc_core.stores.chroma import ChromaConfig

DEMO = Path(__file__).resolve().parents[2] / "damc_core" / "data" / "airline_demo.json"


def test_replay_with_retrieval_writes_every_decision_point(tmp_path: Path) -> None:
    trace = tmp_path / "two.json"
    trace.write_text(json.dumps(json.loads(DEMO.read_text())[:2]))
    plain, retrieved = tmp_path / "plain.jsonl", tmp_path / "retrieved.jsonl"
    assert main(["replay", str(trace), "--budget", "500", "--out", str(plain)]) == 0
    args = ["replay", str(trace), "--budget", "500", "--out", str(retrieved)]
    assert main([*args, "--chroma", str(tmp_path / "index"), "--embedder", "hashing"]) == 0

    def points(path: Path) -> list[tuple[int, int]]:
        return [(p["traj"], p["step"]) for p in map(json.loads, path.read_text().splitlines())]

    assert points(retrieved) == points(plain) and points(plain)
    index = CardIndex(ChromaConfig(path=tmp_path / "index"), embedder=HashingEmbedder())
    # Cards are indexed when a decision asks for them; the second conversation calls no tool.
    assert {"c0", "c1"} <= index.ids(Namespace(user="replay", session="traj-0"))
    assert index.ids(Namespace(user="replay", session="traj-1")) == set()


def test_a_folder_indexed_before_gives_the_contexts_of_a_new_one(tmp_path: Path) -> None:
    demo = json.loads(DEMO.read_text())
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps(demo[2:4]))
    second.write_text(json.dumps(demo[:2]))
    index, fresh, reused = tmp_path / "index", tmp_path / "fresh.jsonl", tmp_path / "reused.jsonl"
    common = ["--budget", "300", "--embedder", "hashing"]
    assert main(["replay", str(first), "--out", str(tmp_path / "x"), "--chroma", str(index), *common]) == 0
    assert main(["replay", str(second), "--out", str(reused), "--chroma", str(index), *common]) == 0
    assert main(["replay", str(second), "--out", str(fresh), "--chroma", str(tmp_path / "new"), *common]) == 0
    assert reused.read_text() == fresh.read_text()


def test_eval_with_retrieval_prints_its_table_and_indexes_the_cards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "two.json"
    trace.write_text(json.dumps(json.loads(DEMO.read_text())[:2]))

    code = main(
        ["eval", str(trace), "--budget", "500", "--chroma", str(tmp_path / "index"), "--embedder", "hashing"]
    )

    assert code == 0
    out = capsys.readouterr().out
    assert "damc @500" in out and "full history" in out and "decision points: 8" in out
    index = CardIndex(ChromaConfig(path=tmp_path / "index"), embedder=HashingEmbedder())
    assert {"c0", "c1"} <= index.ids(Namespace(user="replay", session="traj-0"))


def test_inspect_with_retrieval_shows_each_cards_retrieval_score(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "two.json"
    trace.write_text(json.dumps(json.loads(DEMO.read_text())[:2]))
    inspect = ["inspect", str(trace), "--step", "8"]

    assert main(inspect) == 0
    assert "retrieval=" not in capsys.readouterr().out
    assert main([*inspect, "--chroma", str(tmp_path / "index"), "--embedder", "hashing"]) == 0
    shown = capsys.readouterr().out
    assert "retrieval=" in shown and "retrieval: similarity" in shown
