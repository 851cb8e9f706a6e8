"""Tables sent as a header and rows instead of a list of records.

SQL and analytics APIs send a query's result as column names beside rows of values
(``{"columns": [...], "rows": [[...], ...]}``, ``DataFrame.to_json(orient="split")``, ClickHouse's
``meta`` and ``data``); an SQL tool prints the rows alone, as a list of tuples, whose names are
those of the query's ``SELECT`` (:func:`select_names`); a tool written for a spreadsheet prints
CSV. Read as they come, each row is a list of values whose meaning sits in
another place, and the encoder could neither name a row's identifier nor keep the rows a decision
needs. Each function here turns one of these shapes into records (one dict per row), which the
encoder reads as it reads a JSON list of records.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COLUMN_KEYS = frozenset({"columns", "column_names", "fields", "headers", "header", "meta", "schema", "cols"})
"""Keys that hold a table's column names: as text, or as ``{"name": ...}`` entries."""
DELIMITERS = (",", "\t", ";")
"""Delimiters tried for text tables, in this order."""
_COLUMN_NAME = re.compile(r"[A-Za-z_#][\w.()/%#-]*(?: [\w.()/%#-]+){0,3}")
"""A header cell: a name of at most four words (``order_id``, ``Unit price``), not a value."""


def positional_records(rows: list[Any]) -> list[dict[str, Any]] | None:
    """Rows of values without column names (``[(1, 'AC/DC'), (2, 'Accept')]``) as records with
    numbered columns (``column_1``), or ``None`` unless every row is a list of the same two or
    more values."""
    if not rows or not all(isinstance(row, list) for row in rows):
        return None
    width = len(rows[0])
    if width < 2 or any(len(row) != width for row in rows):
        return None
    if all(isinstance(item, dict) for row in rows for item in row):
        return None  # groups of records (a connecting flight's legs), not rows of values
    names = [f"column_{i}" for i in range(1, width + 1)]
    return [dict(zip(names, row, strict=True)) for row in rows]


def split_records(value: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """A table sent as column names beside rows of values: ``(records, other keys)``, or ``None``.

    The names sit under one of ``COLUMN_KEYS``; the rows are the one non-empty list of lists as
    wide as the names (a ``rows`` count beside ``data`` is not them). The other keys leave out
    the names' key: the records hold the names."""
    for names_key, names_value in value.items():
        if names_key.lower() not in COLUMN_KEYS:
            continue
        names = _column_names(names_value)
        if names is None:
            continue
        tables = [
            key
            for key, rows in value.items()
            if key != names_key
            and isinstance(rows, list)
            and rows
            and all(isinstance(row, list) and len(row) == len(names) for row in rows)
        ]
        if len(tables) == 1:
            rows_key = tables[0]
            records = [dict(zip(names, row, strict=True)) for row in value[rows_key]]
            rest = {key: item for key, item in value.items() if key not in (names_key, rows_key)}
            return records, rest
    return None


def _column_names(value: object) -> list[str] | None:
    """Distinct column names from a list of names or of ``{"name": ...}`` entries."""
    if not isinstance(value, list) or not value:
        return None
    names = [item.get("name") if isinstance(item, dict) else item for item in value]
    texts = [name for name in names if isinstance(name, str) and name]
    return texts if len(texts) == len(names) == len(set(texts)) else None


def delimited_records(text: str) -> list[dict[str, str]] | None:
    """The rows of a CSV (or tab- or semicolon-separated) text with a header line, values kept as
    written; ``None`` unless every line has the header's two or more cells and the header is made
    of names. Prose with a comma on each line is not a table: it needs two rows or more, or one
    under a header of three or more single-word names."""
    first_line = text.partition("\n")[0]
    for delimiter in DELIMITERS:
        if delimiter not in first_line:
            continue
        try:  # quoted cells may hold the delimiter, or a line break
            lines = csv.reader(io.StringIO(text), delimiter=delimiter, strict=True)
            header, *rows = (line for line in lines if any(cell.strip() for cell in line))
        except (csv.Error, ValueError):  # ValueError: no line at all
            continue
        if not rows:
            continue
        header = [cell.strip() for cell in header]
        if len(header) < 2 or len(set(header)) != len(header) or any(len(row) != len(header) for row in rows):
            continue
        if not all(_COLUMN_NAME.fullmatch(cell) for cell in header):
            continue
        if len(rows) < 2 and (len(header) < 3 or any(" " in cell for cell in header)):
            continue
        return [dict(zip(header, (cell.strip() for cell in row), strict=True)) for row in rows]
    return None


_SQL_NAME = r"""[A-Za-z_][\w$]*|"(?:[^"]|"")*"|`[^`]*`|\[[^\]]*\]"""
"""A name in SQL: a word, or quoted as standard SQL, MySQL or SQL Server quote it."""
_SQL_WORD = re.compile(rf"""{_SQL_NAME}|'(?:[^']|'')*'|[(),*]""")
"""The parts of an SQL text that say where its select list is: names, strings (whose commas and
parentheses are no syntax), parentheses, commas and stars."""
_SELECT_PREFIX = re.compile(r"(?:(?:DISTINCT|ALL)\b|TOP\s+\d+(?:\s+PERCENT)?)\s*", re.I)
_COLUMN_NAME_OF = re.compile(
    rf"(?:(?:{_SQL_NAME})\s*\.\s*)*(?P<name>{_SQL_NAME})|.*?\sAS\s+(?P<alias>{_SQL_NAME})", re.I | re.S
)
"""A select item named by a database as written: a column (``c.Country``) or an alias (``... AS sales``)."""
_QUERY = re.compile(r"\s*(?:SELECT|WITH)\b", re.I)
_CLAUSES = frozenset({"FROM", "INTO", "WHERE", "UNION", "EXCEPT", "INTERSECT", "LIMIT", "ORDER"})
"""Words that end a select list."""


def select_names(sql: str) -> list[str] | None:
    """The names of the columns an SQL query returns, as a database names them: an alias
    (``SUM(total) AS sales`` -> ``sales``), a column's own name (``c.Country`` -> ``Country``), or
    the expression's text (``COUNT(*)``); from its first ``SELECT`` outside parentheses (a ``WITH``
    query's main one, a ``UNION``'s first). ``None`` when the text is no such query (it starts
    with ``SELECT`` or ``WITH``), selects a star (whose columns the query does not name) or names
    two columns alike."""
    if _QUERY.match(sql) is None:
        return None
    depth = 0
    start = end = -1
    for match in _SQL_WORD.finditer(sql):
        word = match.group()
        if word in ("(", ")"):
            depth += 1 if word == "(" else -1
        elif depth == 0 and start < 0 and word.upper() == "SELECT":
            start = match.end()
        elif depth == 0 and start >= 0 and word.upper() in _CLAUSES:
            end = match.start()
            break
    if start < 0:
        return None
    select_list = _SELECT_PREFIX.sub(
        "", sql[start : end if end >= 0 else len(sql)].strip().rstrip(";"), count=1
    )
    names = [_column_name(item) for item in _top_level_items(select_list)]
    if any(not name or name.endswith("*") for name in names) or len(set(names)) != len(names):
        return None
    return names


def _top_level_items(select_list: str) -> list[str]:
    """The items of a select list: its parts between commas outside parentheses and strings."""
    items: list[str] = []
    depth = last = 0
    for match in _SQL_WORD.finditer(select_list):
        word = match.group()
        if word in ("(", ")"):
            depth += 1 if word == "(" else -1
        elif word == "," and depth == 0:
            items.append(select_list[last : match.start()].strip())
            last = match.end()
    items.append(select_list[last:].strip())
    return items


def _column_name(item: str) -> str:
    """The name a database gives the column of one select item (see :func:`select_names`)."""
    named = _COLUMN_NAME_OF.fullmatch(item)
    if named is None:
        return " ".join(item.split())
    return _unquoted(named.group("alias") or named.group("name"))


@dataclass(frozen=True, slots=True)
class CreatedTable:
    """A table an SQL schema text creates: its name, its columns' names and its statement."""

    name: str
    columns: tuple[str, ...]
    statement: str
    """The ``CREATE TABLE`` statement on one line (a schema tool prints a column a line)."""
    start: int
    end: int
    """Where the statement is in the text."""

    def outline(self) -> str:
        """``Album(AlbumId, Title, ArtistId)``: the names a query takes from the table."""
        return f"{self.name}({', '.join(self.columns)})"


_CREATE_TABLE = re.compile(
    rf"\bCREATE\s+(?:(?:TEMP|TEMPORARY|VIRTUAL)\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    rf"(?:(?:{_SQL_NAME})\s*\.\s*)?(?P<name>{_SQL_NAME})\s*\(",
    re.I,
)
_LEADING_NAME = re.compile(_SQL_NAME)
_CONSTRAINT = re.compile(r"(?:PRIMARY|FOREIGN|UNIQUE|CHECK|CONSTRAINT|KEY|INDEX|EXCLUDE)", re.I)
"""What a table constraint starts with, where a column definition starts with the column's name."""


def created_tables(text: str) -> list[CreatedTable]:
    """The tables of the ``CREATE TABLE`` statements in ``text`` (what LangChain's ``sql_db_schema``
    prints, or a ``.schema`` dump), in order; a statement cut off before its closing parenthesis
    is left out."""
    tables: list[CreatedTable] = []
    end = 0
    for match in _CREATE_TABLE.finditer(text):
        if match.start() < end:
            continue
        depth, closed = 1, -1
        for word in _SQL_WORD.finditer(text, match.end()):
            if word.group() in ("(", ")"):
                depth += 1 if word.group() == "(" else -1
                if depth == 0:
                    closed = word.end()
                    break
        if closed < 0:
            break
        end = closed
        names = (_LEADING_NAME.match(part) for part in _top_level_items(text[match.end() : closed - 1]))
        columns = tuple(
            _unquoted(name.group()) for name in names if name and not _CONSTRAINT.fullmatch(name.group())
        )
        statement = " ".join(text[match.start() : closed].split()).replace("( ", "(").replace(" )", ")")
        tables.append(CreatedTable(_unquoted(match.group("name")), columns, statement, match.start(), closed))
    return tables


def _unquoted(name: str) -> str:
    """An SQL name without its quotes (``"Album"``, `` `Album` ``, ``[Album]``)."""
    return name[1:-1] if name[:1] in ('"', "`", "[") else name
