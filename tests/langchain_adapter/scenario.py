"""A scripted booking conversation shared by the LangChain adapter tests."""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import tool

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


@tool
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


@tool
def search_flights(date: str) -> str:
    """Search flights on a date."""
    return json.dumps(FLIGHTS)


@tool
def book(flight_number: str, payment_id: str) -> str:
    """Book a flight."""
    return json.dumps({"reservation_id": "4WQ150", "status": "confirmed", "flight_number": flight_number})


def call(name, args, call_id):
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


SCRIPT = (
    call("get_user_details", {"user_id": "mia_li_3668"}, "c1"),
    call("search_flights", {"date": "2024-05-20"}, "c2"),
    call("book", {"flight_number": "HAT107", "payment_id": "credit_card_4421486"}, "c3"),
    AIMessage("Booked HAT107, reservation 4WQ150."),
)


def text(messages):
    return "\n".join(str(m.content) for m in messages)


SCRATCHPAD_PROMPT = ChatPromptTemplate.from_messages(
    [("system", "You book flights."), ("human", "{input}"), MessagesPlaceholder("agent_scratchpad")]
)


def executor(model):
    """A langchain-classic tool-calling AgentExecutor over the scenario's tools."""
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent

    tools = [get_user_details, search_flights, book]
    agent = create_tool_calling_agent(model, tools, SCRATCHPAD_PROMPT)
    return AgentExecutor(agent=agent, tools=tools, return_intermediate_steps=True)
