"""Ablation problems from recorded trajectories: one per decision point of a replay.

The frame is plain text a small model can follow: the system prompt and the task's first user turn
(fixed), then one line per memory card (removable), then ``Next tool call:``; the action is the
call the agent made there, written the way cards write calls, so the model can copy IDs from them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..assemble import MEMORY_PREAMBLE
from ..compress import format_arguments
from ..encode import is_error_result, parse_arguments
from ..evaluate import ReplayPoint, system_prompt
from ..memory import DecisionMemory
from ..stores import InMemoryStore
from ..tokens import CharEstimateCounter, call_function
from ..types import CardKind, Message
from .problem import AblationProblem

ACTION_PREFIX = "Next tool call:"
"""Ends the context; the action follows after one space."""


def action_text(message: Message) -> str:
    """The tool calls of an assistant message as ``name(key=value, ...)``, one per line."""
    calls = []
    for call in message.get("tool_calls") or ():
        function = call_function(call)
        arguments = parse_arguments(function.get("arguments"))
        calls.append(f"{function.get('name') or '?'}({format_arguments(arguments)})")
    if not calls:
        raise ValueError("the message makes no tool call: there is no action to score")
    return "\n".join(calls)


def action_succeeded(trajectory: Sequence[Message], step: int) -> bool:
    """Whether every call of the assistant message at ``step`` got a result that is not an error
    (as the memory reads one: error text, an ``error`` key, a failed status)."""
    calls = list(trajectory[step].get("tool_calls") or ())
    results = []
    for message in trajectory[step + 1 :]:  # the results follow the call (call ids repeat in some traces)
        if message.get("role") != "tool":
            break
        results.append(message)
    return bool(calls) and len(results) >= len(calls) and not any(is_error_result(m) for m in results)


def problem_from_history(
    history: Sequence[Message], action: Message, *, system: str | None = None
) -> AblationProblem:
    """The decision before ``action`` given the messages before it (system message excluded).

    Cards are the memory's own renderings of ``history``; a tool call's card is left out when its
    result card already starts with the call, as the memory does. The first user turn states the
    task and stays in the head.
    """
    memory = DecisionMemory(store=InMemoryStore(), counter=CharEstimateCounter())
    if system is not None:  # observed first (an empty one too), as a replay does: card ids match it
        memory.observe({"role": "system", "content": system})
    for message in history:
        memory.observe(message)
    cards = [
        c
        for c in memory.cards()
        if c.source not in ("system", "developer") and not (c.kind is CardKind.TOOL_CALL and not c.text)
    ]
    first = next((c for c in cards if c.kind is CardKind.USER_INSTRUCTION), None)
    rest = [c for c in cards if c is not first]
    head = "".join(part + "\n\n" for part in (system,) if part) + MEMORY_PREAMBLE + "\n"
    if first is not None:
        head += first.summary + "\n"
    return AblationProblem(
        card_ids=tuple(c.id for c in rest),
        card_texts=tuple(c.summary for c in rest),
        head=head,
        tail="\n" + ACTION_PREFIX,
        action=" " + action_text(action),
    )


def problem_from_replay(point: ReplayPoint, trajectory: Sequence[Message]) -> AblationProblem:
    """The ablation problem of one replayed decision point (``trajectory`` is the one replayed)."""
    return problem_from_history(point.history, trajectory[point.step], system=system_prompt(trajectory))
