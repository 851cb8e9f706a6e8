"""Decision likelihood: how likely a language model finds the right next action from a context.

The second retention metric beside fact recall. At every decision point of recorded trajectories,
``log P(gold action | context)`` is measured for DAMC's context and for the usual memories, and
reported as the difference to the full history. A memory that keeps what the decision needs loses
nothing here; one that also drops noise can gain.

Contexts are read as plain transcripts; the trajectory's own system prompt is left out of every
one of them (it is the same for all strategies), so only what a memory sends is compared. Every
context opens with the same list of the agent's tools, as a real prompt carries their schemas:
without it, only a context that shows earlier calls tells the model what a call looks like.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..encode import parse_arguments
from ..evaluate import baselines, budget_label, replay, system_prompt
from ..memory import MemorySettings
from ..tokens import TokenCounter, call_function, content_text
from ..types import Message, Namespace
from .gold import gold_action
from .problem import ScoreRequest
from .problems import ACTION_PREFIX, action_text
from .scorer import ContextTooLong, LogProbScorer


def transcript(messages: Sequence[Message], *, system: str | None = None) -> str:
    """A context as the model reads it: ``role: text`` blocks, calls written as cards write them.

    ``system`` (the trajectory's own system prompt) is cut out of system messages, so a memory
    section placed in the system message is kept and the shared policy text is not.
    """
    blocks = []
    for message in messages:
        role = str(message.get("role") or "unknown")
        text = content_text(message.get("content"))
        if role == "system" and system and system in text:
            text = text.replace(system, "", 1).strip()
        calls = [action_text({"tool_calls": [c]}) for c in message.get("tool_calls") or ()]
        if role == "tool":
            role = f"tool {message.get('name') or ''}".rstrip()
        body = "\n".join(part for part in (text, *calls) if part)
        if body:
            blocks.append(f"{role}: {body}")
    return "\n".join(blocks)


def tool_list(trajectories: Sequence[Sequence[Message]]) -> str:
    """The tools the trajectories call, one per line as ``name(argument, records=[(key, ...)], ...)``.

    Recorded traces keep the calls, not the tool schemas the agent was given; every argument seen
    in any call of any trajectory stands in for them, so each decision sees the whole tool set
    (not the tools its own trajectory goes on to use). Empty when no trajectory calls a tool.
    """
    tools: dict[str, dict[str, tuple[bool, dict[str, None]]]] = {}
    for messages in trajectories:
        for message in messages:
            for call in message.get("tool_calls") or ():
                function = call_function(call)
                arguments = tools.setdefault(str(function.get("name") or "?"), {})
                for name, value in parse_arguments(function.get("arguments")).items():
                    is_list, keys = arguments.setdefault(name, (isinstance(value, list), {}))
                    for item in value if isinstance(value, list) else [value]:
                        if isinstance(item, Mapping):
                            keys.update(dict.fromkeys(map(str, item)))
    if not tools:
        return ""
    lines = []
    for tool, arguments in tools.items():
        shown = []
        for name, (is_list, keys) in arguments.items():
            record = f"({', '.join(keys)})" if keys else ""
            shown.append(name if not record else f"{name}=[{record}]" if is_list else f"{name}={record}")
        lines.append(f"{tool}({', '.join(shown)})")
    return "Tools:\n" + "\n".join(lines)


@dataclass(slots=True)
class LikelihoodRow:
    """One strategy's ``log P(gold action | context)`` at every scored decision point."""

    name: str
    log_probs: list[float] = field(default_factory=list)
    deltas: list[float] = field(default_factory=list)
    """Minus the full history's figure at the same point (positive: likelier than from everything)."""
    tokens: list[int] = field(default_factory=list)

    @property
    def mean_log_prob(self) -> float:
        return sum(self.log_probs) / len(self.log_probs) if self.log_probs else math.nan

    @property
    def mean_delta(self) -> float:
        return sum(self.deltas) / len(self.deltas) if self.deltas else math.nan

    @property
    def not_worse(self) -> float:
        """Share of points where the context made the action at least as likely as the full history."""
        return sum(d >= 0 for d in self.deltas) / len(self.deltas) if self.deltas else math.nan


@dataclass(frozen=True, slots=True)
class LikelihoodReport:
    rows: list[LikelihoodRow]
    positions: list[tuple[int, int]]
    """``(traj, step)`` of each scored point, in the order of the rows' lists."""
    skipped: Mapping[str, int]
    """Decision points not scored, by reason (no successful call, too long for the scorer)."""

    @property
    def points(self) -> int:
        """Decision points scored."""
        return len(self.positions)

    def per_point(self) -> list[dict[str, Any]]:
        """One record per scored point, every strategy's log P and tokens: where a memory loses."""
        return [_point_record(self.rows, self.positions, i) for i in range(len(self.positions))]


def _point_record(
    rows: Sequence[LikelihoodRow], positions: Sequence[tuple[int, int]], i: int
) -> dict[str, Any]:
    traj, step = positions[i]
    return {
        "traj": traj,
        "step": step,
        "log_prob": {row.name: row.log_probs[i] for row in rows},
        "tokens": {row.name: row.tokens[i] for row in rows},
    }


def decision_likelihood(
    trajectories: Sequence[Sequence[Message]],
    *,
    scorer: LogProbScorer,
    settings: MemorySettings,
    counter: TokenCounter,
    budgets: Sequence[int] = (),
    stages: Mapping[str, Any] | Callable[[Namespace], Mapping[str, Any]] | None = None,
    on_point: Callable[[], None] | None = None,
    on_scored: Callable[[dict[str, Any]], None] | None = None,
    tools: str | None = None,
) -> LikelihoodReport:
    """DAMC (at each budget) and the baselines, scored at every decision point with a gold action.

    The gold action is the call the trajectory made that then succeeded
    (:func:`~damc_core.counterfactual.gold.gold_action`). Every context opens with ``tools``
    (default: :func:`tool_list` of ``trajectories``; ``""`` for none). ``on_point`` is called once
    per decision point, scored or skipped; ``on_scored`` with each scored point's record (as in
    :meth:`LikelihoodReport.per_point`) as soon as it is scored, so a long run that is stopped
    keeps what it scored.
    """
    budgets = list(budgets) or [settings.budget]
    head = tool_list(trajectories) if tools is None else tools
    head += "\n" if head else ""
    contexts: dict[tuple[int, int], dict[str, list[Message]]] = {}
    names = []
    for budget in budgets:
        at_budget = replace(settings, budget=budget)
        names.append(f"damc {budget_label(at_budget)}")
        for point in replay(trajectories, settings=at_budget, counter=counter, stages=stages):
            contexts.setdefault((point.traj, point.step), {})[names[-1]] = point.built.messages
    strategies = baselines(budgets, settings)
    names += list(strategies)
    rows = {name: LikelihoodRow(name) for name in names}
    ordered = list(rows.values())
    skipped = {"no successful call": 0, "longer than the scorer's context": 0}
    positions: list[tuple[int, int]] = []
    for (traj, step), damc in contexts.items():
        messages = trajectories[traj]
        gold = gold_action(messages, step)
        if gold is None:
            skipped["no successful call"] += 1
            _tick(on_point)
            continue
        system = system_prompt(messages)
        history = [m for m in messages[:step] if m.get("role") != "system"]
        chosen = {**damc, **{name: run(history, counter) for name, run in strategies.items()}}
        action = " " + action_text(gold)
        frames = [head + transcript(chosen[n], system=system) + "\n" + ACTION_PREFIX for n in names]
        requests = [ScoreRequest(frame, action) for frame in frames]
        try:
            log_probs = scorer.score(requests)
        except ContextTooLong:
            skipped["longer than the scorer's context"] += 1
            _tick(on_point)
            continue
        full = log_probs[names.index("full history")]
        for name, request, value in zip(names, requests, log_probs, strict=True):
            row = rows[name]
            row.log_probs.append(value)
            row.deltas.append(value - full)
            row.tokens.append(counter.count(request.context))
        positions.append((traj, step))
        if on_scored is not None:
            on_scored(_point_record(ordered, positions, len(positions) - 1))
        _tick(on_point)
    return LikelihoodReport(ordered, positions, skipped)


def _tick(on_point: Callable[[], None] | None) -> None:
    if on_point is not None:
        on_point()
