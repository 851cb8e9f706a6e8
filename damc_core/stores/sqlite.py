from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from ..checks import finite_number, whole_number
from ..errors import ConfigError, RecordExistsError, SchemaVersionError, StoreClosedError, StoreError
from ..serde import CardSerializer, JsonCardSerializer, readable_cards
from ..types import CARD_FORMAT_VERSION, Card, Namespace, RawRecord
from .base import read_keys, require_storable

T = TypeVar("T")

logger = logging.getLogger("damc")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    ns TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, created_at REAL NOT NULL,
    body TEXT NOT NULL, v INTEGER NOT NULL, PRIMARY KEY (ns, id));
CREATE TABLE IF NOT EXISTS cards (
    ns TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (ns, id));
CREATE INDEX IF NOT EXISTS cards_by_seq ON cards (ns, seq);
CREATE INDEX IF NOT EXISTS records_by_seq ON records (ns, seq);
"""


_UNWRITABLE = (sqlite3.Error, UnicodeError, OverflowError)
"""What a write fails with: SQLite's errors, text it cannot encode (half an emoji), a number past
64 bits."""


class SQLiteStore:
    """An embedded SQLite file (WAL journal) shared safely by threads of one process.

    ``path=":memory:"`` keeps everything in memory with the same code path.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        serde: CardSerializer | None = None,
        timeout: float = 5.0,
    ) -> None:
        """``timeout``: seconds a read or write waits for another process's lock on the file
        before it fails with a ``StoreError``.

        A ``path`` that is no path (``None`` from an unset setting, a number) or a ``timeout``
        that is no number of seconds is a ``ConfigError``: as text, it would name a file such as
        ``None`` in the working directory, and a conversation written there is found by no one."""
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise ConfigError(f"SQLiteStore takes a file path or ':memory:', got {path!r}")
        if not finite_number(timeout) or timeout < 0:
            raise ConfigError(f"SQLiteStore(timeout=...) must be seconds >= 0, got {timeout!r}")
        self.path = os.fsdecode(path)
        self._serde = serde or JsonCardSerializer()
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=timeout
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
        except (sqlite3.Error, OSError, UnicodeError) as exc:  # OSError: a file where its folder should
            # be; UnicodeError: a damaged schema, whose text SQLite's error message quotes
            opened = getattr(self, "_conn", None)
            if opened is not None:
                opened.close()
            raise StoreError(f"cannot open SQLite store at {self.path!r}: {exc}") from exc

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosedError(f"SQLiteStore at {self.path!r} is closed; open a new one")
        return self._conn

    def _run(self, doing: str, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work`` on the connection, one caller at a time. A failure (the file locked by another
        process past the timeout, read-only, damaged, a full disk, a value SQLite cannot bind) is a
        ``StoreError`` saying what failed. Any exit by an exception, an interrupt too, leaves no
        transaction open: writes made after it would join the failed one and be rolled back with it."""
        with self._lock:
            db = self._db()
            try:
                return work(db)
            except BaseException as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                if isinstance(exc, StoreError) or not isinstance(exc, _UNWRITABLE):
                    raise
                raise StoreError(f"SQLite store at {self.path!r} could not {doing}: {exc}") from exc

    def append(self, record: RawRecord) -> None:
        require_storable(record)  # SQLite would keep bytes as bytes, and a string as the time

        def insert(db: sqlite3.Connection) -> None:
            try:
                db.execute(
                    "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)",
                    (record.namespace.key, record.id, record.seq, record.created_at, record.body, record.v),
                )
            except sqlite3.IntegrityError as exc:
                if "UNIQUE" not in str(exc):  # a missing value (NOT NULL): nothing is stored under the id
                    raise
                raise RecordExistsError(record.id, record.namespace.key) from exc

        self._run(f"store record {record.id!r}", insert)

    def _record(
        self, namespace: Namespace, row: tuple[object, object, object, object, object]
    ) -> RawRecord | None:
        """The record of a row, read as far as it can be when the file is damaged: fields that lost
        their kind on disk (a time or a version read back as bytes) are named in a warning and read
        as defaults, so the event and its sequence number stay in the conversation. A row without a
        sequence number cannot be placed in it and is skipped, named."""
        record_id, seq, created_at, data, version = row
        if not isinstance(record_id, str):
            record_id = (
                record_id.decode("utf-8", "replace") if isinstance(record_id, bytes) else str(record_id)
            )
        if not whole_number(seq):
            logger.warning(
                "damc: record %r of %r in %r is damaged (no sequence number); it is skipped",
                record_id,
                namespace.key,
                self.path,
            )
            return None
        damaged = [
            name
            for name, readable in (
                ("time", finite_number(created_at)),
                ("format version", whole_number(version)),
                ("body", isinstance(data, bytes)),
            )
            if not readable
        ]
        if damaged:
            logger.warning(
                "damc: record %r of %r in %r is damaged (its %s unreadable); it is read without them",
                record_id,
                namespace.key,
                self.path,
                " and ".join(damaged),
            )
        version = version if whole_number(version) else CARD_FORMAT_VERSION
        if version > CARD_FORMAT_VERSION:
            raise SchemaVersionError(f"record {record_id!r} has format v{version}; upgrade damc")
        raw = data if isinstance(data, bytes) else b""
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError as exc:  # damaged on disk: read, with what cannot be, named
            logger.warning(
                "damc: record %r of %r in %r is damaged (%s); its unreadable bytes are read as U+FFFD",
                record_id,
                namespace.key,
                self.path,
                exc,
            )
            body = raw.decode("utf-8", "replace")
        at = float(created_at) if finite_number(created_at) else 0.0
        return RawRecord(
            id=record_id, namespace=namespace, seq=int(seq), created_at=at, body=body, v=int(version)
        )

    def record(self, namespace: Namespace, record_id: str) -> RawRecord | None:
        keys = read_keys(namespace)
        row = self._run(
            f"read record {record_id!r}",
            lambda db: db.execute(
                "SELECT id, seq, created_at, CAST(body AS BLOB), v FROM records "
                f"WHERE ns IN ({_marks(keys)}) AND id = ? ORDER BY ns = ? DESC",
                (*keys, record_id, namespace.key),
            ).fetchone(),
        )
        return self._record(namespace, row) if row else None

    def records(self, namespace: Namespace, *, since: int = 0) -> list[RawRecord]:
        keys = read_keys(namespace)
        rows = self._run(
            f"read the records of {namespace.key!r}",
            lambda db: db.execute(
                "SELECT id, seq, created_at, CAST(body AS BLOB), v FROM records "
                f"WHERE ns IN ({_marks(keys)}) AND seq >= ? ORDER BY seq",
                (*keys, since),
            ).fetchall(),
        )
        return [record for row in rows if (record := self._record(namespace, row)) is not None]

    def put_cards(self, namespace: Namespace, cards: Sequence[Card]) -> None:
        rows = [(namespace.key, c.id, c.seq, self._serde.dumps(c)) for c in cards]

        def write(db: sqlite3.Connection) -> None:
            db.execute("BEGIN")
            db.executemany("INSERT OR REPLACE INTO cards VALUES (?, ?, ?, ?)", rows)
            db.execute("COMMIT")

        self._run(f"store {len(rows)} cards of {namespace.key!r}", write)

    def cards(self, namespace: Namespace, *, since: int = 0) -> list[Card]:
        keys = read_keys(namespace)
        rows = self._run(
            f"read the cards of {namespace.key!r}",
            lambda db: db.execute(
                f"SELECT CAST(data AS BLOB) FROM cards WHERE ns IN ({_marks(keys)}) AND seq >= ? "
                "ORDER BY seq",
                (*keys, since),
            ).fetchall(),
        )
        where = f"{self.path!r}, {namespace.key!r}"
        documents = []
        for (data,) in rows:
            try:
                documents.append(data.decode("utf-8"))
            except UnicodeDecodeError as exc:  # damaged on disk: encoded again from its record
                logger.warning("damc: a damaged card in %s is encoded again from its record (%r)", where, exc)
        return readable_cards(self._serde, documents, where)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _marks(keys: tuple[str, ...]) -> str:
    return ", ".join("?" * len(keys))
