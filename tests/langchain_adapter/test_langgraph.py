"""damc_pre_model_hook on langgraph's create_react_agent: the model input is DAMC's, the state is not."""

from __future__ import annotations

import json
import warnings

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import HumanMessage, ToolMessage

from damc_core import DecisionMemory, InMemoryStore, MemorySettings
from damc_langchain import damc_pre_model_hook

from .scenario import FLIGHTS, SCRIPT, book, get_user_details, search_flights, text


def react_agent(model, hook):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of create_agent
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(model, [get_user_details, search_flights, book], pre_model_hook=hook)


def test_model_input_comes_from_damc_and_state_stays_verbatim(recording_model):
    model = recording_model(*SCRIPT)
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600))

    result = react_agent(model, damc_pre_model_hook(memory)).invoke(
        {"messages": [HumanMessage("Book HAT107 for mia_li_3668 with my visa")]}
    )

    booking_prompt = model.received[2]
    assert "<memory>" in text(booking_prompt)
    assert "credit_card_4421486" in text(booking_prompt)
    assert "975 Sunset Drive " * 20 not in text(booking_prompt)
    searches = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.name == "search_flights"]
    assert json.loads(searches[0].content) == FLIGHTS
    assert [c.tool_name for c in memory.cards() if c.kind.value == "tool_result"] == [
        "get_user_details",
        "search_flights",
        "book",
    ]
