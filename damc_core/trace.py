"""Reading recorded agent traces: OpenAI-format messages in the three common file shapes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import TraceError
from .types import Message


def load_trajectories(path: str | Path) -> list[list[Message]]:
    """Trajectories from a JSON list of messages, a JSONL of messages, or ``[{"traj": [...]}, ...]``.

    A JSONL whose lines are themselves lists or ``{"traj": ...}`` objects gives one trajectory per
    line. Errors name the file, the line and what was expected.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read trace {path}: {exc}") from exc
    try:
        return parse_trajectories(json.loads(text), source=str(path))
    except json.JSONDecodeError as whole_error:
        items = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if number == 1:
                    raise TraceError(f"{path} is neither JSON nor JSONL: {whole_error}") from exc
                raise TraceError(f"{path}:{number}: invalid JSON line (truncated trace?): {exc}") from exc
        if items and all(isinstance(i, dict) and "role" in i for i in items):
            return [_messages(items, f"{path}")]
        return parse_trajectories(items, source=str(path))


def parse_trajectories(data: Any, *, source: str = "trace") -> list[list[Message]]:
    if isinstance(data, dict) and "traj" in data:
        data = [data]
    if not isinstance(data, list) or not data:
        raise TraceError(f"{source}: expected a non-empty list of messages or of {{'traj': [...]}} items")
    if all(isinstance(m, dict) and "role" in m for m in data):
        return [_messages(data, source)]
    out = []
    for index, item in enumerate(data):
        messages = item.get("traj") if isinstance(item, dict) else item
        if not isinstance(messages, list):
            raise TraceError(f"{source}: item {index} has no message list (expected 'traj': [...])")
        out.append(_messages(messages, f"{source}[{index}]"))
    return out


def _messages(items: Sequence[Any], source: str) -> list[Message]:
    out = []
    for index, message in enumerate(items):
        if not isinstance(message, dict):
            raise TraceError(f"{source}: message {index} is {type(message).__name__}, expected an object")
        out.append(message)
    return out
