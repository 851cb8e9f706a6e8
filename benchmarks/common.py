"""Names and message builders shared by the benchmark event generators."""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIRST = [
    "Mia",
    "Omar",
    "Sofia",
    "Yusuf",
    "Lucas",
    "Chen",
    "Aarav",
    "Emma",
    "Noah",
    "Ivan",
    "Fatima",
    "Raj",
    "Lena",
    "Mateo",
    "Ava",
    "Kenji",
    "Amelia",
    "Daiki",
    "Olivia",
    "Ethan",
    "Harper",
    "Liam",
]
LAST = [
    "Li",
    "Rossi",
    "Garcia",
    "Kim",
    "Brown",
    "Nguyen",
    "Patel",
    "Smith",
    "Ahmed",
    "Silva",
    "Muller",
    "Lopez",
    "Sato",
    "Khan",
    "Davis",
    "Moore",
    "Wilson",
    "Taylor",
    "Thomas",
    "Lee",
    "Martin",
]


def call_message(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style assistant message making one tool call."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def result_message(call_id: str, name: str, result: object) -> dict[str, Any]:
    """The tool message answering ``call_id``; non-string results are sent as JSON."""
    content = result if isinstance(result, str) else json.dumps(result)
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


def conflict_problems(trajectories: list[dict[str, Any]]) -> list[str]:
    """Problems with the conflict records (empty when every old value precedes its new one)."""
    problems = []
    for i, item in enumerate(trajectories):
        texts = [json.dumps(m) for m in item["traj"]]
        for c in item["conflicts"]:
            before = "\n".join(texts[: c["from_step"]])
            if c["old"] not in before:
                problems.append(f"traj {i}: old value {c['old']} not seen before step {c['from_step']}")
            if c["new"] in before:
                problems.append(f"traj {i}: new value {c['new']} already seen before step {c['from_step']}")
            if c["new"] not in texts[c["from_step"]]:
                problems.append(f"traj {i}: new value {c['new']} not in step {c['from_step']}")
    return problems


class TrajectoryBuilder:
    """Builds one trajectory step by step: its messages, the value changes later calls must
    follow (``conflicts``) and its size, against a target in tokens (``chars_per_token`` of the
    generator's text). Values drawn through ``unique`` are never drawn twice in a trajectory."""

    def __init__(self, rng: random.Random, target_tokens: int, chars_per_token: float) -> None:
        self.rng = rng
        self.chars_per_token = chars_per_token
        self.target_chars = int(target_tokens * chars_per_token)
        self.messages: list[dict[str, Any]] = []
        self.conflicts: list[dict[str, Any]] = []
        self.chars = 0
        self.calls = 0
        self.used: set[str] = set()

    def unique(self, make: Any) -> str:
        for _ in range(1000):
            value = str(make())
            if value not in self.used:
                self.used.add(value)
                return value
        raise RuntimeError("could not draw a unique value")

    def add(self, message: dict[str, Any]) -> int:
        self.messages.append(message)
        self.chars += len(json.dumps(message))
        return len(self.messages) - 1

    def user(self, text: str) -> int:
        return self.add({"role": "user", "content": text})

    def say(self, text: str) -> int:
        return self.add({"role": "assistant", "content": text})

    def tool(self, name: str, arguments: dict[str, Any], result: object) -> int:
        """An assistant call and its tool result; returns the index of the result message."""
        self.calls += 1
        call_id = f"call_{self.rng.getrandbits(64):016x}"
        self.add(call_message(call_id, name, arguments))
        return self.add(result_message(call_id, name, result))

    def conflict(self, step: int, old: object, new: object, what: str) -> None:
        self.conflicts.append({"from_step": step, "old": str(old), "new": str(new), "what": what})

    @property
    def tokens(self) -> int:
        return int(self.chars / self.chars_per_token)


def generator_main(
    argv: list[str] | None,
    *,
    doc: str | None,
    make: Callable[[int, int, int], list[dict[str, Any]]],
    n: int,
    target_tokens: int,
    spread: str,
    describe: Callable[[dict[str, Any]], str],
) -> int:
    """The command line of a trajectory generator: ``--out --n --seed --target-tokens``, the
    trajectories ``make(n, seed, target_tokens)`` checked, written as JSON and each described."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output JSON path")
    parser.add_argument("--n", type=int, default=n, help="trajectories (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--target-tokens",
        type=int,
        default=target_tokens,
        help=f"approximate tokens per trajectory (default %(default)s, {spread})",
    )
    args = parser.parse_args(argv)
    trajectories = make(args.n, args.seed, args.target_tokens)
    for problem in conflict_problems(trajectories):
        print(f"warning: {problem}", file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(trajectories, ensure_ascii=False))
    for i, item in enumerate(trajectories):
        print(f"traj {i}: {describe(item)}")
    print(f"wrote {len(trajectories)} trajectories to {args.out}")
    return 0
