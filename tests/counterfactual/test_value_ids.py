"""``damc value`` writes each value under the card id the replay gives that card."""

from __future__ import annotations

import json

from damc_core import MemorySettings
from damc_core.counterfactual.commands import value_trajectories
from damc_core.counterfactual.estimators import LeaveOneOut
from damc_core.evaluate import replay
from damc_core.tokens import CharEstimateCounter


class PaymentScorer:
    """A scorer for whom the action is likely only when the payment id is in the context; it keeps
    every context it was asked about."""

    name = "payment"

    def __init__(self) -> None:
        self.contexts: list[str] = []

    def score(self, requests):
        self.contexts += [r.context for r in requests]
        return [0.0 if "credit_card_7815826" in r.context else -10.0 for r in requests]


def call(call_id, name, arguments):
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


TRAJECTORY = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "Book HAT069 for mia_li_3668"},
    call("t1", "get_user_details", {"user_id": "mia_li_3668"}),
    {"role": "tool", "tool_call_id": "t1", "content": json.dumps({"name": "Mia Li"})},
    {"role": "system", "content": "Reminder: confirm before booking."},
    {"role": "user", "content": "Yes, book it and pay with credit_card_7815826"},
    call("t2", "book_reservation", {"flight": "HAT069", "payment_id": "credit_card_7815826"}),
    {"role": "tool", "tool_call_id": "t2", "content": '{"ok": true}'},
]


def test_a_system_message_mid_conversation_does_not_shift_the_card_ids():
    settings, counter = MemorySettings(budget=500, recent_messages=0), CharEstimateCounter()
    scorer = PaymentScorer()

    lines = list(
        value_trajectories(
            [TRAJECTORY], estimator=LeaveOneOut(), scorer=scorer, settings=settings, counter=counter
        )
    )

    booking = next(line for line in lines if line["step"] == 6)
    most_valuable = max(zip(booking["values"], booking["card_ids"], strict=True))[1]
    replayed = next(p for p in replay([TRAJECTORY], settings=settings, counter=counter) if p.step == 6)
    assert f"[{most_valuable}] user: Yes, book it and pay with credit_card_7815826" in replayed.built.memory
    assert most_valuable == "c5"  # c4 is the reminder, a system message the replay numbers too
    assert any("credit_card_7815826" not in context for context in scorer.contexts)  # it was left out once
