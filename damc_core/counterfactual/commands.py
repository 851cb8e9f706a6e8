"""The counterfactual parts of the ``damc`` command: ``damc value``, ``--values`` and ``--likelihood``."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ..errors import ConfigError, TraceError
from ..evaluate import replay, system_prompt
from ..memory import MemorySettings
from ..tokens import TiktokenCounter, TokenCounter
from ..trace import load_trajectories
from ..types import Message
from .book import ValueBook, ValuedDecision, decision_line, replay_namespace
from .estimators import AblationSurrogate, CoarseToFine, CopyAttribution, Estimator, LeaveOneOut
from .gold import gold_action
from .likelihood import LikelihoodReport
from .problem import CardValues
from .problems import problem_from_history
from .scorer import ContextTooLong, LogProbScorer
from .valuator import CounterfactualValuator

ESTIMATORS: dict[str, Callable[[], Estimator]] = {
    "loo": LeaveOneOut,
    "surrogate": AblationSurrogate,
    "coarse": CoarseToFine,
    "copy": CopyAttribution,
}
SCORER_HELP = "llama.cpp (the bundled SmolLM2-135M-Instruct, default) or llama.cpp:PATH.gguf"


def make_scorer(spec: str) -> LogProbScorer:
    """The scorer a ``--scorer`` option names."""
    backend, _, path = spec.partition(":")
    if backend != "llama.cpp":
        raise ConfigError(f"unknown scorer {spec!r}; use {SCORER_HELP}")
    from .llama_cpp import LlamaCppScorer

    return LlamaCppScorer(path or None)


def value_trajectories(
    trajectories: Sequence[Sequence[Message]],
    *,
    estimator: Estimator,
    scorer: LogProbScorer,
    settings: MemorySettings,
    counter: TokenCounter,
    with_system: bool = True,
    on_point: Callable[[], None] | None = None,
    on_too_long: Callable[[int, int], None] | None = None,
) -> Iterator[dict[str, Any]]:
    """One values line per decision point with a gold action: every card's value there, and the
    full context's score (``None`` when that pass failed: the line stays valid JSON).

    ``with_system=False`` leaves the trajectory's system prompt out of the scored contexts (much
    faster with long policies; small scoring models make little use of them). A point whose
    context the scorer cannot take is skipped and handed to ``on_too_long`` as (trajectory, step).
    """
    for point in replay(trajectories, settings=settings, counter=counter):
        messages = trajectories[point.traj]
        gold = gold_action(messages, point.step)
        prompt = system_prompt(messages)
        opens_with_system = prompt is not None
        system = prompt if with_system else None
        # every message the replay numbered, later system messages too, so card ids match it
        history = messages[int(opens_with_system) : point.step]
        problem = problem_from_history(history, gold, system=system) if gold is not None else None
        try:
            values = estimator.estimate(problem, scorer) if problem is not None and problem.card_ids else None
        except ContextTooLong:
            values = None
            if on_too_long is not None:
                on_too_long(point.traj, point.step)
        if values is not None:
            if not with_system and opens_with_system:  # ids as the replay numbers them
                values = _after_system(values)
            namespace = replay_namespace({"traj": point.traj})
            decision = ValuedDecision.of(namespace, point.step, point.built.focus.terms, values, scorer.name)
            yield {
                "traj": point.traj,
                "step": point.step,
                "history": history_digest(messages[: point.step]),
                **decision_line(decision),
                "full": values.full if math.isfinite(values.full) else None,
                "passes": values.passes,
                "failed": values.failed,
            }
        if on_point is not None:
            on_point()


def _after_system(values: CardValues) -> CardValues:
    """Card ids of a problem built without the system prompt, as a replay (which observed it) has them."""
    return replace(values, card_ids=tuple(f"c{int(i[1:]) + 1}" for i in values.card_ids))


def value_command(
    args: argparse.Namespace, console: Console, progress: Progress, settings: MemorySettings
) -> int:
    """``damc value``: write every decision point's card values, with a progress bar."""
    trajectories = load_trajectories(args.trace)
    check_output(args.out, "--out", {"trace": args.trace})
    points = sum(1 for t in trajectories for m in t if m.get("role") == "assistant" and m.get("tool_calls"))
    scorer = make_scorer(args.scorer)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = passes = failed = 0
    too_long: list[tuple[int, int]] = []
    with out.open("w", encoding="utf-8") as handle, progress as bar:
        task = bar.add_task(f"valuing ({args.estimator})", total=points)
        try:
            for line in value_trajectories(
                trajectories,
                estimator=ESTIMATORS[args.estimator](),
                scorer=scorer,
                settings=settings,
                counter=TiktokenCounter(),
                with_system=not args.without_system,
                on_point=lambda: bar.advance(task),
                on_too_long=lambda traj, step: too_long.append((traj, step)),
            ):
                handle.write(json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n")
                handle.flush()  # a long run can be stopped and its values used
                written += 1
                passes += int(line["passes"])
                failed += int(line["failed"])
        except KeyboardInterrupt:
            console.print(f"interrupted: {out} holds the values of the first {written} decision points")
            raise
    console.print(f"wrote values of {written} decision points ({passes} scorer passes) to {out}")
    if failed:  # a scorer that gives NaN or an infinity: those passes measured nothing
        console.print(f"{failed} of the {passes} passes gave no finite score and measured nothing")
    if too_long:
        console.print(f"skipped {len(too_long)} decision points longer than the scorer's context")
    return 0


def add_value_parser(
    sub: Any, trace: Callable[[argparse.ArgumentParser], None], run: Callable[..., int]
) -> None:
    p = sub.add_parser("value", help="counterfactual value of every card at every decision point")
    trace(p)
    p.add_argument(
        "--estimator",
        choices=sorted(ESTIMATORS),
        default="loo",
        help="loo: exact leave-one-out, n + 1 passes; surrogate: random ablations and a sparse fit; "
        "coarse: groups of cards, split where removal matters; copy: two passes, each word of the "
        "action credited to the cards that spell it (default %(default)s)",
    )
    p.add_argument("--scorer", default="llama.cpp", help=SCORER_HELP)
    p.add_argument("--out", required=True, help="output JSONL: one decision point per line")
    p.add_argument(
        "--without-system", action="store_true", help="leave the system prompt out of scored contexts"
    )
    p.set_defaults(run=run)


def add_values_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--values",
        help="values file from `damc value`: blend its counterfactual values into the heuristics",
    )


def values_stages(path: str | None) -> Mapping[str, Any] | None:
    """``DecisionMemory`` stages for a ``--values`` file (``None`` when none is given)."""
    if path is None:
        return None
    return {"valuator": CounterfactualValuator(book=ValueBook.read_jsonl(path))}


def history_digest(messages: Sequence[Message]) -> str:
    """A fingerprint of a trajectory up to a decision, written on each values line: card ids are
    positions (``c3``), so values read against another trace would land on other cards."""
    text = json.dumps(list(messages), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def check_output(out: str, option: str, inputs: Mapping[str, str | None]) -> None:
    """Refuse an output path that names one of the run's inputs (``{"trace": path, ...}``): the
    file would be emptied as the run starts, after it was read. A folder is refused by name too:
    opening it says only ``Is a directory``, not which option gave it."""
    if os.path.isdir(out):
        raise TraceError(
            f"{option} {out} is a folder; give it a file, such as {os.path.join(out, 'out.jsonl')}"
        )
    for name, given in inputs.items():
        if given and _same_file(out, given):
            raise TraceError(f"{option} {out} is the {name} file; writing it would overwrite the {name}")


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # a hard link
    except OSError:  # one of them does not exist yet
        return False


def check_values_trace(path: str, trajectories: Sequence[Sequence[Message]], trace: str) -> None:
    """Refuse a values file written by ``damc value`` on another trace (or its trajectories in
    another order): its decisions are read by trajectory and step. Lines without a fingerprint
    (files from before it was written) are taken as they are."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read values file {path}: {exc}") from exc
    for number, line in enumerate(lines, 1):
        try:
            item = json.loads(line) if line.strip() else {}
        except (ValueError, RecursionError):
            continue  # reading the book says what is wrong with the line
        if not isinstance(item, dict) or "history" not in item or "traj" not in item:
            continue
        traj, step = item["traj"], item.get("step")
        held = trajectories[traj] if isinstance(traj, int) and 0 <= traj < len(trajectories) else None
        if held is None or not isinstance(step, int) or history_digest(held[:step]) != item["history"]:
            raise TraceError(
                f"{path}:{number}: these values were computed on another trace (trajectory {traj} up to "
                f"step {step} is not the same in {trace}); run `damc value {trace}` for its values"
            )


def likelihood_table(report: LikelihoodReport, trace: str) -> Table:
    table = Table(title=f"Decision likelihood on {trace} (log P(gold action | context), nats)")
    for column in ("strategy", "mean tokens", "mean log P", "vs full history", "not worse"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for row in report.rows:
        tokens = sum(row.tokens) / len(row.tokens) if row.tokens else 0.0
        table.add_row(
            row.name,
            f"{tokens:.0f}",
            f"{row.mean_log_prob:.3f}",
            f"{row.mean_delta:+.3f}",
            f"{row.not_worse:.2f}",
        )
    return table
