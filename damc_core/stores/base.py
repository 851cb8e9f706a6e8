from __future__ import annotations

import math
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
        whose time is not a finite number, is refused with the ``StoreError`` of
        :func:`require_text_body` or :func:`require_time`."""

    def record(self, namespace: Namespace, record_id: str) -> RawRecord | None: ...

    def records(self, namespace: Namespace, *, since: int = 0) -> list[RawRecord]:
        """The namespace's records with ``seq >= since``, in sequence order: a memory catching up
        with another writer reads only what is new."""

    def put_cards(self, namespace: Namespace, cards: Sequence[Card]) -> None:
        """Insert or replace cards by id."""

    def cards(self, namespace: Namespace, *, since: int = 0) -> list[Card]:
        """The namespace's cards with ``seq >= since``, in sequence order."""

    def close(self) -> None: ...


def require_text_body(record: RawRecord) -> None:
    """Refuse a record whose body is not text (``None``, bytes, a number) with a ``StoreError``
    naming it, as every backend does before writing: read back, such a body is not the event that
    was stored (``None``, bytes or ``"5"``) and cannot be replayed."""
    if not isinstance(record.body, str):
        raise StoreError(f"record {record.id!r} has no text body (body={reprlib.repr(record.body)})")


def require_time(record: RawRecord) -> None:
    """Refuse a record whose ``created_at`` is not a finite number (NaN, an infinity, ``None``, a
    string) with a ``StoreError`` naming it, as every backend does before writing: SQLite cannot
    hold NaN, Chroma drops such a field (and the session's records read no more), and a time that
    is no time cannot be ordered or aged."""
    at = record.created_at
    try:
        finite = not isinstance(at, bool) and isinstance(at, (int, float)) and math.isfinite(at)
    except OverflowError:  # an int past a float's range
        finite = False
    if not finite:
        raise StoreError(f"record {record.id!r} has no time (created_at={reprlib.repr(at)})")
