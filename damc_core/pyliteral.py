"""Python reprs of tool outputs, read as the data they print.

A tool that returns a dict reaches many agents as its ``str()``: LlamaIndex's ``FunctionTool``
puts ``str(raw_output)`` in the tool message, LangChain does so for output JSON cannot encode
(a ``datetime``, a ``Decimal``), SQL tools print rows as tuples. Such text is not JSON
(``{'status': 'sold out', 'seats': None}``), but it is data: read as text it would lose the
structure that keeps a record's identifiers, dates and statuses together.

The text is parsed by :mod:`ast`, never evaluated. Literals become JSON values (tuples and sets
lists, keys strings); the calls a repr prints for common values become their text
(``Decimal('12.50')`` -> ``12.50``, ``datetime.date(2024, 5, 1)`` -> ``2024-05-01``,
``UUID('…')`` -> the uuid), NumPy's their value (``np.int64(5)`` -> ``5``, ``array([1, 2])`` ->
``[1, 2]``); a dataclass or pydantic repr (``Flight(number='HAT001', seats=0)``)
becomes a record of its fields. The marks ``repr`` prints for a container inside itself
(``[1, [...]]``, ``{'self': {...}}``) stay those marks, as text. Anything else makes the text not a
literal.
"""

from __future__ import annotations

import ast
import datetime
import re
from collections.abc import Callable
from typing import Any

LOOKS_LIKE_A_LITERAL = re.compile(r"^(?:[\[{(]|[A-Za-z_][\w.]*\()")
"""How a printed container or record starts: a bracket, or a type name and its parenthesis."""

_AS_TEXT = frozenset({"Decimal", "UUID", "PosixPath", "WindowsPath", "Path", "ObjectId", "HttpUrl", "AnyUrl"})
"""Types whose repr wraps one string argument, the value itself (``Decimal('12.50')``)."""
_NUMPY = frozenset({"np", "numpy"})
_NUMPY_SCALARS = frozenset(
    {
        *(f"{kind}{bits}" for kind in ("int", "uint") for bits in (8, 16, 32, 64)),
        *("intc", "uintc", "intp", "uintp", "longlong", "ulonglong", "float16", "float32", "float64"),
        *("longdouble", "complex64", "complex128", "clongdouble", "str_", "bytes_", "datetime64"),
    }
)
"""NumPy's scalar types, whose repr wraps the value (``np.int64(5)``, ``np.str_('HAT136')``): what
a tool returning values read from an array or a DataFrame prints."""
_NUMPY_BOOLS = {"True_": True, "False_": False}
_ARRAY_KEYWORDS = frozenset({"dtype", "shape"})
"""What an array's repr prints beside its items (``array([1, 2], dtype=int8)``)."""
_TIMES: dict[str, Callable[..., datetime.date | datetime.time]] = {
    "date": datetime.date,
    "datetime": datetime.datetime,
    "time": datetime.time,
}


def parse_python_literal(text: str) -> Any:
    """The JSON-like value ``text`` prints (see the module docstring). Raises ``ValueError`` when
    the text is not such a literal, ``SyntaxError`` (a ``ValueError`` too) when it does not parse;
    nesting deeper than Python's parser takes (about 200 brackets) is a ``ValueError`` as well."""
    if not LOOKS_LIKE_A_LITERAL.match(text):
        raise ValueError("not a Python literal: it does not start with a bracket or a type name")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not a Python literal: {exc}") from exc
    try:
        return _value(tree.body)
    except RecursionError as exc:
        raise ValueError("not a Python literal: nested too deep") from exc


def _value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return _constant(node.value)
    if isinstance(node, ast.Dict):
        record = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:  # ``{**other}``
                raise ValueError("not a Python literal: a dict unpacks another")
            record[_key(_value(key))] = _value(value)
        return record
    if isinstance(node, (ast.List, ast.Set)) and len(node.elts) == 1 and _is_recursion(node.elts[0]):
        return "[...]" if isinstance(node, ast.List) else "{...}"  # (a dict's mark parses as a set)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_value(item) for item in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _value(node.operand)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name) and node.id in ("nan", "inf"):
        return node.id
    if isinstance(node, ast.Attribute) and node.attr in _NUMPY_BOOLS and _dotted(node.value) in _NUMPY:
        return _NUMPY_BOOLS[node.attr]  # np.True_
    if isinstance(node, ast.Call):
        return _call(node)
    raise ValueError(f"not a Python literal: {type(node).__name__} in it")


def _is_recursion(node: ast.expr) -> bool:
    """Whether ``node`` is the ``...`` that ``repr`` prints for a container already being printed:
    it never means Ellipsis, which ``repr`` writes ``Ellipsis``."""
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _constant(value: object) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if value is Ellipsis:  # a recursion mark without brackets (a tuple's, in parentheses)
        return "..."
    return str(value)  # complex


def _key(key: Any) -> str:
    """A JSON key: ``1`` and ``True`` as ``"1"`` and ``"true"``, as ``json.dumps`` writes them."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)


def _call(node: ast.Call) -> Any:
    name = _dotted(node.func)
    if name is None or any(isinstance(arg, ast.Starred) for arg in node.args):
        raise ValueError("not a Python literal: a call it cannot read")
    short = name.rpartition(".")[2]
    arguments = [_value(arg) for arg in node.args]
    keywords = {k.arg: k.value for k in node.keywords}
    if None in keywords:  # ``f(**other)``
        raise ValueError("not a Python literal: a call unpacks a mapping")
    if short in _AS_TEXT and len(arguments) == 1 and not keywords:
        return str(arguments[0])
    owner = name.rpartition(".")[0]
    if short in _NUMPY_SCALARS and owner in _NUMPY and len(arguments) == 1 and not keywords:
        return arguments[0]
    array = short == "array" and owner in ("", *_NUMPY)
    if array and len(arguments) == 1 and keywords.keys() <= _ARRAY_KEYWORDS:
        return arguments[0]
    if short in _TIMES and arguments and all(type(a) is int for a in arguments):
        return _time(short, arguments, keywords)
    if not arguments:  # ``Flight(number='HAT001', seats=0)``: a record of its fields
        return {str(key): _value(value) for key, value in keywords.items()}
    raise ValueError(f"not a Python literal: a call of {name}")


def _time(kind: str, arguments: list[int], keywords: dict[str | None, ast.expr]) -> str:
    zone = keywords.pop("tzinfo", None)
    if keywords:
        raise ValueError(f"not a Python literal: {kind}() with {', '.join(map(str, keywords))}")
    try:
        value = _TIMES[kind](*arguments)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"not a Python literal: {exc}") from exc
    if zone is None:
        return value.isoformat()
    if _dotted(zone) in ("datetime.timezone.utc", "timezone.utc", "datetime.UTC", "UTC"):
        return value.isoformat() + "+00:00"
    return f"{value.isoformat()} {ast.unparse(zone)}"  # the zone as printed: ZoneInfo(key='Europe/Paris')


def _dotted(node: ast.expr) -> str | None:
    """``datetime.date`` for the expression naming it; ``None`` for anything but names and dots."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return f"{owner}.{node.attr}" if owner is not None else None
    return None
