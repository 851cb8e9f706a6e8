"""``damc`` command line: replay traces, compare retention with baselines, inspect one decision."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .counterfactual.book import ValueBook
from .counterfactual.commands import (
    SCORER_HELP,
    add_value_parser,
    add_values_option,
    check_output,
    check_values_trace,
    likelihood_table,
    make_scorer,
    value_command,
    values_stages,
)
from .counterfactual.likelihood import decision_likelihood
from .counterfactual.scorer import LogProbScorer
from .counterfactual.valuator import CounterfactualValuator
from .errors import DamcError
from .evaluate import ReplayPoint, contexts_jsonl, evaluate, replay
from .explain import explain
from .memory import MemorySettings
from .tokens import TiktokenCounter
from .trace import load_trajectories
from .types import Message, Namespace

DEFAULT_EMBEDDER = "minilm-int8"
DEFAULT_SCORER = "llama.cpp"
CLI_BUDGET = 500
CLI_RECENT = 0
"""Replays measure memory alone by default: every earlier message reaches the model as a card."""


def _settings(args: argparse.Namespace) -> MemorySettings:
    budget = args.budget[0] if isinstance(args.budget, list) else args.budget
    return MemorySettings(
        budget=budget,
        recent_messages=args.recent,
        budget_ratio=args.budget_ratio,
        min_budget=args.min_budget,
        left_out_share=args.left_out_share,
    )


Stages = Callable[[Namespace], Mapping[str, Any]] | Mapping[str, Any] | None
"""Stage overrides for each replayed memory: fixed, or made per conversation."""


def _stages(args: argparse.Namespace, trajectories: Sequence[Sequence[Message]]) -> Stages:
    """Stages of the replayed memories: a retrieval valuator on a Chroma index with ``--chroma``
    (each replayed conversation starts on an empty index, so a folder used before gives the same
    contexts as a new one), counterfactual values from a file with ``--values`` (over the
    retrieval valuator when both are given)."""
    values = getattr(args, "values", None)
    if values:
        check_values_trace(values, trajectories, args.trace)
    if not getattr(args, "chroma", None):
        return values_stages(values)
    from .retrieval import CardIndex, RetrievalValuator, load_embedder
    from .stores.chroma import ChromaConfig

    index = CardIndex(ChromaConfig(path=args.chroma), embedder=load_embedder(args.embedder))
    book = ValueBook.read_jsonl(values) if values else None  # read once, shared by every conversation

    retrieval = RetrievalValuator(index)
    valuator = CounterfactualValuator(base=retrieval, book=book) if book else retrieval

    def stages(namespace: Namespace) -> Mapping[str, Any]:
        index.drop(namespace)
        return {"valuator": valuator}

    return stages


def _count_points(trajectories: Sequence[Sequence[dict[str, object]]]) -> int:
    return sum(len(_decision_steps(messages)) for messages in trajectories)


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def _points_of(trajectories: Sequence[Sequence[dict[str, object]]], trace: str) -> int:
    """How many decision points the trace has; none is an error (a trace of another format, or
    one without tool calls), not an empty result."""
    points = _count_points(trajectories)
    if not points:
        raise DamcError(f"{trace} has no decision points: no assistant message in it calls a tool")
    return points


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    trajectories = load_trajectories(args.trace)
    points = _points_of(trajectories, args.trace)
    check_output(args.out, "--out", {"trace": args.trace, "values": getattr(args, "values", None)})
    settings, stages = _settings(args), _stages(args, trajectories)  # a usage error leaves --out alone
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with out.open("w", encoding="utf-8") as handle, _progress(console) as progress:
        task = progress.add_task("replaying", total=points)
        try:
            for point in replay(trajectories, settings=settings, counter=TiktokenCounter(), stages=stages):
                handle.write(contexts_jsonl(point) + "\n")
                written += 1
                progress.advance(task)
        except KeyboardInterrupt:
            console.print(f"interrupted: {out} holds the first {written} decision points")
            raise
    console.print(f"wrote {written} decision points from {len(trajectories)} trajectories to {out}")
    return 0


def cmd_eval(args: argparse.Namespace, console: Console) -> int:
    trajectories = load_trajectories(args.trace)
    points = _points_of(trajectories, args.trace)
    settings, stages = _settings(args), _stages(args, trajectories)
    for budget in args.budget[1:]:  # every budget is checked before the long part
        replace(settings, budget=budget)
    if args.likelihood_out:
        check_output(args.likelihood_out, "--likelihood-out", {"trace": args.trace, "values": args.values})
    scorer = make_scorer(args.scorer) if args.likelihood or args.likelihood_out else None
    if args.likelihood_out:  # writable, and left as it was until the scoring starts
        open(args.likelihood_out, "a", encoding="utf-8").close()
    _retention(args, console, trajectories, points, settings, stages)
    if scorer is None:
        return 0
    with (
        open(args.likelihood_out, "w", encoding="utf-8") if args.likelihood_out else contextlib.nullcontext()
    ) as out:
        _likelihood(args, console, trajectories, points, settings, stages, scorer, out)
    return 0


def _retention(
    args: argparse.Namespace,
    console: Console,
    trajectories: list[list[Message]],
    points: int,
    settings: MemorySettings,
    stages: Stages,
) -> None:
    with _progress(console) as progress:
        task = progress.add_task("evaluating", total=points * len(args.budget))

        def advance(_: ReplayPoint) -> None:
            progress.advance(task)

        rows = evaluate(
            trajectories,
            settings=settings,
            counter=TiktokenCounter(),
            budgets=args.budget,
            on_point=advance,
            stages=stages,
        )
    table = Table(title=f"Decision-fact retention on {args.trace}")
    for column in ("strategy", "mean tokens", "token ratio", "tool facts", "user facts"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for row in rows:
        table.add_row(
            row.name,
            f"{row.mean_tokens:.0f}",
            f"{row.token_ratio:.2f}",
            _share(row.recall("tool")),
            _share(row.recall("user")),
        )
    console.print(table)
    first = rows[0]
    console.print(
        f"decision points: {len(first.tokens)}, tool-grounded facts: {first.totals['tool']}, "
        f"user-grounded facts: {first.totals['user']}"
    )


def _share(recall: float) -> str:
    """A recall, or n/a when the trace has no fact of that kind (no tool result was used)."""
    return "n/a" if math.isnan(recall) else f"{recall:.3f}"


def _likelihood(
    args: argparse.Namespace,
    console: Console,
    trajectories: list[list[Message]],
    points: int,
    settings: MemorySettings,
    stages: Stages,
    scorer: LogProbScorer,
    out: TextIO | None,
) -> None:
    """``damc eval --likelihood``: log P(gold action | context) beside the full history's."""
    with _progress(console) as progress:

        def write(point: dict[str, Any]) -> None:  # as scored: a stopped run keeps its points
            if out is not None:
                out.write(json.dumps(point) + "\n")
                out.flush()

        task = progress.add_task("scoring actions", total=points)
        report = decision_likelihood(
            trajectories,
            scorer=scorer,
            settings=settings,
            counter=TiktokenCounter(),
            budgets=args.budget,
            stages=stages,
            on_point=lambda: progress.advance(task),
            on_scored=write,
            tools="" if args.without_tool_list else None,
        )
    console.print(likelihood_table(report, args.trace))
    skipped = ", ".join(f"{n} {why}" for why, n in report.skipped.items() if n)
    console.print(f"decision points scored: {report.points}" + (f"; skipped: {skipped}" if skipped else ""))


def cmd_value(args: argparse.Namespace, console: Console) -> int:
    return value_command(args, console, _progress(console), MemorySettings(recent_messages=CLI_RECENT))


def cmd_inspect(args: argparse.Namespace, console: Console) -> int:
    trajectories = load_trajectories(args.trace)
    if not 0 <= args.traj < len(trajectories):
        raise DamcError(f"--traj {args.traj} is out of range: the trace has {len(trajectories)} trajectories")
    steps = _decision_steps(trajectories[args.traj])
    if not steps:
        with_decisions = [str(t) for t, messages in enumerate(trajectories) if _decision_steps(messages)]
        named = ", ".join(with_decisions[:10]) + (", ..." if len(with_decisions) > 10 else "")
        raise DamcError(
            f"trajectory {args.traj} has no tool-calling assistant message; "
            + (f"trajectories {named} have" if with_decisions else "no trajectory of the trace has one")
        )
    if args.step not in steps:  # said before any replay: a long trajectory is not replayed to find out
        raise DamcError(
            f"step {args.step} of trajectory {args.traj} is not a tool-calling assistant message; "
            f"decision steps are {steps}"
        )
    stages = _stages(args, trajectories)
    for point in replay(
        [trajectories[args.traj]], settings=_settings(args), counter=TiktokenCounter(), stages=stages
    ):
        if point.step == args.step:
            console.print(explain(point.built), markup=False, highlight=False, soft_wrap=True)
            break
    return 0


def _decision_steps(messages: Sequence[Message]) -> list[int]:
    """Where a trajectory's assistant calls a tool: the steps a replay builds a context before."""
    return [step for step, m in enumerate(messages) if m.get("role") == "assistant" and m.get("tool_calls")]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="damc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def trace(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "trace",
            help="JSON list of messages, JSONL of messages, or [{'traj': [...]}, ...] "
            "(or {'messages': [...]} items); OpenAI chat messages or Responses API items",
        )

    def retrieval(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--chroma",
            metavar="DIR",
            help="also rank cards by retrieval from a Chroma index in DIR (needs the chroma extra)",
        )
        p.add_argument(
            "--embedder", help=f"embedder of --chroma: minilm-int8 or hashing (default {DEFAULT_EMBEDDER})"
        )

    def common(p: argparse.ArgumentParser, *, many_budgets: bool = False) -> None:
        trace(p)
        p.add_argument(
            "--budget",
            type=int,
            nargs="+" if many_budgets else None,
            default=[CLI_BUDGET] if many_budgets else CLI_BUDGET,
            help="tokens for memory plus recent dialogue (default %(default)s)"
            + ("; several budgets give one row each" if many_budgets else ""),
        )
        p.add_argument(
            "--budget-ratio",
            type=float,
            metavar="R",
            help="grow the budget with the history: --min-budget plus R times what the history "
            "would cost verbatim, up to --budget (e.g. --budget 3000 --budget-ratio 0.074 --min-budget 285)",
        )
        p.add_argument(
            "--min-budget",
            type=int,
            metavar="N",
            help="with --budget-ratio: the budget for an empty history "
            f"(default {MemorySettings().min_budget})",
        )
        p.add_argument(
            "--left-out-share",
            type=float,
            metavar="S",
            default=MemorySettings().left_out_share,
            help="share of the memory budget held for the line naming the cards left out "
            "(default %(default)s; 0 leaves the line out)",
        )
        p.add_argument(
            "--recent",
            type=int,
            default=CLI_RECENT,
            help="newest messages sent verbatim; 0 sends everything as cards (default %(default)s)",
        )

    p_replay = sub.add_parser("replay", help="write the context DAMC would send before every tool call")
    common(p_replay)
    p_replay.add_argument("--out", required=True, help="output JSONL: {traj, step, messages} per line")
    retrieval(p_replay)
    add_values_option(p_replay)
    p_replay.set_defaults(run=cmd_replay)
    p_eval = sub.add_parser("eval", help="retention of decision facts beside baselines")
    common(p_eval, many_budgets=True)
    retrieval(p_eval)
    add_values_option(p_eval)
    p_eval.add_argument(
        "--likelihood", action="store_true", help="also score log P(gold action | context) with --scorer"
    )
    p_eval.add_argument(
        "--likelihood-out",
        metavar="FILE",
        help="--likelihood, and every point's log P per strategy written to FILE (JSONL)",
    )
    p_eval.add_argument(
        "--without-tool-list",
        action="store_true",
        help="--likelihood without the list of the trace's tools that opens every context",
    )
    p_eval.add_argument("--scorer", help=SCORER_HELP)
    p_eval.set_defaults(run=cmd_eval)
    p_inspect = sub.add_parser("inspect", help="cards, scores and assembled context at one decision")
    common(p_inspect)
    retrieval(p_inspect)
    p_inspect.add_argument("--traj", type=int, default=0, help="trajectory index, from 0 (default 0)")
    p_inspect.add_argument(
        "--step",
        type=int,
        required=True,
        help="index of a tool-calling assistant message in the trajectory (the message list, from 0)",
    )
    p_inspect.set_defaults(run=cmd_inspect)
    add_value_parser(sub, trace, cmd_value)  # values are of every card: a budget would change nothing
    return parser


def _check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Options that would be ignored, said so rather than silently dropped."""
    given = set(vars(args))
    if "budget" not in given:  # `damc value`: every card, whatever a budget would keep
        return
    if args.min_budget is not None and args.budget_ratio is None:
        parser.error("--min-budget needs --budget-ratio (it is where the growing budget starts)")
    if "embedder" in given and args.embedder is not None and not args.chroma:
        parser.error("--embedder needs --chroma (it embeds the cards of that index)")
    if "likelihood" in given and not (args.likelihood or args.likelihood_out):
        if args.scorer is not None:
            parser.error("--scorer needs --likelihood or --likelihood-out (it scores the actions)")
        if args.without_tool_list:
            parser.error(
                "--without-tool-list needs --likelihood or --likelihood-out (it frames the scored contexts)"
            )
    if args.min_budget is None:
        args.min_budget = MemorySettings().min_budget
    for name, default in (("embedder", DEFAULT_EMBEDDER), ("scorer", DEFAULT_SCORER)):
        if name in given and getattr(args, name) is None:
            setattr(args, name, default)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_options(parser, args)
    if isinstance(getattr(args, "budget", None), list):
        args.budget = list(dict.fromkeys(args.budget))  # a budget named twice is one row, not two
    console = Console()
    errors = Console(stderr=True, soft_wrap=True)
    try:
        return int(args.run(args, console))
    except (DamcError, OSError) as exc:  # OSError: an input or output path that cannot be used
        errors.print(f"damc: error: {exc}", markup=False)
        return 2
    except KeyboardInterrupt:
        errors.print("damc: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
