"""Where the data is in a tool output: JSON, or data printed some other way.

Tools return JSON, but not always as the whole text. A model-backed tool or an MCP server fences
it in Markdown (```` ```json ````), a wrapper introduces it (``Found 2 flights: [...]``), a log
prints one object per line, and Python agents send the repr of a dict (:mod:`.pyliteral`).
:func:`read_document` finds the data in each of these and returns the text around it, so the
encoder walks the data as it walks JSON and keeps the rest as a note.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

from .pyliteral import LOOKS_LIKE_A_LITERAL, parse_python_literal

_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
SURROGATE = re.compile("[\ud800-\udfff]")
"""Half of a UTF-16 pair: text cut inside an emoji."""
_FENCE = re.compile(r"^[ \t]*```[\w+-]*[ \t]*\n(.*?)\n[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
"""A Markdown code fence on lines of its own, its language tag (``json``, ``python``) dropped."""
FENCES_READ = 4
"""Code fences tried for data, from the first: a page of code samples is not parsed block by block."""
INTRODUCED_SHARE = 0.5
"""Least share of an output that data after an introduction must take to be read as the output's
data: below it, the text is prose that happens to hold a bracket (``see [1]``)."""


def parse_json(text: str) -> Any:
    """``json.loads``, with a half emoji escaped in the text (``"\\ud83d"``, what JavaScript writes
    for a string cut inside one) replaced by U+FFFD: parsed as it is, it is not UTF-8, and no store
    or tokenizer takes it. Raises what ``json.loads`` raises."""
    parsed = json.loads(text)
    return _without_surrogates(parsed) if _ESCAPED_SURROGATE.search(text) else parsed


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_surrogates(key): _without_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class Document:
    """The data of a tool output and the text around it (``""`` when the data is all of it)."""

    data: Any
    around: str = ""


def read_document(text: str, *, max_json_chars: int, max_literal_chars: int) -> Document | None:
    """The data ``text`` holds: all of it as JSON or a Python repr; else the first fenced block
    that is; else one JSON object per line; else the part from the first bracket to the last,
    when that is data and at least ``INTRODUCED_SHARE`` of the text. ``None`` for free text."""
    stripped = text.strip()
    whole = _data(stripped, max_json_chars, max_literal_chars)
    if whole is not None:
        return Document(whole)
    for fence in itertools.islice(_FENCE.finditer(stripped), FENCES_READ):
        data = _data(fence.group(1).strip(), max_json_chars, max_literal_chars)
        if data is not None:
            return Document(data, _joined(stripped[: fence.start()], stripped[fence.end() :]))
    if (lines := _json_lines(stripped, max_json_chars)) is not None:
        return Document(lines)
    start = min((i for i in (stripped.find("{"), stripped.find("[")) if i >= 0), default=-1)
    end = max(stripped.rfind("}"), stripped.rfind("]")) + 1
    if start < 0 or (end - start) < INTRODUCED_SHARE * len(stripped) or (start == 0 and end == len(stripped)):
        return None
    data = _data(stripped[start:end], max_json_chars, max_literal_chars)
    return Document(data, _joined(stripped[:start], stripped[end:])) if data is not None else None


def _data(text: str, max_json_chars: int, max_literal_chars: int) -> dict[str, Any] | list[Any] | None:
    """``text`` parsed as a JSON object or array, or as the Python repr of one; else ``None``."""
    if text[:1] in ("{", "[") and len(text) <= max_json_chars:
        try:
            parsed = parse_json(text)
        except (ValueError, RecursionError):
            pass
        else:
            return parsed if isinstance(parsed, (dict, list)) else None
    if len(text) <= max_literal_chars and LOOKS_LIKE_A_LITERAL.match(text):
        try:
            parsed = parse_python_literal(text)
        except ValueError:
            return None
        return parsed if isinstance(parsed, (dict, list)) else None
    return None


def _json_lines(text: str, max_chars: int) -> list[Any] | None:
    """The objects of text that holds one JSON object per line (two or more), else ``None``."""
    if not text.startswith("{") or "\n" not in text or len(text) > max_chars:
        return None
    rows = []
    for line in filter(None, (line.strip() for line in text.split("\n"))):
        if not (line.startswith("{") and line.endswith("}")):
            return None
        try:
            rows.append(parse_json(line))
        except (ValueError, RecursionError):
            return None
    return rows


def _joined(before: str, after: str) -> str:
    """The text around the data: an introduction and what follows, ``…`` where the data was."""
    before, after = before.strip(), after.strip()
    return f"{before} … {after}" if before and after else before or after
