"""Ablation problems built from replayed decision points of a recorded conversation."""

from __future__ import annotations

import pytest

from damc_core import MemorySettings
from damc_core.counterfactual.problems import (
    ACTION_PREFIX,
    action_succeeded,
    action_text,
    problem_from_replay,
)
from damc_core.evaluate import replay
from damc_core.tokens import CharEstimateCounter


def points_of(messages):
    return list(replay([messages], settings=MemorySettings(), counter=CharEstimateCounter()))


def test_each_decision_point_becomes_a_problem_whose_action_is_the_call_made_there(airline_messages):
    points = points_of(airline_messages)
    problems = [problem_from_replay(p, airline_messages) for p in points]

    assert [p.step for p in points] == [2, 4, 8]
    assert [pr.action for pr in problems] == [
        " get_user_details(user_id=mia_li_3668)",
        " search_direct_flight(origin=JFK, destination=SEA, date=2024-05-20)",
        " book_reservation(user_id=mia_li_3668, origin=JFK, destination=SEA, flight_type=one_way, "
        "cabin=economy, flights=[(flight_number=HAT069, date=2024-05-20)], "
        "payment_methods=[(payment_id=credit_card_4421486, amount=121)])",
    ]
    booking = problems[-1]
    assert booking.head.startswith("You are an airline agent. Follow the airline policy.\n\n")
    assert "user: Hi, I'm mia_li_3668." in booking.head  # the task's request is fixed
    assert booking.tail == "\n" + ACTION_PREFIX
    assert not booking.context([True] * len(booking.card_ids)).endswith(" ")


def test_cards_are_the_memorys_renderings_with_the_replays_card_ids(airline_messages):
    point = points_of(airline_messages)[-1]
    problem = problem_from_replay(point, airline_messages)

    replay_ids = {d.card_id for d in point.built.decisions}
    assert set(problem.card_ids) <= replay_ids
    texts = dict(zip(problem.card_ids, problem.card_texts, strict=True))
    payment = [cid for cid, text in texts.items() if "credit_card_4421486" in text]
    assert payment and texts[payment[0]].startswith(f"[{payment[0]}] get_user_details(")
    assert not any(" called " in text for text in texts.values())  # calls head their result cards
    assert texts[problem.card_ids[-1]].startswith(f"[{problem.card_ids[-1]}] user: Yes, book HAT069")


@pytest.mark.parametrize("prompt", ["", None], ids=["empty", "null"])
def test_an_empty_system_message_keeps_the_replays_card_ids(airline_messages, prompt):
    from damc_core import DecisionMemory, InMemoryStore

    messages = [{"role": "system", "content": prompt}, *airline_messages[1:]]
    point = points_of(messages)[-1]
    replayed = DecisionMemory(store=InMemoryStore(), counter=CharEstimateCounter())
    for message in messages[: point.step]:
        replayed.observe(message)

    problem = problem_from_replay(point, messages)

    summaries = {card.id: card.summary for card in replayed.cards()}
    for card_id, text in zip(problem.card_ids, problem.card_texts, strict=True):
        assert summaries[card_id].split(" -> ")[0] == text.split(" -> ")[0]


def test_a_call_answered_by_an_error_did_not_succeed(msg):
    trajectory = [
        msg.user("Book HAT069"),
        msg.call("call_1", "book_reservation", {"flight": "HAT069"}),
        msg.result("call_1", "book_reservation", "Error: not enough seats"),
        msg.call("call_1", "book_reservation", {"flight": "HAT070"}),
        msg.result("call_1", "book_reservation", {"reservation_id": "HATHAT"}),
    ]

    assert not action_succeeded(trajectory, 1)
    assert action_succeeded(trajectory, 3)  # a repeated call id pairs with the result right after it
    assert not action_succeeded(trajectory, 0)


@pytest.mark.parametrize(
    "result", [{"error": "payment declined"}, {"status": "failed"}, "Exception: timeout"], ids=str
)
def test_a_call_answered_by_an_error_in_any_form_the_memory_knows_did_not_succeed(msg, result):
    trajectory = [
        msg.call("c", "book_reservation", {"flight": "HAT069"}),
        msg.result("c", "book_reservation", result),
    ]

    assert not action_succeeded(trajectory, 0)


def test_a_message_without_tool_calls_has_no_action(msg):
    with pytest.raises(ValueError, match="no tool call"):
        action_text(msg.assistant("Done."))
