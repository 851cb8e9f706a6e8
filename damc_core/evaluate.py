"""Replay recorded trajectories through DAMC and measure decision-fact retention.

A *decision point* is an assistant message that calls a tool. Its *needed facts* are the leaf
values of the call's arguments that appeared earlier in the trajectory, split by where they first
came from (a tool result or a user turn). A context retains a fact when the value appears in it
verbatim. Baselines (full history, last-N window, token buffer, clear-old-tool-results) are
measured the same way, so the figures sit side by side.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .encode import argument_values, parse_arguments
from .memory import DecisionMemory, MemorySettings
from .stores import InMemoryStore, MemoryStore
from .tokens import TokenCounter, call_function, content_text, count_messages, message_text
from .types import BuiltContext, Message, Namespace

SKIPPED_TOOLS = frozenset({"think", "calculate", "web_search"})
"""Calls whose arguments are free text the model writes, not facts it must remember."""


@dataclass(frozen=True, slots=True)
class ReplayPoint:
    traj: int
    step: int
    """Index of the assistant message in the trajectory."""
    history: list[Message]
    """Messages before the step, system prompt excluded."""
    built: BuiltContext


def replay(
    trajectories: Sequence[Sequence[Message]],
    *,
    settings: MemorySettings,
    counter: TokenCounter,
    store: MemoryStore | None = None,
    stages: Mapping[str, Any] | Callable[[Namespace], Mapping[str, Any]] | None = None,
) -> Iterator[ReplayPoint]:
    """Feed each trajectory in order; before every tool-calling assistant message, build a context.

    ``stages`` are passed to :class:`DecisionMemory` (``valuator=``, ``selector=``, ...) to replay
    the same traces with other stage implementations; a function of the namespace makes them per
    trajectory (stages that are bound to one namespace, such as a retrieval valuator).

    ``store``: where every trajectory is recorded; by default each is recorded in a new in-memory
    store, dropped when the next begins, so a long trace replays in the memory of one trajectory.
    """
    for index, messages in enumerate(trajectories):
        clock = _StepClock()
        namespace = Namespace(user="replay", session=f"traj-{index}")
        memory = DecisionMemory(
            namespace=namespace,
            store=store if store is not None else InMemoryStore(),
            counter=counter,
            settings=settings,
            clock=clock,
            **dict((stages(namespace) if callable(stages) else stages) or {}),
        )
        for step, message in enumerate(messages):
            if message.get("role") == "assistant" and message.get("tool_calls"):
                history = [m for m in messages[:step] if m.get("role") != "system"]
                yield ReplayPoint(index, step, history, memory.build())
            memory.observe(message)
            clock.tick()


class _StepClock:
    """Traces carry no timestamps: one second per event keeps ``as of`` and decay ordered."""

    def __init__(self, start: float = 1_715_785_200.0) -> None:
        self.now = start

    def tick(self) -> None:
        self.now += 1.0

    def __call__(self) -> float:
        return self.now


def needed_facts(history: Sequence[Message], message: Message) -> list[tuple[str, str]]:
    """(value, "tool" | "user") for each argument value of the step's calls seen earlier."""
    tool_text = "\n".join(content_text(m.get("content")) for m in history if m.get("role") == "tool")
    user_text = "\n".join(content_text(m.get("content")) for m in history if m.get("role") == "user")
    facts = []
    for call in message.get("tool_calls") or ():
        function = call_function(call)
        if not isinstance(function.get("name"), str) or function["name"] in SKIPPED_TOOLS:
            continue
        arguments = parse_arguments(function.get("arguments"))
        if "_raw" in arguments:
            continue
        for value in set(argument_values(arguments)):
            if len(value) < 3:
                continue
            if value in user_text:
                facts.append((value, "user"))
            elif value in tool_text:
                facts.append((value, "tool"))
    return facts


@dataclass(slots=True)
class Retention:
    """Token ratio and fact recall of one strategy over all decision points."""

    name: str
    tokens: list[int] = field(default_factory=list)
    full_tokens: list[int] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=lambda: {"tool": 0, "user": 0})
    totals: dict[str, int] = field(default_factory=lambda: {"tool": 0, "user": 0})

    def add(
        self,
        context: Sequence[Message],
        facts: Sequence[tuple[str, str]],
        full_tokens: int,
        counter: TokenCounter,
        system: str | None = None,
    ) -> None:
        counted = [_without_system(m, system) for m in context]
        text = "\n".join(message_text(m) for m in counted)
        self.tokens.append(count_messages(counted, counter))
        self.full_tokens.append(full_tokens)
        for value, source in facts:
            self.totals[source] += 1
            self.hits[source] += value in text

    def recall(self, source: str) -> float:
        return self.hits[source] / self.totals[source] if self.totals[source] else float("nan")

    @property
    def token_ratio(self) -> float:
        return sum(self.tokens) / max(1, sum(self.full_tokens))

    @property
    def mean_tokens(self) -> float:
        return sum(self.tokens) / max(1, len(self.tokens))


def _without_system(message: Message, system: str | None) -> Message:
    content = message.get("content")
    if message.get("role") == "system" and system and isinstance(content, str) and system in content:
        return {**message, "content": content.replace(system, "", 1)}
    return message


Baseline = Callable[[list[Message], TokenCounter], list[Message]]


def window(n: int) -> Baseline:
    return lambda history, counter: history[-n:]


def token_buffer(budget: int, *, settings: MemorySettings | None = None) -> Baseline:
    """The newest messages that fit in ``budget``; with ``settings`` that have a ``budget_ratio``,
    in a budget that grows with the history as DAMC's does (``MemorySettings.budget_for``)."""

    def run(history: list[Message], counter: TokenCounter) -> list[Message]:
        limit = budget if settings is None else settings.budget_for(count_messages(history, counter), budget)
        out: list[Message] = []
        used = 0
        for message in reversed(history):
            cost = count_messages([message], counter)
            if used + cost > limit:
                break
            out.append(message)
            used += cost
        return out[::-1]

    return run


def clear_old_tool_results(keep: int) -> Baseline:
    def run(history: list[Message], counter: TokenCounter) -> list[Message]:
        tool_positions = [i for i, m in enumerate(history) if m.get("role") == "tool"]
        old = set(tool_positions[: len(tool_positions) - keep] if keep else tool_positions)
        return [{**m, "content": "[cleared]"} if i in old else m for i, m in enumerate(history)]

    return run


def baselines(budgets: Sequence[int], settings: MemorySettings | None = None) -> dict[str, Baseline]:
    """The usual memories to compare with: everything, a window, a token buffer per budget (growing
    with the history when ``settings`` has a ``budget_ratio``), and clearing old tool results (what
    LangChain's ContextEditingMiddleware does)."""
    out: dict[str, Baseline] = {
        "full history": lambda history, counter: history,
        "window (last 10)": window(10),
        "clear old tool results (keep 2)": clear_old_tool_results(2),
    }
    settings = settings or MemorySettings()
    for budget in budgets:
        at_budget = replace(settings, budget=budget)
        out[f"token buffer {budget_label(at_budget)}"] = token_buffer(budget, settings=at_budget)
    return out


def evaluate(
    trajectories: Sequence[Sequence[Message]],
    *,
    settings: MemorySettings,
    counter: TokenCounter,
    budgets: Sequence[int] = (),
    on_point: Callable[[ReplayPoint], None] | None = None,
    stages: Mapping[str, Any] | Callable[[Namespace], Mapping[str, Any]] | None = None,
) -> list[Retention]:
    """DAMC at each budget (``settings.budget`` when none are given) and the baselines, on every
    decision point of the trajectories; ``stages`` as in :func:`replay`."""
    budgets = list(budgets) or [settings.budget]
    rows = []
    for budget in budgets:
        at_budget = replace(settings, budget=budget)
        damc = Retention(f"damc {budget_label(at_budget)}")
        for point in replay(trajectories, settings=at_budget, counter=counter, stages=stages):
            facts = needed_facts(point.history, trajectories[point.traj][point.step])
            full = count_messages(point.history, counter)
            damc.add(point.built.messages, facts, full, counter, system_prompt(trajectories[point.traj]))
            if on_point is not None:
                on_point(point)
        rows.append(damc)
    for name, strategy in baselines(budgets, settings).items():
        row = Retention(name)
        for messages in trajectories:
            for step, message in enumerate(messages):
                if message.get("role") == "assistant" and message.get("tool_calls"):
                    history = [m for m in messages[:step] if m.get("role") != "system"]
                    full = count_messages(history, counter)
                    row.add(strategy(history, counter), needed_facts(history, message), full, counter)
        rows.append(row)
    return rows


def budget_label(settings: MemorySettings) -> str:
    """How a row of results names its budget: ``@500``, or one that grows with the history."""
    if settings.budget_ratio is None:
        return f"@{settings.budget}"
    return f"@{settings.min_budget} + {settings.budget_ratio:.0%} of history (max {settings.budget})"


def system_prompt(messages: Sequence[Message]) -> str | None:
    """The trajectory's system prompt: the text of its first message when that is a system one."""
    first = messages[0] if messages else {}
    return content_text(first.get("content")) if first.get("role") == "system" else None


def contexts_jsonl(point: ReplayPoint) -> str:
    """One line of the replay output: ``{"traj": i, "step": t, "messages": [...]}``."""
    return json.dumps(
        {"traj": point.traj, "step": point.step, "messages": point.built.messages}, ensure_ascii=False
    )
