"""explain(): a readable account of a built context, card by card, with totals."""

from __future__ import annotations

import re

import pytest

from damc_core import MemorySettings, explain
from damc_core.memory import NAMED_LEFT_OUT


@pytest.fixture
def built_and_memory(make_memory, airline_messages, msg):
    memory = make_memory(settings=MemorySettings(budget=450))
    for message in airline_messages:
        memory.observe(message)
    for i in range(4):  # more searches than the budget holds
        memory.observe(
            msg.call(f"s{i}", "search_direct_flight", {"origin": "SEA", "destination": f"C{i:02d}"})
        )
        rows = [
            {"flight_number": f"HAT{200 + 10 * i + j}", "status": "available", "price": 90 + j}
            for j in range(6)
        ]
        memory.observe(msg.result(f"s{i}", "search_direct_flight", rows))
    memory.observe(msg.user("Which of these is cheapest?"))
    return memory.build(), memory


def test_every_decision_is_listed_with_kept_or_dropped_and_its_reason(built_and_memory):
    built, _ = built_and_memory

    text = explain(built)

    assert any(d.kept for d in built.decisions) and any(not d.kept for d in built.decisions)
    for d in built.decisions:
        row = (
            rf"^\s*{d.card_id}\s+{'yes' if d.kept else 'no'}\s+{d.value:.3f}\s+{d.tokens}\s+{d.raw_tokens}\s+"
        )
        assert re.search(row + re.escape(d.reason) + "$", text, re.M), f"no row for {d.card_id}"
        assert d.reason


def test_kept_cards_say_which_score_kept_them(built_and_memory):
    built, _ = built_and_memory

    for d in built.decisions:
        if d.kept:
            assert d.reason.startswith("kept")
        else:
            assert d.reason.removesuffix(f"; {NAMED_LEFT_OUT}") in (
                "over the token budget",
                "far outside the budget in value order",
                "its arguments head the result card",
            ) or d.reason.startswith(("value ", "superseded by"))


def test_totals_line_matches_the_built_context(built_and_memory):
    built, _ = built_and_memory
    kept = sum(d.kept for d in built.decisions)

    text = explain(built)

    expected = (
        f"{kept} of {len(built.decisions)} cards kept; memory {built.memory_tokens} tokens; "
        f"sent {built.total_tokens} of {built.raw_tokens} tokens (ratio {built.compression_ratio:.2f}); "
        "cards save "
    )
    assert expected in text


def test_a_context_of_recent_messages_only_saves_nothing(make_memory, msg):
    memory = make_memory(settings=MemorySettings(budget=450, recent_messages=4))
    memory.observe(msg.user("Look up W123"))
    memory.observe(msg.call("l1", "lookup", {"order_id": "W123"}))
    memory.observe(msg.result("l1", "lookup", {"order_id": "W123", "status": "shipped"}))
    memory.observe(msg.assistant("W123 has shipped."))

    assert "cards save 0 tokens" in explain(memory.build())


def test_assembled_messages_are_shown(built_and_memory):
    built, _ = built_and_memory

    text = explain(built)

    tail = text[text.index("assembled messages:") :]
    assert [line[4:].split(" ")[0] for line in tail.splitlines() if line.startswith("--- ")] == [
        m["role"] for m in built.messages
    ]
    assert "<memory>" in tail


def test_scores_are_listed_with_their_provenance(built_and_memory):
    built, _ = built_and_memory

    text = explain(built)

    for d in built.decisions:
        for score in d.scores:
            assert f"{score.name}={score.value:.2f}: {score.provenance}" in text


def test_every_card_of_the_memory_is_accounted_for(built_and_memory):
    built, memory = built_and_memory

    text = explain(built)

    listed = set(re.findall(r"^\s*(c\d+)\s+(?:yes|no)\s", text, re.M))
    assert listed == {card.id for card in memory.cards()}


def test_a_system_prompt_that_is_not_sent_is_reported_dropped(memory, msg):
    first = memory.observe({"role": "system", "content": "You are AcmeAir's agent."})
    newer = memory.observe({"role": "developer", "content": "Always answer in French."})
    memory.observe(msg.user("Hi, order #W123"))

    reasons = {d.card_id: (d.kept, d.reason) for d in memory.build().decisions}
    assert reasons[newer.id] == (True, "kept: system prompt, sent as it is")
    assert reasons[first.id] == (False, f"dropped: system prompt replaced by the newer {newer.id}")

    passed = {d.card_id: d.kept for d in memory.build(system="You are a travel agent.").decisions}
    assert passed[first.id] is passed[newer.id] is False


def test_a_message_of_content_parts_is_shown_as_its_text_with_media_named(memory, msg):
    photo = "data:image/png;base64," + "iVBORw0KGgo" * 300
    memory.observe(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Is the suitcase in this photo within the size limit?"},
                {"type": "image_url", "image_url": {"url": photo}},
            ],
        }
    )

    text = explain(memory.build())

    assert "--- user\nIs the suitcase in this photo within the size limit?\n[image_url]" in text
    assert "base64" not in text and "{'type'" not in text
