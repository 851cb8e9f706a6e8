"""``damc value`` with a scorer that gives no finite number: the values file stays valid JSON and
says what failed (no model needed)."""

from __future__ import annotations

import json
import math

import pytest

from damc_core.cli import main


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


class FailingScorer:
    """A scorer whose every answer is ``failure`` (NaN, an infinity): a model that overflows, or a
    backend that returns no number. It keeps the requests it got."""

    name = "failing"

    def __init__(self, failure: float) -> None:
        self.failure = failure
        self.requests: list = []

    def score(self, requests):
        self.requests += requests
        return [self.failure] * len(requests)


def strict_json(constant: str):
    raise ValueError(f"{constant} is not JSON")  # as jq or JavaScript read it


@pytest.mark.parametrize("failure", [math.nan, -math.inf], ids=["NaN", "-inf"])
def test_a_failed_full_context_pass_is_written_as_null(tmp_path, monkeypatch, capsys, failure):
    from conftest import airline_conversation

    scorer = FailingScorer(failure)
    monkeypatch.setattr("damc_core.counterfactual.commands.make_scorer", lambda spec: scorer)
    trace, values = tmp_path / "trace.json", tmp_path / "values.jsonl"
    trace.write_text(json.dumps([{"traj": airline_conversation()}]), encoding="utf-8")

    assert main(["value", str(trace), "--without-system", "--out", str(values)]) == 0

    lines = values.read_text(encoding="utf-8").splitlines()
    points = [json.loads(line, parse_constant=strict_json) for line in lines]
    assert len(points) == 2 and len(scorer.requests) == sum(point["passes"] for point in points)
    for point in points:  # nothing measured: no full score and no card values
        assert (point["full"], point["card_ids"], point["values"]) == (None, [], [])
        assert f"({point['passes']} of {point['passes']} passes failed)" in point["source"]
        assert point["failed"] == point["passes"]
    passes = sum(point["passes"] for point in points)
    assert f"{passes} of the {passes} passes gave no finite score" in capsys.readouterr().out
    assert main(["eval", str(trace), "--values", str(values)]) == 0  # read back as not measured
