"""Per-step overhead of DAMC's LangChain surfaces against the same agents bare.

``DamcMiddleware`` on a ``create_agent`` agent, and ``DamcCallbackHandler`` on a langchain-classic
``AgentExecutor``.

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
from damc_langchain import DamcCallbackHandler, DamcMiddleware


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


def run_executor(steps: int, with_damc: bool) -> float:
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

    prompt = ChatPromptTemplate.from_messages(
        [("system", "You find hotels."), ("human", "{input}"), MessagesPlaceholder("agent_scratchpad")]
    )
    model = ScriptedModel(script=script(steps))
    executor = AgentExecutor(
        agent=create_tool_calling_agent(model, [search_hotels], prompt),
        tools=[search_hotels],
        max_iterations=None,
    )
    callbacks = [DamcCallbackHandler(DecisionMemory(store=InMemoryStore()))] if with_damc else []
    start = time.perf_counter()
    executor.invoke({"input": "Find me a hotel in Austin"}, {"callbacks": callbacks})
    return (time.perf_counter() - start) * 1000 / (steps + 1)


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
    run_executor(5, True)
    print(f"steps per run {args.steps}, runs {args.repeats}, ms per step (median of runs)")
    for label, measure in (
        ("create_agent + DamcMiddleware", run),
        ("AgentExecutor + DamcCallbackHandler", run_executor),
    ):
        bare = statistics.median(measure(args.steps, False) for _ in range(args.repeats))
        damc = statistics.median(measure(args.steps, True) for _ in range(args.repeats))
        print(f"{label:38} bare {bare:7.2f}  with DAMC {damc:7.2f}  overhead {damc - bare:6.2f}")


if __name__ == "__main__":
    main()
