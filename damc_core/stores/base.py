from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Sequence
from typing import Protocol

from ..errors import StoreError
from ..types import Card, Namespace, RawRecord


class MemoryStore(Protocol):
    """Durable home of raw records (append-only) and cards (upserted as they gain links and scores)."""

    def append(self, record: RawRecord) -> None:
        """Persist a raw record; called before the event is processed in any way. Records are
        never replaced: raise ``RecordExistsError`` when the namespace already holds the id
        (another memory on the same session wrote it first). A record whose body is not text, or
        whose time is not a finite number, is refused with :func:`require_storable`'s
        ``StoreError``."""

    def record(self, namespace: Namespace, record_id: str) -> RawRecord | None: ...

    def records(self, namespace: Namespace, *, since: int = 0) -> list[RawRecord]:
        """The namespace's records with ``seq >= since``, in sequence order: a memory catching up
        with another writer reads only what is new."""

    def put_cards(self, namespace: Namespace, cards: Sequence[Card]) -> None:
        """Insert or replace cards by id."""

    def cards(self, namespace: Namespace, *, since: int = 0) -> list[Card]:
        """The namespace's cards with ``seq >= since``, in sequence order."""

    def close(self) -> None: ...


def require_storable(record: RawRecord) -> None:
    """Refuse, with a ``StoreError`` naming what is wrong, a record every backend refuses before
    writing: a body that is not text (``None``, bytes, a number: read back, it is not the event
    that was stored and cannot be replayed), or a ``created_at`` that is not a finite number (NaN,
    an infinity, ``None``, a string: SQLite cannot hold NaN, Chroma drops such a field and the
    session's records read no more, and a time that is no time cannot be ordered or aged)."""
    if not isinstance(record.body, str):
        raise StoreError(f"record {record.id!r} has no text body (body={reprlib.repr(record.body)})")
    at = record.created_at
    try:
        finite = not isinstance(at, bool) and isinstance(at, (int, float)) and math.isfinite(at)
    except OverflowError:  # an int past a float's range
        finite = False
    if not finite:
        raise StoreError(f"record {record.id!r} has no time (created_at={reprlib.repr(at)})")


def read_keys(namespace: Namespace) -> tuple[str, ...]:
    """The keys a read of the namespace's records and cards looks under: its own, then the one a
    release before ``%`` was escaped in keys stored them under (``acme%40corp``'s under
    ``acme%40corp/...``), so that a store written before an upgrade opens with its memory. No old
    key when the key never changed (no ``%``), nor when the old key was, or now is, another
    namespace's too, so a read never reaches another tenant: ``acme%2Falice`` and ``acme/alice``
    shared one (``/`` was escaped as ``%2F``), and ``a%25``'s old key is ``a%``'s key now."""
    parts = (namespace.user, namespace.session)
    if not any("%" in part for part in parts) or any("/" in part or "%2F" in part for part in parts):
        return (namespace.key,)
    if all(_ESCAPED_PERCENT_ONLY.fullmatch(part) for part in parts):
        return (namespace.key,)
    # no "/" in a part: the old escaping left it as it is
    return (namespace.key, f"{namespace.user}/{namespace.session}")


_ESCAPED_PERCENT_ONLY = re.compile(r"(?:[^%]|%25)*")
"""A part whose every ``%`` starts ``%25``: what escaping ``%`` makes of some other part."""
