"""Where the data is in a tool output: JSON, or data printed some other way.

Tools return JSON, but not always as the whole text. A model-backed tool or an MCP server fences
it in Markdown (```` ```json ````), a wrapper introduces it (``Found 2 flights: [...]``), a log
prints one object per line, and Python agents send the repr of a dict (:mod:`.pyliteral`). Tools
written for a model to read print records as ``key: value`` lines (YAML) or Markdown tables, and
tools over spreadsheets print CSV (:mod:`.tabular`); feeds and SOAP services answer in XML.
:func:`read_document` finds the data in each of these and returns the text around it, so the
encoder walks the data as it walks JSON and keeps the rest as a note.
"""

from __future__ import annotations

import itertools
import json
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from typing import Any

import yaml

from .extract import ERROR_KEY
from .pyliteral import LOOKS_LIKE_A_LITERAL, parse_python_literal
from .tabular import delimited_records
from .webpage import HTML_TAGS

_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
SURROGATE = re.compile("[\ud800-\udfff]")
"""Half of a UTF-16 pair: text cut inside an emoji."""
_FENCE = re.compile(r"^[ \t]*```[\w+-]*[ \t]*\n(.*?)\n[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
"""A Markdown code fence on lines of its own, its language tag (``json``, ``python``) dropped."""
FENCES_READ = 4
"""Code fences tried for data, from the first: a page of code samples is not parsed block by block."""
INTRODUCED_SHARE = 0.5
"""Least share of an output that data inside other text (fenced, a Markdown table, after an
introduction) must take to be read as the output's data: below it, the text is an explanation
with an example, or prose that happens to hold a bracket (``see [1]``)."""


def parse_json(text: str, *, as_written: bool = False) -> Any:
    """``json.loads``, with a half emoji escaped in the text (``"\\ud83d"``, what JavaScript writes
    for a string cut inside one) replaced by U+FFFD: parsed as it is, it is not UTF-8, and no store
    or tokenizer takes it. With ``as_written``, a number a float prints otherwise (``19.90``) is a
    :class:`WrittenNumber`. Raises what ``json.loads`` raises."""
    parsed = json.loads(text, parse_float=_written if as_written else None)
    return _without_surrogates(parsed) if _ESCAPED_SURROGATE.search(text) else parsed


class WrittenNumber(float):
    """A number of a tool output that a float prints otherwise, printed as written: an amount of
    ``19.90`` is quoted ``19.90`` by the user and the next call, not ``19.9``."""

    def __new__(cls, text: str) -> WrittenNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number

    text: str

    def __repr__(self) -> str:
        return self.text


def _written(text: str) -> float:
    """``text`` as a float, or as a :class:`WrittenNumber` when the float prints otherwise: a
    trailing zero (``19.90``) or an exponent (``1e-3``); other digits a float keeps (the rest of a
    float-heavy list goes by at ``float``'s pace)."""
    if text[-1] != "0" and "e" not in text and "E" not in text:
        return float(text)
    number = float(text)
    return number if repr(number) == text else WrittenNumber(text)


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
    """The data ``text`` holds: all of it as JSON or a Python repr; else one JSON object per line;
    else all of it as ``key: value`` lines (see :func:`_key_value_lines`) or as CSV; else the
    first fenced block that is data, its Markdown tables, or the part from its first bracket to
    its last that is data, each only when the text around it is at most ``1 - INTRODUCED_SHARE``
    of the whole: data in a long explanation is left to the free-text extract, which keeps values
    from all of it. ``None`` for free text. ``max_literal_chars`` bounds the text given to the parsers slower
    than JSON's."""
    stripped = text.strip()
    whole = _data(stripped, max_json_chars, max_literal_chars)
    if whole is None and len(stripped) <= max_literal_chars:
        whole = xml_data(stripped)
    if whole is not None:
        return Document(whole)
    if (lines := _json_lines(stripped, max_json_chars)) is not None:
        return Document(lines)
    if len(stripped) <= max_literal_chars:
        records = _key_value_lines(stripped)
        if records is None:
            records = delimited_records(stripped)
        if records is not None:
            return Document(records)
    wrapped = _fenced(stripped, max_json_chars, max_literal_chars)
    if wrapped is None and len(stripped) <= max_literal_chars:
        wrapped = _markdown_tables(stripped)
    if wrapped is None:
        wrapped = _introduced(stripped, max_json_chars, max_literal_chars)
    if wrapped is None or len(wrapped.around) > (1 - INTRODUCED_SHARE) * len(stripped):
        return None
    return wrapped


def _fenced(text: str, max_json_chars: int, max_literal_chars: int) -> Document | None:
    for fence in itertools.islice(_FENCE.finditer(text), FENCES_READ):
        block = fence.group(1).strip()
        data: Any = _data(block, max_json_chars, max_literal_chars)
        if data is None and len(block) <= max_literal_chars:
            data = delimited_records(block)
        if data is not None:
            return Document(data, _joined(text[: fence.start()], text[fence.end() :]))
    return None


def _introduced(text: str, max_json_chars: int, max_literal_chars: int) -> Document | None:
    """The data from the first bracket to the last (``Found 2 flights: [...]``)."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    end = max(text.rfind("}"), text.rfind("]")) + 1
    if start < 0 or end - start < INTRODUCED_SHARE * len(text) or (start, end) == (0, len(text)):
        return None
    data = _data(text[start:end], max_json_chars, max_literal_chars)
    return Document(data, _joined(text[:start], text[end:])) if data is not None else None


def _data(text: str, max_json_chars: int, max_literal_chars: int) -> dict[str, Any] | list[Any] | None:
    """``text`` parsed as a JSON object or array, or as the Python repr of one, with the data its
    strings hold read too (see :func:`_with_data_inside`); else ``None``. JSON text of a string
    that holds data (``json.dumps`` applied twice) is that data."""
    if text[:1] in ("{", "[", '"') and len(text) <= max_json_chars:
        try:
            parsed = parse_json(text, as_written=True)
        except (ValueError, RecursionError):
            pass
        else:
            if isinstance(parsed, str):
                inner = parsed.strip()
                return _data(inner, max_json_chars, max_literal_chars) if inner[:1] in ("{", "[") else None
            if not isinstance(parsed, (dict, list)):
                return None
            return _with_data_inside(parsed) if _QUOTED_DATA.search(text) else parsed
    if len(text) <= max_literal_chars and LOOKS_LIKE_A_LITERAL.match(text):
        try:
            parsed = parse_python_literal(text)
        except ValueError:
            return None
        if not isinstance(parsed, (dict, list)):
            return None
        return _with_data_inside(parsed) if _QUOTED_DATA.search(text) else parsed
    return None


_QUOTED_DATA = re.compile(r"""["'][ \t]*[\[{]""")
"""A string that starts with a bracket: only a text holding one can have data inside a string."""
_INSIDE_DEPTH = 16
"""Nesting searched for strings that hold data; deeper values are kept as they are."""


def _with_data_inside(value: Any, depth: int = 0) -> Any:
    """``value`` with each string that is a JSON object or array (``{"result": "{\\"order_id\\": ...}"}``,
    what a wrapper that serialized its payload returns) replaced by that data, so its values are read
    one by one rather than as one string cut at a cell's length. Unchanged parts are the same objects."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] not in ("{", "[") or text[-1:] not in ("}", "]"):
            return value
        try:
            parsed = parse_json(text, as_written=True)
        except (ValueError, RecursionError):
            return value
        return _with_data_inside(parsed, depth + 1) if isinstance(parsed, (dict, list)) else value
    if depth >= _INSIDE_DEPTH:
        return value
    if isinstance(value, dict):
        items = {key: _with_data_inside(item, depth + 1) for key, item in value.items()}
        return items if any(items[key] is not item for key, item in value.items()) else value
    if isinstance(value, list):
        found = [_with_data_inside(item, depth + 1) for item in value]
        return found if any(new is not old for new, old in zip(found, value, strict=True)) else value
    return value


_XML_START = re.compile(r"(?:\ufeff|\s|<\?xml[^>]*>|<!--.*?-->)*<[A-Za-z_]", re.DOTALL)
"""How an XML document starts: its root element's tag, after a declaration or comments."""


def xml_data(text: str) -> dict[str, Any] | list[Any] | None:
    """An XML document (an RSS or Atom feed, a SOAP response, a list of records) as the data it
    holds, or ``None`` for text that is no well-formed XML. An element is a record of its
    attributes and child elements, by their names without namespace (``opensearch:totalResults``
    is ``totalResults``); children of one name are a list; an element of text alone is that text,
    as written; text beside attributes is a field named like its element (``<Total currency="USD">
    412.50</Total>`` is ``Total(currency=USD; Total=412.50)``), text beside elements (``<p>a <b>b
    </b></p>``) its words. The root's attributes say which format it is (``version="2.0"``): the
    data is what it holds, and of elements that only wrap one record (a feed's ``channel``, a SOAP
    ``Body`` and its ``...Response``), that record, so its id names it; a root that names an
    error (``<Error>``) is kept, as it says the call failed. A document declaring entities is not
    read: what they expand to is no part of the text; nor is one element of text alone, or markup
    of HTML elements (a part of a page), which read as the text they are."""
    if _XML_START.match(text) is None or "<!ENTITY" in text:
        return None
    try:
        root = ElementTree.fromstring(text.lstrip("\ufeff"))
    except (ElementTree.ParseError, ValueError, RecursionError):
        return None
    name = _local_name(root.tag)
    if name.lower() in HTML_TAGS:
        return None  # a part of a page (``<p>Order <b>ORD-1</b> shipped</p>``): text, as it reads
    data = _xml_element(root, attributes=False)
    if not isinstance(data, dict):
        return None  # one element of text: the text it holds is all there is
    if ERROR_KEY.fullmatch(name):
        return {name: data}  # S3's ``<Error><Code>NoSuchKey</Code>...``: the call failed
    while len(data) == 1:
        name, inner = next(iter(data.items()))
        if not isinstance(inner, dict) or not inner or ERROR_KEY.fullmatch(name):
            break  # a SOAP Fault stays one: it says the call failed
        data = inner
    return data


_XML_DEPTH = 64
"""Elements nested deeper are read as their words: a walk of each level would run out of stack."""


def _local_name(name: str) -> str:
    return name.rpartition("}")[2]


def _xml_element(
    element: ElementTree.Element, *, attributes: bool = True, depth: int = 0
) -> str | dict[str, Any]:
    """One element as a record or a text (see :func:`xml_data`); past :data:`_XML_DEPTH`, as
    its words."""
    fields: dict[str, Any] = (
        {_local_name(key): value for key, value in element.attrib.items()} if attributes else {}
    )
    text = (element.text or "").strip()
    children = list(element)
    mixed = any((child.tail or "").strip() for child in children)
    if children and (text or mixed or depth >= _XML_DEPTH):
        text, children = " ".join("".join(element.itertext()).split()), []  # prose with markup
    if not children:
        if not fields:
            return text
        if text:
            fields[_local_name(element.tag)] = text
        return fields
    for child in children:
        name, value = _local_name(child.tag), _xml_element(child, depth=depth + 1)
        if name not in fields:
            fields[name] = value
        elif isinstance(fields[name], list):  # (an element is never read as a list)
            fields[name].append(value)
        else:
            fields[name] = [fields[name], value]
    for value in fields.values():
        if isinstance(value, list):
            _listed_alike(value)
    return fields


def _listed_alike(records: list[Any]) -> None:
    """A child that some of the ``records`` repeat (an entry's ``author``) made a list in each of
    them, so that it is one column of their table, not ``author.name`` in some rows and
    ``author`` in others."""
    repeated = {
        name
        for record in records
        if isinstance(record, dict)
        for name, v in record.items()
        if isinstance(v, list)
    }
    for record in records:
        if isinstance(record, dict):
            for name in repeated & record.keys():
                if not isinstance(record[name], list):
                    record[name] = [record[name]]


def _json_lines(text: str, max_chars: int) -> list[Any] | None:
    """The objects of text that holds one JSON object per line (two or more), else ``None``."""
    if not text.startswith("{") or "\n" not in text or len(text) > max_chars:
        return None
    rows = []
    for line in filter(None, (line.strip() for line in text.split("\n"))):
        if not (line.startswith("{") and line.endswith("}")):
            return None
        try:
            rows.append(parse_json(line, as_written=True))
        except (ValueError, RecursionError):
            return None
    return rows


def _joined(before: str, after: str) -> str:
    """The text around the data: an introduction and what follows, ``…`` where the data was."""
    before, after = before.strip(), after.strip()
    return f"{before} … {after}" if before and after else before or after


_KEY_LINE = re.compile(r"^(?:- )*[A-Za-z_][\w .-]{0,40}:(?:\s|$)")
"""The first line of ``key: value`` data: a key (a record's first key after ``- ``), a colon."""


def _key_value_lines(text: str) -> dict[str, Any] | list[Any] | None:
    """Records printed as ``key: value`` lines, read by YAML with every value kept as its text
    (``14:00:00`` is not 50,400 seconds, ``no`` not ``false``, ``0123`` not 83): a mapping of two
    keys or more, or a list of records. One ``Note: ...`` line, or prose, is not data."""
    if not _KEY_LINE.match(text) or _COMMENT.search(text):
        return None
    try:
        node = yaml.compose(text, Loader=_VERBATIM)
        data = _plain(node, set()) if node is not None else None
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    if isinstance(data, dict) and len(data) >= 2:
        return data
    if isinstance(data, list) and data and all(isinstance(item, (dict, list)) for item in data):
        return data
    return None


_VERBATIM = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
"""YAML's loader that resolves no types: scalars stay the text they were written as."""
_COMMENT = re.compile(r"(?:^|\s)#")
"""Where YAML would start a comment: ``order_id: #W2378156`` is an id to a tool, nothing to YAML."""


def _plain(node: yaml.Node, seen: set[int]) -> Any:
    """A YAML node as text, lists and dicts with text keys (YAML's may be lists: ``? [a, b]``).
    What no tool prints as records is refused (``ValueError``): a key said twice (two blocks of
    ``key: value`` lines, which YAML reads as one record whose later values win) and an alias
    (``*a``), whose copies grow exponentially with nesting."""
    if id(node) in seen:
        raise ValueError("a YAML alias")
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, seen) for item in node.value]
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = str(_plain(key_node, seen))
            if key in out:
                raise ValueError(f"the key {key!r} twice")
            out[key] = _plain(value_node, seen)
        return out
    return node.value


_TABLE_RULE = re.compile(r"^\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$", re.MULTILINE)
"""The line under a Markdown table's header: ``|---|:---:|``."""


def _markdown_tables(text: str) -> Document | None:
    """The rows of the Markdown tables in ``text`` as records (one table: its rows; several: each
    under ``table_N``), the lines around them as the note."""
    if not _TABLE_RULE.search(text):
        return None
    lines = text.split("\n")
    tables: list[list[dict[str, str]]] = []
    around: list[str] = []
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and "|" in lines[i] and "|" in lines[i + 1] and _TABLE_RULE.match(lines[i + 1]):
            header = _header(_table_cells(lines[i]))
            i += 2
            rows = []
            while i < len(lines) and "|" in lines[i]:
                cells = _table_cells(lines[i])
                if len(cells) > len(header):  # a row wider than its header
                    header = _header([*header, *[""] * (len(cells) - len(header))])
                cells += [""] * (len(header) - len(cells))
                rows.append(dict(zip(header, cells, strict=True)))
                i += 1
            tables.append(rows)
        else:
            around.append(lines[i])
            i += 1
    if not tables:
        return None
    data: Any = tables[0] if len(tables) == 1 else {f"table_{n}": rows for n, rows in enumerate(tables, 1)}
    return Document(data, "\n".join(line for line in around if line.strip()).strip())


def _table_cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)]


def _header(names: list[str]) -> list[str]:
    """Column names, an empty one numbered and a repeated one suffixed, so no cell is lost."""
    named = [name or f"column_{i}" for i, name in enumerate(names, 1)]
    taken = set(named)
    header: list[str] = []
    for name in named:
        if name in header:  # a suffix no other column has (``a_2`` may be one already)
            number = 2
            while f"{name}_{number}" in taken:
                number += 1
            name = f"{name}_{number}"
            taken.add(name)
        header.append(name)
    return header
