"""The booking scenario of the LangChain adapter tests, as LlamaIndex tools and scripted replies."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.tools import FunctionTool

from damc_core import DecisionMemory, InMemoryStore, MemorySettings

FLIGHTS = [
    {
        "flight_number": f"HAT{100 + i}",
        "status": "available" if i != 3 else "sold out",
        "prices": {"economy": 100 + 7 * i},
        "gate": f"B{i}",
        "aircraft": "A320neo",
        "meal": "snack box",
    }
    for i in range(30)
]
QUESTION = "Book HAT107 on 2024-05-20 for mia_li_3668 with my visa"
ANSWER = "Booked HAT107, reservation 4WQ150."


def get_user_details(user_id: str) -> str:
    """Look up a user."""
    return json.dumps(
        {
            "user_id": user_id,
            "payment_methods": {
                "credit_card_4421486": {"id": "credit_card_4421486", "brand": "visa"},
                "certificate_7504069": {"id": "certificate_7504069", "amount": 250},
            },
            "address": {"address1": "975 Sunset Drive " * 20},
        }
    )


def search_flights(date: str) -> str:
    """Search flights on a date."""
    return json.dumps(FLIGHTS)


def book(flight_number: str, payment_id: str) -> str:
    """Book a flight."""
    return json.dumps({"reservation_id": "4WQ150", "status": "confirmed", "flight_number": flight_number})


TOOLS = [FunctionTool.from_defaults(f) for f in (get_user_details, search_flights, book)]
STEPS: list[tuple[str, dict[str, Any], str]] = [
    ("get_user_details", {"user_id": "mia_li_3668"}, "c1"),
    ("search_flights", {"date": "2024-05-20"}, "c2"),
    ("book", {"flight_number": "HAT107", "payment_id": "credit_card_4421486"}, "c3"),
]


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
