"""How much a per-decision budget could keep if it knew where the needed values are.

The memory spends one budget rule at every decision (fixed, or grown with the history). This
replays a trace at several fixed budgets, then gives each decision the smallest of those budgets
that keeps as many of its needed tool facts as the largest one, greedily by facts gained per
token, until the token ratio reaches ``--ratio``. No rule that decides before seeing the next
call can do better than this allocation with these budgets; the gap to the rule in use says how
much is lost to spending the same budget on decisions that need little::

    python benchmarks/budget_allocation.py ../shared/data/taubench-airline-dev.json --ratio 0.20
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from damc_core.evaluate import Retention, needed_facts, replay, system_prompt
from damc_core.memory import MemorySettings
from damc_core.tokens import TiktokenCounter, count_messages
from damc_core.trace import load_trajectories

BUDGETS = (250, 300, 350, 400, 450, 500, 600, 700, 800, 1000, 1300)


def per_point(trajectories: list[list[dict]], budgets: tuple[int, ...]) -> dict[tuple[int, int], list]:
    """(traj, step) -> [full-history tokens, tool facts, [(tokens, facts kept) per budget]]."""
    counter = TiktokenCounter()
    points: dict[tuple[int, int], list] = defaultdict(lambda: [0, 0, []])
    for budget in budgets:
        for point in replay(trajectories, settings=MemorySettings(budget=budget), counter=counter):
            step = trajectories[point.traj][point.step]
            facts = [fact for fact in needed_facts(point.history, step) if fact[1] == "tool"]
            system = system_prompt(trajectories[point.traj])
            full = count_messages(point.history, counter)
            measured = Retention("one decision")  # the judge's own count, for this decision alone
            measured.add(point.built.messages, facts, full, counter, system)
            row = points[point.traj, point.step]
            row[0], row[1] = full, len(facts)
            row[2].append((measured.tokens[0], measured.hits["tool"]))
    return points


def allocate(points: dict[tuple[int, int], list], ratio: float) -> tuple[float, float]:
    """Greedy allocation from the smallest budget: the step with the most facts per added token
    first, while the token ratio stays within ``ratio``. Returns (ratio reached, tool-fact recall)."""
    full = sum(row[0] for row in points.values())
    facts = sum(row[1] for row in points.values()) or 1
    choice = dict.fromkeys(points, 0)
    tokens = sum(row[2][0][0] for row in points.values())
    kept = sum(row[2][0][1] for row in points.values())
    while True:
        best = None
        for key, (_, _, levels) in points.items():
            now = levels[choice[key]]
            for level in range(choice[key] + 1, len(levels)):
                gain, cost = levels[level][1] - now[1], max(1, levels[level][0] - now[0])
                if gain > 0 and (best is None or gain / cost > best[0]):
                    best = (gain / cost, key, level, cost, gain)
        if best is None or (tokens + best[3]) / full > ratio:
            return tokens / full, kept / facts
        _, key, level, cost, gain = best
        choice[key], tokens, kept = level, tokens + cost, kept + gain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--ratio", type=float, default=0.20, help="token ratio to allocate within")
    parser.add_argument("--budgets", type=int, nargs="+", default=BUDGETS, help="fixed budgets to replay")
    args = parser.parse_args()
    budgets = tuple(sorted(args.budgets))
    points = per_point(load_trajectories(args.trace), budgets)
    reached, recall = allocate(points, args.ratio)
    facts = max(1, sum(row[1] for row in points.values()))
    smallest = sum(row[2][0][1] for row in points.values()) / facts
    largest = sum(max(kept for _, kept in row[2]) for row in points.values()) / facts
    print(f"decisions {len(points)}, tool facts {facts}")
    print(f"kept at {budgets[0]} tokens: {smallest:.3f}; at {budgets[-1]} tokens: {largest:.3f}")
    print(f"allocated per decision: {recall:.3f} of tool facts at a token ratio of {reached:.3f}")


if __name__ == "__main__":
    main()
