"""The right action at a recorded decision point: the call the agent made that then succeeded."""

from __future__ import annotations

from collections.abc import Sequence

from ..encode import is_error_result
from ..types import Message


def gold_action(messages: Sequence[Message], step: int) -> Message | None:
    """The assistant message at or after ``step`` reduced to its first call whose result was clean.

    A call that failed is not what the context should have led to; the agent's next call (before
    the user speaks again, which would make it another decision) is. ``None`` when no call of that
    stretch succeeded or its result is missing.
    """
    for index in range(step, len(messages)):
        message = messages[index]
        if index > step and message.get("role") == "user":
            return None
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        for call in message["tool_calls"]:
            call_id = call.get("id") if isinstance(call, dict) else None
            result = _result(messages, index, call_id)
            if result is not None and not is_error_result(result):
                return {**message, "tool_calls": [call]}
    return None


def _result(messages: Sequence[Message], index: int, call_id: object) -> Message | None:
    for message in messages[index + 1 :]:
        if message.get("role") != "tool":
            return None
        if message.get("tool_call_id") == call_id:
            return message
    return None
