"""Counterfactual card values on recorded decision points: cheap estimators against exact leave-one-out.

For a seeded sample of decision points of the dev trajectories (a tool call that then succeeded,
with at least ``--min-cards`` cards and a context of at most ``--max-tokens``; the system prompt
is left out of the head unless ``--with-system``), with the bundled SmolLM2 scorer or the GGUF
model given as ``--model``:

* Spearman rank correlation of :class:`AblationSurrogate` and of :class:`CoarseToFine` with exact
  :class:`LeaveOneOut`, each given at most ``n / 4`` ablations (at most 32; ``--budget``), and of
  :class:`CopyAttribution`, which takes two passes whatever ``n``;
* scorer passes per second and tokens evaluated per pass;
* what prefix reuse saves: leave-one-out with and without KV-cache reuse (on the first
  ``--reuse-points`` points: without reuse is the slow part);
* with ``--noise-floor``, how far exact leave-one-out agrees with itself: Spearman between its
  values and those of a second run on a frame changed in no meaningful way (a semicolon of the
  memory header made a comma). No estimator can agree with leave-one-out more closely than that.

    nice python benchmarks/counterfactual.py --points 6
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass, replace

import numpy as np

from damc_core.assemble import MEMORY_PREAMBLE
from damc_core.counterfactual import AblationProblem, CardValues
from damc_core.counterfactual.estimators import (
    AblationSurrogate,
    CoarseToFine,
    CopyAttribution,
    Estimator,
    LeaveOneOut,
)
from damc_core.counterfactual.llama_cpp import LlamaCppScorer
from damc_core.counterfactual.problems import action_succeeded, problem_from_history
from damc_core.encode import parse_arguments
from damc_core.evaluate import SKIPPED_TOOLS, replay, system_prompt
from damc_core.memory import MemorySettings
from damc_core.tokens import CharEstimateCounter, call_function
from damc_core.trace import load_trajectories

DEV = "/work/shared/data/taubench-airline-dev.json"


def spearman(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Rank correlation with average ranks for ties (nan when one side is constant)."""
    ra, rb = _ranks(np.asarray(a)), _ranks(np.asarray(b))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    order = values.argsort(kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=float)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


REWORDED_PREAMBLE = MEMORY_PREAMBLE.replace(";", ",", 1)
"""The memory header changed in no meaningful way (a semicolon made a comma), for ``--noise-floor``."""


@dataclass
class Run:
    values: CardValues
    seconds: float
    tokens: int


def run(estimator: Estimator, problem: AblationProblem, scorer: LlamaCppScorer) -> Run:
    before = scorer.evaluated_tokens
    start = time.perf_counter()
    values = estimator.estimate(problem, scorer)
    return Run(values, time.perf_counter() - start, scorer.evaluated_tokens - before)


def sample_problems(args: argparse.Namespace, scorer: LlamaCppScorer) -> list[tuple[str, AblationProblem]]:
    trajectories = load_trajectories(args.data)
    found = []
    for point in replay(trajectories, settings=MemorySettings(), counter=CharEstimateCounter()):
        trajectory = trajectories[point.traj]
        message = trajectory[point.step]
        names = {call_function(c).get("name") for c in message.get("tool_calls") or ()}
        if names & SKIPPED_TOOLS or not action_succeeded(trajectory, point.step):
            continue
        if any("_raw" in parse_arguments(call_function(c).get("arguments")) for c in message["tool_calls"]):
            continue
        system = system_prompt(trajectory) if args.with_system else None
        problem = problem_from_history(point.history, message, system=system)
        n = len(problem.card_ids)
        if n < args.min_cards:
            continue
        if len(scorer.tokens(problem.request([True] * n))[0]) > args.max_tokens:
            continue
        found.append((f"traj {point.traj} step {point.step}", problem))
    random.Random(args.seed).shuffle(found)
    print(f"{len(found)} decision points qualify; sampling {min(args.points, len(found))}")
    return found[: args.points]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=DEV)
    parser.add_argument("--points", type=int, default=6)
    parser.add_argument("--min-cards", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=900)
    parser.add_argument("--reuse-points", type=int, default=2)
    parser.add_argument("--budget", type=float, default=0.25, help="ablations as a fraction of the cards")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--with-system", action="store_true", help="keep the ~1,500-token system prompt in the head"
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default=None, help="a GGUF model file (default: the bundled SmolLM2-135M)")
    parser.add_argument(
        "--noise-floor", action="store_true", help="also run leave-one-out on a trivially changed frame"
    )
    args = parser.parse_args()

    scorer = LlamaCppScorer(args.model, n_ctx=args.max_tokens + 64, n_threads=args.threads)
    problems = sample_problems(args, scorer)
    rows = []
    for index, (label, problem) in enumerate(problems):
        n = len(problem.card_ids)
        budget = max(1, min(32, int(n * args.budget)))
        exact = run(LeaveOneOut(), problem, scorer)
        surrogate = run(AblationSurrogate(ablations=budget), problem, scorer)
        coarse = run(CoarseToFine(max_passes=budget + 1), problem, scorer)
        copy = run(CopyAttribution(), problem, scorer)
        row = {
            "point": label,
            "n": n,
            "tokens": len(scorer.tokens(problem.request([True] * n))[0]),
            "loo_s": exact.seconds,
            "passes_per_s": exact.values.passes / exact.seconds,
            "tokens_per_pass": exact.tokens / exact.values.passes,
            "surrogate_rho": spearman(surrogate.values.values, exact.values.values),
            "surrogate_passes": surrogate.values.passes,
            "coarse_rho": spearman(coarse.values.values, exact.values.values),
            "coarse_passes": coarse.values.passes,
            "copy_rho": spearman(copy.values.values, exact.values.values),
            "top_card_loo": exact.values.card_ids[int(np.argmax(exact.values.values))],
            "top_card_surrogate": surrogate.values.card_ids[int(np.argmax(surrogate.values.values))],
            "top_card_coarse": coarse.values.card_ids[int(np.argmax(coarse.values.values))],
            "top_card_copy": copy.values.card_ids[int(np.argmax(copy.values.values))],
            "max_loo": max(exact.values.values),
        }
        if args.noise_floor:
            reworded = replace(problem, head=problem.head.replace(MEMORY_PREAMBLE, REWORDED_PREAMBLE, 1))
            again = run(LeaveOneOut(), reworded, scorer)
            row["loo_self_rho"] = spearman(again.values.values, exact.values.values)
        if index < args.reuse_points:
            scorer.reuse_prefix = False
            fresh = run(LeaveOneOut(), problem, scorer)
            scorer.reuse_prefix = True
            row["reuse_speedup_s"] = fresh.seconds / exact.seconds
            row["reuse_speedup_tokens"] = fresh.tokens / exact.tokens
            row["reuse_max_diff"] = max(
                abs(a - b) for a, b in zip(fresh.values.values, exact.values.values, strict=True)
            )
        rows.append(row)
        print(
            f"{label}: n={n} tokens={row['tokens']} loo {exact.seconds:.1f}s "
            f"({row['passes_per_s']:.2f} passes/s, {row['tokens_per_pass']:.0f} tokens/pass) | "
            f"surrogate rho={row['surrogate_rho']:.2f} ({surrogate.values.passes} passes) | "
            f"coarse-to-fine rho={row['coarse_rho']:.2f} ({coarse.values.passes} passes) | "
            f"copy rho={row['copy_rho']:.2f} (2 passes) | "
            f"top card loo/surrogate/coarse/copy {row['top_card_loo']}/{row['top_card_surrogate']}/"
            f"{row['top_card_coarse']}/{row['top_card_copy']} (loo {row['max_loo']:.1f} nats)"
            + (f" | loo vs itself reworded rho={row['loo_self_rho']:.2f}" if "loo_self_rho" in row else "")
            + (
                f" | reuse: {row['reuse_speedup_s']:.1f}x time, {row['reuse_speedup_tokens']:.1f}x tokens, "
                f"max diff {row['reuse_max_diff']:.2g}"
                if "reuse_speedup_s" in row
                else ""
            ),
            flush=True,
        )
    if not rows:
        return
    print("\nsummary over", len(rows), "decision points")
    for key in ("surrogate_rho", "coarse_rho", "copy_rho", "loo_self_rho", "passes_per_s", "tokens_per_pass"):
        values = [float(r[key]) for r in rows if key in r and not np.isnan(float(r[key]))]
        if not values:
            continue
        print(f"  {key}: mean {statistics.mean(values):.3f} median {statistics.median(values):.3f}")
    for name in ("surrogate", "coarse", "copy"):
        agree = sum(r[f"top_card_{name}"] == r["top_card_loo"] for r in rows)
        print(f"  {name} finds loo's top card: {agree}/{len(rows)}")
    speedups = [r for r in rows if "reuse_speedup_s" in r]
    for r in speedups:
        print(
            f"  prefix reuse on {r['point']}: {r['reuse_speedup_s']:.1f}x faster, "
            f"{r['reuse_speedup_tokens']:.1f}x fewer tokens, max |diff| {r['reuse_max_diff']:.2g} nats"
        )


if __name__ == "__main__":
    main()
