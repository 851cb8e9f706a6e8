"""What ``recall`` with ``match`` returns: the parts of a raw record that hold a given text.

A record too long for the budget (a catalog of 2,000 rows) reaches the model cut, and the row the
next call needs may be past the cut, in the card as in a plain recall. ``recall(card_id,
match="SKU01500")`` returns the rows that hold the text, with the plain fields of the records
around them (an order's id and status beside the one item that matched), as JSON again, so the
answer is encoded like any tool result; free text gives its matching lines.
"""

from __future__ import annotations

import json
from typing import Any


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
    lines = [line for line in content.splitlines() if needle in line.lower()]
    return "\n".join(lines) if lines else None


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
