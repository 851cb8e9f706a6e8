"""Chroma as the home of raw records and cards, embedded (a folder) or shared (a Chroma server).

``ChromaConfig(path=...)`` opens an embedded ``PersistentClient``; ``ChromaConfig(host=..., port=...)``
talks to a server started with ``chroma run --path DIR --port P``, so agent processes on many
machines share one memory. The API is the same either way. Records and cards live in two
collections, namespaced by a metadata key that every read filters on. Their vectors are
placeholders (two numbers from the sequence number): the semantic index of cards is
:class:`damc_core.retrieval.CardIndex`, in the same server.

Needs the ``chroma`` extra: ``pip install "damc[chroma]"``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..errors import ConfigError, RecordExistsError, SchemaVersionError, StoreClosedError, StoreError
from ..serde import CardSerializer, JsonCardSerializer, readable_cards
from ..types import CARD_FORMAT_VERSION, Card, Namespace, RawRecord
from .base import read_keys, require_storable

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

PAGE = 5000
"""Rows per ``get`` and per write: bounds one request to a server."""

T = TypeVar("T")


def _chromadb() -> Any:
    try:
        import chromadb
    except ImportError as exc:
        raise ConfigError('Chroma backend not installed. Install with: pip install "damc[chroma]"') from exc
    return chromadb


@dataclass(frozen=True, slots=True)
class ChromaConfig:
    """Where Chroma is: an embedded folder (``path``) or a server (``host`` and ``port``)."""

    path: str | Path | None = None
    """Folder of an embedded ``PersistentClient``; ``damc-chroma`` when neither this nor ``host`` is set."""
    host: str | None = None
    """Chroma server host; set it (and ``port``) when several processes or machines share memory."""
    port: int = 8000
    ssl: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    """HTTP headers for the server, e.g. an auth token."""
    tenant: str = "default_tenant"
    database: str = "default_database"
    prefix: str = "damc"
    """Collection names start with it, so several memories can share one server or folder."""

    def __post_init__(self) -> None:
        if self.path is not None and self.host is not None:
            raise ConfigError("ChromaConfig takes path= (embedded) or host= (server), not both")
        if not 0 < self.port < 65536:
            raise ConfigError(f"ChromaConfig.port must be in 1..65535, got {self.port}")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}", self.prefix):  # Chroma's collection names
            raise ConfigError(
                "ChromaConfig.prefix must be up to 100 letters, digits, '-' or '_', starting with a letter "
                f"or digit, got {self.prefix!r}"
            )

    @property
    def mode(self) -> str:
        return "server" if self.host is not None else "embedded"

    def client(self) -> ClientAPI:
        """A Chroma client for this configuration, with anonymous telemetry off."""
        chromadb = _chromadb()
        from chromadb.config import Settings

        settings = Settings(anonymized_telemetry=False)
        try:
            if self.host is not None:
                client: ClientAPI = chromadb.HttpClient(
                    host=self.host,
                    port=self.port,
                    ssl=self.ssl,
                    headers=dict(self.headers),
                    settings=settings,
                    tenant=self.tenant,
                    database=self.database,
                )
            else:
                client = chromadb.PersistentClient(
                    path=str(self.path or "damc-chroma"),
                    settings=settings,
                    tenant=self.tenant,
                    database=self.database,
                )
        except Exception as exc:
            where = f"{self.host}:{self.port}" if self.host is not None else str(self.path or "damc-chroma")
            raise StoreError(f"cannot open Chroma ({self.mode}) at {where}: {exc}") from exc
        return client


def release(client: ClientAPI) -> None:
    """Close a client Chroma can close (1.5 and later; shared systems are reference-counted, so
    other clients on the same folder keep working)."""
    close = getattr(client, "close", None)
    if callable(close):
        close()


def placeholder_vectors(seqs: Sequence[int]) -> np.ndarray:
    """Records and cards are found by namespace and id, never by vector; Chroma needs one anyway.
    Distinct points keep its HNSW graph well formed."""
    return np.array([[float(seq), 1.0] for seq in seqs], dtype=np.float32)


def _escaped(part: str) -> str:
    return part.replace("\\", "\\\\").replace("|", "\\|")


def _row_id(key: str, item_id: str) -> str:
    """A record's or card's row id: ``<namespace key>|<id>``, a ``|`` or ``\\`` in either escaped,
    so session ``t1|b``'s card ``c0`` and session ``t1``'s card ``b|c0`` are two rows. Ids without
    either character are written as they always were."""
    return f"{_escaped(key)}|{_escaped(item_id)}"


def _item_id(key: str, row_id: str) -> str:
    """The record or card id of a row stored under namespace key ``key`` (see :func:`_row_id`);
    a row written before ids were escaped is ``<key>|<id>`` as given."""
    escaped = f"{_escaped(key)}|"
    if row_id.startswith(escaped):
        return re.sub(r"\\(.)", r"\1", row_id[len(escaped) :])
    return row_id[len(key) + 1 :]


class ChromaStore:
    """A :class:`~damc_core.stores.MemoryStore` in Chroma: raw records verbatim, cards serialized."""

    def __init__(
        self,
        config: ChromaConfig | None = None,
        *,
        client: ClientAPI | None = None,
        serde: CardSerializer | None = None,
    ) -> None:
        self.config = config or ChromaConfig()
        self._serde = serde or JsonCardSerializer()
        self._owns_client = client is None
        self._client: ClientAPI | None = client or self.config.client()
        prefix = self.config.prefix
        self._records = self._call(
            lambda: self._open().get_or_create_collection(f"{prefix}_records", embedding_function=None)
        )
        self._cards = self._call(
            lambda: self._open().get_or_create_collection(f"{prefix}_cards", embedding_function=None)
        )

    def __enter__(self) -> ChromaStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _open(self) -> ClientAPI:
        if self._client is None:
            raise StoreClosedError("ChromaStore is closed; open a new one")
        return self._client

    def _call(self, operation: Callable[[], T]) -> T:
        self._open()
        try:
            return operation()
        except (StoreError, ConfigError):
            raise
        except Exception as exc:
            raise StoreError(f"Chroma ({self.config.mode}) failed: {type(exc).__name__}: {exc}") from exc

    def append(self, record: RawRecord) -> None:
        """Add the record unless its id is taken. Chroma has no insert-if-absent, and its ``add``
        of an id it holds leaves the record as it was: the record is read back (one round trip
        besides the add), and another writer's record under the id is a ``RecordExistsError``."""
        key = record.namespace.key
        require_storable(record)  # Chroma would keep a None body, and drop a NaN time
        doc_id = _row_id(key, record.id)
        token = uuid.uuid4().hex  # this add's mark, to tell its record from another writer's

        def add() -> None:
            meta: dict[str, str | int | float] = {
                "ns": key,
                "seq": record.seq,
                "created_at": record.created_at,
                "v": record.v,
                "w": token,
            }
            self._records.add(
                ids=[doc_id],
                documents=[record.body],
                embeddings=placeholder_vectors([record.seq]),
                metadatas=[meta],
            )
            held = self._records.get(ids=[doc_id], include=["metadatas"])["metadatas"] or [{}]
            if (held[0] or {}).get("w") != token:
                raise RecordExistsError(record.id, key)

        self._call(add)

    def _as_record(self, namespace: Namespace, doc_id: str, body: str, meta: Any) -> RawRecord:
        version = int(meta["v"])
        if version > CARD_FORMAT_VERSION:
            raise SchemaVersionError(f"record {doc_id!r} has format v{version}; upgrade damc")
        return RawRecord(
            id=_item_id(str(meta["ns"]), doc_id),
            namespace=namespace,
            seq=int(meta["seq"]),
            created_at=float(meta["created_at"]),
            body=body,
            v=version,
        )

    def record(self, namespace: Namespace, record_id: str) -> RawRecord | None:
        """The record under its row id, or else under the row ids older releases gave it (ids
        unescaped, under every key of :func:`~damc_core.stores.base.read_keys`). A row counts only if
        it is stored for one of the namespace's keys and reads back as ``record_id``: an
        unescaped id such as ``b|r0`` can name another session's row."""
        keys = read_keys(namespace)
        row_ids = list(
            dict.fromkeys([_row_id(namespace.key, record_id), *(f"{k}|{record_id}" for k in keys)])
        )
        found = self._call(lambda: self._records.get(ids=row_ids, include=["documents", "metadatas"]))
        held = {
            row_id: (document, meta)
            for row_id, document, meta in zip(
                found["ids"], found["documents"] or [], found["metadatas"] or [], strict=True
            )
            if meta and meta.get("ns") in keys and _item_id(str(meta["ns"]), row_id) == record_id
        }
        row_id = next((row_id for row_id in row_ids if row_id in held), None)
        return None if row_id is None else self._as_record(namespace, row_id, *held[row_id])

    def records(self, namespace: Namespace, *, since: int = 0) -> list[RawRecord]:
        rows = self._all(self._records, namespace, since)
        records = [self._as_record(namespace, i, d, m) for i, d, m in rows]
        return sorted(records, key=lambda r: r.seq)

    def put_cards(self, namespace: Namespace, cards: Sequence[Card]) -> None:
        key = namespace.key
        cards = list({card.id: card for card in cards}.values())  # an id given twice: its last card
        for start in range(0, len(cards), PAGE):
            chunk = cards[start : start + PAGE]
            self._call(
                lambda chunk=chunk: self._cards.upsert(  # type: ignore[misc]
                    ids=[_row_id(key, c.id) for c in chunk],
                    documents=[self._serde.dumps(c) for c in chunk],
                    embeddings=placeholder_vectors([c.seq for c in chunk]),
                    metadatas=[{"ns": key, "seq": c.seq} for c in chunk],
                )
            )

    def cards(self, namespace: Namespace, *, since: int = 0) -> list[Card]:
        rows = self._all(self._cards, namespace, since)
        cards = readable_cards(self._serde, (d for _, d, _ in rows), f"Chroma, {namespace.key!r}")
        return sorted(cards, key=lambda c: c.seq)

    def _all(self, collection: Collection, namespace: Namespace, since: int) -> list[tuple[str, str, Any]]:
        """Every (id, document, metadata) of the namespace from sequence number ``since`` on, a
        page at a time, rows older releases stored under another key included; the default 0
        bounds the read too (a row numbered -1 is left out, as in every backend)."""
        keys = list(read_keys(namespace))
        where: dict[str, Any] = {"$and": [{"ns": {"$in": keys}}, {"seq": {"$gte": since}}]}
        rows: list[tuple[str, str, Any]] = []
        while True:
            page = self._call(
                lambda: collection.get(
                    where=where,
                    include=["documents", "metadatas"],
                    limit=PAGE,
                    offset=len(rows),
                )
            )
            rows.extend(zip(page["ids"], page["documents"] or [], page["metadatas"] or [], strict=True))
            if len(page["ids"]) < PAGE:
                return rows

    def close(self) -> None:
        """Stop using the client; one this store made is closed, which releases an embedded
        folder's database (Chroma keeps it open until then, and a folder removed and made again
        at the same path could not be written in this process)."""
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            release(client)
