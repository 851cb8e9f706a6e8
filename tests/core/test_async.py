"""Async forms: ``aobserve``, ``aobserve_tool`` and ``abuild`` run the same pipeline off the event loop."""

from __future__ import annotations

import asyncio

from damc_core import CardKind


def test_aobserve_and_abuild(memory, airline_messages, assert_valid_context):
    async def agent_turns():
        cards = [await memory.aobserve(message) for message in airline_messages]
        return cards, await memory.abuild(budget=800)

    cards, built = asyncio.run(agent_turns())

    assert [c.id for c in cards] == [f"c{i}" for i in range(len(airline_messages))]
    assert_valid_context(built.messages)
    assert built == memory.build(budget=800)


def test_aobserve_tool_records_call_and_result(memory):
    async def run():
        return await memory.aobserve_tool(
            "get_user_details", {"user_id": "mia_li_3668"}, {"user_id": "mia_li_3668", "membership": "gold"}
        )

    card = asyncio.run(run())

    assert card.kind is CardKind.TOOL_RESULT
    assert card.tool_name == "get_user_details"
    assert dict(card.arguments) == {"user_id": "mia_li_3668"}
    assert [c.kind for c in memory.cards()] == [CardKind.TOOL_CALL, CardKind.TOOL_RESULT]


def test_async_memory_does_not_block_the_event_loop(memory, msg):
    async def run():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await memory.aobserve(msg.user("Hello " * 20_000))
        task.cancel()
        return ticks

    assert asyncio.run(run()) > 1


def test_concurrent_aobserve_keeps_every_event(memory, msg):
    events = [msg.user(f"note {i}: order #W{i:07d}") for i in range(40)]

    async def run():
        return await asyncio.gather(*(memory.aobserve(event) for event in events))

    cards = asyncio.run(run())

    assert len({card.id for card in cards}) == len(events)
    assert sorted(memory.recall(card.id)["content"] for card in cards) == sorted(e["content"] for e in events)
