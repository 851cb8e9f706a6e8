"""Memory a long-running server keeps for conversations it served and dropped.

One process serves many short conversations (a few turns each, then the caller lets go of them)
through each surface: ``DecisionMemory.for_session``, a ``DamcMiddleware`` agent with one
checkpointer thread per conversation, a ``DamcMiddleware`` made per request, a
``DamcCallbackHandler`` per request and a LlamaIndex ``DamcMemory`` per session. Python's heap
(``tracemalloc``, after a full collection) is read after each round; once the bounded caches are
warm (a few thousand conversations: the text caches hold 65,536 entries each, the valuation memos
4,096 cards), it must stop growing with the number of conversations served.

Usage::

    python benchmarks/server_memory.py --sessions 1000 --rounds 6
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from damc_core import DecisionMemory, Namespace, SQLiteStore

Serve = Callable[[int], None]


def orders(n: int) -> str:
    return json.dumps(
        [{"order_id": f"#W{n}{j:02d}", "item": f"Lamp {j}", "price": 20 + j} for j in range(20)]
    )


def core_sessions(store: SQLiteStore) -> Serve:
    root = DecisionMemory(namespace=Namespace("acme", "root"), store=store)

    def serve(n: int) -> None:
        memory = root.for_session(f"core-{n}")
        memory.observe({"role": "user", "content": f"Where are the orders of user_{n}?"})
        call = {"id": "c1", "type": "function", "function": {"name": "list_orders", "arguments": "{}"}}
        memory.observe({"role": "assistant", "content": None, "tool_calls": [call]})
        memory.observe({"role": "tool", "tool_call_id": "c1", "content": orders(n)})
        memory.build(budget=600)
        memory.observe({"role": "assistant", "content": f"User {n} has 20 orders."})

    return serve


def langchain_surfaces(store: SQLiteStore) -> dict[str, Serve]:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    from damc_langchain import DamcCallbackHandler, DamcMiddleware

    class TwoStepModel(BaseChatModel):
        """Calls the tool once, then answers."""

        @property
        def _llm_type(self) -> str:
            return "two-step"

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> TwoStepModel:
            return self

        def _generate(self, messages: list[BaseMessage], stop: Any = None, **kwargs: Any) -> ChatResult:
            if messages[-1].type == "tool":
                reply = AIMessage("Found them.")
            else:
                reply = AIMessage("", tool_calls=[{"name": "list_orders", "args": {"user": "u"}, "id": "c1"}])
            return ChatResult(generations=[ChatGeneration(message=reply)])

    @tool
    def list_orders(user: str) -> str:
        """A user's orders."""
        return orders(len(user))

    model = TwoStepModel()
    shared = DamcMiddleware(DecisionMemory(namespace=Namespace("acme", "agent"), store=store))
    threaded = create_agent(model, [list_orders], middleware=[shared])

    def thread(n: int) -> None:  # no checkpointer: one would keep every thread, the server's choice
        config = {"configurable": {"thread_id": f"lc-{n}"}}
        threaded.invoke({"messages": [HumanMessage(f"Orders of user_{n}?")]}, config)

    def per_request(n: int) -> None:
        memory = DecisionMemory(namespace=Namespace(f"user-{n}", "chat"), store=store)
        agent = create_agent(model, [list_orders], middleware=[DamcMiddleware(memory)])
        agent.invoke({"messages": [HumanMessage(f"Orders of user_{n}?")]})

    def handler(n: int) -> None:
        memory = DecisionMemory(namespace=Namespace(f"user-{n}", "callbacks"), store=store)
        agent = create_agent(model, [list_orders])
        agent.invoke(
            {"messages": [HumanMessage(f"Orders of user_{n}?")]},
            {"callbacks": [DamcCallbackHandler(memory)]},
        )

    return {"middleware threads": thread, "middleware per request": per_request, "callback handler": handler}


def llamaindex_sessions(store: SQLiteStore) -> Serve:
    from llama_index.core.base.llms.types import ChatMessage

    from damc_llamaindex import DamcMemory

    root = DecisionMemory(namespace=Namespace("acme", "llama"), store=store)

    def serve(n: int) -> None:
        memory = DamcMemory(memory=root.for_session(f"li-{n}"), budget=600)
        memory.put(ChatMessage(role="user", content=f"Orders of user_{n}?"))
        memory.get()
        memory.put(ChatMessage(role="assistant", content=f"User {n} has 20 orders."))

    return serve


def measure(serve: Serve, sessions: int, rounds: int) -> list[int]:
    """Heap bytes after each round of ``sessions`` new conversations."""
    heap = []
    served = 0
    for _ in range(rounds):
        for _ in range(sessions):
            serve(served)
            served += 1
        gc.collect()
        heap.append(tracemalloc.get_traced_memory()[0])
    return heap


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=400, help="conversations per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", help="measure the surfaces whose name holds this text")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder, SQLiteStore(Path(folder) / "server.sqlite3") as store:
        surfaces = {"core for_session": core_sessions(store)}
        try:
            surfaces.update(langchain_surfaces(store))
        except ImportError:
            print("langchain not installed: its surfaces are left out")
        try:
            surfaces["llamaindex DamcMemory"] = llamaindex_sessions(store)
        except ImportError:
            print("llama-index not installed: its surface is left out")
        tracemalloc.start()
        for name, serve in surfaces.items():
            if args.only and args.only not in name:
                continue
            heap = measure(serve, args.sessions, args.rounds)
            per_session = (heap[-1] - heap[-2]) / args.sessions if len(heap) > 1 else 0.0
            results[name] = {
                "heap_kib": [h // 1024 for h in heap],
                "last_round_bytes_per_session": per_session,
            }
            rounds = " ".join(f"{h // 1024:>7}" for h in heap)
            print(f"{name:<24} heap KiB per round {rounds}   last round {per_session:8.0f} B/session")
        tracemalloc.stop()
    if args.json:
        args.json.write_text(
            json.dumps({"sessions": args.sessions, "rounds": args.rounds, "results": results})
        )
    return results


if __name__ == "__main__":
    main()
