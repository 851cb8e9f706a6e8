"""Compress stage: a card's compact text, one template per card kind.

Every rendering starts with ``[card_id]`` so the model (or a person) can ``recall`` the raw record.
Structured cards use templates only; an LLM summarizer may be plugged in for free text, and its
output is checked: any identifier it dropped is appended, so a summary never loses an exact value,
and one that states an identifier the text does not hold is not used.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import math
import re
import reprlib
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from .checks import whole_number
from .encode import argument_values, changes_over_time, field_name, list_items
from .errors import ConfigError
from .extract import (
    DIGIT,
    NEGATIVE_STATUS,
    SENTENCE_BREAK,
    fact_kind,
    identifiers,
    is_handle,
    is_link,
    split_path,
    term_variants,
)
from .tabular import created_tables
from .types import Card, CardKind, DecisionFocus, Fact, Table

logger = logging.getLogger("damc")

Detail = Literal["full", "key", "skeleton"]
"""How much of a card to render. ``full``: every extracted value. ``key``: identifiers, dates,
amounts, statuses, names and short codes, without free text such as addresses. ``skeleton``: only
the values the decision focus names or later calls used, identifiers (what a later call takes),
names (what people call the record by), statuses and errors. What is left out stays recallable
by card id."""

_DATUM_KEY = re.compile(r"[A-Z]{3,}|.*\d.*\d.*\d.*")
"""A dict key that is itself data: an upper-case code (``SFO``) or an id with 3+ digits."""


_RESTRICTION = re.compile(
    r"\b(not|no|never|only|don't|do not|can't|cannot|won't|before|after|instead|"
    r"prefer|must|without|except|cheapest|fastest|earliest|latest)\b",
    re.I,
)


def _prose(card: Card, detail: Detail) -> str:
    """User or assistant text: whole in ``full``; in ``key`` only sentences with exact values or a
    restriction; in ``skeleton`` only the exact values."""
    if detail == "full" or not card.text:
        return card.text
    values = [f.value for f in card.facts]
    if detail == "skeleton":
        return ", ".join(values) if values else _clip(card.text, 80)
    sentences = [s for s in SENTENCE_BREAK.split(card.text) if s.strip()]
    kept = [s.strip() for s in sentences if _RESTRICTION.search(s) or any(v in s for v in values)]
    return " ".join(kept) if kept else _clip(card.text, 80)


@functools.lru_cache(maxsize=4096)
def identity_columns(columns: tuple[str, ...]) -> tuple[int, ...]:
    """Columns that name a row's entity: id-like names (``flight_number``, ``sku``) or the key of a
    keyed collection. A row is re-quoted only through these, never through a shared origin or date."""
    return tuple(
        i for i, c in enumerate(columns) if fact_kind(c, "") == "id" or (i == 0 and c in ("key", "option"))
    )


def row_identifiers(table: Table, row: tuple[str, ...]) -> Iterator[str]:
    """The non-empty cells of ``row`` that name its entity (see :func:`identity_columns`)."""
    for i in identity_columns(table.columns):
        if i < len(row) and row[i]:
            yield row[i]


def row_names(table: Table, row: tuple[str, ...]) -> Iterator[str]:
    """The lower-cased entity names of ``row``: its identifiers, matched against terms."""
    return (identifier.lower() for identifier in row_identifiers(table, row))


def _point_stale_rows(
    table: Table, stale: tuple[tuple[str, str], ...], cells: tuple[tuple[str, str, str], ...]
) -> Table:
    """Replace the volatile cells of re-quoted rows (or the re-quoted cells of a row) by ``see cN``
    so no outdated price is shown."""
    volatile = volatile_columns(table.columns)
    newer = {entity: card_id for entity, card_id in stale}
    newer_cells = {(entity, column): card_id for entity, column, card_id in cells}
    rows = []
    for row in table.rows:
        names = list(row_names(table, row))
        whole = next((newer[name] for name in names if name in newer), None)
        shown = list(row)
        for i in volatile:
            pointer = whole or next(
                (newer_cells[(n, table.columns[i])] for n in names if (n, table.columns[i]) in newer_cells),
                None,
            )
            if pointer is not None and shown[i]:
                shown[i] = f"see {pointer}"
        rows.append(tuple(shown))
    return replace(table, rows=tuple(rows))


@functools.lru_cache(maxsize=4096)
def volatile_columns(columns: tuple[str, ...]) -> frozenset[int]:
    """Columns whose values change over time: prices, statuses, seats and stock counts."""
    return frozenset(i for i, c in enumerate(columns) if changes_over_time(c, fact_kind(c, "")))


def mentions(value: str, wanted: Collection[str]) -> bool:
    """Whether a value (or an item of a ``[a, b]`` list value) is one of the ``wanted`` terms."""
    return bool(wanted) and not _value_terms(value).isdisjoint(wanted)


@functools.lru_cache(maxsize=16384)
def _value_terms(value: str) -> frozenset[str]:
    """The terms that make a value mentioned: its variants, or those of its list's items."""
    if not value:
        return frozenset()
    if (items := list_items(value)) is not None:
        return frozenset().union(*map(_value_terms, items))
    return frozenset(term_variants(value))


@functools.lru_cache(maxsize=16384)
def _cell_terms(cell: str) -> frozenset[str]:
    """The terms a table's rows are picked by in a cell: ``mentions``'s and the focus scores'."""
    return frozenset(term_variants(cell)) | _value_terms(cell)


_TELLING_KINDS = frozenset({"status", "error", "id", "name"})
_OUTCOME_KEY = re.compile(r"ok|success(ful)?|succeeded|failed|done|completed?", re.I)
"""Keys of a flag that says whether a call worked (``success=false``): a status by another name."""
_REASON_KEY = re.compile(
    r"(?:error_)?(?:message|msg|reason|detail|details|description|text)|fault_?string", re.I
)
"""Keys of a failed call's why (``message=Insufficient gift card balance``, ``errorMessage``, a
SOAP fault's ``faultstring`` or ``Reason.Text``): shown at every detail when no error field says
it in words, since it tells the next call what to change; in a result, such text is prose."""
REASON_CHARS = 160
"""Characters of a failed call's why shown at key and skeleton detail."""


def _always_told(fact: Fact) -> bool:
    """Whether a skeleton shows the fact whatever the decision wants: a status, an error, an id, a
    name, a list of ids or an outcome flag. A name is a handle as an id is: the user speaks of a
    passenger, a product or a hotel by it, and a booking takes a traveller's name. Without its
    outcome flag, a payment that returned ``success=false`` would read as done."""
    return (
        fact.kind in _TELLING_KINDS
        or _lists_identifiers(fact)
        or (fact.value in ("true", "false") and bool(_OUTCOME_KEY.fullmatch(field_name(fact.path))))
    )


def _lists_identifiers(fact: Fact) -> bool:
    """Whether the fact is a list of identifiers (a user's ``reservations=[8C8K4E, UDMOP1]``):
    the handles of the records a task goes through, which a skeleton keeps as it keeps one id."""
    items = list_items(fact.value)
    return items is not None and items != [""] and all(fact_kind(fact.path, item) == "id" for item in items)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def text_handles(card: Card) -> Iterator[str]:
    """The links of a card's free text, then its other handles (``HAT028``, ``2024-05-21``), each
    in text order: what a later call takes from it whole, a URL or path above all."""
    if not card.text:
        return
    values = dict.fromkeys(f.value for f in card.facts)
    position = {value: card.text.find(value) % (len(card.text) + 1) for value in values}  # absent: last
    found = sorted(values, key=position.__getitem__)
    linked = [value for value in found if is_link(value)]
    yield from linked
    yield from (value for value in found if is_handle(value) and value not in linked)


def left_out_values(card: Card, fields: Collection[str]) -> Iterator[str]:
    """What a card the budget leaves out still offers a next call, most likely first: the links of
    its text, the identifiers of its rows and the values of ``fields`` (those calls take), then its
    other handles (ids, ISO dates); of a user's turn, every value it gave. A value a newer card
    re-quoted is not offered: its card shows a pointer to the newer one in its place. Lazy: the
    line takes a few values of a card that may hold thousands."""
    seen: set[str] = set()
    later: list[str] = []

    def first_time(value: str) -> bool:
        new = value not in seen and len(value) <= LEFT_OUT_LONGEST and "\n" not in value
        seen.add(value)
        return new

    yield from (value for value in text_handles(card) if is_link(value) and first_time(value))
    changed = dict(card.stale_facts)
    said = card.kind is CardKind.USER_INSTRUCTION  # each value the user gave, a word tools hold too
    for fact in card.facts:
        if fact.path in changed:
            continue
        if (said or field_name(fact.path) in fields) and len(fact.value) <= LEFT_OUT_VALUE_CHARS:
            if first_time(fact.value):
                yield fact.value
        elif is_handle(fact.value):
            later.append(fact.value)
    stale = card.stale_rows, card.stale_cells
    for table in card.tables:
        wanted = {i for i, column in enumerate(table.columns) if field_name(column) in fields}
        for row in table.rows:
            shown = row
            if any(stale):  # row by row: the line takes a few rows of a table that may hold thousands
                shown = _point_stale_rows(replace(table, rows=(row,)), *stale).rows[0]
            yield from (value for value in row_identifiers(table, row) if first_time(value))
            for i, cell in enumerate(row):
                if not cell or shown[i] != cell:  # re-quoted since
                    continue
                if i in wanted and len(cell) <= LEFT_OUT_VALUE_CHARS:
                    if first_time(cell):
                        yield cell
                elif is_handle(cell):
                    later.append(cell)
    yield from (value for value in later if first_time(value))


LEFT_OUT_LONGEST = 300
"""Longest value ``left_out_values`` offers at all: a URL, not a page of text that names a row."""
LEFT_OUT_VALUE_CHARS = 24
"""Longest value of a field calls take that ``left_out_values`` offers (a code, an amount, a
name; not an address)."""


def _text_skeleton(card: Card) -> str:
    """A free text's opening, then the links and handles it holds past it (``| also: ...``): the
    URL or path a later call opens is often in the fifth search result, not the first. Of a
    schema, its tables with their columns (``Album(AlbumId, Title, ArtistId)``): the names a
    next query takes, where its opening is one table's types and its handles the sample rows'."""
    if schema := created_tables(card.text):
        return _clip("; ".join(table.outline() for table in schema), SKELETON_SCHEMA_CHARS)
    opening = _clip(card.text, SKELETON_TEXT_CHARS)
    if opening == card.text:
        return opening
    shown = shown_in(opening)
    later = (value for value in text_handles(card) if not shown(value))
    also = ", ".join(itertools.islice(later, SKELETON_TEXT_VALUES))
    return f"{opening} | also: {also}" if also else opening


SKELETON_TEXT_CHARS = 200
SKELETON_TEXT_VALUES = 8
"""How much of a free text a skeleton shows: its first characters, and as many of its later links
and handles."""
SKELETON_SCHEMA_CHARS = 1000
"""How much of a schema's tables and columns a skeleton shows (some 30 tables of 5 columns)."""


def _is_key_value(kind: str, value: str) -> bool:
    """Whether key detail shows the value: anything but free text. A short value of up to three
    words is an exact value (``full size``, ``Google Home``, ``123 Elm Street``), an option a user
    picks by; a longer one, or an email, is prose or contact data no call takes."""
    if (items := list_items(value)) is not None:
        return all(_is_key_value(kind, part) for part in items)
    return kind != "value" or (len(value) <= 24 and value.count(" ") <= 2 and "@" not in value)


class Compressor(Protocol):
    """Renders a card as the compact text placed in the memory section.

    Without a focus the rendering is the card's standing summary; with one, long lists of records
    may be cut to the rows the decision is about (the rest stay recallable by card id).
    """

    def render(self, card: Card, *, focus: DecisionFocus | None = None, detail: Detail = "full") -> str: ...

    def depends_on_focus(self, card: Card, *, detail: Detail) -> bool:
        """Whether ``render`` at this detail can change with the focus (lets callers cache)."""
        ...

    # Optional: ``terms_read(card, *, detail) -> frozenset[str]``, the terms whose being wanted can
    # change ``render`` (see ``TemplateCompressor.terms_read``); with it, a rendering is cached
    # across decisions whose focus differs only in other terms.


class Summarizer(Protocol):
    """Any text-to-text model call (an LLM behind LangChain, LlamaIndex or the openai client)."""

    def summarize(self, text: str, *, instructions: str) -> str: ...


SUMMARY_INSTRUCTIONS = (
    "Summarize the text in one or two sentences. Keep every time, number, amount, name, ID and "
    "conclusion exactly as written; leave out process and background."
)


def format_arguments(arguments: Mapping[str, Any]) -> str:
    """``key=value, ...``, records as ``(key=value, ...)``: every value beside its name, as the call
    wrote it, so a model retrying or repeating the call copies it whole. (A table with the keys
    once is shorter, but a retry must then rewrite it, which small models do badly.)"""
    return ", ".join(f"{key}={_value(value)}" for key, value in arguments.items())


def _restated(value: object, text: str) -> bool:
    """Whether ``value`` is a list or record whose every leaf value ``text`` shows, or a long text
    of several words that ``text`` quotes whole (an SQL error's ``[SQL: ...]`` line repeats the
    query). Not a link: a page's URL names the call, though the page repeats it."""
    if isinstance(value, str):
        return len(value) >= QUOTED_ARGUMENT_CHARS and " " in value.strip() and value in text
    if not isinstance(value, (Mapping, list)):
        return False
    leaves = argument_values({"": value})
    return bool(leaves) and all(map(shown_in(text), leaves))


QUOTED_ARGUMENT_CHARS = 40
"""Length from which a text argument the result quotes whole is written ``name=…`` in the call:
shorter values cost about what the ellipsis does, and read better in place."""

_BETWEEN_VALUES = re.compile(r"[\s;,()\[\]=\"'`]+|:(?=\s|$)")
"""What separates the values of a rendering: cells, ``key=value;`` pairs, a sparse row's label,
the quotes around a value in free text."""


def shown_in(text: str) -> Callable[[str], bool]:
    """Whether a rendering ``text`` shows a value as a value of its own: room ``12`` is not shown
    by ``2024-07-12``, item ``12`` not by ``W1273``, ``UA160`` not by ``UA1600``."""
    values = frozenset(_BETWEEN_VALUES.split(text))
    return lambda value: value in values if not _BETWEEN_VALUES.search(value) else value in text


def _value(value: object) -> str:
    if isinstance(value, Mapping):
        return "(" + format_arguments(value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class TemplateCompressor:
    """Templates for success, failure, user instruction, conclusion and lists of records."""

    max_rows: int = 60
    """Rows of a table shown; the rest are announced with the card id to recall them."""
    focus_min_rows: int = 6
    """Tables longer than this are cut to the rows matching the decision focus, when one is given."""
    preview_rows: int = 2
    """Rows shown from a long table that no focus term matches."""
    focus_groups: int = 3
    """Rows (or option groups) of a long table kept when the focus matches some."""

    def render(
        self, card: Card, *, focus: DecisionFocus | None = None, detail: Detail = "full", call: bool = True
    ) -> str:
        """``call=False`` leaves a result's call (tool name and arguments) out of its header: for a
        result sent right after the assistant message that made the call."""
        head = f"[{card.id}]"
        if card.kind is CardKind.USER_INSTRUCTION:
            return f"{head} user: {_prose(card, detail)}"
        if card.kind is CardKind.ASSISTANT_CONCLUSION:
            return f"{head} assistant: {_prose(card, detail)}"
        if card.kind is CardKind.SYSTEM_NOTE:
            return f"{head} {card.source}: {card.text}"
        if card.kind is CardKind.TOOL_CALL:
            said = f" ({card.text})" if card.text else ""
            return f"{head} assistant called {self._call(card)}{said}"
        status = " FAILED" if card.kind is CardKind.TOOL_ERROR else ""
        body = self._body(card, focus, detail)
        if not call:
            return f"{head}{status} -> {body}"
        return f"{head} {self._call(card, restated_in=body)}{status} -> {body}"

    def depends_on_focus(self, card: Card, *, detail: Detail) -> bool:
        if detail == "skeleton":
            return bool(card.facts or card.tables)
        return any(len(t.rows) > self.focus_min_rows for t in card.tables)

    def terms_read(self, card: Card, *, detail: Detail) -> frozenset[str]:
        """The terms whose being wanted (in the focus, or among the card's used terms) can change
        ``render`` at this detail: the values a skeleton shows only when wanted, the cells of the
        tables whose rows it picks by them, the cells of the long tables cut to the focus's rows.
        Any other focus renders the card alike, so a caller may cache the rendering under these."""
        if card.kind not in (CardKind.TOOL_RESULT, CardKind.TOOL_ERROR):
            return frozenset()
        terms: set[str] = set()
        if detail == "skeleton":
            for fact in () if card.text else self._shown_facts(card):
                if not _always_told(fact):
                    terms.update(_value_terms(fact.value))
        for table in card.tables:
            if card.stale_rows or card.stale_cells:
                table = _point_stale_rows(table, card.stale_rows, card.stale_cells)
            # a skeleton keeps every row of a short table that has columns to keep, or is all the card holds
            short_kept = (
                detail != "skeleton"
                or _tables_only(card)
                or bool(_skeleton_columns(table, _reason_columns(card, table)))
            )
            if len(table.rows) > self.focus_min_rows or not short_kept:
                terms.update(*(_cell_terms(cell) for row in table.rows for cell in row))
        return frozenset(terms)

    @staticmethod
    def _shown_facts(card: Card) -> Iterator[Fact]:
        """The card's facts as its body shows them: those its call header shows left out, those a
        newer card changed pointing to it."""
        echoed = {(k, str(v)) for k, v in card.arguments.items()}
        newer = dict(card.stale_facts)
        for fact in card.facts:
            if (fact.path, fact.value) in echoed:
                continue  # already in the call header
            if fact.path in newer:
                fact = replace(fact, value=f"see {newer[fact.path]}")  # a newer card changed it
            yield fact

    @staticmethod
    def _call(card: Card, restated_in: str = "") -> str:
        """The call as ``name(arguments)``; an argument the result ``restated_in`` restates (see
        ``_restated``) is written ``name=…`` (a booking echoes its flights and passengers)."""
        arguments: Mapping[str, Any] = card.arguments
        if restated_in:
            arguments = {
                key: "…" if _restated(value, restated_in) else value for key, value in arguments.items()
            }
        return f"{card.tool_name}({format_arguments(arguments)})"

    def _body(self, card: Card, focus: DecisionFocus | None, detail: Detail) -> str:
        parts: list[str] = []
        groups: dict[str, list[str]] = {}
        wanted = card.used_terms | (focus.terms if focus is not None else frozenset())
        fields = focus.fields if focus is not None else frozenset()
        named = focus.named if focus is not None else frozenset()
        omitted = False
        # a failure that no error field explains in words (``status=failed``, ``error=bad_request``)
        # keeps its why
        unexplained = _unexplained(card)
        for fact in () if card.text else self._shown_facts(card):
            asked_for = bool(named) and set(field_name(fact.path).split("_")) <= named  # asked for by name
            why = unexplained and bool(_REASON_KEY.fullmatch(field_name(fact.path)))
            telling = (
                _always_told(fact)
                or why
                or mentions(fact.value, wanted)
                or field_name(fact.path) in fields
                or asked_for
            )
            if detail == "skeleton" and not telling:
                omitted = True
                continue
            if detail == "key" and not (asked_for or why) and not _is_key_value(fact.kind, fact.value):
                if not _DATUM_KEY.fullmatch(split_path(fact.path)[1]):
                    omitted = True  # prose or contact data: recall has it
                    continue
                fact = replace(fact, value=_clip(fact.value, 24))  # the key is the datum (e.g. ``SFO``)
            if why and detail != "full" and len(fact.value) > REASON_CHARS:
                fact, omitted = replace(fact, value=_clip(fact.value, REASON_CHARS)), True  # a trace's start
            parent, leaf = split_path(fact.path)
            groups.setdefault(parent, []).append(f"{leaf}={fact.value}" if leaf else fact.value)
        for parent, items in groups.items():
            parts.append(f"{parent}({'; '.join(items)})" if parent else "; ".join(items))
        body = "; ".join(parts)
        if card.text:
            text = card.text if detail != "skeleton" else _text_skeleton(card)
            omitted = omitted or text != card.text
            body = f"{body} {text}".strip()
        for table in card.tables:
            if card.stale_rows or card.stale_cells:
                table = _point_stale_rows(table, card.stale_rows, card.stale_cells)
            reasons = _reason_columns(card, table)
            if detail == "skeleton":
                cut = self._skeleton_table(table, wanted, fields | reasons, whole_result=_tables_only(card))
                omitted = omitted or cut != table
                if not cut.rows:
                    continue
                table = cut
            body += "\n" + self._table(table, focus, detail, reasons=reasons)
        if omitted:
            body = f"{body} (more)" if body else "(more)"
        if body or not card.facts:
            return body or "(empty)"
        # facts, none shown nor left out: each restated the call (a status update returning what
        # it set, which "(empty)" would misread as nothing back)
        return "(as called)"

    def _skeleton_table(
        self, table: Table, wanted: frozenset[str], fields: frozenset[str], *, whole_result: bool = False
    ) -> Table:
        """Of a short table, every row; of a long one, the rows holding a wanted value. Only the
        identity columns, the fields that calls take, a status column that rules rows out
        (``sold out``) and a date every row shares (one value: ``all date=2024-05-22``) are kept,
        when the table has any. A short table with none of these keeps only the rows wanted
        (a booking's passengers), unless it is the ``whole_result``: an aggregate's
        ``Country, TotalSales`` rows are all a query answered, and cut to none they say nothing."""
        keep = _skeleton_columns(table, fields)
        short = len(table.rows) <= self.focus_min_rows
        rows = list(table.rows) if short and (keep or whole_result) else self.matching_rows(table, wanted)
        left_out = table.size - len(rows)  # the header still tells the list's size
        if not keep:
            return Table(table.path, table.columns, tuple(rows), left_out)
        return Table(
            table.path,
            tuple(table.columns[i] for i in keep),
            tuple(tuple(row[i] for i in keep) for row in rows),
            left_out,
        )

    @staticmethod
    def matching_rows(table: Table, wanted: frozenset[str]) -> list[tuple[str, ...]]:
        """Rows holding a wanted value, with every row of the same option group."""
        hits = [row for row in table.rows if any(mentions(cell, wanted) for cell in row)]
        if hits and table.columns and table.columns[0] in ("option", "key"):
            groups = {row[0] for row in hits}
            hits = [row for row in table.rows if row[0] in groups]
        return hits

    def focused_rows(self, table: Table, focus: DecisionFocus) -> list[tuple[str, ...]]:
        """The rows (or option groups) that match the decision focus best, in their original order."""
        group_of, group_score = _focus_scores(table, focus)
        best = sorted((g for g, sc in group_score.items() if sc > 0), key=lambda g: -group_score[g])
        if not best:
            return list(table.rows[: self.preview_rows])
        keep = set(best[: self.focus_groups])
        return [row for row, group in zip(table.rows, group_of, strict=True) if group in keep]

    def _table(
        self,
        table: Table,
        focus: DecisionFocus | None,
        detail: Detail,
        *,
        reasons: frozenset[str] = frozenset(),
    ) -> str:
        """The table's lines; at key detail without prose but in the ``reasons`` columns."""
        rows = list(table.rows)
        if focus is not None and len(rows) > self.focus_min_rows:
            rows = self.focused_rows(table, focus)
        rows = rows[: self.max_rows]
        derivable = _derivable_columns(table)
        shown = [i for i in range(len(table.columns)) if i not in derivable]
        if detail == "key":
            keyed = _key_columns(table.columns, tuple(rows))
            shown = [i for i in shown if i in keyed or field_name(table.columns[i]) in reasons]
        whole = len(table.rows) > 1 and not table.left_out  # "all" speaks for the whole list
        constant = [  # (a clipped cell, ending in "…", says nothing of the rest of its value)
            i
            for i in shown
            if whole
            and not table.rows[0][i].endswith("…")
            and all(row[i] == table.rows[0][i] for row in table.rows)
        ]
        shown = [i for i in shown if i not in constant]
        header = table_heading(table)
        if said := [i for i in constant if table.rows[0][i]]:  # (an empty one says nothing)
            header += " all " + ", ".join(f"{table.columns[i]}={table.rows[0][i]}" for i in said)
        empty = sum(1 for row in rows for i in shown if not row[i])
        lines = []
        if not shown:
            lines.append(header)
        elif rows and empty * 4 >= len(rows) * max(1, len(shown)):  # sparse: one key=value line per row
            label = next((i for i in shown if fact_kind(table.columns[i], "") == "id"), shown[0])
            lines.append(header + ":")
            for row in rows:
                pairs = " ".join(
                    f"{table.columns[i]}={_one_line(row[i])}" for i in shown if row[i] and i != label
                )
                lines.append(f" {_one_line(row[label])}: {pairs}".rstrip())
        else:
            lines.append(header + ": " + _cells(table.columns[i] for i in shown))
            lines.extend(" " + _cells(row[i] for i in shown) for row in rows)
        if len(rows) < table.size and detail != "skeleton":  # a skeleton says "(more)" at its end
            lines.append(f" (+{table.size - len(rows)} more rows)")
        return "\n".join(lines)


def _unexplained(card: Card) -> bool:
    """Whether the card is a failure that no error field explains in words (``status=failed``,
    ``error=bad_request``): its why is shown at every detail (see ``_REASON_KEY``)."""
    return card.kind is CardKind.TOOL_ERROR and not any(
        f.kind == "error" and " " in f.value.strip() for f in card.facts
    )


def _reason_columns(card: Card, table: Table) -> frozenset[str]:
    """The fields of the table that say why an :func:`_unexplained` failure failed (a GraphQL
    ``errors`` list's ``message``), kept at every detail; none for another card."""
    if not _unexplained(card):
        return frozenset()
    return frozenset(name for name in map(field_name, table.columns) if _REASON_KEY.fullmatch(name))


def _tables_only(card: Card) -> bool:
    """Whether the card's tables are all it holds (no fact, no text): a query's rows."""
    return bool(card.tables) and not card.facts and not card.text


def _skeleton_columns(table: Table, fields: frozenset[str]) -> list[int]:
    """The columns a skeleton keeps of a table (see ``TemplateCompressor._skeleton_table``)."""
    return sorted(
        {
            *identity_columns(table.columns),
            *(i for i, c in enumerate(table.columns) if field_name(c) in fields),
            *_ruling_out_columns(table),
            *_shared_date_columns(table),
        }
    )


def table_heading(table: Table) -> str:
    """How a rendered table's first line starts: `` flights (4)``, its path and its size."""
    return f" {table.path or 'rows'} ({table.size})"


@functools.lru_cache(maxsize=4096)
def _key_columns(columns: tuple[str, ...], rows: tuple[tuple[str, ...], ...]) -> frozenset[int]:
    """Columns whose every cell in ``rows`` key detail shows; remembered, as a table is rendered
    at key detail when it arrives and again at every decision that upgrades it."""
    return frozenset(
        i
        for i, column in enumerate(columns)
        if all(_is_key_value(fact_kind(column, row[i]), row[i]) for row in rows)
    )


def _shared_date_columns(table: Table) -> Iterator[int]:
    """Date columns holding one date for every row (a one-way trip's legs): the table's header
    states it once, so a skeleton keeps the date a change of those rows takes at the cost of one
    value, where a column of different dates would cost one per row."""
    if len(table.rows) > 1:
        for i, column in enumerate(table.columns):
            if fact_kind(column, "") == "date" and len({row[i] for row in table.rows}) == 1:
                yield i


def _ruling_out_columns(table: Table) -> Iterator[int]:
    """Status columns where some row says the option is out (sold out, cancelled): without them a
    skeleton lists that row like any other."""
    for i, column in enumerate(table.columns):
        if fact_kind(column, "") == "status" and any(NEGATIVE_STATUS.search(row[i]) for row in table.rows):
            yield i


def rows_by_focus(table: Table, focus: DecisionFocus) -> Table:
    """The table with the rows (or option groups) that match the focus best first; rows that
    match equally keep their order. A cut of it keeps the likeliest picks."""
    group_of, group_score = _focus_scores(table, focus)
    order = sorted(range(len(table.rows)), key=lambda i: -group_score[group_of[i]])
    return replace(table, rows=tuple(table.rows[i] for i in order))


def _focus_scores(table: Table, focus: DecisionFocus) -> tuple[list[str], dict[str, float]]:
    """Each row's group (its option, or itself) and how well each group matches the focus.

    A term matching few rows says more than one matching many, so each match weighs
    ``1 / rows containing the term``; terms in more than half of the rows are ignored.
    """
    lowered = [{v for cell in row for v in term_variants(cell)} for row in table.rows]
    document_frequency = {t: sum(t in cells for cells in lowered) for t in focus.terms}
    weights = {t: 1.0 / n for t, n in document_frequency.items() if 0 < n <= len(lowered) // 2}
    grouped = bool(table.columns) and table.columns[0] in ("option", "key")
    group_of = [row[0] if grouped else str(i) for i, row in enumerate(table.rows)]
    group_score: dict[str, float] = {}
    for group, cells in zip(group_of, lowered, strict=True):
        score = math.fsum(weights.get(t, 0.0) for t in cells)  # exact: the same whatever the set order
        group_score[group] = max(group_score.get(group, 0.0), score)
    return group_of, group_score


def _cells(cells: Iterable[str]) -> str:
    """Cells joined by spaces, an empty cell or one holding whitespace or a quote in double quotes
    (``clicky "full size" ""``): unambiguous, and a pipe between every cell would cost a token more
    per cell of the whole table."""
    return " ".join(_quoted(c) if not c or _QUOTED.search(c) else c for c in cells)


def _one_line(cell: str) -> str:
    """The cell with its line breaks escaped: a line of a card is one row, never two."""
    return cell.replace("\n", "\\n").replace("\r", "\\r") if "\n" in cell or "\r" in cell else cell


def _quoted(cell: str) -> str:
    """The cell in double quotes, its quotes and line breaks escaped: a row stays one line."""
    escaped = _one_line(cell.replace('"', '\\"'))
    return f'"{escaped}"'


_QUOTED = re.compile(r'[\s"]')


@functools.lru_cache(maxsize=4096)
def _derivable_columns(table: Table) -> frozenset[int]:
    """Columns of category words that start another value of their row (``credit_card`` of
    ``credit_card_4421486``, up to a ``_`` or ``-``): repeating them adds tokens, not facts. A
    number (``2`` of ``2.5``) or a code (``HAT001`` of ``HAT001-Y``) is a value of its own, and
    an identity column is never left out. Each row's prefixes are read once: a table of
    thousands of columns costs one pass."""
    keys = set(identity_columns(table.columns))
    alive = {i for i in range(len(table.columns)) if i not in keys}
    holding: set[int] = set()
    for row in table.rows:
        if not alive:
            break
        prefixes = {cell[:at] for cell in row for at, char in enumerate(cell) if at and char in "_-"}
        for i in list(alive):
            cell = row[i] if i < len(row) else ""
            if not cell:
                continue
            if DIGIT.search(cell) or cell not in prefixes:
                alive.discard(i)
            else:
                holding.add(i)
    return frozenset(alive & holding)


@dataclass(frozen=True, slots=True)
class SummarizingCompressor:
    """Templates for structured cards; an LLM summary for long free text, verified against the source."""

    summarizer: Summarizer
    templates: TemplateCompressor = TemplateCompressor()
    min_chars: int = 400
    """Free text shorter than this is left to the template (a model call would cost more than it saves)."""
    _summaries: dict[bytes, str | None] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Each text's summary (``None``: the summarizer failed on it), by digest: a card is rendered
    at every detail and cut, and each would otherwise send the whole text to the model again."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    """Guards ``_summaries``: sessions on other threads share the compressor (not held during
    the model call)."""

    def __post_init__(self) -> None:
        if not callable(getattr(self.summarizer, "summarize", None)):
            raise ConfigError(
                "SummarizingCompressor needs an object with summarize(text, *, instructions) -> str, "
                f"got {reprlib.repr(self.summarizer)}"
            )
        if not whole_number(self.min_chars):
            raise ConfigError(
                f"SummarizingCompressor.min_chars must be a whole number, got {self.min_chars!r}"
            )

    def render(self, card: Card, *, focus: DecisionFocus | None = None, detail: Detail = "full") -> str:
        if card.facts and card.kind in (CardKind.TOOL_RESULT, CardKind.TOOL_ERROR) and not card.text:
            return self.templates.render(card, focus=focus, detail=detail)
        if card.tables or len(card.text) < self.min_chars:
            return self.templates.render(card, focus=focus, detail=detail)
        digest = hashlib.blake2b(card.text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            known = digest in self._summaries
            summary = self._summaries.get(digest)
        if not known:
            summary = self._summary(card)
            with self._lock:
                if len(self._summaries) >= SUMMARIES_KEPT:
                    del self._summaries[next(iter(self._summaries))]
                self._summaries[digest] = summary
        if summary is None:
            return self.templates.render(card, focus=focus, detail=detail)
        return self.templates.render(replace(card, text=summary), focus=focus, detail=detail)

    def _summary(self, card: Card) -> str | None:
        """The card's text summarized, with every identifier it dropped appended; ``None``, and the
        card sent unsummarized, when the summarizer failed (said in the log) or wrote no less than
        the text (a small model that repeats it, or rambles to its token limit)."""
        try:
            summary = self.summarizer.summarize(card.text, instructions=SUMMARY_INSTRUCTIONS)
        except Exception as exc:  # the summarizer is optional: a failed call falls back to the template
            return self._failed(card, f"raised {type(exc).__name__}: {exc}")
        if not isinstance(summary, str) or not summary.strip():  # e.g. a chat model's reply object
            return self._failed(card, f"returned {reprlib.repr(summary)}, not text")
        summary = summary.strip()
        source = dict.fromkeys(identifiers(card.text))
        if invented := [t for t in dict.fromkeys(identifiers(summary)) if t not in source]:
            # a reference off by a digit, or one cut short at the reply's token limit (``ZFA0``)
            return self._failed(card, f"wrote {', '.join(invented[:3])} (not in the text)")
        kept = frozenset(identifiers(summary))  # as values: ``W1234`` does not keep ``W123``
        missing = [t for t in source if t not in kept]
        if missing:
            summary += " | also: " + ", ".join(missing)
        return summary if len(summary) < len(card.text) else None

    @staticmethod
    def _failed(card: Card, why: str) -> None:
        logger.warning("damc: the summarizer %s on card %s; its template is used instead", why, card.id)

    def depends_on_focus(self, card: Card, *, detail: Detail) -> bool:
        return self.templates.depends_on_focus(card, detail=detail)

    def terms_read(self, card: Card, *, detail: Detail) -> frozenset[str]:
        return self.templates.terms_read(card, detail=detail)


SUMMARIES_KEPT = 1024
"""Summaries a ``SummarizingCompressor`` remembers, the oldest forgotten first."""
