"""What ``recall`` with ``match`` returns: the parts of a raw record that hold a given text.

A record too long for the budget (a catalog of 2,000 rows) reaches the model cut, and the row the
next call needs may be past the cut, in the card as in a plain recall. ``recall(card_id,
match="SKU01500")`` returns the rows that hold the text, with the plain fields of the records
around them (an order's id and status beside the one item that matched), as JSON again, so the
answer is encoded like any tool result; free text gives its matching lines, and a very long line
(a minified page, a log without line breaks) the parts of it around the text. An HTML page whose
markup holds no match gives the lines of the text it shows that do (``HX-200 space heaters``,
which the page writes as ``<strong>HX-200</strong> space heaters``), as its card shows them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .webpage import is_page, page_text

LONG_LINE = 2000
"""A matching line longer than this is answered with the parts around the text, not whole: a page
minified to one line of 400,000 characters would be the whole record again, cut before the match."""
AROUND = 300
"""Characters kept on each side of the text in a long line."""
_EDGE = re.compile(r"[\s<>]")
"""Where a part of a long line may start or end: a space or a tag's bracket, not inside a URL or an id."""
_EDGE_SLACK = 120
"""How far past ``AROUND`` a part goes to reach such an edge."""


def excerpt(content: str, match: str) -> str | None:
    """The parts of ``content`` that hold ``match`` (case-blind), or ``None`` when none does."""
    needle = match.strip().lower()
    if not needle:
        return content
    try:
        data = json.loads(content)
        if isinstance(data, (dict, list)):
            kept, found = _keep(data, needle)
            return json.dumps(kept, ensure_ascii=False) if found else None
    except (ValueError, RecursionError):
        pass  # not JSON, or nested too deep to walk: read it as lines
    lines = _lines_holding(content, needle)
    if not lines and is_page(content.strip()):  # words the card shows that tags split or entities spell
        lines = _lines_holding(page_text(content.strip())[0], needle)
    return "\n".join(lines) if lines else None


def _lines_holding(text: str, needle: str) -> list[str]:
    return [_around(line, needle) for line in text.splitlines() if needle in line.lower()]


def _around(line: str, needle: str) -> str:
    """``line``, or when longer than :data:`LONG_LINE` the parts of it around each occurrence of
    ``needle`` (merged where they overlap), joined and ended by ``…`` where text is left out."""
    if len(line) <= LONG_LINE:
        return line
    spans: list[tuple[int, int]] = []
    for found in re.finditer(re.escape(needle), line, re.IGNORECASE):
        start, end = _edge_before(line, found.start() - AROUND), _edge_after(line, found.end() + AROUND)
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    if not spans:  # lower() and the pattern's case folding disagree (a dotted İ): the line as it is
        return line
    parts = " … ".join(line[start:end] for start, end in spans)
    return ("… " if spans[0][0] > 0 else "") + parts + (" …" if spans[-1][1] < len(line) else "")


def _edge_before(line: str, at: int) -> int:
    """The start of a part near ``at``: after a space, at a tag's ``<``, or at ``at`` when none is near."""
    if at <= 0:
        return 0
    edges = list(_EDGE.finditer(line, max(0, at - _EDGE_SLACK), at))
    if not edges:
        return at
    edge = edges[-1]
    return edge.start() if edge.group() == "<" else edge.end()


def _edge_after(line: str, at: int) -> int:
    """The end of a part near ``at``: before a space, after a tag's ``>``, or at ``at`` when none is near."""
    if at >= len(line):
        return len(line)
    edge = _EDGE.search(line, at, at + _EDGE_SLACK)
    if edge is None:
        return at
    return edge.end() if edge.group() == ">" else edge.start()


def _keep(value: Any, needle: str) -> tuple[Any, bool]:
    """(the part of ``value`` to show, whether it holds the needle): of a list, the items that hold
    it, whole (a row with all its columns); of a record, its plain fields and the parts of its
    lists and records that hold it."""
    if isinstance(value, list):
        kept = [item for item in value if _holds(item, needle)]
        return kept, bool(kept)
    if isinstance(value, dict):
        record: dict[str, Any] = {}
        any_found = False
        for key, item in value.items():
            named = needle in str(key).lower()
            if isinstance(item, (dict, list)):
                part, found = (item, True) if named else _keep(item, needle)
                if found:
                    record[key] = part
            else:
                found = named or needle in str(item).lower()
                record[key] = item
            any_found = any_found or found
        return record, any_found
    return value, needle in str(value).lower()


def _holds(value: Any, needle: str) -> bool:
    if isinstance(value, dict):
        return any(needle in str(k).lower() or _holds(v, needle) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds(item, needle) for item in value)
    return needle in str(value).lower()
