"""Per-step overhead of DamcMiddleware on a ``create_agent`` agent, against the same agent bare.

The model is a scripted chat model that answers instantly, so the difference between the two runs
is what DAMC adds per step (observing the new messages and building the context).

Usage::

    python benchmarks/langchain_overhead.py --steps 60 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from damc_core import DecisionMemory, InMemoryStore, MemorySettings
from damc_langchain import DamcMiddleware


class ScriptedModel(BaseChatModel):
    script: list[AIMessage]
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        reply = self.script[self.calls]
        self.calls += 1
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def search_hotels(city: str, page: int) -> str:
    """Search hotels in a city."""
    return json.dumps(
        [
            {
                "hotel_id": f"H{page:03d}{i:02d}",
                "city": city,
                "price": 80 + i * 7,
                "rating": 3 + i % 3,
                "address": f"{i} Main Street",
                "available": i % 4 != 0,
            }
            for i in range(12)
        ]
    )


def script(steps: int) -> list[AIMessage]:
    calls = [
        AIMessage(
            "", tool_calls=[{"name": "search_hotels", "args": {"city": "Austin", "page": i}, "id": f"c{i}"}]
        )
        for i in range(steps)
    ]
    return [*calls, AIMessage("done")]


def run(steps: int, with_damc: bool) -> float:
    middleware = []
    if with_damc:
        memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=1500))
        middleware = [DamcMiddleware(memory)]
    agent = create_agent(ScriptedModel(script=script(steps)), [search_hotels], middleware=middleware)
    start = time.perf_counter()
    agent.invoke(
        {"messages": [HumanMessage("Find me a hotel in Austin")]}, {"recursion_limit": 4 * steps + 10}
    )
    return (time.perf_counter() - start) * 1000 / (steps + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    run(5, True)  # warm imports and caches
    bare = [run(args.steps, False) for _ in range(args.repeats)]
    damc = [run(args.steps, True) for _ in range(args.repeats)]
    b, d = statistics.median(bare), statistics.median(damc)
    print(f"steps per run {args.steps}, runs {args.repeats}")
    print(f"bare agent   {b:7.2f} ms per step (median of runs)")
    print(f"with DAMC    {d:7.2f} ms per step")
    print(f"overhead     {d - b:7.2f} ms per step")


if __name__ == "__main__":
    main()
