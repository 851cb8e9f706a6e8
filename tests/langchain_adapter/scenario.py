"""A scripted booking conversation shared by the LangChain adapter tests."""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import tool

from damc_core import testing

FLIGHTS = testing.BOOKING_FLIGHTS
get_user_details, search_flights, book = (tool(f) for f in testing.BOOKING_TOOLS)


def call(name, args, call_id):
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


SCRIPT = (*(call(*step) for step in testing.BOOKING_STEPS), AIMessage(testing.BOOKING_ANSWER))


def text(messages):
    return "\n".join(str(m.content) for m in messages)


SCRATCHPAD_PROMPT = ChatPromptTemplate.from_messages(
    [("system", "You book flights."), ("human", "{input}"), MessagesPlaceholder("agent_scratchpad")]
)


HISTORY_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You book flights."),
        MessagesPlaceholder("chat_history"),
        ("human", "{input}"),
        MessagesPlaceholder("agent_scratchpad"),
    ]
)
"""The prompt of an executor whose caller keeps the chat history and passes it in."""


def executor(model, prompt=SCRATCHPAD_PROMPT, tools=(get_user_details, search_flights, book)):
    """A langchain-classic tool-calling AgentExecutor over the scenario's tools."""
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent

    tools = list(tools)
    agent = create_tool_calling_agent(model, tools, prompt)
    return AgentExecutor(agent=agent, tools=tools, return_intermediate_steps=True)


def unparsable_call(name, arguments, call_id):
    """A call whose arguments are not JSON, as LangChain's OpenAI model returns it (a reply cut off
    at ``max_tokens``): a langchain-classic tools agent cannot parse it."""
    return AIMessage(
        "",
        additional_kwargs={
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            ]
        },
        invalid_tool_calls=[
            {"id": call_id, "name": name, "args": arguments, "error": None, "type": "invalid_tool_call"}
        ],
    )


class BusyStore:
    """A SQLite file another process starts writing while the agent looks reservation ABC123 up:
    the store refuses that result for a moment. The write ends with ``release()``, or when the
    agent checks in. ``SCRIPT``: the model's replies for the run."""

    SCRIPT = (
        call("get_reservation", {"reservation_id": "ABC123"}, "t1"),
        call("check_in", {"reservation_id": "ABC123"}, "t2"),
        AIMessage("Checked in; paid with gift_card_7777."),
    )

    def __init__(self, path):
        import sqlite3

        self.path = path
        self.other_process = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

        @tool
        def get_reservation(reservation_id: str) -> str:
            """Look up a reservation."""
            self.other_process.execute("BEGIN IMMEDIATE")  # another process writes the file meanwhile
            return '{"reservation_id": "ABC123", "payment": "gift_card_7777"}'

        @tool
        def check_in(reservation_id: str) -> str:
            """Check in."""
            self.release()
            return "checked in"

        self.tools = [get_reservation, check_in]

    def release(self):
        if self.other_process.in_transaction:
            self.other_process.execute("COMMIT")
