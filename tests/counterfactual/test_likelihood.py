"""Decision likelihood: log P(gold action | context) for DAMC and the baselines, with the local model."""

from __future__ import annotations

import math

import pytest

from damc_core import MemorySettings, TiktokenCounter
from damc_core.counterfactual.likelihood import decision_likelihood, tool_list, transcript

llama_cpp = pytest.importorskip("llama_cpp", reason="needs the counterfactual extra")

from damc_core.counterfactual.llama_cpp import LlamaCppScorer  # noqa: E402

SETTINGS = MemorySettings(budget=300, recent_messages=0)


@pytest.fixture(scope="module")
def scorer():
    with LlamaCppScorer(n_ctx=2048) as opened:
        yield opened


def test_transcript_reads_what_a_memory_sends_without_the_shared_policy(msg):
    policy = "You are an airline agent."
    context = [
        {"role": "system", "content": policy + "\n\n<memory>\n[c3] get_user_details -> gold\n</memory>"},
        msg.call("call_1", "get_user_details", {"user_id": "mia_li_3668"}),
        msg.result("call_1", "get_user_details", {"membership": "gold"}),
    ]

    text = transcript(context, system=policy)

    assert policy not in text
    assert text.splitlines()[0] == "system: <memory>"
    assert "assistant: get_user_details(user_id=mia_li_3668)" in text
    assert 'tool get_user_details: {"membership": "gold"}' in text


def test_the_tool_list_names_every_argument_any_trajectory_passed(msg):
    flights = [{"flight_number": "HAT136", "date": "2024-05-20"}]
    first = [msg.call("call_1", "get_user_details", {"user_id": "mia_li_3668"})]
    second = [
        msg.call("call_2", "book_reservation", {"user_id": "omar_davis_3817", "flights": flights}),
        msg.call("call_3", "book_reservation", {"flights": [{"flight_number": "HAT039", "origin": "ATL"}]}),
        msg.call("call_4", "update_address", {"address": {"city": "Austin", "zip": "78750"}}),
        msg.call("call_5", "list_all_airports", {}),
    ]

    assert tool_list([first, second]).splitlines() == [
        "Tools:",
        "get_user_details(user_id)",
        "book_reservation(user_id, flights=[(flight_number, date, origin)])",
        "update_address(address=(city, zip))",
        "list_all_airports()",
    ]
    assert tool_list([[msg.user("Hi")]]) == ""  # no call, no list


def test_every_context_scored_opens_with_the_same_tool_list(scorer, airline_messages):
    class Recording:
        """The real scorer, with what it was asked to score kept."""

        name = scorer.name

        def __init__(self) -> None:
            self.requests: list = []

        def score(self, requests):
            self.requests.extend(requests)
            return scorer.score(requests)

    recording = Recording()
    decision_likelihood([airline_messages], scorer=recording, settings=SETTINGS, counter=TiktokenCounter())

    tools = tool_list([airline_messages])
    assert tools.startswith("Tools:\n") and len(recording.requests) == 15  # 3 points, 5 strategies
    assert all(request.context.startswith(tools + "\n") for request in recording.requests)


def test_every_strategy_is_scored_against_the_full_history(scorer, airline_messages, msg):
    failed_only = [
        msg.system("You are an airline agent."),
        msg.user("Cancel ZZZ999."),
        msg.call("call_1", "cancel_reservation", {"reservation_id": "ZZZ999"}),
        msg.result("call_1", "cancel_reservation", "Error: reservation ZZZ999 not found"),
        msg.assistant("I could not find ZZZ999."),
    ]

    scored = []
    report = decision_likelihood(
        [airline_messages, failed_only],
        scorer=scorer,
        settings=SETTINGS,
        counter=TiktokenCounter(),
        on_scored=scored.append,
    )

    names = [row.name for row in report.rows]
    assert names == [
        "damc @300",
        "full history",
        "window (last 10)",
        "clear old tool results (keep 2)",
        "token buffer @300",
    ]
    assert report.points == 3 and report.skipped["no successful call"] == 1
    assert [p["traj"] for p in report.per_point()] == [0, 0, 0]
    assert report.per_point()[0]["log_prob"]["full history"] == report.rows[1].log_probs[0]
    assert scored == report.per_point()  # each point handed over as it was scored
    full = report.rows[1]
    assert full.deltas == [0.0, 0.0, 0.0] and full.not_worse == 1.0
    for row in report.rows:
        assert len(row.log_probs) == 3 and all(math.isfinite(v) and v < 0 for v in row.log_probs)
        assert row.mean_delta == pytest.approx(row.mean_log_prob - full.mean_log_prob)


def test_contexts_longer_than_the_scorer_takes_are_skipped_not_fatal(airline_messages):
    with LlamaCppScorer(n_ctx=128, n_batch=128) as short:
        report = decision_likelihood(
            [airline_messages], scorer=short, settings=SETTINGS, counter=TiktokenCounter()
        )

    assert report.points == 1  # the first decision point is short enough; the two later ones are not
    assert report.skipped["longer than the scorer's context"] == 2
    assert all(len(row.log_probs) == 1 for row in report.rows)
