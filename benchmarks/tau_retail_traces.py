"""Retail-domain trajectories from a tau-bench checkout: the tasks' gold actions run on its retail
database through its own tool implementations, so every tool output is what the retail
environment returns.

A second domain beside the airline conversations: orders with several items, products with
dozens of variants keyed by 10-digit item ids, users who list their orders. Each trajectory is
the task's instruction as the user's first turn, then each gold action as an assistant tool
call with its real result. Before each action that changes an order (cancel, modify, return,
exchange), the assistant restates the action and the user says yes, as the retail policy
requires. Tasks' gold actions hold no exploration, so these are shorter than recorded agent
runs.

The tau-bench code and data are read from ``--tau-bench`` (a clone of
``sierra-research/tau-bench``) and never copied; nothing is downloaded.

Usage::

    git clone https://github.com/sierra-research/tau-bench /tmp/tau-bench
    python benchmarks/tau_retail_traces.py --tau-bench /tmp/tau-bench --out retail.json
    damc eval retail.json --budget 400 500
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

WRITES = ("cancel_", "modify_", "return_", "exchange_")
"""Tools that change an order: the policy asks for the user's yes first."""


def load_retail(root: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(database, tools by name, policy) from a tau-bench checkout, importing only the
    retail tools, data and task modules (the package's own ``__init__`` files pull in model
    clients, which are not needed here)."""
    for name in ("tau_bench", "tau_bench.envs", "tau_bench.envs.retail"):
        package = types.ModuleType(name)
        package.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules.setdefault(name, package)
    sys.path.insert(0, str(root))
    tools = importlib.import_module("tau_bench.envs.retail.tools").ALL_TOOLS
    data = importlib.import_module("tau_bench.envs.retail.data").load_data()
    policy = (root / "tau_bench" / "envs" / "retail" / "wiki.md").read_text()
    return data, {t.get_info()["function"]["name"]: t for t in tools}, policy


def tasks_of(split: str) -> list[Any]:
    module = importlib.import_module(f"tau_bench.envs.retail.tasks_{split}")
    return list(getattr(module, f"TASKS_{split.upper()}"))


def trajectory(
    index: int, task: Any, database: dict[str, Any], tools: dict[str, Any], policy: str
) -> dict[str, Any]:
    data = copy.deepcopy(database)  # write actions change the database
    instruction = task.instruction.replace("You are", "I am", 1)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": policy},
        {"role": "user", "content": instruction},
    ]
    for step, action in enumerate(task.actions):
        if action.name.startswith(WRITES):
            details = "; ".join(f"{key}: {json.dumps(value)}" for key, value in action.kwargs.items())
            confirm = f"To confirm, I will {action.name.replace('_', ' ')} with {details}. Shall I proceed?"
            messages.append({"role": "assistant", "content": confirm})
            messages.append({"role": "user", "content": "Yes, please go ahead."})
        call_id = f"call_{index}_{step}"
        function = {"name": action.name, "arguments": json.dumps(action.kwargs)}
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            }
        )
        try:
            result = tools[action.name].invoke(data=data, **action.kwargs)
        except (
            Exception
        ) as exc:  # a gold action the database rejects is an error result, as in the environment
            result = f"Error: {exc}"
        messages.append({"role": "tool", "tool_call_id": call_id, "name": action.name, "content": result})
    messages.append({"role": "assistant", "content": "Done. Is there anything else I can help with?"})
    return {"traj": messages, "task_id": index}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tau-bench", type=Path, required=True, help="a clone of sierra-research/tau-bench")
    parser.add_argument("--split", default="test", choices=["test", "dev", "train"])
    parser.add_argument("--n", type=int, default=None, help="first N tasks (default all)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    database, tools, policy = load_retail(args.tau_bench)
    tasks = tasks_of(args.split)[: args.n]
    out = [trajectory(i, task, database, tools, policy) for i, task in enumerate(tasks)]
    args.out.write_text(json.dumps(out))
    print(f"{len(out)} trajectories, {sum(len(t['traj']) for t in out)} messages -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
