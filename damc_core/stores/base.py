from __future__ import annotations

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
        (another memory on the same session wrote it first). A record whose body is not text is
        refused with :func:`require_text_body`'s ``StoreError``."""

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
