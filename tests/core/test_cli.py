"""The ``damc`` command: replay, eval and inspect on a small tau-bench-shaped trace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import damc_core
from damc_core.cli import main

DEMO = Path(damc_core.__file__).parent / "data" / "airline_demo.json"
"""The bundled demo trace: real tau-bench conversations."""


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # keep rich from wrapping table cells


@pytest.fixture
def trace(tmp_path, airline_messages, msg):
    """Three trajectories as tau-bench writes them: [{"task_id", "reward", "traj": [...]}, ...]."""
    cancel = [
        msg.system("You are an airline agent."),
        msg.user("Cancel reservation ZFA04Y, I'm mia_li_3668."),
        msg.call("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y"}),
        msg.result("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y", "status": "confirmed"}),
        msg.call("call_2", "cancel_reservation", {"reservation_id": "ZFA04Y"}),
        msg.result("call_2", "cancel_reservation", {"reservation_id": "ZFA04Y", "status": "cancelled"}),
        msg.assistant("ZFA04Y is cancelled."),
    ]
    chat_only = [
        msg.system("You are an airline agent."),
        msg.user("Hi"),
        msg.assistant("Hello! How can I help?"),
    ]
    items = [
        {"task_id": 0, "reward": 1.0, "traj": airline_messages},
        {"task_id": 1, "reward": 1.0, "traj": cancel},
        {"task_id": 2, "reward": 0.0, "traj": chat_only},
    ]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(items), encoding="utf-8")
    return path, [item["traj"] for item in items]


def decision_steps(trajectories):
    return [
        (t, s)
        for t, messages in enumerate(trajectories)
        for s, m in enumerate(messages)
        if m["role"] == "assistant" and m.get("tool_calls")
    ]


def test_replay_writes_one_line_per_tool_calling_assistant_message(
    trace, tmp_path, capsys, assert_valid_context
):
    path, trajectories = trace
    out = tmp_path / "out" / "contexts.jsonl"

    code = main(["replay", str(path), "--budget", "500", "--out", str(out)])

    assert code == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert (
        [(line["traj"], line["step"]) for line in lines]
        == decision_steps(trajectories)
        == [(0, 2), (0, 4), (0, 8), (1, 2), (1, 4)]
    )
    for line in lines:
        assert set(line) == {"traj", "step", "messages"}
        assert_valid_context(line["messages"])
        assert line["messages"][0]["role"] == "system"
    assert f"wrote 5 decision points from 3 trajectories to {out}" in capsys.readouterr().out.replace(
        "\n", " "
    )


def test_replay_context_holds_what_the_booking_needs(trace, tmp_path):
    path, _ = trace
    out = tmp_path / "contexts.jsonl"

    main(["replay", str(path), "--budget", "500", "--out", str(out)])

    booking = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()][2]
    assert booking["step"] == 8
    sent = json.dumps(booking["messages"])
    for value in ("mia_li_3668", "HAT069", "credit_card_4421486", "2024-05-20"):
        assert value in sent


def test_eval_prints_damc_beside_the_baselines(trace, capsys):
    path, _ = trace

    code = main(["eval", str(path), "--budget", "500"])

    assert code == 0
    out = capsys.readouterr().out
    assert "damc" in out
    assert "full history" in out
    assert "token buffer @500" in out
    assert "decision points: 5" in out


def test_eval_with_a_budget_ratio_grows_damcs_budget_and_the_token_buffers_alike(trace, capsys):
    path, _ = trace

    code = main(["eval", str(path), "--budget", "3000", "--budget-ratio", "0.1", "--min-budget", "150"])

    assert code == 0
    out = capsys.readouterr().out
    assert "damc @150 + 10% of history (max 3000)" in out
    assert "token buffer @150 + 10% of history (max 3000)" in out


def test_a_budget_ratio_out_of_range_is_a_clear_error(trace, capsys):
    path, _ = trace

    code = main(["eval", str(path), "--budget-ratio", "2"])

    assert code == 2
    assert "budget_ratio must be in (0, 1], got 2.0" in capsys.readouterr().err


def test_inspect_shows_the_cards_at_one_decision(trace, capsys):
    path, _ = trace

    code = main(["inspect", str(path), "--traj", "0", "--step", "8", "--budget", "500"])

    assert code == 0
    out = capsys.readouterr().out
    assert "cards kept; memory" in out
    assert "assembled messages:" in out


def test_inspect_with_a_step_that_is_no_decision_returns_2(trace, capsys):
    path, _ = trace

    code = main(["inspect", str(path), "--traj", "0", "--step", "3"])

    assert code == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert "damc: error: step 3 of trajectory 0 is not a tool-calling assistant message" in err
    assert "decision steps are [2, 4, 8]" in err


def test_inspect_of_a_trajectory_without_decisions_names_those_with_them(trace, capsys):
    path, _ = trace

    code = main(["inspect", str(path), "--traj", "2", "--step", "1"])

    assert code == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert "damc: error: trajectory 2 has no tool-calling assistant message; trajectories 0, 1 have" in err


def test_inspect_with_a_trajectory_out_of_range_returns_2(trace, capsys):
    path, _ = trace

    assert main(["inspect", str(path), "--traj", "7", "--step", "2"]) == 2
    assert "--traj 7 is out of range" in capsys.readouterr().err


def test_truncated_trace_returns_2_and_names_the_line(tmp_path, airline_messages, capsys):
    path = tmp_path / "cut.jsonl"
    text = "".join(json.dumps(m) + "\n" for m in airline_messages)
    path.write_text(text[:-30], encoding="utf-8")

    code = main(["eval", str(path)])

    assert code == 2
    assert f"cut.jsonl:{len(airline_messages)}: invalid JSON line" in capsys.readouterr().err.replace(
        "\n", " "
    )


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compress"])

    assert exit_info.value.code == 2


def test_replay_writes_the_same_contexts_whatever_the_hash_seed(tmp_path):
    """Python salts string hashes per process: nothing DAMC sends may depend on set order."""
    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / f"seed{seed}.jsonl"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "damc_core.cli",
                "replay",
                str(DEMO),
                "--budget",
                "400",
                "--out",
                str(out),
            ],
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            capture_output=True,
        )
        outputs.append(out.read_text())

    assert outputs[0] == outputs[1]


def test_a_budget_named_twice_is_one_row(trace, capsys):
    path, _ = trace

    assert main(["eval", str(path), "--budget", "500", "500"]) == 0

    assert capsys.readouterr().out.count("damc @500") == 1


def test_an_output_path_that_cannot_be_written_is_a_clear_error(trace, tmp_path, capsys):
    path, _ = trace

    code = main(["replay", str(path), "--budget", "500", "--out", str(tmp_path)])  # a folder

    assert code == 2
    assert capsys.readouterr().err.startswith(f"damc: error: --out {tmp_path} is a folder; give it a file")


def test_a_usage_error_leaves_an_earlier_output_file_as_it_was(trace, tmp_path, capsys):
    path, _ = trace
    out = tmp_path / "contexts.jsonl"
    assert main(["replay", str(path), "--out", str(out)]) == 0
    written = out.read_text()

    for wrong in (["--values", str(tmp_path / "missing.jsonl")], ["--budget", "0"]):
        assert main(["replay", str(path), "--out", str(out), *wrong]) == 2

    assert out.read_text() == written
    assert capsys.readouterr().err.count("damc: error: ") == 2


def test_ctrl_c_stops_a_replay_with_a_note_and_whole_lines(tmp_path):
    demo = json.loads(DEMO.read_text())
    long_trace, out = tmp_path / "long.json", tmp_path / "contexts.jsonl"
    long_trace.write_text(json.dumps(demo * 40))
    replay = subprocess.Popen(
        [sys.executable, "-m", "damc_core.cli", "replay", str(long_trace), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background job ignores it
    )
    while not out.exists() or not out.stat().st_size:  # usage checked, replay under way
        assert replay.poll() is None
        time.sleep(0.01)
    replay.send_signal(signal.SIGINT)
    stdout, stderr = replay.communicate(timeout=60)

    assert replay.returncode == 130
    assert stderr == "damc: interrupted\n"  # no traceback
    held = int(stdout.split("holds the first ")[1].split()[0])
    assert [json.loads(line)["traj"] >= 0 for line in out.read_text().splitlines()] == [True] * held


def test_inspect_prints_the_context_lines_unbroken(trace, capsys, monkeypatch):
    from damc_core import MemorySettings, explain
    from damc_core.evaluate import replay
    from damc_core.tokens import TiktokenCounter

    monkeypatch.setenv("COLUMNS", "60")
    path, trajectories = trace
    settings = MemorySettings(budget=500, recent_messages=0)
    point = next(
        p for p in replay(trajectories[:1], settings=settings, counter=TiktokenCounter()) if p.step == 8
    )

    assert main(["inspect", str(path), "--step", "8", "--budget", "500"]) == 0

    assert capsys.readouterr().out == explain(point.built) + "\n"


@pytest.mark.parametrize("command", ["eval", "replay"])
def test_a_trace_without_decisions_is_an_error_not_an_empty_result(tmp_path, msg, capsys, command):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([msg.user("Hi"), msg.assistant("Hello!")]))
    out = tmp_path / "contexts.jsonl"
    output = ["--out", str(out)] if command == "replay" else []

    assert main([command, str(path), *output]) == 2
    assert "has no decision points" in capsys.readouterr().err
    assert not out.exists()


def test_eval_of_a_call_whose_name_is_not_text_runs(tmp_path, msg, capsys):
    odd = msg.call("call_1", "lookup", {"order_id": "#W1"})
    odd["tool_calls"][0]["function"]["name"] = ["lookup"]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps([msg.user("Where is #W1?"), odd, msg.result("call_1", "lookup", {"ok": 1})]))

    assert main(["eval", str(path), "--budget", "300"]) == 0
    assert "decision points: 1" in capsys.readouterr().out


def test_eval_checks_the_scorer_before_the_retention_run(trace, capsys):
    path, _ = trace

    assert main(["eval", str(path), "--likelihood", "--scorer", "gpt-9"]) == 2

    printed = capsys.readouterr()
    assert "Decision-fact retention" not in printed.out
    assert "gpt-9" in printed.err


@pytest.mark.parametrize(
    ("command", "needs"),
    [
        (["eval", "--min-budget", "300"], "--min-budget needs --budget-ratio"),
        (["replay", "--out", "x.jsonl", "--embedder", "hashing"], "--embedder needs --chroma"),
        (["eval", "--scorer", "llama.cpp"], "--scorer needs --likelihood"),
        (["eval", "--without-tool-list"], "--without-tool-list needs --likelihood"),
        # values are measured on every card: what a budget would keep changes none of them
        (["value", "--out", "v.jsonl", "--budget", "300"], "unrecognized arguments: --budget 300"),
        (["value", "--out", "v.jsonl", "--recent", "4"], "unrecognized arguments: --recent 4"),
    ],
)
def test_an_option_that_would_be_ignored_is_a_usage_error(trace, tmp_path, command, needs, capsys):
    path, _ = trace
    options = [str(tmp_path / option) if option.endswith(".jsonl") else option for option in command[1:]]

    with pytest.raises(SystemExit) as exit_info:
        main([command[0], str(path), *options])

    assert exit_info.value.code == 2
    assert needs in capsys.readouterr().err


def test_every_budget_is_checked_before_the_retention_run_and_an_earlier_points_file_is_kept(
    trace, tmp_path, capsys
):
    path, _ = trace
    points = tmp_path / "points.jsonl"
    points.write_text("an earlier run\n")

    code = main(
        [
            "eval",
            str(path),
            "--budget",
            "500",
            "150",
            "--budget-ratio",
            "0.07",
            "--likelihood-out",
            str(points),
        ]
    )

    printed = capsys.readouterr()
    assert code == 2 and "min_budget (200) is above budget (150)" in printed.err
    assert "Decision-fact retention" not in printed.out
    assert points.read_text() == "an earlier run\n"


def test_eval_leaves_a_system_prompt_in_content_parts_out_of_damcs_tokens(trace):
    from damc_core import MemorySettings, TiktokenCounter
    from damc_core.evaluate import evaluate

    _, trajectories = trace
    booking = trajectories[0]
    system, *rest = booking
    parts = [{**system, "content": [{"type": "text", "text": system["content"]}]}, *rest]
    settings = MemorySettings(budget=500, recent_messages=0)

    as_text, *_ = evaluate([booking], settings=settings, counter=TiktokenCounter())
    as_parts, *_ = evaluate([parts], settings=settings, counter=TiktokenCounter())

    assert as_parts.tokens == as_text.tokens  # the prompt is the same text, and not counted either way
    assert as_parts.recall("tool") == as_text.recall("tool") > 0


@pytest.mark.parametrize(
    ("command", "target"),
    [
        (["replay", "{trace}", "--out", "{trace}"], "trace"),
        (["replay", "{trace}", "--values", "{values}", "--out", "{values}"], "values"),
        (["eval", "{trace}", "--likelihood-out", "{trace}"], "trace"),
        (["eval", "{trace}", "--values", "{values}", "--likelihood-out", "{values}"], "values"),
        (["value", "{trace}", "--out", "{trace}"], "trace"),
    ],
    ids=[
        "replay over its trace",
        "replay over its values",
        "eval over its trace",
        "eval over its values",
        "value over its trace",
    ],
)
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(trace, tmp_path, capsys, command, target):
    path, _ = trace
    values = tmp_path / "values.jsonl"
    values.write_text(
        json.dumps({"traj": 0, "step": 2, "card_ids": ["c1"], "values": [0.5], "source": "loo"}) + "\n"
    )
    files = {"trace": path, "values": values}
    before = files[target].read_text()
    alias = tmp_path / "sub" / ".." / files[target].name  # the same file, named otherwise

    code = main([part.format(trace=path, values=values) for part in command[:-1]] + [str(alias)])

    assert code == 2
    assert files[target].read_text() == before
    err = capsys.readouterr().err
    assert err.startswith("damc: error: ") and "would overwrite" in err


def test_replay_of_a_responses_api_trace_counts_its_calls_as_decisions(tmp_path, assert_valid_context):
    """The items of the Responses API, as ``observe`` takes them: their calls are decision points,
    a step's parallel calls one, and the cancelled reservation's id reaches the context."""
    items = [
        {"role": "user", "content": "Cancel my reservation, I'm mia_li_3668."},
        {
            "type": "function_call",
            "call_id": "fc_1",
            "name": "get_user",
            "arguments": '{"user_id": "mia_li_3668"}',
        },
        {"type": "function_call_output", "call_id": "fc_1", "output": '{"reservations": ["ZFA04Y"]}'},
        {
            "type": "function_call",
            "call_id": "fc_2",
            "name": "cancel",
            "arguments": '{"reservation_id": "ZFA04Y"}',
        },
        {
            "type": "function_call",
            "call_id": "fc_3",
            "name": "notify",
            "arguments": '{"user_id": "mia_li_3668"}',
        },
    ]
    trace, out = tmp_path / "responses.json", tmp_path / "contexts.jsonl"
    trace.write_text(json.dumps(items), encoding="utf-8")

    replay = subprocess.run(
        [sys.executable, "-m", "damc_core.cli", "replay", str(trace), "--out", str(out)],
        capture_output=True,
        text=True,
    )

    assert replay.returncode == 0, replay.stderr
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["step"] for line in lines] == [1, 3]
    assert_valid_context(lines[1]["messages"])
    assert "ZFA04Y" in json.dumps(lines[1]["messages"])


def test_a_replay_holds_one_trajectorys_records_however_long_the_trace():
    """A trace of thousands of conversations replays in the memory of one: each is recorded in a
    store of its own, which goes when the next begins."""
    import gc

    from damc_core import MemorySettings, Namespace, TiktokenCounter
    from damc_core.evaluate import replay
    from damc_core.stores import InMemoryStore
    from damc_core.trace import load_trajectories

    demo = load_trajectories(DEMO)
    first = Namespace(user="replay", session="traj-0")
    points = replay(demo[:3], settings=MemorySettings(budget=400), counter=TiktokenCounter())
    while next(points).traj < 2:  # the replay is at the third conversation
        pass
    gc.collect()

    holding_the_first = [
        store for store in gc.get_objects() if isinstance(store, InMemoryStore) and store.records(first)
    ]
    assert holding_the_first == []


def test_needed_values_are_found_in_the_text_of_content_parts_not_in_their_repr(msg):
    from damc_core.evaluate import needed_facts

    path = r"C:\data\report.csv"
    said = {"role": "user", "content": [{"type": "text", "text": f"Summarize {path} for me."}]}
    call = msg.call("r1", "read_file", {"path": path})

    assert needed_facts([said], call) == [(path, "user")]


@pytest.mark.parametrize(("share", "named"), [("0.08", True), ("0", False)])
def test_replay_holds_the_share_of_the_budget_it_is_given_for_the_left_out_line(tmp_path, share, named):
    out = tmp_path / "contexts.jsonl"

    code = main(["replay", str(DEMO), "--budget", "250", "--left-out-share", share, "--out", str(out)])

    assert code == 0
    assert ("Not shown: " in out.read_text()) is named


def test_a_left_out_share_of_the_whole_budget_is_a_clear_error(trace, capsys):
    path, _ = trace

    code = main(["eval", str(path), "--left-out-share", "1"])

    assert code == 2 and "MemorySettings.left_out_share must be in [0, 1), got 1.0" in capsys.readouterr().err
