"""Exact-value extraction shared by the encoder, the valuator and the decision focus.

Patterns are deliberately conservative: a value is kept verbatim or not at all, never paraphrased.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

_TOKEN = re.compile(r"#?[A-Za-z0-9][A-Za-z0-9_\-]*")
"""Word-like tokens; identifiers are picked from these so matching stays linear in the text."""
_SCANNED = re.compile(r"#?[A-Za-z0-9][A-Za-z0-9_\-]*(?:(?<=\d)(?:,(?=\d{3}(?!\d))|\.(?=\d))[A-Za-z0-9_\-]*)*")
"""Tokens of free text, a number with thousands separators or a decimal point (``1,000``,
``1,234.50``, ``10.0.0.1``) as one: split, its digit groups read as identifiers (``000``)."""
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")


@functools.lru_cache(maxsize=65536)
def is_identifier(token: str) -> bool:
    """Identifiers and codes: anything with a digit (``HAT136``, ``#W4923227``, ``credit_card_44``,
    ``7447``), an upper-case code of three or more letters (``JFK``) that is no SQL word
    (``CREATE``, ``NOT NULL``, ``NVARCHAR``), or a name in camel case (``CustomerId``,
    ``InvoiceLine``: a column, table or class a later call names).

    Cached: long prose repeats its words, and a 10 MB text has a million tokens to check."""
    core = token.lstrip("#")
    if len(core) < 2:
        return False
    if DIGIT.search(core) is not None or _CAMEL_CASE.fullmatch(core) is not None:
        return True
    return len(core) >= 3 and core.isalpha() and core.isupper() and core not in SQL_WORDS


_CAMEL_CASE = re.compile(r"[A-Z][a-z]+(?:[A-Z][a-z]*)+")
_SQL_WORDS = """
ALL ALTER AND ASC AUTOINCREMENT BETWEEN BIGINT BLOB BOOLEAN BY CASE CAST CHAR CHECK COLLATE
COLUMN CONSTRAINT COUNT CREATE CROSS DATE DATETIME DECIMAL DEFAULT DELETE DESC DISTINCT DOUBLE
DROP ELSE END EXISTS FALSE FLOAT FOREIGN FROM FULL GROUP HAVING INDEX INNER INSERT INT INTEGER
INTO JOIN KEY LEFT LIKE LIMIT NCHAR NOT NULL NUMERIC NVARCHAR OFFSET OUTER ORDER PRIMARY REAL
REFERENCES RIGHT ROWID SELECT SERIAL SET SMALLINT SQL TABLE TEXT THEN TIME TIMESTAMP TINYINT TRUE
UNION UNIQUE UPDATE USING VALUES VARCHAR VIEW WHEN WHERE WITH
"""
SQL_WORDS = frozenset(_SQL_WORDS.split())
"""Upper-case words of SQL (keywords and column types): a schema or a query is full of them, and
they name nothing a later call takes."""


DIGIT = re.compile(r"\d")
"""Any digit: what makes a token an identifier, a sentence worth ranking."""

SENTENCE_BREAK = re.compile(r"(?<=[.!?؟।])\s+|(?<=[。\uff01\uff1f])\s*|\n+")
"""Where a sentence ends: after a full stop and a space, or after a Chinese or Japanese one, which
no space follows (``…发布了新款手机。该机型售价为6999元。``), or at a line break."""

_HANDLE = re.compile(r"(?=[^A-Za-z]*[A-Za-z])(?=\D*\d)[\w#.\-]{5,}|\d{4}-\d{2}-\d{2}(?:[T ][\d:.+\-Z]*)?")


def is_handle(value: str) -> bool:
    """A value a call takes as it is: an identifier mixing letters and digits (``mia_li_3668``,
    ``HAT082``, ``#W4923227``) or an ISO date. Bare numbers (``24``, ``3422``, ``$1,000``) are
    not: people say them in passing."""
    return _HANDLE.fullmatch(value) is not None


IDENTIFIER_TERM = re.compile(r"(?=[a-z0-9_#.\-]*\d)[a-z0-9_#.\-]{3,}|[a-z]{3}")
"""A lower-cased term that identifies something: anything with a digit (ids, dates) or a 3-letter
code; the indexed-term counterpart of :func:`is_identifier`."""


def identifiers(text: str) -> Iterator[str]:
    """Identifiers in ``text`` in order (see :func:`is_identifier`), trailing ``-``/``_`` stripped.

    Built from C-level iterators only: megabytes of prose are scanned in about a second."""
    tokens = map(_matched, _SCANNED.finditer(text))
    return filter(is_identifier, map(_strip_trailing_dashes, tokens))


_matched = operator.methodcaller("group", 0)
_strip_trailing_dashes = operator.methodcaller("rstrip", "-_")


def names_in_text(text: str) -> list[str]:
    """The names inside an argument written as an SQL statement, which a call took from earlier
    cards: its table and column names and its quoted values (``Invoice``, ``CustomerId``,
    ``Brazil``), not its keywords, functions or one-letter aliases. None of other text: the
    identifiers of a note the model writes itself (``think``) are what it read, not what it used."""
    if not is_sql_statement(text):
        return []
    code = _SQL_LIMIT.sub(" ", _SQL_STRING.sub(" ", text))
    quoted = [value for value in _SQL_STRING.findall(text) if value.strip()]
    words = (word for word in _SQL_NAME.findall(code) if len(word) >= 3 or is_identifier(word))
    return [*quoted, *(word for word in words if word.upper() not in _SQL_QUERY_WORDS)]


def is_sql_statement(text: str) -> bool:
    """Whether ``text`` is an SQL statement (``SELECT ...``), not a sentence that starts like one
    ("Select the cheapest flight for me")."""
    return _SQL_STATEMENT.match(text) is not None and _PROSE_WORD.search(_SQL_STRING.sub(" ", text)) is None


_SQL_STATEMENT = re.compile(r"\s*\(?\s*(?:SELECT|WITH|INSERT|UPDATE|DELETE|REPLACE|EXPLAIN|PRAGMA)\b", re.I)
_PROSE_WORD = re.compile(r"\b(?:the|please|you|your|me|my|we|our|should|would|could)\b", re.I)
"""Words of a sentence that no query holds outside its quoted values."""
_SQL_STRING = re.compile(r"'((?:[^']|'')*)'")
_SQL_LIMIT = re.compile(r"\b(?:LIMIT|OFFSET|TOP)\s+\d+(?:\s*,\s*\d+)?", re.I)
"""A row count, which no earlier card gave: ``LIMIT 5`` is not the 5 of a result."""
_SQL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*|\b\d{2,}\b")
_SQL_FUNCTIONS = """
ABS AVG COALESCE CONCAT CURRENT_DATE CURRENT_TIMESTAMP DATE_TRUNC EXCEPT EXTRACT FILTER GLOB
GROUP_CONCAT IFNULL IIF ILIKE INSTR INTERSECT INTERVAL JULIANDAY LENGTH LOWER MAX MIN NATURAL NOW
NULLIF NULLS OVER PARTITION RANK RECURSIVE REPLACE RETURNING ROUND ROW_NUMBER STRFTIME SUBSTR
SUBSTRING SUM TRIM UPPER
"""
_SQL_QUERY_WORDS = (SQL_WORDS | frozenset(_SQL_FUNCTIONS.split())) - {"DATE", "TEXT", "TIME", "TIMESTAMP"}
"""Words of a query that name no table or column: :data:`SQL_WORDS` and functions, but the
types that are often a column's name (``date``). Only for reading queries: some (``MAX``) are
codes in other text."""


DATE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
    r"|\b\d{1,2}:\d{2}(?::\d{2})?\b"
)
"""A date, an ISO timestamp with its fraction of a second and zone (``2024-05-01T10:00:00.123Z``,
``2024-05-01T09:58:12+02:00``: one value a later call takes whole), or a time of day."""
_NUMBER = r"\d+(?:,\d{3})*(?:\.\d+)?"  # 1000, 1,000, 1,234.50 (not the comma after "$1,000,")
AMOUNT = re.compile(rf"[$€£]\s?{_NUMBER}|\b{_NUMBER}\s?(?:USD|EUR|GBP|dollars?)\b", re.I)
AMOUNT_NUMBER = re.compile(_NUMBER)
"""The number of an amount (``1,000`` of ``$1,000``)."""
_LINK = re.compile(
    r"\b[A-Za-z][A-Za-z0-9+.-]{1,15}://[^\s<>\"'`|\\^{}\[\]]+"  # https://..., s3://bucket/key
    r"|(?<![\w/.~:\\-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]*\w\.[A-Za-z]\w{0,7}\b"  # src/app/main.py
    r"(?:::[\w.\[\]-]+)*"  # a test in it: tests/test_app.py::TestLogin::test_expired[utc]
    r"|\b[A-Za-z]:\\(?:[\w.-]+\\)*[\w.-]*\w\.[A-Za-z]\w{0,7}\b"  # C:\\data\\report.csv
)
"""A URL of any scheme, or a file path with a folder and an extension (and a pytest node id in it,
``tests/test_app.py::test_login``, is one value: a later run takes it whole). A path starts only after a
character no path holds, so a long run of path characters is tried once, not from each position."""
_FILE_LINE = re.compile(r"^[ \t│├└─*+•-]*(?:\[\w+\][ \t]+)?([\w.-]*\w\.[A-Za-z]\w{0,7})[ \t]*$", re.MULTILINE)
"""A file name with an extension alone on its line, as a directory listing prints it (``README.md``,
``├── main.py``, ``[FILE] app.py``)."""
_LINK_TAIL = ".,;:!?'\""
"""Punctuation that ends the sentence around a link rather than the link."""


def links(text: str) -> Iterator[str]:
    """URLs and file paths in ``text``, in order: values a later call takes whole (``fetch(url)``,
    ``read_file(path)``), which identifiers would split into meaningless pieces. A path needs a
    folder and an extension (``src/app/main.py``), so ``and/or`` and ``2026/03/14`` are none; a
    file name needs a line of its own (a listing's ``setup.cfg``), so ``Node.js`` in a sentence is
    none."""
    found: list[Iterator[re.Match[str]]] = []
    if "/" in text or "\\" in text:  # every URL and path has one: a text without is not scanned
        found.append(_LINK.finditer(text))
    if "." in text:
        found.append(_FILE_LINE.finditer(text))  # (no line is both: a file name holds no slash)
    for match in heapq.merge(*found, key=operator.methodcaller("start")):
        link = match.group(match.lastindex or 0).rstrip(_LINK_TAIL)
        while link.endswith(")") and link.count(")") > link.count("("):  # [title](https://...)
            link = link[:-1].rstrip(_LINK_TAIL)
        if link:
            yield link


def is_link(value: str) -> bool:
    """Whether ``value`` is one URL (its query's brackets too: :data:`_BRACKETED_URL`), file path
    or file name (see :func:`links`); asked of every value of a record, so a long text or one
    without a slash or a dot is no link without a scan."""
    if len(value) > _LONGEST_LINK or ("/" not in value and "\\" not in value and "." not in value):
        return False
    return next(links(value), None) == value or _BRACKETED_URL.fullmatch(value) is not None


_LONGEST_LINK = 4096
_BRACKETED_URL = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]{1,15}://[^\s<>\"'`|\\^{}]+\?[^\s<>\"'`|\\^{}]*\[[^\s<>\"'`|\\^{}]*"
)
"""A URL whose query names its parameters with brackets (``?page[number]=2``, as JSON:API and
Rails write them): a value that is all of it is one link, though in free text a bracket ends one
(``[docs](https://...)``)."""


EMAIL = re.compile(r"(?<![\w.+-])\w[\w.+-]{0,63}@[\w-]+\.[\w.]+\b")
"""Tried only where a run of address characters starts, so a long run without ``@`` (a hash, a
dump of ids) is scanned once, not once from every position in it."""
CAPITALIZED = re.compile(r"\b[A-Z][a-z]{2,}\b")
_FUNCTION_WORDS = """
about after again all also and any are because been before but can could did does done each for
from great had has have hello here hey how however into its just let may might more most must
now once only other our please should since some sorry still sure thank thanks that the their
then there these they this those too unfortunately very was well were what when where which
while who why will with would yes yeah you your
"""
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS.split())
"""Words capitalized only because they start a sentence: not names, so never exact terms."""
NEGATIVE_STATUS = re.compile(
    r"\b(sold[ _-]?out|unavailable|not available|no (?:seats|availability|rooms?)|fully booked|"
    r"cancell?ed|insufficient|not enough|exceeds?|denied|declined|rejected|failed|failure|invalid|"
    r"not found|does not exist|expired|full|forbidden|unauthori[sz]ed|error|blocked|closed|"
    r"out of stock|conflict|overbooked)\b",
    re.I,
)
"""Words that rule an option out; a card carrying one constrains the next decision."""

STATE_CHANGE_VERB = re.compile(
    r"(^|_)(book|update|cancel|create|modify|send|transfer|delete|remove|confirm|pay|refund|exchange|"
    r"return|add|set|change|submit|place|reserve|purchase|buy|upgrade|apply|approve|assign|write|insert)",
    re.I,
)
"""Tool names that change the world's state (their successful results are state changes)."""


@functools.lru_cache(maxsize=4096)
def changes_state(tool_name: str | None) -> bool:
    """Whether a tool's name says it changes the world's state (``update_reservation_flights``):
    asked of every candidate at every decision, of a few tool names."""
    return tool_name is not None and STATE_CHANGE_VERB.search(tool_name) is not None


CONFIRMED = re.compile(
    r"\b(confirmed|booked|completed|success(?:ful(?:ly)?)?|done|approved|paid|placed)\b", re.I
)

CONSENT = re.compile(
    r"\b(yes|yeah|yep|sure|go ahead|proceed|confirm(?:ed)?|correct|please do|ok(?:ay)?|sounds good)\b", re.I
)
"""A user turn that agrees to what the assistant proposed ("Yes, please go ahead")."""

_ENTITY_WORDS = "id|ids|number|code|no|num|key|ref|reference|sku|uuid"
ENTITY_KEY = re.compile(rf"(^|_|\.)({_ENTITY_WORDS})$", re.I)
"""Keys of arguments that name the entity a lookup is about (``reservation_id``): results about
different entities are different records. Not a page's URL: of the pages an agent reads one after
another, the newest is what it works from, and older pages fading leaves room for what it found
them by (measured on research traces, see docs/measurements.md)."""
ID_KEY = re.compile(
    rf"(^|_|\.)({_ENTITY_WORDS}|url|uri|link|href|cursor)$|(page|next|continuation)_?token$", re.I
)
"""Keys of values that name something a later call takes: an id, a code, a URL (a search result's
``url`` or ``link`` column names its row, as a ``flight_number`` does), a page's cursor or token
(``next_cursor``, ``nextPageToken``: the next page's call takes it whatever it looks like; not an
``access_token``, which no skeleton should spread)."""
DATE_KEY = re.compile(r"(date|time|_at$|^at$|dob|day|deadline|until|since|expir)", re.I)
AMOUNT_KEY = re.compile(r"(price|amount|cost|balance|total|fee|fare|paid|refund|budget|charge|rate)", re.I)
STATUS_KEY = re.compile(r"(status|state|availability|available|result|outcome)", re.I)
ERROR_KEY = re.compile(r"^(error|errors|err|exception|fault|failure|message_error)$", re.I)
NAME_KEY = re.compile(r"name", re.I)
ADDRESS_KEY = re.compile(r"address", re.I)


_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_BREAK = re.compile(r"[ \t-]+")
_QUOTED_NAME = re.compile(r"(?<![^.])'((?:[^'\\]|\\.)*)'(?![^.\[])")
"""A name of a path in single quotes: it starts the path or follows a dot, and ends it or comes
before a dot or an index."""
_LAST_QUOTED_NAME = re.compile(r"(?<![^.])'(?:[^'\\]|\\.)*'(?:\[\d+\])*$")
"""A quoted name that ends a path, with the indexes after it (``x.'a.b'[0]``)."""


def quoted_name(key: str) -> str:
    """``key`` as one name of a path: in single quotes, its quotes and backslashes escaped
    (``'a.b'``), for a key whose dot would read as a step into another key."""
    return "'" + key.replace("\\", "\\\\").replace("'", "\\'") + "'"


def split_path(path: str) -> tuple[str, str]:
    """``(parent, last name)`` of a fact path: ``a.b`` -> ``("a", "b")``, ``x.'a.b'`` ->
    ``("x", "'a.b'")``; a quoted name is one name."""
    if "'" in path and (quoted := _LAST_QUOTED_NAME.search(path)) is not None:
        return path[: max(quoted.start() - 1, 0)], path[quoted.start() :]
    parent, _, leaf = path.rpartition(".")
    return parent, leaf


def unquoted(path: str) -> str:
    """The path with its quoted names as written (``x.'order.id'`` -> ``x.order.id``): what a key
    is taken for (an id, a date) reads its words, not its quotes."""
    if "'" not in path:
        return path
    return _QUOTED_NAME.sub(lambda m: re.sub(r"\\(.)", r"\1", m.group(1)), path)


def snake_case(name: str) -> str:
    """``flightNumber``, ``Reservation ID`` and ``seat-class`` as ``flight_number``,
    ``reservation_id`` and ``seat_class``: a key means the same in a JavaScript API, a table
    header or a Python dict."""
    return _WORD_BREAK.sub("_", _CAMEL_HUMP.sub("_", name)).lower()


@functools.lru_cache(maxsize=65536)
def fact_kind(key: str, value: str) -> str:
    """Classify a keyed value: ``id``, ``date``, ``amount``, ``status``, ``error``, ``name`` or
    ``value``. Keys are read in snake case (``flightNumber`` as ``flight_number``)."""
    parent, _, leaf = snake_case(unquoted(key)).rpartition(".")
    if ERROR_KEY.search(leaf):
        return "error"
    if ID_KEY.search(leaf):
        return "id"
    if ADDRESS_KEY.search(parent.rsplit(".", 1)[-1]):
        return "value"  # a postal ``state`` is no status, nor a ``country`` code an identifier
    if DATE_KEY.search(leaf) or DATE.fullmatch(value):
        return "date"
    if AMOUNT_KEY.search(leaf):
        return "amount"
    if STATUS_KEY.search(leaf):
        return "status"
    if NAME_KEY.search(leaf):
        return "name"
    if (_TOKEN.fullmatch(value) and is_identifier(value) and not value.isdigit()) or is_link(value):
        return "id"
    return "value"


_PART_SPLIT = re.compile(r"[_\-./:]")
_ISO_DATE = re.compile(r"^\d{4}-(\d{2}-\d{2})")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
SPOKEN_DATE = re.compile(
    rf"\b(?:{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?|(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH})\b",
    re.IGNORECASE,
)
"""Dates as people write them (``May 27``, ``27th of May``); matched to ISO dates by month and day."""


def spoken_dates(text: str) -> Iterator[str]:
    """``MM-DD`` for every spoken date in ``text``: the variant ISO dates in cards also carry."""
    for match in SPOKEN_DATE.finditer(text):
        month, day = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(3))
        if 1 <= int(day) <= 31:
            yield f"{_MONTHS.index(month[:3].lower()) + 1:02d}-{int(day):02d}"


_WRITTEN_NUMBER = re.compile(r"-?\d+(?:\.\d*0|(?:\.\d+)?e[-+]?\d+)")
"""A number a float prints otherwise: a trailing zero of its fraction, or an exponent."""


def _float_text(number: str) -> str:
    """``number`` as a float prints it, without a ``.0`` (``121.0`` as ``121``); itself when no
    float holds it (``1e400``)."""
    value = float(number)
    if not math.isfinite(value):
        return number
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


@functools.lru_cache(maxsize=65536)
def term_variants(term: str) -> tuple[str, ...]:
    """A lower-cased term plus its digit-bearing parts, so ``certificate_7504069`` also matches a
    text that says ``certificate 7504069``; an ISO date also gives its ``MM-DD``, which a spoken
    ``May 27`` matches; a number written with a trailing zero or an exponent (``100.10``, ``1e-3``)
    also gives the float it is (``100.1``), as a call's parsed arguments print it."""
    term = term.lower().lstrip("#")
    if _THOUSANDS.fullmatch(term):  # "$1,000" in a text is the 1000 of a record
        return (term, *term_variants(term.replace(",", "")))
    if _WRITTEN_NUMBER.fullmatch(term) and (number := _float_text(term)) != term:
        return (term, *term_variants(number))
    if not _PART_SPLIT.search(term):
        return (term,)
    month_day = _ISO_DATE.match(term)
    if month_day:  # its parts are a year and a time, which match any other date
        return (term, month_day.group(1))
    return (term, *(p for p in _PART_SPLIT.split(term) if len(p) >= 3 and any(c.isdigit() for c in p)))


def exact_terms(text: str, *, limit: int = 4096) -> set[str]:
    """Lower-cased links, identifiers, codes, dates, e-mails and capitalized names found in free
    text."""
    dates, emails = map(_matched, DATE.finditer(text)), map(_matched, EMAIL.finditer(text))
    values = itertools.chain(links(text), identifiers(text), dates, emails)
    return _terms(text, limit, values, map(_matched, CAPITALIZED.finditer(text)))


def _terms(text: str, limit: int, values: Iterable[str], names: Iterable[str]) -> set[str]:
    """Terms from a text's links, identifiers, dates and e-mails (``values``), then its capitalized words,
    in text order; a repeat adds nothing, so they may come with or without repeats."""
    found: set[str] = set()
    for value in itertools.chain(values, (n for n in names if n.lower() not in FUNCTION_WORDS)):
        found.update(term_variants(value))
        if len(found) >= limit:
            return found
    found.update(spoken_dates(text))
    return found


ValueKind = Literal["date", "amount", "email", "link", "identifier", "name"]
_FINDERS: dict[ValueKind, Callable[[str], Iterable[str]]] = {
    "date": DATE.findall,
    "amount": AMOUNT.findall,
    "email": EMAIL.findall,
    "link": links,
    "identifier": identifiers,
    "name": CAPITALIZED.findall,
}


class TextScan:
    """The exact values of one free text, each kind found by one scan, made when first asked for.

    A card's summary, facts and terms all read the same text; sharing one scan keeps each pattern
    from running over it two or three times. Lives as long as the encoding of that text."""

    __slots__ = ("_distinct", "_supplied", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._distinct: dict[ValueKind, tuple[str, ...]] = {}
        self._supplied: dict[ValueKind, Iterable[str]] = {}

    def supply(self, kind: ValueKind, found: Iterable[str]) -> None:
        """Every ``kind`` value of the text in order, repeats allowed, from a caller that matched
        it piece by piece anyway (the summary ranks sentences) and whose pieces split no value;
        read instead of scanning the text, and only if asked for."""
        self._supplied[kind] = found

    def distinct(self, kind: ValueKind) -> tuple[str, ...]:
        """The ``kind`` values of the text, each once, in order of first occurrence. Repeats are
        dropped by C-level dict building: a repetitive log costs a scan, not a step per repeat."""
        values = self._distinct.get(kind)
        if values is None:
            found = self._supplied.pop(kind, None)
            if found is None:
                found = _FINDERS[kind](self.text)
            values = self._distinct[kind] = tuple(dict.fromkeys(found))
        return values

    def _each(self, *kinds: ValueKind) -> Iterator[str]:
        """The distinct values of ``kinds`` in turn; a kind is scanned only once it is reached."""
        for kind in kinds:
            yield from self.distinct(kind)

    def terms(self, limit: int) -> set[str]:
        """:func:`exact_terms` of the text, from the shared scan."""
        return _terms(self.text, limit, self._each("link", "identifier", "date", "email"), self._each("name"))
