"""Cost of the Chroma card index as it grows: add and query throughput, query latency, memory.

For each size N (default 10k, 100k; 1M with ``--sizes ... 1000000``) and each mode (``embedded``:
a ``PersistentClient`` folder; ``server``: a ``chroma run`` process on loopback started by this
script), the script fills one :class:`~damc_core.retrieval.CardIndex` with N synthetic cards of
one namespace (plus 1 % in a second namespace), then times ``--queries`` searches of each kind
through ``CardIndex.search``: vector top-16 alone, and hybrid (vector top-16 plus two
exact-identifier lookups, as a decision makes them, by id through the index's ``_terms`` twin;
each must find its target card).

Embedding a million texts with MiniLM takes far too long on 2 cores, so the index is measured with
synthetic vectors: random unit vectors (384 dimensions, as MiniLM's) seeded from each card's text.
The embedder's own throughput is measured separately on real card-like sentences
(``--embed-texts``): model load time and sentences per second, MiniLM and the hashing fallback.

Memory: resident set size of this process (embedded) or of the server process (server), read from
``/proc/PID/status`` after the fill, and the size of the data folder on disk.

Usage::

    nice python benchmarks/chroma_retrieval.py --sizes 10000 100000 --json /tmp/chroma.json
    nice python benchmarks/chroma_retrieval.py --sizes 1000000 --modes embedded --every 100000 \
        --embed-texts 0 --data ~/damc-1m   # resumable: run it again to continue the fill
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from damc_core import Card, CardKind, Namespace
from damc_core.retrieval import CardIndex, HashingEmbedder, MiniLMEmbedder
from damc_core.stores.chroma import ChromaConfig

DIMENSION = 384
BATCH = 5000
BENCH = Namespace(user="bench", session="main")
OTHER = Namespace(user="bench", session="other")


class SyntheticEmbedder:
    """Random unit vectors seeded from the text: the index's cost without the model's."""

    name = "synthetic"
    dimension = DIMENSION

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(DIMENSION)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def card(seq: int) -> Card:
    reservation = f"R{seq:07d}"
    return Card(
        id=f"c{seq}",
        record_id=f"r{seq}",
        seq=seq,
        created_at=1_715_785_200.0 + seq,
        kind=CardKind.TOOL_RESULT,
        summary=f"[c{seq}] get_reservation_details(reservation_id={reservation}) -> status=confirmed "
        f"flight=HAT{seq % 997:03d} date=2024-05-{seq % 28 + 1:02d} total={seq % 900 + 100}",
        tool_name="get_reservation_details",
    )


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[int(share * (len(ordered) - 1))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def start_server(path: Path) -> tuple[subprocess.Popen[bytes], ChromaConfig]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    chroma = Path(sys.executable).parent / "chroma"
    process = subprocess.Popen(
        [str(chroma), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    config = ChromaConfig(host="127.0.0.1", port=port)
    for _ in range(300):
        try:
            config.client().heartbeat()
            return process, config
        except Exception:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("chroma server did not start")


def time_queries(index: CardIndex, filled: int, queries: int) -> dict[str, float]:
    """Vector and hybrid search latency over the first ``filled`` cards."""
    rng = np.random.default_rng(0)
    vector: list[float] = []
    hybrid: list[float] = []
    for _ in range(queries):
        target = int(rng.integers(filled))
        query = f"decision focus: reservation r{target:07d}"
        began = time.perf_counter()
        index.search(BENCH, query, k=16)
        vector.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        hits = index.search(BENCH, query, terms=[f"r{target:07d}", f"hat{target % 997:03d}"], k=16)
        hybrid.append((time.perf_counter() - began) * 1000)
        assert any(h.card_id == f"c{target}" for h in hits), "exact id lookup missed its card"
    return {
        "vector_p50_ms": round(statistics.median(vector), 1),
        "vector_p95_ms": round(percentile(vector, 0.95), 1),
        "hybrid_p50_ms": round(statistics.median(hybrid), 1),
        "hybrid_p95_ms": round(percentile(hybrid, 0.95), 1),
        "hybrid_queries_per_s": round(1000 / statistics.mean(hybrid), 1),
    }


def run(size: int, mode: str, queries: int, data: Path, every: int) -> list[dict[str, object]]:
    """Fill ``data`` up to ``size`` cards, measuring at every ``every`` cards and at the end.

    A folder that already holds part of the fill is continued from its card count, and the
    measurements made before are kept in ``data/measured.jsonl``: a million cards can be filled
    over several runs.
    """
    server = None
    if mode == "server":
        server, config = start_server(data)
    else:
        config = ChromaConfig(path=data)
    log = data / "measured.jsonl"
    try:
        index = CardIndex(config, embedder=SyntheticEmbedder())
        if index.collection(OTHER).count() == 0:
            index.add(OTHER, [card(s) for s in range(max(1, size // 100))])
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        filled = int(rows[-1]["cards"]) if rows else 0  # cards past the last measured mark: added again
        marks = sorted({*range(every, size, every), size} if every else {size})
        memory_pid = server.pid if server is not None else os.getpid()
        for mark in (m for m in marks if m > filled):
            started = time.perf_counter()
            for start in range(filled, mark, BATCH):
                index.add(BENCH, [card(s) for s in range(start, min(mark, start + BATCH))])
            add_seconds = time.perf_counter() - started
            row: dict[str, object] = {
                "mode": mode,
                "cards": mark,
                "add_cards_per_s": round((mark - filled) / add_seconds),
                "add_seconds": round(add_seconds, 1),
                **time_queries(index, mark, queries),
                "rss_mb": round(rss_mb(memory_pid)),
                "disk_mb": round(folder_mb(data)),
            }
            filled = mark
            rows.append(row)
            with log.open("a") as out:
                out.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
        return rows
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)


def embedding_throughput(count: int) -> list[dict[str, object]]:
    texts = [card(s).summary.split("] ", 1)[1] for s in range(count)]
    rows = []
    for name, make in (("minilm-int8", MiniLMEmbedder), ("hashing", HashingEmbedder)):
        began = time.perf_counter()
        embedder = make()
        loaded = time.perf_counter() - began
        embedder.embed(texts[:32])
        began = time.perf_counter()
        embedder.embed(texts)
        seconds = time.perf_counter() - began
        rows.append({"embedder": name, "load_s": round(loaded, 2), "texts_per_s": round(count / seconds)})
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--modes", nargs="+", default=["embedded", "server"], choices=["embedded", "server"])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--embed-texts", type=int, default=2000, help="0 skips the embedder measurement")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--every", type=int, default=0, help="also measure at every this many cards during the fill"
    )
    parser.add_argument(
        "--data", help="keep the filled collections in this folder; a later run continues them"
    )
    args = parser.parse_args(argv)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    results: dict[str, object] = {}
    if args.embed_texts:
        results["embedders"] = embedding_throughput(args.embed_texts)
        for row in results["embedders"]:  # type: ignore[attr-defined]
            print(f"embedder {row['embedder']}: load {row['load_s']} s, {row['texts_per_s']} texts/s")
    root = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="damc-chroma-bench-"))
    rows = []
    try:
        for size in args.sizes:
            for mode in args.modes:
                data = root / f"{mode}-{size}"
                data.mkdir(parents=True, exist_ok=True)
                rows.extend(run(size, mode, args.queries, data, args.every))
    finally:
        if not args.data:
            shutil.rmtree(root, ignore_errors=True)
    results["index"] = rows
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
