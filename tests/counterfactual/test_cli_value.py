"""``damc value`` with the local model, and its values steering ``damc replay`` and ``damc eval``."""

from __future__ import annotations

import json

import pytest

from damc_core import MemorySettings, TiktokenCounter
from damc_core.cli import main
from damc_core.counterfactual.commands import values_stages
from damc_core.evaluate import replay

pytest.importorskip("llama_cpp", reason="needs the counterfactual extra")


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def valued_trace(tmp_path_factory):
    """The airline conversation as a tau-bench trace, valued once with leave-one-out."""
    from conftest import airline_conversation

    folder = tmp_path_factory.mktemp("values")
    trace = folder / "trace.json"
    trace.write_text(json.dumps([{"task_id": 0, "traj": airline_conversation()}]), encoding="utf-8")
    values = folder / "values.jsonl"
    code = main(["value", str(trace), "--estimator", "loo", "--without-system", "--out", str(values)])
    assert code == 0
    return trace, values


def test_value_writes_every_card_value_at_every_decision_with_a_removable_card(valued_trace, capsys):
    _, values = valued_trace
    lines = [json.loads(line) for line in values.read_text(encoding="utf-8").splitlines()]

    # step 2 (get_user_details) has only the task's first user turn, which every context keeps
    assert [(line["traj"], line["step"]) for line in lines] == [(0, 4), (0, 8)]
    search, booking = lines
    assert search["card_ids"] == ["c3"]  # the user's profile, numbered as the replay numbers it
    assert booking["card_ids"] == ["c3", "c5", "c6", "c7"]
    assert (
        booking["passes"] == 5 and booking["source"] == "leave-one-out/llama.cpp:SmolLM2-135M-Instruct.Q4_1"
    )
    assert all(isinstance(v, float) for v in booking["values"]) and booking["full"] < 0
    assert "hat069" in booking["terms"]


def test_copy_estimator_values_the_same_cards_in_two_passes_a_decision(valued_trace, tmp_path):
    trace, exact = valued_trace
    values = tmp_path / "copy.jsonl"

    assert main(["value", str(trace), "--estimator", "copy", "--without-system", "--out", str(values)]) == 0

    copied = [json.loads(line) for line in values.read_text(encoding="utf-8").splitlines()]
    loo = [json.loads(line) for line in exact.read_text(encoding="utf-8").splitlines()]
    assert [(c["step"], c["card_ids"], c["full"]) for c in copied] == [
        (e["step"], e["card_ids"], e["full"]) for e in loo
    ]
    assert [c["passes"] for c in copied] == [2, 2]
    assert copied[1]["source"] == "copy-attribution/llama.cpp:SmolLM2-135M-Instruct.Q4_1"


def test_values_steer_later_decisions_of_the_replay(valued_trace, tmp_path):
    trace, values = valued_trace
    from conftest import airline_conversation

    points = list(
        replay(
            [airline_conversation()],
            settings=MemorySettings(budget=500, recent_messages=0),
            counter=TiktokenCounter(),
            stages=values_stages(str(values)),
        )
    )

    def counterfactual(step: int) -> set[str]:
        (point,) = [p for p in points if p.step == step]
        return {d.card_id for d in point.built.decisions if any(s.name == "counterfactual" for s in d.scores)}

    assert counterfactual(4) == set()  # nothing was valued before step 4
    assert counterfactual(8) == {"c3"}  # valued at step 4, the only earlier decision

    out = tmp_path / "contexts.jsonl"
    assert main(["replay", str(trace), "--values", str(values), "--out", str(out)]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3


def test_eval_with_values_and_likelihood_prints_both_tables(valued_trace, capsys):
    trace, values = valued_trace

    code = main(["eval", str(trace), "--budget", "300", "--values", str(values), "--likelihood"])

    out = capsys.readouterr().out
    assert code == 0
    assert "Decision-fact retention" in out and "Decision likelihood" in out
    assert "vs full history" in out and "decision points scored: 3" in out


def test_eval_writes_each_points_log_probs_for_a_closer_look(valued_trace, tmp_path):
    trace, _ = valued_trace
    out = tmp_path / "points.jsonl"

    assert main(["eval", str(trace), "--budget", "300", "--likelihood-out", str(out)]) == 0

    points = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(p["traj"], p["step"]) for p in points] == [(0, 2), (0, 4), (0, 8)]
    for point in points:
        assert set(point["log_prob"]) == set(point["tokens"]) >= {"damc @300", "full history"}
        assert all(v < 0 for v in point["log_prob"].values())
    full_tokens = [p["tokens"]["full history"] for p in points]
    assert full_tokens == sorted(full_tokens) and full_tokens[0] > 0  # the history grows step by step


def test_every_scored_context_opens_with_the_traces_tools_unless_left_out(valued_trace, tmp_path):
    trace, _ = valued_trace
    framed, bare = tmp_path / "framed.jsonl", tmp_path / "bare.jsonl"

    assert main(["eval", str(trace), "--budget", "300", "--likelihood-out", str(framed)]) == 0
    assert (
        main(["eval", str(trace), "--budget", "300", "--likelihood-out", str(bare), "--without-tool-list"])
        == 0
    )

    read = [
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for path in (framed, bare)
    ]
    for with_tools, without in zip(*read, strict=True):
        for name, tokens in with_tools["tokens"].items():
            assert tokens > without["tokens"][name]  # the same list before every strategy's context
        assert with_tools["log_prob"] != without["log_prob"]


def test_unknown_scorer_and_broken_values_file_are_clear_errors(valued_trace, tmp_path, capsys):
    trace, _ = valued_trace
    broken = tmp_path / "values.jsonl"
    broken.write_text("not json\n", encoding="utf-8")

    assert main(["value", str(trace), "--scorer", "gpt-9", "--out", str(tmp_path / "v.jsonl")]) == 2
    assert main(["eval", str(trace), "--values", str(broken)]) == 2

    err = capsys.readouterr().err
    assert "unknown scorer 'gpt-9'" in err
    assert "values.jsonl:1: not a values line" in err


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\xff\xfe not text", "cannot read values file"),
        (b"[" * 100_000, "values.jsonl:1: not a values line"),
    ],
    ids=["not UTF-8", "nested past the depth"],
)
def test_a_values_file_that_cannot_be_read_is_a_clear_error(valued_trace, tmp_path, capsys, content, said):
    trace, _ = valued_trace
    broken = tmp_path / "values.jsonl"
    broken.write_bytes(content)

    assert main(["replay", str(trace), "--values", str(broken), "--out", str(tmp_path / "c.jsonl")]) == 2
    assert said in capsys.readouterr().err


def test_values_of_another_trace_are_refused(valued_trace, tmp_path, capsys):
    trace, values = valued_trace
    other = tmp_path / "other.json"
    conversation = json.loads(trace.read_text(encoding="utf-8"))
    conversation[0]["traj"][1]["content"] = "Book a hotel in Oslo instead."  # same shape, other words
    other.write_text(json.dumps(conversation), encoding="utf-8")

    assert main(["replay", str(other), "--values", str(values), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "computed on another trace (trajectory 0 up to step 4" in capsys.readouterr().err
    assert main(["replay", str(trace), "--values", str(values), "--out", str(tmp_path / "x.jsonl")]) == 0


def test_points_longer_than_the_scorer_takes_are_skipped_and_named(airline_messages):
    from damc_core.counterfactual import LeaveOneOut, LlamaCppScorer
    from damc_core.counterfactual.commands import value_trajectories

    too_long: list[tuple[int, int]] = []
    # step 4 scores one card in under 64 tokens; step 8 four cards in over 400
    with LlamaCppScorer(n_ctx=256) as short:
        lines = list(
            value_trajectories(
                [airline_messages],
                estimator=LeaveOneOut(),
                scorer=short,
                settings=MemorySettings(budget=500, recent_messages=0),
                counter=TiktokenCounter(),
                with_system=False,
                on_too_long=lambda traj, step: too_long.append((traj, step)),
            )
        )

    assert [(line["traj"], line["step"]) for line in lines] == [(0, 4)]
    assert too_long == [(0, 8)]


def test_ctrl_c_stops_value_with_a_note_and_the_values_written_so_far(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from conftest import airline_conversation

    trace, out = tmp_path / "trace.json", tmp_path / "values.jsonl"
    trace.write_text(json.dumps([{"traj": airline_conversation()}] * 5), encoding="utf-8")
    valuing = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "damc_core.cli",
            "value",
            str(trace),
            "--estimator",
            "coarse",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background job ignores it
    )
    while not out.exists() or not out.stat().st_size:  # the first decision is valued
        assert valuing.poll() is None
        time.sleep(0.05)
    valuing.send_signal(signal.SIGINT)
    stdout, stderr = valuing.communicate(timeout=120)

    assert valuing.returncode == 130
    assert stderr == "damc: interrupted\n"
    held = int(stdout.split("holds the values of the first ")[1].split()[0])
    assert held >= 1
    assert len(out.read_text().splitlines()) == held
