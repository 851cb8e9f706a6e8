"""Encode stage: one observed event becomes one card with exact facts.

JSON tool outputs, and data printed otherwise (fenced or introduced JSON, JSON lines, YAML,
Markdown tables, Python reprs, XML: see :mod:`.documents`), are walked structurally (scalars become
keyed facts, lists of records become compact tables); free text gets an extractive fallback that
keeps sentences carrying numbers, names and IDs and lists any identifier it had to cut. Nothing
is paraphrased.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from .documents import parse_json, read_document
from .extract import (
    AMOUNT,
    AMOUNT_NUMBER,
    DATE,
    DIGIT,
    ENTITY_KEY,
    ERROR_KEY,
    NEGATIVE_STATUS,
    SENTENCE_BREAK,
    TextScan,
    ValueKind,
    changes_state,
    exact_terms,
    fact_kind,
    identifiers,
    quoted_name,
    snake_case,
    term_variants,
    unquoted,
)
from .tabular import CreatedTable, created_tables, positional_records, select_names, split_records
from .tokens import call_function, content_text
from .types import Card, CardKind, Fact, Message, RawRecord, Table
from .webpage import is_page, page_text

HOSTED_TOOL = "hosted_tool"
"""The role a tool the provider ran itself is read as (a Responses API ``web_search_call``,
``mcp_call``, ...): ``name`` and ``arguments`` say what it was asked and the content what it found.
It is a tool result's card, but no turn of the dialogue, since no chat API takes one."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """An assistant's request to run a tool, as recorded from its message."""

    id: str
    name: str
    arguments: Mapping[str, Any]
    """Parsed arguments; ``{"_raw": text}`` when the model sent invalid JSON."""
    card_id: str = ""
    """The ``TOOL_CALL`` card that recorded the request."""


class Encoder(Protocol):
    """Turns one normalized message into a card (summary and token cost are filled in later)."""

    def encode(self, message: Message, *, record: RawRecord, card_id: str, call: ToolCall | None) -> Card: ...


_ERROR_TEXT = re.compile(r"^\s*(error|exception|traceback|failed|failure)\b", re.I)
_TERMINAL_CODE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])|.\x08")
"""How a terminal is told to colour or overstrike text (``\\x1b[31m``, a link's ``\\x1b]8;;url\\x07``,
``man``'s ``N\\bN``): it shows none of them, and a token scan would glue ``31m`` or ``0m`` to the
word after (``0msrc/main.rs``)."""
_OVERWRITTEN = re.compile(r"[^\r\n]*\r(?=[^\n])")
"""A line a carriage return writes over (a progress bar's earlier states), which a terminal no longer
shows; only in a text of ``\\n`` lines, since a file saved by classic Mac software ends its lines in
``\\r``."""
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")
"""Other control characters (the NULs between ``find -print0``'s names): they separate what they
sit between."""
_TERMINAL_MARK = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""Any of the above: most texts hold none, and are read as they are."""
_COUNT_COLUMN = re.compile(r"(avail|seat|stock|remaining|quantity|inventory|capacity|left)", re.I)
"""A count that can run out: zero there rules an option out."""
_QUOTE_COLUMN = re.compile(r"(price|fare|rate)", re.I)
"""A quoted price and what goes with it (``price_updated``, ``fare_id``), whatever its value looks like."""


def changes_over_time(field: str, kind: str) -> bool:
    """Whether a field's value can change over time: an amount, a status, a count of seats or stock,
    a quote."""
    return kind in ("amount", "status") or any(p.search(field) for p in (_COUNT_COLUMN, _QUOTE_COLUMN))


_AMOUNT_ACROSS_LINES = re.compile(r"[$€£]\n|\n(?:USD|EUR|GBP|dollar)", re.I)
"""A currency sign or unit on the other side of a line break from its number: that amount spans
two sentences, so the amounts found sentence by sentence are not the text's."""
ALSO_VALUES = 60
"""Values from sentences an extractive summary leaves out that it still lists after ``| also:``."""
_T = TypeVar("_T")

DEFAULT_TRUST: Mapping[str, float] = {"user": 0.9, "tool": 0.8, "system": 0.7, "assistant": 0.4}


def parse_arguments(raw: object) -> dict[str, Any]:
    """Tool-call arguments as a dict; invalid JSON is kept as ``{"_raw": text}``, never raised."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if raw is None or raw == "":
        return {}
    try:
        parsed = parse_json(str(raw))
    except (ValueError, RecursionError):
        return {"_raw": str(raw)}
    return parsed if isinstance(parsed, dict) else {"_value": parsed}


def scalar_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):  # 121.0 as the 121 it is; 1e23 not as int(1e23)'s 23 digits
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    return str(value)


def _list_item(value: object) -> str:
    """An item of a ``[a, b]`` list as written: ``null`` keeps its place, and an item holding the
    list's separator is quoted (``"Smith, John"`` is one name, not two)."""
    if value is None:
        return "null"
    text = scalar_text(value)
    return json.dumps(text, ensure_ascii=False) if ", " in text else text


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _named(
    record: Mapping[Any, Any],
    keys: Callable[[tuple[str, ...]], AbstractSet[str]] | None = None,
    at: tuple[str, ...] = (),
) -> Iterator[tuple[str, Any]]:
    """A record's items by the names their paths take. A key that reads as a path through another
    key (``"a.b"`` beside ``"a"``, ``"x[0]"`` beside ``"x"``) is quoted (``'a.b'``):
    ``{"a.b": 1, "a": {"b": 2}}`` would give both values the path ``a.b``. So is a key that starts
    with a quote, which would read as a quoted name (``"'a.b'"`` as the quoted ``"a.b"``). The other
    keys are the record's, or ``keys(at)`` for a record reached by the keys ``at`` in a table: those
    of all its rows, so that a key is named alike in every row and a literal ``"a.b"`` never shares
    a column with a nested one."""
    others: AbstractSet[str] | None = None  # asked for at the first key holding a dot or a bracket
    for key, value in record.items():
        name = str(key)
        if "'" in name and name[0] == "'":
            name = quoted_name(name)
        elif "." in name or "[" in name:
            if others is None:
                others = keys(at) if keys is not None else {str(other) for other in record}
            if any(name[:i] in others for i, char in enumerate(name) if char in ".["):
                name = quoted_name(name)
        yield name, value


def argument_values(arguments: Mapping[str, Any]) -> list[str]:
    """Leaf values of tool-call arguments as strings, the way a later call would reuse them."""
    return [
        scalar_text(value)
        for _, value in _argument_leaves(arguments)
        if value is not None and not isinstance(value, bool)
    ]


def argument_ids(arguments: Mapping[str, Any]) -> list[str]:
    """Leaf values of tool-call arguments that name something, by their field or their form
    (``order_id=O-1``, ``flight=HAT001``), not counts and limits (``max_results=10``)."""
    return [text for _, text in argument_id_fields(arguments)]


def argument_id_fields(arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """:func:`argument_ids`, each with the name of the field holding it (``("order_id", "O-1")``)."""
    texts = (
        (field_name(key), scalar_text(value))
        for key, value in _argument_leaves(arguments)
        if value is not None and not isinstance(value, bool)
    )
    return [(name, text) for name, text in texts if fact_kind(name, text) == "id"]


def argument_dates(arguments: Mapping[str, Any]) -> dict[str, set[str]]:
    """The dates tool-call arguments ask for, by the name of the field holding them
    (``{"date": {"2024-05-20"}}``)."""
    dates: dict[str, set[str]] = {}
    for key, value in _argument_leaves(arguments):
        text = "" if value is None or isinstance(value, bool) else scalar_text(value)
        if text and fact_kind(field_name(key), text) == "date":
            dates.setdefault(field_name(key), set()).add(text)
    return dates


def argument_fields(arguments: Mapping[str, Any]) -> set[str]:
    """Names of the fields that carry values in tool-call arguments (``flights[].date`` -> ``date``)."""
    return {field_name(key) for key, _ in _argument_leaves(arguments) if key}


def _argument_leaves(value: object, key: str = "", depth: int = 0) -> Iterator[tuple[str, object]]:
    """(name of the field holding it, value) for every scalar in the arguments; a list's items
    are held by the list's field."""
    if depth > 32:
        return
    if isinstance(value, Mapping):
        for name, item in value.items():
            yield from _argument_leaves(item, str(name), depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _argument_leaves(item, key, depth + 1)
    else:
        yield key, value


@functools.lru_cache(maxsize=65536)
def field_name(path: str) -> str:
    """The last name of a fact path or table column in snake case: ``flights[1].flight_number`` and
    ``flights[1].flightNumber`` -> ``flight_number``."""
    return snake_case(unquoted(path).rpartition(".")[2].partition("[")[0])


@dataclass(frozen=True, slots=True)
class DefaultEncoder:
    """Structural JSON extraction with an extractive text fallback; no model calls."""

    max_parse_chars: int = 16_000_000
    """Outputs longer than this are not parsed as JSON; they get the text fallback (raw kept)."""
    max_literal_chars: int = 262_144
    """Outputs up to this long that are not JSON but data printed otherwise (a Python repr such as
    ``str(dict)``, ``key: value`` lines, Markdown tables, XML; :mod:`.documents`) are read as that data:
    their parsers take about a second per megabyte, JSON's a tenth of that. Longer ones get the
    text fallback. JSON in a Markdown fence, after an introduction or one object per line is read
    up to ``max_parse_chars``."""
    max_depth: int = 12
    """Deeper JSON is kept as one clipped value instead of being walked."""
    max_rows: int = 500
    """Rows kept per table in the card; the rest stay in the raw record."""
    max_cell_chars: int = 300
    """Longer string values are clipped with an ellipsis (the raw record keeps them whole)."""
    max_text_chars: int = 1200
    """Budget of the extractive fallback for free text."""
    max_read_chars: int = 1_000_000
    """Free text is read for facts, terms and its summary up to this many characters, half from its
    start and half from its end (where a log says how it ended), so a 10 MB page costs about a
    second, not a minute. The summary says what was read; the raw record keeps all of it."""
    max_page_chars: int = 250_000
    """An HTML page is read as the text a browser shows (:mod:`.webpage`) up to this many
    characters from its start, so a 2 MB page of links costs a fraction of a second; the card
    says so, and the raw record keeps the page."""
    max_terms: int = 5000
    """Cap on the exact terms indexed per card."""
    trust: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TRUST))
    """Trust per source kind (``user``, ``tool``, ``system``, ``assistant``)."""

    def encode(self, message: Message, *, record: RawRecord, card_id: str, call: ToolCall | None) -> Card:
        role = message.get("role")
        text = _shown_text(content_text(message.get("content")))
        base: dict[str, Any] = {
            "id": card_id,
            "record_id": record.id,
            "seq": record.seq,
            "created_at": record.created_at,
        }
        if role == "tool":
            return self._tool_result(message, text, call, base)
        if role == HOSTED_TOOL:
            arguments = message.get("arguments")
            asked = arguments if isinstance(arguments, Mapping) else {}
            hosted = ToolCall("", str(message.get("name") or "unknown_tool"), asked)
            return self._tool_result(message, text, call or hosted, base)
        if role == "user":
            return self._prose(CardKind.USER_INSTRUCTION, text, "user", base, keep_whole=True)
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if calls:
                return self._tool_call(message, text, calls, base)
            said = text if text.strip() else _refused_or_spoken(message)
            return self._prose(CardKind.ASSISTANT_CONCLUSION, said, "assistant", base, keep_whole=False)
        label = str(role) if role else "unknown"
        return self._prose(CardKind.SYSTEM_NOTE, text, "system", base, keep_whole=False, source=f"{label}")

    # -- prose -------------------------------------------------------------------------------
    def _prose(
        self,
        kind: CardKind,
        text: str,
        source_kind: str,
        base: dict[str, Any],
        *,
        keep_whole: bool,
        source: str | None = None,
    ) -> Card:
        limit = self.max_text_chars if keep_whole else self.max_text_chars // 3
        text, unread = self._read(text, base["id"])
        scan = TextScan(text)
        extract = text.strip() if len(text) <= limit else _extractive_summary(scan, limit) + unread
        facts = tuple(_text_facts(scan, self.max_terms // 10))
        return Card(
            **base,
            kind=kind,
            summary="",
            text=extract,
            facts=facts,
            source=source or source_kind,
            trust=self.trust.get(source_kind, 0.5),
            terms=frozenset(scan.terms(self.max_terms)),
            constraints=_text_constraints(extract),
        )

    def _tool_call(self, message: Message, text: str, calls: list[Any], base: dict[str, Any]) -> Card:
        names: list[str] = []
        arguments: dict[str, Any] = {}
        terms: set[str] = set()
        for raw_call in calls:
            function = call_function(raw_call)
            name = str(function.get("name") or "unknown_tool")
            args = parse_arguments(function.get("arguments"))
            names.append(name)
            repeat = names.count(name)  # two calls of one tool in a message keep both their arguments
            arguments[name if repeat == 1 else f"{name} #{repeat}"] = args
            terms.update(v.lower() for v in argument_values(args))
        text, unread = self._read(text, base["id"])
        extract = extractive_summary(text, self.max_text_chars // 3) + unread if text.strip() else ""
        return Card(
            **base,
            kind=CardKind.TOOL_CALL,
            summary="",
            text=extract,
            tool_name=", ".join(names),
            tool_call_id=", ".join(str(c.get("id", "")) for c in calls if isinstance(c, dict)),
            arguments=arguments if len(names) > 1 else arguments.get(names[0], {}),
            source="assistant",
            trust=self.trust.get("assistant", 0.5),
            terms=frozenset(terms),
        )

    def _read(self, text: str, card_id: str) -> tuple[str, str]:
        """The part of a free text that is read (its start and its end), and a note saying so."""
        if len(text) <= self.max_read_chars:
            return text, ""
        half = self.max_read_chars // 2
        note = f" (read the first and last {half:,} of {len(text):,} characters; recall {card_id} for all)"
        return f"{text[:half]}\n…\n{text[-half:]}", note

    # -- tool results --------------------------------------------------------------------------
    def _tool_result(self, message: Message, text: str, call: ToolCall | None, base: dict[str, Any]) -> Card:
        name = call.name if call else str(message.get("name") or "unknown_tool")
        arguments = dict(call.arguments) if call else {}
        stripped = text.strip()
        page_note = ""
        if page := is_page(stripped):  # a fetched page: what it says, not its markup (the record keeps it)
            shown, whole = page_text(stripped, _page_address(arguments), limit=self.max_page_chars)
            stripped = shown.strip()
            if not whole:
                page_note = (
                    f" (read the first {len(shown):,} characters the page shows; recall {base['id']} for all)"
                )
        document = read_document(
            stripped, max_json_chars=self.max_parse_chars, max_literal_chars=self.max_literal_chars
        )
        attached = _attachments(message.get("content"))
        if document is None and attached:  # data beside a chart or a screenshot: read without them
            said = _shown_text(content_text([p for p in message["content"] if not _is_attachment(p)])).strip()
            document = read_document(
                said, max_json_chars=self.max_parse_chars, max_literal_chars=self.max_literal_chars
            )
            if document is not None:
                stripped = said
                document = replace(document, around=" ".join(filter(None, (document.around, *attached))))
        structured = document is not None
        parsed = document.data if document is not None else None
        around = document.around if document is not None else ""
        facts: list[Fact] = []
        tables: list[Table] = []
        extract = unread = ""
        schema: list[CreatedTable] = []
        if structured:
            if around:  # "Found 2 flights:", or what a fenced block comes with
                facts.append(Fact("note", _clip(around, self.max_cell_chars), fact_kind("note", around)))
            payload, envelope = _unwrapped(_untyped(parsed))
            if (column := _one_column_rows(payload, arguments)) is not None:
                tables.append(self._records_table("", column))
            else:
                self._walk(payload, "", 0, facts, tables)
            stated = [f.path for f in facts] + [t.path for t in tables]
            # the envelope after the payload: its ids name the entity
            for path, value in _envelope_paths(envelope, stated):
                self._walk(value, path, 1, facts, tables)
            tables = _named_by_query(tables, arguments)
            extract_scan = TextScan(around)
        else:
            read, unread = self._read(stripped, base["id"])
            scan = TextScan(read)
            schema = created_tables(read)
            if len(stripped) <= self.max_text_chars:
                extract = stripped
            elif schema:
                extract = _schema_summary(schema, read, self.max_text_chars)
            else:
                extract = _extractive_summary(scan, self.max_text_chars)
            facts = _text_facts(scan, self.max_terms // 10)
            extract_scan = scan if extract == read else TextScan(extract)
        # a record's ``failed: 0`` is a count (its error keys say whether it failed); the text
        # around it may say so ("Error: payment declined {...}"). A page says no error by its
        # first words: they are its title ("Error codes of the API")
        said = "" if page else around if isinstance(parsed, dict) else stripped
        error = _is_error(message, "" if page else stripped, parsed) or bool(
            structured and _ERROR_TEXT.match(said)
        )
        constraints = _constraints(facts, tables, around if structured else extract)
        if error:
            constraints = [f"{name} failed: {_clip(stripped, 160)}", *constraints]
        volatile = any(changes_over_time(f.path, f.kind) for f in facts) or any(
            changes_over_time(c, fact_kind(c, "")) for t in tables for c in t.columns
        )
        terms = self._terms(facts, tables, extract_scan)
        terms.update(v.lower() for v in argument_values(arguments) if len(v) >= 2)
        if not structured:  # the tables and columns of a schema are what a query names
            terms.update(name.lower() for table in schema for name in (table.name, *table.columns))
        return Card(
            **base,
            kind=CardKind.TOOL_ERROR if error else CardKind.TOOL_RESULT,
            summary="",
            facts=tuple(facts),
            tables=tuple(tables),
            text=extract + (unread or page_note),
            tool_name=name,
            tool_call_id=str(message.get("tool_call_id") or (call.id if call else "")) or None,
            arguments=arguments,
            constraints=tuple(constraints[:24]),
            source=f"tool:{name}",
            trust=self.trust.get("tool", 0.5),
            as_of=base["created_at"] if volatile else None,
            volatile=volatile,
            entity_keys=_entity_keys(name, arguments, facts, tables),
            terms=frozenset(list(terms)[: self.max_terms]),
        )

    def _walk(self, value: object, path: str, depth: int, facts: list[Fact], tables: list[Table]) -> None:
        value = _untyped(value)
        if depth > self.max_depth:
            dumped = _safe_dump(value)
            facts.append(Fact(path or "value", _clip(dumped, self.max_cell_chars), "value"))
            return
        if isinstance(value, dict):
            if _is_keyed_collection(value):
                tables.append(self._table(path, [(str(k), v) for k, v in value.items()], keyed=True))
                return
            if (split := split_records(value)) is not None:
                records, value = split
                tables.append(self._records_table(path, records))
            for name, item in _named(value):
                self._walk(item, _join(path, name), depth + 1, facts, tables)
        elif isinstance(value, list):
            if not value:
                facts.append(Fact(path or "value", "[]", "value"))
            elif all(_is_scalar(v) for v in value):
                joined = ", ".join(map(_list_item, value))
                facts.append(
                    Fact(path or "value", f"[{_clip(joined, self.max_cell_chars * 4)}]", fact_kind(path, ""))
                )
            elif all(isinstance(v, dict) for v in value):
                tables.append(self._records_table(path, value))
            elif all(isinstance(v, list) and all(isinstance(x, dict) for x in v) for v in value):
                grouped = [(str(i + 1), row) for i, group in enumerate(value) for row in group]
                tables.append(self._table(path, grouped, keyed=True, key_name="option"))
            elif (rows := positional_records(value)) is not None:
                tables.append(self._records_table(path, rows))
            else:
                for i, item in enumerate(value):
                    self._walk(item, f"{path}[{i}]", depth + 1, facts, tables)
        elif value is not None:
            text = _cell(value, self.max_cell_chars)
            facts.append(Fact(path or "value", text, fact_kind(path or "value", text)))

    def _records_table(self, path: str, records: list[Any]) -> Table:
        """A list of records as a table, one row each (see :mod:`.tabular` for the shapes read as one)."""
        return self._table(path, [("", record) for record in records], keyed=False)

    def _table(self, path: str, items: list[tuple[str, Any]], *, keyed: bool, key_name: str = "key") -> Table:
        shown = items[: self.max_rows]
        column_keys = _column_keys([row for _, row in shown])
        flat_rows = [(key, _flatten(row, self.max_cell_chars, column_keys)) for key, row in shown]
        columns: dict[str, None] = {}
        for _, flat in flat_rows:
            columns.update(dict.fromkeys(flat))
        column_list = list(columns)
        # the key is left out only when one column holds it in every row (a collection keyed by
        # its records' ids), not when each row happens to have some cell equal to it, and only when
        # each row has a key of its own: rows that share one (an option's legs) are a group, which a
        # column holding the same numbers (each leg's ``stops``) does not say
        keys = [key for key, _ in flat_rows]
        held = len(set(keys)) == len(keys) and any(
            all(flat.get(c) == key for key, flat in flat_rows) for c in column_list
        )
        if keyed and not held:
            rows = tuple(tuple([key] + [flat.get(c, "") for c in column_list]) for key, flat in flat_rows)
            # a field of the records named like the key column is quoted: ``key 'key' v``, not ``key key v``
            column_list = [key_name, *(quoted_name(c) if c == key_name else c for c in column_list)]
        else:
            rows = tuple(tuple(flat.get(c, "") for c in column_list) for _, flat in flat_rows)
        left_out = max(0, len(items) - self.max_rows)
        return Table(path=path, columns=tuple(column_list), rows=rows, left_out=left_out)

    def _terms(self, facts: Iterable[Fact], tables: Iterable[Table], extract: TextScan) -> set[str]:
        terms: set[str] = set()
        for fact in facts:
            _add_value_terms(terms, fact.value)
        for table in tables:
            for row in table.rows:
                for cell in row:
                    _add_value_terms(terms, cell)
                if len(terms) > self.max_terms:
                    return terms
        terms.update(extract.terms(self.max_terms))
        return terms


def _page_address(arguments: Mapping[str, Any]) -> str:
    """The address a page was fetched from, if the call names one (``{"url": "https://..."}``):
    what its relative links are resolved against."""
    found = (v for v in arguments.values() if isinstance(v, str) and v.startswith(("https://", "http://")))
    return next(found, "")


def _one_column_rows(payload: object, arguments: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """Rows of one value each (``[(3,)]``, what ``SELECT COUNT(*) ...`` prints) as records of the
    one column the call's SQL query names; ``None`` otherwise: without such a query, a list of
    one-item lists is no table."""
    if not isinstance(payload, list) or not payload:
        return None
    if not all(isinstance(row, list) and len(row) == 1 and _is_scalar(row[0]) for row in payload):
        return None
    queries = (value for _, value in _argument_leaves(arguments) if isinstance(value, str))
    names = next(
        (names for names in map(select_names, queries) if names is not None and len(names) == 1), None
    )
    return None if names is None else [{names[0]: row[0]} for row in payload]


def _named_by_query(tables: list[Table], arguments: Mapping[str, Any]) -> list[Table]:
    """Tables of rows without column names (``column_1``...) named by the columns of the SQL query
    the call ran (``[('USA', 523.06)]`` for ``SELECT Country, SUM(Total) AS Sales ...``), so a
    row's id is known as one and the model reads what each value is."""
    queries = [value for _, value in _argument_leaves(arguments) if isinstance(value, str)]
    named = [names for names in map(select_names, queries) if names is not None]
    if not named:
        return tables
    out = []
    for table in tables:
        numbered = tuple(f"column_{i}" for i in range(1, len(table.columns) + 1))
        names = next((names for names in named if len(names) == len(numbered)), None)
        out.append(replace(table, columns=tuple(names)) if table.columns == numbered and names else table)
    return out


ENVELOPE_KEYS = frozenset({"data", "result", "results", "response", "payload", "body", "output"})
"""Keys under which an API wraps what it returns (``{"success": true, "data": {...}, "meta": ...}``)."""


_JSON_RPC_KEYS = frozenset({"jsonrpc", "id", "result", "error"})
"""A JSON-RPC 2.0 response's keys: what it answers is its ``result``, or its ``error``."""


def _unwrapped(parsed: object) -> tuple[object, dict[str, object]]:
    """The record a response wraps in an envelope, and the envelope's other keys; ``(parsed, {})``
    for a response without one. The record is read as the response itself, so its fields keep
    their own names (``reservation_id``, not ``data.reservation_id``) and its id names the entity;
    the envelope is read after it. An envelope is one of ``ENVELOPE_KEYS`` holding a record that
    outweighs everything beside it (a list under it is a table of that name already)."""
    if not isinstance(parsed, dict):
        return parsed, {}
    if isinstance(parsed.get("jsonrpc"), str) and parsed.keys() <= _JSON_RPC_KEYS:
        # a JSON-RPC response: its id is the request's, which a client may send the same every time
        return (parsed["result"], {}) if "result" in parsed else ({"error": parsed.get("error")}, {})
    wrapping = [
        key for key, value in parsed.items() if key.lower() in ENVELOPE_KEYS and isinstance(value, dict)
    ]
    if len(wrapping) != 1 or not parsed[wrapping[0]]:
        return parsed, {}
    rest = {key: value for key, value in parsed.items() if key != wrapping[0]}
    beside = _leaves(rest)
    if _leaves(parsed[wrapping[0]], beside + 1) <= beside:
        return parsed, {}
    return parsed[wrapping[0]], rest


def _envelope_paths(envelope: Mapping[str, object], stated: Iterable[str]) -> Iterator[tuple[str, object]]:
    """The envelope's items by the paths they take beside the record read from it, whose facts
    and tables have the paths ``stated``. A key is named as it would be in the envelope alone
    (:func:`_named`), and an item whose name starts like a path of the record's is the response's:
    the envelope's ``status`` beside the record's is ``response.status``, its ``meta`` or
    ``meta.page`` beside the record's ``meta.page`` is ``response.meta.page``, its ``items``
    beside the record's ``items[0]`` is ``response.items``. That prefix is a name neither the
    record's paths nor the envelope's own keys start with (``envelope`` when the record has a
    ``response`` of its own or the envelope a ``response`` beside its record), so no two values
    share a name and none reads as a field of another. A blank key is named ``''``: under no name,
    its record's fields would read as the response's own (``status``) and its value as ``value``."""
    taken = {_first_name(path) for path in stated}
    named = [(name or quoted_name(name), value) for name, value in _named(envelope)]
    used = taken | {_first_name(name) for name, _ in named}
    prefix = next(name for name in _response_names() if name not in used)
    for name, value in named:
        yield (_join(prefix, name) if _first_name(name) in taken else name), value


def _response_names() -> Iterator[str]:
    """Names for the envelope's values that collide with the record's, the first one free."""
    yield from ("response", "envelope")
    yield from (f"envelope_{n}" for n in itertools.count(2))


_FIRST_NAME = re.compile(r"'(?:[^'\\]|\\.)*'(?![^.\[])|[^.\[]*")
"""The first name of a fact path or table path: a quoted name whole (``'a.b'``), otherwise up to
the first dot or bracket (``items`` of ``items[0].id``)."""


def _first_name(path: str) -> str:
    match = _FIRST_NAME.match(path)
    return match.group() if match is not None else path


def _leaves(value: object, enough: int = 1 << 30) -> int:
    """Scalars in ``value``, counted up to ``enough`` (a payload of a million rows is not walked twice)."""
    stack, count = [value], 0
    while stack and count < enough:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            count += 1
    return count


def list_items(value: str) -> list[str] | None:
    """The items of a fact value written as a ``[a, b]`` list of scalars, or None for one value."""
    if value.startswith("[") and value.endswith("]"):
        return value[1:-1].split(", ")
    return None


def _add_value_terms(terms: set[str], value: str) -> None:
    if not value or value == "[]":
        return
    if (items := list_items(value)) is not None:
        for part in items:
            _add_value_terms(terms, part)
        return
    if len(value) <= 48:
        terms.update(term_variants(value))
    else:
        terms.update(exact_terms(value, limit=64))


_FLAT_DEPTH = 4
"""How deep a table row's records are spread into columns; deeper ones are one cell."""


def _column_keys(rows: list[Any]) -> Callable[[tuple[str, ...]], AbstractSet[str]]:
    """The keys of a table's records reached by the keys ``at`` (``()`` for the top), over all
    rows, for :func:`_named` to quote keys for the table, not one row at a time. Records are found
    by their keys as written, not by the names these take, so a name never depends on how its
    parent's was spelled; where no row has a record, there are no keys. They are gathered at the
    first call, which only a key holding a dot or a bracket makes."""

    @functools.cache
    def gathered() -> dict[tuple[str, ...], set[str]]:
        keys: dict[tuple[str, ...], set[str]] = {}
        level: list[tuple[tuple[str, ...], Any]] = [((), row) for row in rows]
        for _ in range(_FLAT_DEPTH):
            records = [
                (at, record)
                for at, record in ((at, _untyped(v)) for at, v in level)
                if isinstance(record, dict)
            ]
            for at, record in records:
                keys.setdefault(at, set()).update(map(str, record))
            level = [
                ((*at, str(key)), value)
                for at, record in records
                for key, value in record.items()
                if isinstance(value, dict)
            ]
        return keys

    return lambda at: gathered().get(at, frozenset())


def _flatten(
    row: object,
    max_cell: int,
    keys: Callable[[tuple[str, ...]], AbstractSet[str]],
    prefix: str = "",
    at: tuple[str, ...] = (),
) -> dict[str, str]:
    """A table row as cells by column, its keys named by ``keys``, the table's (:func:`_column_keys`)."""
    out: dict[str, str] = {}
    row = _untyped(row)
    if isinstance(row, dict) and len(at) < _FLAT_DEPTH:
        for key, (name, value) in zip(row, _named(row, keys, at), strict=True):
            column = _join(prefix, name)
            if isinstance(value, dict):
                out.update(_flatten(value, max_cell, keys, column, (*at, str(key))))
            elif isinstance(value, list) and isinstance(items := _untyped(value), list):
                out[column] = _clip("; ".join(map(_inline, items)), max_cell * 2) if items else "[]"
            elif value is not None:
                out[column] = _cell(value, max_cell)
    else:
        out[prefix or "value"] = _clip(_inline(row), max_cell)
    return out


def _cell(value: object, limit: int) -> str:
    """A value as a card shows it, clipped to ``limit``; a page in a field (a scraper's
    ``{"url": ..., "html": "<!DOCTYPE html>..."}``) as the text it shows, not its ``<head>``."""
    if isinstance(value, str) and is_page(page := value.strip()):
        shown, whole = page_text(page, limit=limit)
        text = " ".join(shown.splitlines())
        return text if whole else text[: limit - 1] + "…"
    return _clip(scalar_text(value), limit)


def _inline(value: object) -> str:
    value = _untyped(value)
    if isinstance(value, dict):
        return " ".join(f"{k}={_inline(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return scalar_text(value)


def _is_number_text(value: object) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


def _all_text(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


_EXTENDED_JSON: Mapping[str, Callable[[object], bool]] = {
    **dict.fromkeys(("$oid", "$symbol", "$uuid", "$numberDecimal"), lambda v: isinstance(v, str)),
    **dict.fromkeys(("$numberInt", "$numberLong", "$numberDouble"), _is_number_text),
    "$date": lambda v: isinstance(v, (str, int)) or (isinstance(v, dict) and list(v) == ["$numberLong"]),
}
"""Keys of a one-key object that says what type its value has, as MongoDB's extended JSON writes
it (``{"$oid": "5f8d..."}``), each with what its value must be for the object to be that wrapper."""
_TYPE_TAGS: Mapping[str, Callable[[object], bool]] = {
    **_EXTENDED_JSON,
    **dict.fromkeys(("S", "B"), lambda v: isinstance(v, str)),
    "N": _is_number_text,
    "BOOL": lambda v: isinstance(v, bool),
    "NULL": lambda v: v is True,
    "M": lambda v: isinstance(v, dict),
    "L": lambda v: isinstance(v, list),
    **dict.fromkeys(("SS", "NS", "BS"), _all_text),
}
""":data:`_EXTENDED_JSON`, and the type descriptors of DynamoDB's attribute values (``{"N": "12"}``),
which a record's values or a list's items all carry, or none does: one ``{"S": "4"}`` beside
plain values is a stock count by size."""


def _bare(value: object, tags: Mapping[str, Callable[[object], bool]]) -> object:
    """``value`` without the type wrappers of ``tags`` around it: ``{"$date": {"$numberLong":
    "1714557600000"}}`` is ``"1714557600000"``, ``{"NULL": true}`` is ``None``."""
    while isinstance(value, dict) and len(value) == 1:
        tag, inner = next(iter(value.items()))
        is_typed = tags.get(tag)
        if is_typed is None or not is_typed(inner):
            break
        value = None if tag == "NULL" else inner
    return value


def _untyped(value: object) -> object:
    """``value``, and the values of a record or the items of a list it is, without their type
    wrappers (:func:`_bare`): an order's ``_id`` is its id, not a record of one ``$oid``, and a
    DynamoDB item's ``status`` a status, not a column ``status.S``. Deeper values are unwrapped
    when the walk reaches them. A list is told by its first item (its items are of one kind), so
    a list of a million records is not read twice."""
    value = _bare(value, _EXTENDED_JSON)
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    if not items:
        return value
    typed = all(_bare(item, _TYPE_TAGS) is not item for item in items)
    tags = _TYPE_TAGS if typed else _EXTENDED_JSON
    told = items if isinstance(value, dict) else itertools.islice(items, 1)
    if not typed and not any(_bare(item, tags) is not item for item in told):
        return value
    if isinstance(value, dict):
        return {key: _bare(item, tags) for key, item in value.items()}
    return [_bare(item, tags) for item in items]


def _is_keyed_collection(value: dict[Any, Any]) -> bool:
    """A dict used as a collection: every value a record, keyed by ids (``{"card_1": {...}, ...}``)."""
    if len(value) < 2 or not all(isinstance(v, dict) for v in value.values()):
        return False
    key_sets = [set(v) for v in value.values()]
    shared = set.intersection(*key_sets)
    return len(shared) >= max(1, min(len(k) for k in key_sets) // 2)


def _safe_dump(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError, TypeError):
        return repr(value)[:10_000]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_error_result(message: Message) -> bool:
    """Whether a tool message reports a failure (error status, an ``error`` or ``fault`` key, or error
    text)."""
    text = content_text(message.get("content")).strip()
    parsed: object = None
    if text[:1] == "{":
        try:
            parsed = parse_json(text)
        except (ValueError, RecursionError):
            parsed = None
    return _is_error(message, text, parsed)


def _is_error(message: Message, text: str, parsed: object) -> bool:
    if message.get("status") == "error" or message.get("is_error"):
        return True
    if isinstance(parsed, dict):
        fields = {snake_case(str(key)): value for key, value in parsed.items()}
        if any(
            _said(value)
            for key, value in fields.items()
            if ERROR_KEY.fullmatch(key) or _ERROR_FIELD.fullmatch(key)
        ):
            return True  # an ``error``, a SOAP ``Fault``, AWS Lambda's ``errorMessage``
        if any(str(fields.get(key)).strip().lower() == "false" for key in ("success", "ok", "succeeded")):
            return True  # a call that says it did not work (``{"success": false, "message": ...}``)
        # an HTTP API's problem details (``{"status": 403, "title": ..., "detail": ...}``); a link
        # checker's ``{"url": ..., "status": 404}`` says how a page answered, not that the call failed
        refused = any(_http_failure(fields.get(key)) for key in _HTTP_STATUS_KEYS)
        if refused and any(_said(fields.get(key)) for key in ("title", "detail", "message")):
            return True
        return str(fields.get("status", "")).strip().lower() in ("error", "failed", "failure")
    return bool(_ERROR_TEXT.match(text))


_ERROR_FIELD = re.compile(r"error_(?:message|msg|type|description|detail|details)")
"""Keys that say what went wrong in words (``errorMessage``, ``errorType``), not a count of errors."""
_HTTP_STATUS_KEYS = ("status", "status_code", "http_status", "http_code")


def _http_failure(value: object) -> bool:
    """Whether ``value`` is an HTTP status of a failed request (400 to 599)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return False
    text = str(value).strip()
    return text.isdigit() and len(text) == 3 and 400 <= int(text) <= 599


def _said(value: object) -> bool:
    """Whether an error field holds an error: not empty, and not ``null``, ``false`` or ``0`` as
    data printed as text (``error: null``) writes them."""
    if isinstance(value, str):
        return value.strip().lower() not in _NO_ERROR
    return bool(value)


_NO_ERROR = frozenset({"", "null", "none", "nil", "false", "no", "0", "[]", "{}"})


def _constraints(facts: list[Fact], tables: list[Table], text: str) -> list[str]:
    """Options a result rules out: negative statuses, zero availability, error sentences."""
    found: list[str] = []
    for fact in facts:
        unavailable = fact.value in ("0", "false", "no") and _COUNT_COLUMN.search(fact.path)
        if unavailable or (NEGATIVE_STATUS.search(fact.value) and fact.kind in ("status", "error", "value")):
            found.append(f"{fact.path}={_clip(fact.value, 80)}")
    for table in tables:
        label_index = _label_column(table)
        for row in table.rows:
            for column, cell in zip(table.columns, row, strict=False):
                zero = cell in ("0", "0.0", "false", "no") and _COUNT_COLUMN.search(column)
                if zero or (NEGATIVE_STATUS.search(cell) and len(cell) <= 40):
                    found.append(f"{row[label_index]}: {column}={cell}")
            if len(found) > 40:
                return found
    found.extend(_text_constraints(text))
    return found


def _text_constraints(text: str) -> tuple[str, ...]:
    found = []
    for sentence in map(str.strip, SENTENCE_BREAK.split(text)):
        if (ruling := NEGATIVE_STATUS.search(sentence)) is not None:
            found.append(_ruled_out(sentence, ruling.start()))
            if len(found) == _TEXT_CONSTRAINTS:
                break
    return tuple(found)


_TEXT_CONSTRAINTS = 8
_CONSTRAINT_CHARS = 120
_BEFORE_RULING = 40
"""Characters a long constraint shows before the word that rules the option out."""


def _ruled_out(sentence: str, at: int) -> str:
    """``sentence`` in :data:`_CONSTRAINT_CHARS`, around the word at ``at`` that rules an option
    out: a long one (log lines an extract joined) from just before that word, not from its start,
    whose first 120 characters may say nothing failed."""
    if len(sentence) <= _CONSTRAINT_CHARS or at <= _BEFORE_RULING:
        return _clip(sentence, _CONSTRAINT_CHARS)
    start = at - _BEFORE_RULING
    space = sentence.find(" ", start, at)
    return "…" + _clip(sentence[space + 1 if space >= 0 else start :], _CONSTRAINT_CHARS - 1)


def _label_column(table: Table) -> int:
    for i, column in enumerate(table.columns):
        if fact_kind(column, "") == "id":
            return i
    return 0


def _entity_keys(
    name: str, arguments: Mapping[str, Any], facts: list[Fact], tables: list[Table]
) -> tuple[tuple[str, str], ...]:
    """(entity, attribute) pairs: an id at the top of an object names the entity of its fields; a
    result without one (a list, free text, an error message) is the call's own record, so the same
    call answered again replaces it, and so is a list's page whose only id is its address."""
    keys: list[tuple[str, str]] = []
    root = root_id(name, arguments, facts)
    if root is not None and tables and not _names_an_entity(root):
        asked = {value.lower() for value in argument_ids(arguments)}
        # a page of a list (Stripe's ``{"object": "list", "url": "/v1/invoices", "data": [...]}``)
        # is what its call asked for: its address is the same whatever the query
        root = root if root.value.lower() in asked else None
    if root is not None and root.value:
        entity = _entity_name(name, arguments, root)
        keys.extend((entity, f.path.split(".")[0].split("[")[0]) for f in facts if f is not root)
        keys.extend((entity, t.path.split(".")[0]) for t in tables)
    else:
        keys.append(call_key(name, arguments))
    return tuple(dict.fromkeys(keys))


def _entity_name(name: str, arguments: Mapping[str, Any], root: Fact) -> str:
    """The entity a record's id names: the id, with what it identifies when it is a number
    (``order_id=7``, see :func:`id_kind`)."""
    kind = id_kind(name, arguments, field_name(root.path), root.value)
    return root.value if kind is None else f"{kind}={root.value}"


def id_kind(tool: str, arguments: Mapping[str, Any], field: str, value: str) -> str | None:
    """What a number used as an id identifies, since a customer, an order and a product may all
    be ``7``: the field holding it (``order_id``), for a bare ``id`` the argument of another name
    that asked for it, else the tool's ``id``. None for an id with letters, which names one thing."""
    if not value.isdigit():
        return None
    if field != "id":
        return field
    asked = (
        name
        for key, asked_value in _argument_leaves(arguments)
        if asked_value is not None and scalar_text(asked_value) == value and (name := field_name(key)) != "id"
    )
    return next(asked, f"{tool}.id")


def call_key(name: str, arguments: Mapping[str, Any]) -> tuple[str, str]:
    """The (entity, attribute) of a call's own record: what a result without an id of its own
    (a list, free text, an error) is filed under, so the same call answered again replaces it."""
    signature = json.dumps(arguments, sort_keys=True, default=str)[:400]
    return f"{name}({signature})", "result"


def root_id(name: str, arguments: Mapping[str, Any], facts: Iterable[Fact]) -> Fact | None:
    """The id at the top of a record, which names the entity its other fields describe; None for
    a record without one. A lookup that asked for one id is about that id's record (an order's
    ``order_id``, not the ``customer_id`` printed before it); otherwise the first id a key names
    as one is (a booking's ``reservation_id``, not the flight it was asked for; a balance's
    ``account_id``, not the ``EUR`` of its ``currency`` printed before it), else the first id. A
    ``user_id`` beside other fields says whose record it is, not what it is."""
    ids = [
        f
        for f in facts
        if f.path != "text"  # an id found in free text names nothing its other values belong to
        and "." not in f.path
        and "[" not in f.path
        and f.kind == "id"
        and fact_kind(f.path, f.value) == "id"
        and snake_case(f.path) != "user_id"
    ]
    if not ids:
        return None
    asked = {value.lower() for value in argument_ids(arguments)}
    named = next((f for f in ids if _names_an_entity(f)), ids[0])
    if len(asked) == 1 and not changes_state(name):
        return next((f for f in ids if f.value.lower() in asked), named)
    return named


def _names_an_entity(fact: Fact) -> bool:
    """Whether the fact's key says it names its record (``account_id``, ``order_number``), where
    another id is one by its form (the ``EUR`` of a balance's ``currency``) or is an address (a
    list's ``url``)."""
    return ENTITY_KEY.search(field_name(fact.path)) is not None


_FACT_KINDS: tuple[tuple[str, ValueKind], ...] = (
    ("date", "date"),
    ("amount", "amount"),
    ("id", "email"),
    ("id", "link"),
    ("id", "identifier"),
)
"""(fact kind, value kind) in the order free-text facts list them."""


def _exact_values(scan: TextScan) -> Iterator[tuple[str, str]]:
    """(kind, value) for every distinct date, amount, e-mail, link and identifier of the text, in that
    order; a kind is scanned only if the caller reads that far."""
    for kind, found in _FACT_KINDS:
        for value in scan.distinct(found):
            yield kind, value


_DATE_PARTS = re.compile(r"[-:T ]")
"""What separates the year, month, day, hours and minutes of a date or time."""


def _text_facts(scan: TextScan, limit: int) -> list[Fact]:
    return [Fact("text", value, kind) for kind, value in itertools.islice(_stated_values(scan), limit)]


def _stated_values(scan: TextScan) -> Iterator[tuple[str, str]]:
    """:func:`_exact_values`, each value once, without those that are only part of another."""
    # The 1,000 of "$1,000" is that amount, the 07 and 30 of "07:30" that time and the 2026 of
    # ".../2026/03/..." that link, not values of their own (the 12 of "$120" is no part of it).
    parts = {number for amount in scan.distinct("amount") for number in AMOUNT_NUMBER.findall(amount)}
    for date in scan.distinct("date"):  # ("2024-05-01T10" and "00.123Z" of a timestamp too)
        parts.update(_DATE_PARTS.split(date), identifiers(date))
    parts.update(part for link in scan.distinct("link") for part in identifiers(link))
    firsts = _unique(_exact_values(scan), key=lambda found: found[1])
    return ((kind, value) for kind, value in firsts if not (kind == "id" and value in parts))


def _unique(items: Iterable[_T], key: Callable[[_T], object] = lambda item: item) -> Iterator[_T]:
    """Items in order, each key's first only; lazy, so a caller that wants a few stops early."""
    seen: set[object] = set()
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            yield item


def extractive_summary(text: str, limit: int) -> str:
    """Keep the sentences that carry exact values, in order, then list the values that did not fit.

    Sentences are ranked by how many identifiers, dates and amounts they hold and whether they rule
    an option out; the first sentence gets a small bonus because it usually says what the text is
    about. Values from sentences left out follow verbatim after ``| also:``.
    """
    return _extractive_summary(TextScan(text), limit)


def _extractive_summary(scan: TextScan, limit: int) -> str:
    """:func:`extractive_summary` of ``scan.text``. The values it matches sentence by sentence to
    rank them are handed to ``scan``, so the facts and terms of the text do not scan it again."""
    sentences = [s.strip() for s in SENTENCE_BREAK.split(scan.text) if s and s.strip()]
    if not sentences:
        return ""
    scored = []
    ids_by_sentence: list[list[str] | None] = []
    dates: list[str] = []
    amounts: list[str] = []
    for index, sentence in enumerate(sentences):
        negative = NEGATIVE_STATUS.search(sentence) is not None
        if index and not negative and not DIGIT.search(sentence):
            ids_by_sentence.append(None)  # no exact value and nothing ruled out: not worth ranking
            continue
        ids = list(identifiers(sentence))
        sentence_dates = DATE.findall(sentence)
        sentence_amounts = AMOUNT.findall(sentence)
        ids_by_sentence.append(ids)
        dates += sentence_dates
        amounts += sentence_amounts
        weight = len(ids) + 2 * len(sentence_dates) + 2 * len(sentence_amounts) + 3 * negative
        scored.append((weight + (1.5 if index == 0 else 0), index, _clip(sentence, limit // 2)))
    # A sentence not ranked has no digit, so no date or amount, but may hold a code (``JFK``).
    scan.supply(
        "identifier",
        itertools.chain.from_iterable(
            identifiers(s) if ids is None else ids for s, ids in zip(sentences, ids_by_sentence, strict=True)
        ),
    )
    scan.supply("date", dates)
    if not _AMOUNT_ACROSS_LINES.search(scan.text):
        scan.supply("amount", amounts)
    chosen: list[tuple[int, str]] = []
    used = 0
    for _, index, sentence in sorted(scored, key=lambda s: (-s[0], s[1])):
        if used + len(sentence) + 1 > limit:
            continue
        chosen.append((index, sentence))
        used += len(sentence) + 1
    kept = " ".join(s for _, s in sorted(chosen))
    missing = itertools.islice((v for _, v in _stated_values(scan) if v not in kept), ALSO_VALUES)
    also: list[str] = []
    listed = 0
    for value in missing:  # within the limit too: a run of 60,000 characters is one "identifier"
        value = _clip(value, limit // 2)
        if listed + len(value) + 2 > limit:
            break
        also.append(value)
        listed += len(value) + 2
    if also:
        kept += " | also: " + ", ".join(also)
    return kept


def _schema_summary(schema: list[CreatedTable], text: str, limit: int) -> str:
    """A schema text too long to keep whole: each table's ``CREATE TABLE`` statement on one line
    (as ``Album(AlbumId, Title, ArtistId)`` when the statements do not fit), the names a next query
    takes; then, in the room left, the other lines (the sample rows) in order."""
    lines = [table.statement for table in schema]
    if sum(len(line) + 1 for line in lines) > limit:
        lines = [table.outline() for table in schema]
    starts = [table.start for table in schema[1:]] + [len(text)]
    rest = (
        line.strip()
        for table, end in zip(schema, starts, strict=True)
        for line in text[table.end : end].split("\n")
    )
    lines += [line for line in rest if line and line not in ("/*", "*/")]
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > limit:
            break
        kept.append(line)
        used += len(line) + 1
    if len(kept) < len(schema):
        return (
            "\n".join(kept) + " | also: " + _clip(", ".join(table.name for table in schema[len(kept) :]), 400)
        )
    return "\n".join(kept)


def _is_attachment(part: object) -> bool:
    """Whether a content part is media (an image, audio, a file), which a card names, not reads."""
    return isinstance(part, dict) and "text" not in part and bool(content_text([part]))


def _attachments(content: object) -> list[str]:
    """The names of the media parts of a content (``[image_url]``), as the card shows them."""
    return (
        [content_text([part]) for part in content if _is_attachment(part)]
        if isinstance(content, list)
        else []
    )


def _shown_text(text: str) -> str:
    """``text`` as a terminal shows it: without colour codes, the states a progress bar wrote over,
    ``\\r`` before ``\\n`` or control characters (runs of them as a space). The card reads this;
    the raw record keeps the output as it came."""
    if _TERMINAL_MARK.search(text) is None:
        return text
    text = _TERMINAL_CODE.sub("", text).replace("\r\n", "\n")
    if "\r" in text and "\n" in text:
        text = _OVERWRITTEN.sub("", text)
    return _CONTROL.sub(" ", text)


def _refused_or_spoken(message: Message) -> str:
    """What an assistant message without text content said: OpenAI's ``refusal``, or the
    ``transcript`` of an audio reply (``""`` when neither)."""
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        return refusal
    audio = message.get("audio")
    transcript = audio.get("transcript") if isinstance(audio, Mapping) else None
    return transcript if isinstance(transcript, str) else ""
