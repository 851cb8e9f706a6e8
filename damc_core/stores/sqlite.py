from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from ..errors import RecordExistsError, SchemaVersionError, StoreClosedError, StoreError
from ..serde import CardSerializer, JsonCardSerializer
from ..types import CARD_FORMAT_VERSION, Card, Namespace, RawRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    ns TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, created_at REAL NOT NULL,
    body TEXT NOT NULL, v INTEGER NOT NULL, PRIMARY KEY (ns, id));
CREATE TABLE IF NOT EXISTS cards (
    ns TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (ns, id));
CREATE INDEX IF NOT EXISTS cards_by_seq ON cards (ns, seq);
"""


class SQLiteStore:
    """An embedded SQLite file (WAL journal) shared safely by threads of one process.

    ``path=":memory:"`` keeps everything in memory with the same code path.
    """

    def __init__(self, path: str | Path = ":memory:", *, serde: CardSerializer | None = None) -> None:
        self.path = str(path)
        self._serde = serde or JsonCardSerializer()
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
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

    def append(self, record: RawRecord) -> None:
        with self._lock:
            try:
                self._db().execute(
                    "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)",
                    (record.namespace.key, record.id, record.seq, record.created_at, record.body, record.v),
                )
            except sqlite3.IntegrityError as exc:
                raise RecordExistsError(record.id, record.namespace.key) from exc

    def _record(self, namespace: Namespace, row: tuple[str, int, float, str, int]) -> RawRecord:
        if row[4] > CARD_FORMAT_VERSION:
            raise SchemaVersionError(f"record {row[0]!r} has format v{row[4]}; upgrade damc")
        return RawRecord(id=row[0], namespace=namespace, seq=row[1], created_at=row[2], body=row[3], v=row[4])

    def record(self, namespace: Namespace, record_id: str) -> RawRecord | None:
        with self._lock:
            row = (
                self._db()
                .execute(
                    "SELECT id, seq, created_at, body, v FROM records WHERE ns = ? AND id = ?",
                    (namespace.key, record_id),
                )
                .fetchone()
            )
        return self._record(namespace, row) if row else None

    def records(self, namespace: Namespace) -> list[RawRecord]:
        with self._lock:
            rows = (
                self._db()
                .execute(
                    "SELECT id, seq, created_at, body, v FROM records WHERE ns = ? ORDER BY seq",
                    (namespace.key,),
                )
                .fetchall()
            )
        return [self._record(namespace, r) for r in rows]

    def put_cards(self, namespace: Namespace, cards: Sequence[Card]) -> None:
        rows = [(namespace.key, c.id, c.seq, self._serde.dumps(c)) for c in cards]
        with self._lock:
            db = self._db()
            db.execute("BEGIN")
            db.executemany("INSERT OR REPLACE INTO cards VALUES (?, ?, ?, ?)", rows)
            db.execute("COMMIT")

    def cards(self, namespace: Namespace) -> list[Card]:
        with self._lock:
            rows = (
                self._db()
                .execute("SELECT data FROM cards WHERE ns = ? ORDER BY seq", (namespace.key,))
                .fetchall()
            )
        return [self._serde.loads(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
