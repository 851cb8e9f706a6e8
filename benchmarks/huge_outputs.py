"""Time to observe one huge event: a 10 MB JSON list, the same rows as a Markdown table, a search
results page as raw HTML, 10 MB of dense prose as a tool result and as a user paste, then build a
context. The agent waits for
``observe`` and ``build``, so these bound how long one oversized tool output can stall a step.

The prose is the worst case for free-text reading: every sentence holds dates, amounts and codes.

Usage::

    python benchmarks/huge_outputs.py               # 10 MB each
    python benchmarks/huge_outputs.py --mb 2 20
"""

from __future__ import annotations

import argparse
import json
import random
import time

from damc_core import DecisionMemory, InMemoryStore, MemorySettings, Namespace

WORDS = [
    "the",
    "flight",
    "Booking",
    "Paris",
    "order",
    "ID",
    "status",
    "confirmed",
    "Alice",
    "price",
    "$120.50",
    "at",
    "10:45",
    "on",
    "2024-05-14",
    "ZX9QK2",
    "report",
    "Chapter",
    "Section",
]


def dense_prose(chars: int, rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(chars // 5)]
    return " ".join(words)[:chars]


def json_rows(chars: int) -> str:
    rows, size, i = [], 2, 0
    while size < chars:
        row = {"id": f"R{i:07d}", "name": WORDS[i % len(WORDS)], "price": i * 1.5, "status": "ok"}
        size += len(json.dumps(row)) + 2
        rows.append(row)
        i += 1
    return json.dumps(rows)


def markdown_rows(chars: int) -> str:
    """The rows of :func:`json_rows` as a Markdown table, as tools written for a model print them."""
    lines, size, i = ["| id | name | price | status |", "|---|---|---:|---|"], 40, 0
    while size < chars:
        lines.append(f"| R{i:07d} | {WORDS[i % len(WORDS)]} | {i * 1.5} | ok |")
        size += len(lines[-1]) + 1
        i += 1
    return "\n".join(lines)


def html_results(chars: int) -> str:
    """A shop's search results page, as ``requests.get(url).text`` returns it: one linked row per
    product, with its SKU in an attribute and its price in a span."""
    rows, size, i = [], 120, 0
    while size < chars:
        rows.append(
            f'<li class="result"><a href="/p/{i:05d}?ref=search" data-sku="SKU-{i:05d}">'
            f'<span class="title">Widget {i}</span><span class="price">${10 + i % 50}.99</span></a></li>'
        )
        size += len(rows[-1])
        i += 1
    head = "<!DOCTYPE html><html><head><title>Widgets</title></head>"
    return f"{head}<body><ul>{''.join(rows)}</ul></body></html>"


def run(label: str, content: str, role: str) -> None:
    memory = DecisionMemory(
        namespace=Namespace(user="bench", session=label.replace(" ", "_")),
        store=InMemoryStore(),
        settings=MemorySettings(budget=1500),
    )
    memory.observe({"role": "user", "content": "Look this up for me."})
    if role == "tool":
        call = {"id": "t1", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}
        memory.observe({"role": "assistant", "content": None, "tool_calls": [call]})
        message = {"role": "tool", "tool_call_id": "t1", "content": content}
    else:
        message = {"role": "user", "content": content}
    started = time.perf_counter()
    card = memory.observe(message)
    observed = time.perf_counter() - started
    started = time.perf_counter()
    built = memory.build()
    building = time.perf_counter() - started
    print(
        f"{label:>24} {len(content) / 1e6:6.1f} MB  observe {observed:6.2f} s  build {building:5.2f} s  "
        f"card {card.tokens:5d} tokens  context {built.total_tokens:5d} tokens"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, nargs="+", default=[10.0], help="sizes in megabytes")
    args = parser.parse_args()
    rng = random.Random(0)
    for mb in args.mb:
        chars = int(mb * 1_000_000)
        run("JSON list (tool)", json_rows(chars), "tool")
        run("Markdown table (tool)", markdown_rows(chars), "tool")
        run("HTML page (tool)", html_results(chars), "tool")
        prose = dense_prose(chars, rng)
        run("dense prose (tool)", prose, "tool")
        run("dense prose (user paste)", prose, "user")


if __name__ == "__main__":
    main()
