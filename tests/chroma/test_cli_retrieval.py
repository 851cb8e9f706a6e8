"""``damc replay --chroma DIR`` replays a trace with a retrieval valuator on an embedded index."""

from __future__ import annotations

import json
from pathlib import Path

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
