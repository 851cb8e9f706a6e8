"""The booking scenario of the LangChain adapter tests, as LlamaIndex tools and scripted replies."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.tools import FunctionTool

from damc_core import DecisionMemory, InMemoryStore, MemorySettings, testing

FLIGHTS = testing.BOOKING_FLIGHTS
QUESTION = testing.BOOKING_QUESTION
ANSWER = testing.BOOKING_ANSWER
TOOLS = [FunctionTool.from_defaults(f) for f in testing.BOOKING_TOOLS]
STEPS = testing.BOOKING_STEPS


def call(name: str, args: dict[str, Any], call_id: str) -> ChatMessage:
    return ChatMessage(
        role="assistant", blocks=[ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs=args)]
    )


def react(name: str, args: dict[str, Any]) -> ChatMessage:
    return ChatMessage(
        role="assistant", content=f"Thought: I need {name}.\nAction: {name}\nAction Input: {json.dumps(args)}"
    )


def react_answer(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=f"Thought: I can answer.\nAnswer: {text}")


FUNCTION_SCRIPT = (*(call(*step) for step in STEPS), ChatMessage(role="assistant", content=ANSWER))
REACT_SCRIPT = (*(react(name, args) for name, args, _ in STEPS), react_answer(ANSWER))


def damc(budget: int = 600) -> DecisionMemory:
    return DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=budget))


def text(messages: list[ChatMessage]) -> str:
    return "\n".join(
        str(m.content) + " " + " ".join(str(b.model_dump()) for b in m.blocks if b.block_type == "tool_call")
        for m in messages
    )


def run(agent, *args, **kwargs):
    """``agent.run`` needs a running event loop; this is the synchronous way to call it."""

    async def go():
        return await agent.run(*args, **kwargs)

    return asyncio.run(go())
