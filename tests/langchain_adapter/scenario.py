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
