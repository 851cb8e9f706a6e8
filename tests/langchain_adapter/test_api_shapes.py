"""An agent whose tools answer as real APIs do (an RSS feed, DynamoDB items): the model reads
their records as rows of values, not markup or type tags."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from damc_core import DecisionMemory, InMemoryStore, MemorySettings
from damc_langchain import DamcMiddleware

from .scenario import call, text

STATUS_FEED = """<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"><channel><title>Acme Status</title><link>https://status.acme.com</link>
<item><title>Checkout API degraded</title><link>https://status.acme.com/incidents/INC-2041</link>
<guid isPermaLink="false">INC-2041</guid><pubDate>Wed, 01 May 2024 09:12:00 GMT</pubDate></item>
<item><title>Scheduled database maintenance</title><link>https://status.acme.com/incidents/INC-2039</link>
<guid isPermaLink="false">INC-2039</guid><pubDate>Tue, 30 Apr 2024 22:00:00 GMT</pubDate></item>
</channel></rss>"""


@tool
def read_feed(url: str) -> str:
    """Fetch an RSS feed and return it as served."""
    return STATUS_FEED


@tool
def get_order(order_id: str) -> dict:
    """Look an order up in DynamoDB (the low-level client's get_item response)."""
    return {
        "Item": {
            "order_id": {"S": order_id},
            "amount": {"N": "249.90"},
            "status": {"S": "SHIPPED"},
            "skus": {"L": [{"S": "SKU-1"}, {"S": "SKU-2"}]},
        },
        "ResponseMetadata": {"RequestId": "R7Q2", "HTTPStatusCode": 200},
    }


def test_the_model_reads_a_feed_and_typed_items_as_their_values(recording_model):
    model = recording_model(
        call("read_feed", {"url": "https://status.acme.com/history.rss"}, "call_1"),
        call("get_order", {"order_id": "ORD-7781"}, "call_2"),
        AIMessage("INC-2041 is open; ORD-7781 shipped for 249.90."),
    )
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=500, recent_messages=2))
    agent = create_agent(model, [read_feed, get_order], middleware=[DamcMiddleware(memory)])

    agent.invoke({"messages": [HumanMessage("Is checkout down, and did order ORD-7781 ship?")]})

    last = text(model.received[2])  # the feed is a card of the memory section by now
    assert "https://status.acme.com/incidents/INC-2041 INC-2041" in last
    assert "order_id=ORD-7781; amount=249.90; status=SHIPPED; skus=[SKU-1, SKU-2]" in last
    for tag in ("<item>", "<guid", "status.S", "'S':", '"S":'):
        assert tag not in last
