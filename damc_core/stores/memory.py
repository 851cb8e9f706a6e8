from __future__ import annotations

from collections.abc import Sequence

from ..errors import RecordExistsError, StoreClosedError
from ..types import Card, Namespace, RawRecord
from .base import require_storable


class InMemoryStore:
    """Dicts in this process; for tests and short-lived agents. Nothing survives the process."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, RawRecord]] = {}
        self._cards: dict[str, dict[str, Card]] = {}
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError("InMemoryStore is closed; create a new store")

    def append(self, record: RawRecord) -> None:
        require_storable(record)
        self._check()
        bucket = self._records.setdefault(record.namespace.key, {})
        if record.id in bucket:
            raise RecordExistsError(record.id, record.namespace.key)
        bucket[record.id] = record

    def record(self, namespace: Namespace, record_id: str) -> RawRecord | None:
        self._check()
        return self._records.get(namespace.key, {}).get(record_id)

    def records(self, namespace: Namespace, *, since: int = 0) -> list[RawRecord]:
        self._check()
        held = self._records.get(namespace.key, {}).values()
        return sorted((r for r in held if r.seq >= since), key=lambda r: r.seq)

    def put_cards(self, namespace: Namespace, cards: Sequence[Card]) -> None:
        self._check()
        bucket = self._cards.setdefault(namespace.key, {})
        for card in cards:
            bucket[card.id] = card

    def cards(self, namespace: Namespace, *, since: int = 0) -> list[Card]:
        self._check()
        held = self._cards.get(namespace.key, {}).values()
        return sorted((c for c in held if c.seq >= since), key=lambda c: c.seq)

    def close(self) -> None:
        self._closed = True
