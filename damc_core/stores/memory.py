from __future__ import annotations

import threading
from collections.abc import Sequence

from ..errors import RecordExistsError, StoreClosedError
from ..types import Card, Namespace, RawRecord
from .base import require_storable


class InMemoryStore:
    """Dicts in this process; for tests and short-lived agents. Nothing survives the process.

    Shared safely by threads, one call at a time: a read while another thread writes the
    namespace would fail (a dict changed while it is read), and two writers of one record id
    could both store it, the second losing the first's."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, RawRecord]] = {}
        self._cards: dict[str, dict[str, Card]] = {}
        self._closed = False
        self._lock = threading.Lock()

    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError("InMemoryStore is closed; create a new store")

    def append(self, record: RawRecord) -> None:
        require_storable(record)
        with self._lock:
            self._check()
            bucket = self._records.setdefault(record.namespace.key, {})
            if record.id in bucket:
                raise RecordExistsError(record.id, record.namespace.key)
            bucket[record.id] = record

    def record(self, namespace: Namespace, record_id: str) -> RawRecord | None:
        with self._lock:
            self._check()
            return self._records.get(namespace.key, {}).get(record_id)

    def records(self, namespace: Namespace, *, since: int = 0) -> list[RawRecord]:
        with self._lock:
            self._check()
            held = self._records.get(namespace.key, {}).values()
            return sorted((r for r in held if r.seq >= since), key=lambda r: r.seq)

    def put_cards(self, namespace: Namespace, cards: Sequence[Card]) -> None:
        with self._lock:
            self._check()
            bucket = self._cards.setdefault(namespace.key, {})
            for card in cards:
                bucket[card.id] = card

    def cards(self, namespace: Namespace, *, since: int = 0) -> list[Card]:
        with self._lock:
            self._check()
            held = self._cards.get(namespace.key, {}).values()
            return sorted((c for c in held if c.seq >= since), key=lambda c: c.seq)

    def close(self) -> None:
        with self._lock:
            self._closed = True
