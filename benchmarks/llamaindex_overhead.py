"""Per-step overhead of DAMC's LlamaIndex surfaces against the same ``FunctionAgent`` bare.

``DamcLLM`` plus ``DamcMemory`` (context assembled for every model call), and ``DamcSpanHandler``
alone (tool results recorded from instrumentation spans). ``DamcMemoryBlock`` is measured against
llama-index-core's ``Memory`` alone, both holding an earlier conversation of as many searches
(flushed from ``Memory``'s queue into the block's cards).

The LLM is a scripted function-calling model that answers instantly, so the difference between
the runs is what DAMC adds per step.

Usage::

    python benchmarks/llamaindex_overhead.py --steps 60 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, LLMMetadata, ToolCallBlock
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.tools import FunctionTool

from damc_core import DecisionMemory, InMemoryStore, MemorySettings
from damc_llamaindex import DamcLLM, DamcMemory, DamcMemoryBlock, DamcSpanHandler, offline_tokenizer


class ScriptedLLM(FunctionCallingLLM):
    script: list[ChatMessage]
    calls: int = 0

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=True, is_function_calling_model=True)

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.calls += 1
        return ChatResponse(message=self.script[self.calls - 1])

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self.chat(messages)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        yield self.chat(messages)

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        response = self.chat(messages)

        async def chunks() -> Any:
            yield response

        return chunks()

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _prepare_chat_with_tools(
        self, tools: Sequence[Any], user_msg: Any = None, chat_history: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        return {"messages": list(chat_history or [])}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        return [
            ToolSelection(tool_id=b.tool_call_id or "", tool_name=b.tool_name, tool_kwargs=b.tool_kwargs)
            for b in response.message.blocks
            if isinstance(b, ToolCallBlock) and isinstance(b.tool_kwargs, dict)
        ]


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


TOOLS = [FunctionTool.from_defaults(search_hotels)]


def script(steps: int) -> list[ChatMessage]:
    calls = [
        ChatMessage(
            role="assistant",
            blocks=[
                ToolCallBlock(
                    tool_call_id=f"c{i}", tool_name="search_hotels", tool_kwargs={"city": "Austin", "page": i}
                )
            ],
        )
        for i in range(steps)
    ]
    return [*calls, ChatMessage(role="assistant", content="done")]


def earlier_conversation(steps: int) -> list[ChatMessage]:
    """A finished search conversation, as ``Memory`` holds one: each call and its result."""
    messages = [ChatMessage(role="user", content="Find me a hotel in Dallas")]
    for i in range(steps):
        call = ToolCallBlock(
            tool_call_id=f"e{i}", tool_name="search_hotels", tool_kwargs={"city": "Dallas", "page": i}
        )
        messages += [
            ChatMessage(role="assistant", blocks=[call]),
            ChatMessage(
                role="tool", content=search_hotels("Dallas", i), additional_kwargs={"tool_call_id": f"e{i}"}
            ),
        ]
    return [*messages, ChatMessage(role="assistant", content="H00001 in Dallas is free.")]


BLOCK_MS: list[float] = []
"""Milliseconds spent inside the block's own get and put, per run."""


class TimedBlock(DamcMemoryBlock):
    """The block, timing its own work: ``Memory`` renders its template of blocks on every get
    that any block fills, which is ``Memory``'s cost with any block, not DAMC's."""

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        start = time.perf_counter()
        try:
            return await super()._aget(messages, **block_kwargs)
        finally:
            BLOCK_MS[-1] += (time.perf_counter() - start) * 1000

    async def _aput(self, messages: list[ChatMessage]) -> None:
        start = time.perf_counter()
        try:
            await super()._aput(messages)
        finally:
            BLOCK_MS[-1] += (time.perf_counter() - start) * 1000


def run(steps: int, surface: str) -> float:
    llm: Any = ScriptedLLM(script=script(steps))
    memory: Any = ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())
    damc = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=1500))
    if surface == "proxy":
        llm, memory = DamcLLM(llm=llm, memory=damc), DamcMemory(memory=damc)
    if surface in ("memory", "block"):
        blocks = [TimedBlock(memory=damc)] if surface == "block" else []
        memory = Memory.from_defaults(
            token_limit=4000, memory_blocks=blocks, tokenizer_fn=offline_tokenizer()
        )
        BLOCK_MS.append(0.0)
        memory.put_messages(earlier_conversation(steps))
        BLOCK_MS[-1] = 0.0  # the run's own gets and puts from here on
    agent = FunctionAgent(tools=TOOLS, llm=llm)
    handler = DamcSpanHandler.attach(damc, agent) if surface == "spans" else None

    async def go() -> None:
        await agent.run("Find me a hotel in Austin", memory=memory, max_iterations=steps + 5)

    start = time.perf_counter()
    try:
        asyncio.run(go())
    finally:
        if handler is not None:
            handler.detach()
    return (time.perf_counter() - start) * 1000 / (steps + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for surface in ("bare", "proxy", "spans", "memory", "block"):
        run(5, surface)  # warm imports and caches
    print(f"steps per run {args.steps}, runs {args.repeats}, ms per step (median of runs)")
    bare = statistics.median(run(args.steps, "bare") for _ in range(args.repeats))
    for label, surface in (
        ("FunctionAgent + DamcLLM + DamcMemory", "proxy"),
        ("FunctionAgent + DamcSpanHandler", "spans"),
    ):
        damc = statistics.median(run(args.steps, surface) for _ in range(args.repeats))
        print(f"{label:38} bare {bare:7.2f}  with DAMC {damc:7.2f}  overhead {damc - bare:6.2f}")
    alone = statistics.median(run(args.steps, "memory") for _ in range(args.repeats))
    BLOCK_MS.clear()
    block = statistics.median(run(args.steps, "block") for _ in range(args.repeats))
    own = statistics.median(BLOCK_MS) / (args.steps + 1)
    label = "FunctionAgent + Memory + DamcMemoryBlock"
    print(f"{label:38} Memory {alone:5.2f}  with DAMC {block:7.2f}  overhead {block - alone:6.2f}")
    print(f"{'':38} of which in the block's own get and put: {own:6.2f}")


if __name__ == "__main__":
    main()
