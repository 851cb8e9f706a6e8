"""build(exclude=...): cards the caller sends itself are left out of the context."""

import pytest

from damc_core import ConfigError


def test_excluded_cards_are_left_out_of_memory_and_recent_dialogue(memory, airline_messages, memory_text):
    cards = [memory.observe(m) for m in airline_messages[:6]]
    call, result = cards[4], cards[5]  # the flight search the agent still holds in its scratchpad

    built = memory.build(budget=2000, exclude={call.id, result.id})

    sent = "\n".join(str(m.get("content")) for m in built.messages)
    assert "HAT083" not in sent
    assert all(m.get("role") != "tool" or m.get("tool_call_id") != "call_2" for m in built.messages)
    assert "mia_li_3668" in memory_text(built.messages) or "mia_li_3668" in sent
    reasons = {d.card_id: d.reason for d in built.decisions}
    assert reasons[result.id] == "kept: sent by the caller"


def test_without_exclude_the_same_history_is_sent(memory, airline_messages):
    for message in airline_messages[:6]:
        memory.observe(message)

    sent = "\n".join(str(m.get("content")) for m in memory.build(budget=2000).messages)

    assert "HAT083" in sent


def test_one_card_id_may_be_excluded_as_a_string(memory, airline_messages):
    cards = [memory.observe(m) for m in airline_messages[:6]]

    built = memory.build(budget=2000, exclude=cards[5].id)

    reasons = {d.card_id: d.reason for d in built.decisions}
    assert reasons[cards[5].id] == "kept: sent by the caller"
    assert reasons[cards[4].id] != "kept: sent by the caller"


def test_system_prompt_and_query_may_be_content_parts(memory, airline_messages):
    for message in airline_messages[:6]:
        memory.observe(message)

    built = memory.build(
        budget=2000,
        system=[{"type": "text", "text": "You are an airline agent."}],
        query=[{"type": "text", "text": "Which flight leaves first, HAT083 or HAT069?"}],
    )

    assert built.messages[0]["content"].startswith("You are an airline agent.")
    assert {"hat083", "hat069"} <= built.focus.terms


def test_no_exclude_may_be_given_as_none(memory, airline_messages):
    for message in airline_messages[:6]:
        memory.observe(message)

    assert memory.build(budget=2000, exclude=None).messages == memory.build(budget=2000).messages


@pytest.mark.parametrize("exclude", [5, ["c5", 5]], ids=["a number", "a number in the list"])
def test_an_exclude_that_is_not_card_ids_is_a_clear_error(memory, airline_messages, exclude):
    for message in airline_messages[:6]:
        memory.observe(message)

    with pytest.raises(ConfigError, match="exclude must be card ids"):
        memory.build(exclude=exclude)


def test_cards_passed_for_their_ids_are_a_clear_error_not_an_exclude_of_nothing(memory, airline_messages):
    cards = [memory.observe(m) for m in airline_messages[:6]]

    with pytest.raises(ConfigError, match=r"exclude must be card ids such as 'c12'"):
        memory.build(exclude=cards[4:6])
