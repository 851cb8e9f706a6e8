"""Compress stage: a card's compact text, one template per card kind.

Every rendering starts with ``[card_id]`` so the model (or a person) can ``recall`` the raw record.
Structured cards use templates only; an LLM summarizer may be plugged in for free text, and its
output is checked: any identifier it dropped is appended, so a summary never loses an exact value.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .extract import ID_TOKEN
from .types import Card, CardKind, Table


class Compressor(Protocol):
    """Renders a card as the compact text placed in the memory section."""

    def render(self, card: Card) -> str: ...


class Summarizer(Protocol):
    """Any text-to-text model call (an LLM behind LangChain, LlamaIndex or the openai client)."""

    def summarize(self, text: str, *, instructions: str) -> str: ...


SUMMARY_INSTRUCTIONS = (
    "Summarize the text in one or two sentences. Keep every time, number, amount, name, ID and "
    "conclusion exactly as written; leave out process and background."
)


def format_arguments(arguments: Mapping[str, Any]) -> str:
    parts = []
    for key, value in arguments.items():
        if isinstance(value, Mapping):
            parts.append(f"{key}=({format_arguments(value)})")
        elif isinstance(value, list):
            parts.append(f"{key}=[{', '.join(_value(v) for v in value)}]")
        else:
            parts.append(f"{key}={_value(value)}")
    return ", ".join(parts)


def _value(value: object) -> str:
    if isinstance(value, Mapping):
        return "(" + format_arguments(value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _as_of(card: Card) -> str:
    if not card.volatile or card.as_of is None:
        return ""
    return " as of " + time.strftime("%Y-%m-%d %H:%M", time.gmtime(card.as_of))


@dataclass(frozen=True, slots=True)
class TemplateCompressor:
    """Templates for success, failure, user instruction, conclusion and lists of records."""

    max_rows: int = 60
    """Rows of a table shown; the rest are announced with the card id to recall them."""
    show_as_of: bool = True
    """Append ``as of <time>`` to volatile cards (prices, availability, statuses)."""

    def render(self, card: Card) -> str:
        head = f"[{card.id}]"
        if card.kind is CardKind.USER_INSTRUCTION:
            return f"{head} user: {card.text}"
        if card.kind is CardKind.ASSISTANT_CONCLUSION:
            return f"{head} assistant: {card.text}"
        if card.kind is CardKind.SYSTEM_NOTE:
            return f"{head} {card.source}: {card.text}"
        if card.kind is CardKind.TOOL_CALL:
            said = f" ({card.text})" if card.text else ""
            return f"{head} assistant called {self._call(card)}{said}"
        status = " FAILED" if card.kind is CardKind.TOOL_ERROR else ""
        when = _as_of(card) if self.show_as_of else ""
        body = self._body(card)
        return f"{head} {self._call(card)}{status}{when} -> {body}"

    @staticmethod
    def _call(card: Card) -> str:
        return f"{card.tool_name}({format_arguments(card.arguments)})"

    def _body(self, card: Card) -> str:
        parts: list[str] = []
        groups: dict[str, list[str]] = {}
        for fact in card.facts:
            parent, _, leaf = fact.path.rpartition(".")
            groups.setdefault(parent, []).append(f"{leaf}={fact.value}" if leaf else fact.value)
        for parent, items in groups.items():
            parts.append(f"{parent}({'; '.join(items)})" if parent else "; ".join(items))
        body = "; ".join(parts)
        if card.text:
            body = f"{body} {card.text}".strip()
        for table in card.tables:
            body += "\n" + self._table(card.id, table)
        return body or "(empty)"

    def _table(self, card_id: str, table: Table) -> str:
        constant = [
            (column, table.rows[0][i]) for i, column in enumerate(table.columns)
            if len(table.rows) > 1 and all(row[i] == table.rows[0][i] for row in table.rows)
        ]
        constant_names = {c for c, _ in constant}
        shown = [i for i, c in enumerate(table.columns) if c not in constant_names]
        name = table.path or "rows"
        lines = [f"  {name} ({len(table.rows)}): " + " | ".join(table.columns[i] for i in shown)]
        if constant:
            lines[0] += "; all rows: " + ", ".join(f"{c}={v}" for c, v in constant if v)
        for row in table.rows[: self.max_rows]:
            lines.append("  " + " | ".join(row[i] for i in shown))
        if len(table.rows) > self.max_rows:
            lines.append(f"  (+{len(table.rows) - self.max_rows} rows: recall {card_id})")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class SummarizingCompressor:
    """Templates for structured cards; an LLM summary for long free text, verified against the source."""

    summarizer: Summarizer
    templates: TemplateCompressor = TemplateCompressor()
    min_chars: int = 400
    """Free text shorter than this is left to the template (a model call would cost more than it saves)."""

    def render(self, card: Card) -> str:
        if card.facts and card.kind in (CardKind.TOOL_RESULT, CardKind.TOOL_ERROR) and not card.text:
            return self.templates.render(card)
        if card.tables or len(card.text) < self.min_chars:
            return self.templates.render(card)
        try:
            summary = self.summarizer.summarize(card.text, instructions=SUMMARY_INSTRUCTIONS).strip()
        except Exception:  # the summarizer is optional: a failed call falls back to the template
            return self.templates.render(card)
        missing = [t for t in dict.fromkeys(m.group(0) for m in ID_TOKEN.finditer(card.text))
                   if t not in summary]
        if missing:
            summary += " | also: " + ", ".join(missing)
        from dataclasses import replace

        return self.templates.render(replace(card, text=summary))
