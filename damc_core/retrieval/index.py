"""A vector index of cards in Chroma, searched by decision focus, with cold storage and merging.

Each namespace has a live collection, which retrieval searches, and a cold one for cards retired
for low value and members of merged near-duplicates (out of the live index, still searchable with
``cold=True``; their records and cards stay in the :class:`~damc_core.stores.MemoryStore`).

Search is hybrid: cosine similarity from the embedding, plus a bonus for each focus identifier
the card holds verbatim (``#W4923227`` is matched exactly, whatever the embedding makes of it).

Identifiers are looked up by id, not by filter: every filtered ``get`` of Chroma's SQLite backend
scans the whole collection (a document ``$contains`` took 47 ms at 100k cards, a metadata equality
15 ms, growing linearly), while a ``get`` by ids uses its index. So each card collection has a
twin, ``..._terms``, with one entry per identifier (:func:`identifier_terms`) whose id is the
identifier and whose metadata lists the latest ``POSTINGS`` cards holding it; a lookup reads the
focus identifiers' entries, then those cards, and keeps the cards whose text holds the identifier.
Collections made before the twin existed (no ``damc_terms`` in their metadata) are still searched
by document substring: same hits, slower; re-adding their cards under another
``ChromaConfig.prefix`` moves them to the fast lookup. A posting is read, extended and written
back (Chroma has no atomic append): two processes indexing cards with the same identifier at the
same moment can lose one's posting, which hides that card from the exact lookup, never from the
vector search.
"""

from __future__ import annotations

import functools
import hashlib
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from ..checks import finite_number, whole_number
from ..documents import SURROGATE
from ..errors import ConfigError, StoreClosedError
from ..extract import IDENTIFIER_TERM
from ..stores.chroma import ChromaConfig, release
from ..types import Card, DecisionFocus, Namespace
from .embed import (
    HASHING,
    MINILM,
    Embedder,
    HashingEmbedder,
    embedder_signature,
    load_embedder,
    register_embedder,
    utf8_text,
)

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection
    from chromadb.api.types import Where

EXACT_BONUS = 0.25
"""Hybrid score added per focus identifier a card holds verbatim (capped at 1.0 overall)."""
MAX_EXACT_TERMS = 8
"""Identifiers of one focus looked up verbatim (together, by id in the ``_terms`` twin)."""
DOCUMENT_CHARS = 2000
LOW_SINCE = "low_since"
"""Metadata key of a live entry: the event sequence number since which its card has been valued
low (see :class:`~damc_core.retrieval.Lifecycle`). Kept with the vectors, so a process that takes
the namespace over, on this machine or another, continues the count."""
DIGEST = "digest"
"""Metadata key of an entry: :func:`document_digest` of its document."""
POSTINGS = 64
"""Card ids kept per identifier, the latest indexed first; a lookup wants at most ``k`` of them. An
identifier as common as a user id keeps its newest cards (what the agent works from); older ones
are left to the vector search."""
TERMS_FORMAT = ("damc_terms", 1)
"""Collection metadata of card collections that have an identifier twin."""
SPAN_PARTS = 8
"""Longest run of parts (``a_b_c`` has three) indexed as one identifier; the whole run is too."""
MAX_CARD_TERMS = 1024
"""Cap on the identifiers of one card (a card of thousands of numbers stops here)."""
_WRITE_ROWS = 1000
_CARD_TAG = re.compile(r"^\[c\d+\]\s*")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
"""What a Chroma collection name cannot hold (an embedder named ``BAAI/bge-small-en``)."""
_RUN = re.compile(r"[a-z0-9_#.\-]+")
_PART = re.compile(r"[a-z0-9]+")
_LISTED_ID = re.compile(r"(?:\\.|[^\\,])+", re.DOTALL)

_Operation = TypeVar("_Operation", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Hit:
    """One card found for a query."""

    card_id: str
    similarity: float
    """Cosine similarity of the card's text and the query, in [-1, 1]."""
    exact: tuple[str, ...]
    """Focus identifiers the card holds verbatim."""
    score: float
    """Hybrid score in [0, 1]: similarity plus ``EXACT_BONUS`` per exact identifier."""
    members: tuple[str, ...] = ()
    """For a merged summary entry: the ids of the cards it stands for."""


@dataclass(frozen=True, slots=True)
class Merged:
    """Near-duplicate cards folded into one summary entry of the live index."""

    entry_id: str
    members: tuple[str, ...]
    document: str


def _similarities(collection: Any, card_ids: list[str], query_vector: np.ndarray) -> dict[str, float]:
    """Cosine similarity of the query and each card's stored embedding (rows are L2-normalized)."""
    if not card_ids:
        return {}
    got = collection.get(ids=card_ids, include=["embeddings"])
    vectors = got["embeddings"]
    if vectors is None or not len(vectors):
        return {}
    similarity = _unit_rows(vectors) @ _unit_rows([query_vector])[0]
    return dict(zip(got["ids"], map(float, similarity), strict=True))


def card_document(card: Card) -> str:
    """The text a card is embedded and matched by: its rendering, lower-cased (identifiers are
    matched case-blind and ``#`` stays with the id), without the ``[c12]`` tag (two cards that say
    the same thing must embed the same), cut to a length the model reads. Half an emoji becomes
    U+FFFD: the document is stored and digested too, and neither Chroma nor the digest takes text
    that is not UTF-8."""
    return utf8_text(_CARD_TAG.sub("", card.summary, count=1)[:DOCUMENT_CHARS].lower())


def document_digest(document: str) -> str:
    """A short fingerprint of an indexed text: the same id with another digest is another card."""
    return hashlib.blake2b(document.encode("utf-8"), digest_size=8).hexdigest()


def identifier_terms(document: str) -> list[str]:
    """The identifiers an exact lookup finds a document by: in each run of identifier characters
    (``[a-z0-9_#.-]``), every span of whole parts with a digit and 4+ characters, with and without
    a leading ``#``. ``credit_card_4421486`` is found by ``4421486`` and ``card_4421486``,
    ``2024-05-27`` by ``05-27``, ``#w4923227`` by ``w4923227``; ``17447`` is not found by ``7447``."""
    found: dict[str, None] = {}
    for run in _RUN.finditer(document):
        text = run.group(0)
        parts = [(m.start(), m.end(), any(c.isdigit() for c in m.group(0))) for m in _PART.finditer(text)]
        spans = [(i, j) for i in range(len(parts)) for j in range(i, min(len(parts), i + SPAN_PARTS))]
        if len(parts) > SPAN_PARTS:
            spans.append((0, len(parts) - 1))
        for i, j in spans:
            start, end = parts[i][0], parts[j][1]
            if end - start >= 4 and any(digit for _, _, digit in parts[i : j + 1]):
                found[text[start:end]] = None
                if start and text[start - 1] == "#":
                    found[text[start - 1 : end]] = None
        if len(found) >= MAX_CARD_TERMS:
            break
    return list(found)[:MAX_CARD_TERMS]


def focus_query(focus: DecisionFocus) -> str:
    """The query for a decision: what is being decided, then the user's request, e.g.
    ``decision focus: check-in date; request: book the hotel``."""
    parts = sorted(focus.tools) + sorted(t for t in focus.terms if IDENTIFIER_TERM.fullmatch(t))[:12]
    return f"decision focus: {' '.join(parts) or 'next step'}; request: {focus.query.strip()[:500]}"


def _embedder_label(embedder: Embedder) -> str:
    """The embedder's part of a collection name: its name, and a digest of what else tells its
    vector space from another of that name: the settings of a ``HashingEmbedder`` other than the
    default, the class and dimension of an embedder of one's own (:func:`embedder_signature`).
    Chroma hands an existing collection to whatever function asks for it, so another dimension,
    trigram weight or model under the same name needs collections of its own (or its vectors fail,
    or mix with another space's); MiniLM's and the default ``HashingEmbedder``'s names stay as
    they were."""
    label = _NAME_UNSAFE.sub("-", embedder.name)[:100]
    if isinstance(embedder, HashingEmbedder) and embedder != HashingEmbedder():
        settings = f"{embedder.dimension}:{float(embedder.trigram_weight)!r}"
        label += "-" + hashlib.sha256(settings.encode("utf-8")).hexdigest()[:8]
    signature = embedder_signature(embedder)
    if signature is not None:
        label += "-" + hashlib.sha256(signature.encode("utf-8")).hexdigest()[:8]
    return label


def _reopening(method: _Operation) -> _Operation:
    """Run an operation on a namespace once more, on its collections opened afresh, when the ones
    this index holds were deleted (another index or process dropped the namespace): the handles
    would fail until the index is made again. Iterators passed in are read into lists first, so
    the second run sees them whole."""

    @functools.wraps(method)
    def run(index: CardIndex, namespace: Namespace, /, *args: Any, **kwargs: Any) -> Any:
        args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)
        kwargs = {k: list(v) if isinstance(v, Iterator) else v for k, v in kwargs.items()}
        try:
            return method(index, namespace, *args, **kwargs)
        except Exception as exc:
            from chromadb.errors import NotFoundError

            if not isinstance(exc, NotFoundError):
                raise
            index._forget(namespace)
        return method(index, namespace, *args, **kwargs)

    return cast(_Operation, run)


def _embedding_function(embedder: Embedder) -> Any:
    from .chroma_ef import DamcEmbeddingFunction

    return DamcEmbeddingFunction(embedder=embedder)


class CardIndex:
    """Cards of each namespace in a collection of their own (plus its cold twin).

    A search runs inside one namespace's collection, so it cannot reach another tenant's cards,
    and its cost does not grow with the other namespaces (a metadata filter over one shared
    collection would be scanned at every query). The namespace is also kept in each entry's
    metadata and in the collection's.
    """

    def __init__(
        self,
        config: ChromaConfig | None = None,
        *,
        client: ClientAPI | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.config = config or ChromaConfig()
        self.embedder = _checked_embedder(embedder) if embedder is not None else load_embedder(MINILM)
        if self.embedder.name not in (MINILM, HASHING) or embedder_signature(self.embedder) is not None:
            register_embedder(self.embedder)  # its collections, reopened in this process, embed with it
        self._owns_client = client is None
        self._client = client or self.config.client()
        self._function = _embedding_function(self.embedder)
        self._label = _embedder_label(self.embedder)
        self._collections: dict[tuple[str, bool], Collection] = {}
        self._terms: dict[tuple[str, bool], Collection | None] = {}
        self._drops: dict[str, int] = {}
        self._closed = False

    def close(self) -> None:
        """Close the client this index made (see :meth:`ChromaStore.close`); a client passed in is
        left to its owner."""
        self._collections.clear()
        self._terms.clear()
        self._closed = True
        if self._owns_client:
            release(self._client)

    def __enter__(self) -> CardIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def collection(self, namespace: Namespace, *, cold: bool = False) -> Collection:
        """The live (or cold) collection of a namespace, created on first use."""
        if self._closed:
            raise StoreClosedError("this CardIndex was closed; make a new one to use the index again")
        found = self._collections.get((namespace.key, cold))
        if found is None:
            digest = hashlib.sha256(_namespace_key(namespace).encode("utf-8")).hexdigest()[:24]
            tier = "cold" if cold else "live"
            found = self._client.get_or_create_collection(
                f"{self.config.prefix}_{tier}_{self._label}_{digest}",
                embedding_function=self._function,
                metadata={
                    "hnsw:space": "cosine",
                    "damc_namespace": namespace.key,
                    TERMS_FORMAT[0]: TERMS_FORMAT[1],
                },
            )
            self._collections[(namespace.key, cold)] = found
        return found

    def terms(self, namespace: Namespace, *, cold: bool = False) -> Collection | None:
        """The identifier twin of a card collection (ids are identifiers, metadata ``cards`` the
        ids of the first cards holding each, see :func:`_listed`); ``None`` for a collection made
        before twins existed."""
        if (namespace.key, cold) not in self._terms:
            cards = self.collection(namespace, cold=cold)
            twin = None
            if (cards.metadata or {}).get(TERMS_FORMAT[0]) == TERMS_FORMAT[1]:
                twin = self._client.get_or_create_collection(
                    f"{cards.name}_terms",
                    embedding_function=None,
                    configuration={"hnsw": {"space": "l2", "ef_construction": 16, "max_neighbors": 4}},
                    metadata={"damc_namespace": namespace.key},
                )
            self._terms[(namespace.key, cold)] = twin
        return self._terms[(namespace.key, cold)]

    # -- writing -------------------------------------------------------------------------------
    @_reopening
    def add(self, namespace: Namespace, cards: Sequence[Card]) -> None:
        """Embed and upsert cards (by id: adding a card twice replaces it). Each entry keeps the
        digest of its text (:meth:`digests`), so a reader can tell a card it already indexed from
        another card under the same id."""
        if not cards:
            return
        cards = list({card.id: card for card in cards}.values())  # an id given twice: its last card
        _card_ids(c.id for c in cards)
        key = namespace.key
        live = self.collection(namespace)
        documents = [card_document(c) for c in cards]
        vectors = _unit_rows(self._embed(documents))
        for start in range(0, len(cards), _WRITE_ROWS):
            chunk = slice(start, start + _WRITE_ROWS)
            live.upsert(
                ids=[c.id for c in cards[chunk]],
                documents=documents[chunk],
                embeddings=vectors[chunk],
                metadatas=[
                    self._metadata(key, c, document)
                    for c, document in zip(cards[chunk], documents[chunk], strict=True)
                ],
            )
        _post(self.terms(namespace), _postings_of([c.id for c in cards], documents))

    def _embed(self, texts: list[str]) -> np.ndarray:
        """The embedder's vectors of the texts, checked: a row per text, of its ``dimension``,
        finite. The collection is named by that dimension, so an embedder whose vectors have
        another (a model changed, its ``dimension`` not) is a ``ConfigError`` saying so, not
        Chroma's error on the collection's dimension, NumPy's on a flat array or a mismatch of
        fields in the write."""
        embedder = self.embedder
        vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
        dimension = getattr(embedder, "dimension", None)
        if not isinstance(dimension, int):  # an embedder without one: its own rows' length
            dimension = vectors.shape[-1] if vectors.ndim else 0
        if vectors.ndim != 2 or len(vectors) != len(texts):
            got = f"an array of shape {vectors.shape}"
        elif vectors.shape[1] != dimension:
            got = f"rows of {vectors.shape[1]} numbers"
        elif not np.isfinite(vectors).all():
            got = "NaN or infinite values"
        else:
            return vectors
        raise ConfigError(
            f"embedder {embedder.name!r} ({type(embedder).__name__}) returned {got} for {len(texts)} texts; "
            f"embed(texts) must return a row of {dimension} finite numbers (its dimension) per text: set "
            "dimension to the length of the model's vectors"
        )

    @staticmethod
    def _metadata(key: str, card: Card, document: str) -> dict[str, str | int | float | bool]:
        return {
            "ns": key,
            "card": card.id,
            DIGEST: document_digest(document),
            "seq": card.seq,
            "kind": card.kind.value,
            "tool": card.tool_name or "",
            "members": "",
        }

    @_reopening
    def ids(self, namespace: Namespace, *, cold: bool = False) -> set[str]:
        """Card ids of the namespace in the live (or cold) index."""
        got = self.collection(namespace, cold=cold).get(include=[])
        return set(got["ids"])

    @_reopening
    def count(self, namespace: Namespace, *, cold: bool = False) -> int:
        """Entries of the namespace in the live (or cold) index (a merged entry counts once)."""
        return self.collection(namespace, cold=cold).count()

    @_reopening
    def digests(self, namespace: Namespace, *, cold: bool = False) -> dict[str, str]:
        """Card id -> :func:`document_digest` of the text it was indexed with, for the live (or
        cold) index (``""`` for entries written before digests were kept)."""
        got = self.collection(namespace, cold=cold).get(include=["metadatas"])
        metas = got["metadatas"] or []
        return {i: str(m.get(DIGEST) or "") for i, m in zip(got["ids"], metas, strict=True)}

    @_reopening
    def delete(self, namespace: Namespace, card_ids: Iterable[str], *, cold: bool = False) -> None:
        """Remove cards from the live (or cold) index, identifier postings included."""
        ids = _card_ids(card_ids)
        if not ids:
            return
        collection = self.collection(namespace, cold=cold)
        for chunk in _chunks(ids):
            got = collection.get(ids=chunk, include=["documents"])
            if got["ids"]:
                collection.delete(ids=got["ids"])
                postings = _postings_of(got["ids"], [str(d) for d in got["documents"] or []])
                _post(self.terms(namespace, cold=cold), postings, remove=True)

    @_reopening
    def delete_before(self, namespace: Namespace, seq: int) -> None:
        """Remove the cards made before event ``seq`` (a conversation cleared there) from the live
        and cold index. The collections stay: other processes hold them open."""
        older: dict[str, Any] = {"seq": {"$lt": seq}}
        for cold in (False, True):
            got = self.collection(namespace, cold=cold).get(where=older, include=[])
            self.delete(namespace, got["ids"], cold=cold)

    @_reopening
    def drop(self, namespace: Namespace) -> None:
        """Delete every collection of a namespace (live, cold and their identifier twins): its
        cards are searched no more. Records and cards in the store are untouched."""
        for cold in (False, True):
            name = self.collection(namespace, cold=cold).name
            if self.terms(namespace, cold=cold) is not None:
                self._client.delete_collection(f"{name}_terms")
            self._client.delete_collection(name)
        self._forget(namespace)

    def drops(self, namespace: Namespace) -> int:
        """How often this index dropped the namespace or found it dropped by another: a reader
        that counted fewer has to read it again (what it knew to be indexed is gone)."""
        return self._drops.get(namespace.key, 0)

    def _forget(self, namespace: Namespace) -> None:
        """Let go of the namespace's deleted collections (the next use opens them afresh) and count
        the drop."""
        for cold in (False, True):
            self._collections.pop((namespace.key, cold), None)
            self._terms.pop((namespace.key, cold), None)
        self._drops[namespace.key] = self.drops(namespace) + 1

    # -- searching -----------------------------------------------------------------------------
    @_reopening
    def search(
        self,
        namespace: Namespace,
        query: str,
        *,
        terms: Iterable[str] = (),
        k: int = 24,
        cold: bool = False,
    ) -> list[Hit]:
        """The best ``k`` cards for the query, best first; ``terms`` are matched verbatim too."""
        if not whole_number(k) or k <= 0:
            raise ConfigError(f"k must be a whole number > 0, got {k!r}")
        k = int(k)  # Chroma takes no NumPy int
        if not isinstance(query, str):
            raise ConfigError(f"the query must be text, got {type(query).__name__}")
        terms = _not_text(terms, "terms")
        collection = self.collection(namespace, cold=cold)
        found: dict[str, tuple[float, tuple[str, ...], tuple[str, ...]]] = {}
        # DAMC's embedders read half an emoji as U+FFFD themselves; an embedder of one's own need not
        query_vectors = _unit_rows(self._embed([utf8_text(query)]))
        result = collection.query(
            query_embeddings=query_vectors, n_results=k, include=["metadatas", "distances"]
        )
        for card_id, meta, distance in zip(
            result["ids"][0], (result["metadatas"] or [[]])[0], (result["distances"] or [[]])[0], strict=True
        ):
            found[card_id] = (1.0 - float(distance), (), _members(meta))
        nearest = set(found)
        identifiers = sorted({t.lower() for t in terms}, key=_longest)
        chosen = [t for t in identifiers if IDENTIFIER_TERM.fullmatch(t) and len(t) >= 4]
        for term, card_ids, metas in self._exact(namespace, chosen[:MAX_EXACT_TERMS], k, cold=cold):
            for card_id, meta in zip(card_ids, metas, strict=True):
                similarity, exact, members = found.get(card_id, (0.0, (), _members(meta)))
                found[card_id] = (similarity, (*exact, term), members)
        # a card found only verbatim gets its similarity too, so it ranks on the same scale as
        # the nearest ones (an old exact match above this hour's near-duplicates without the id)
        verbatim_only = [card_id for card_id in found if card_id not in nearest]
        for card_id, similarity in _similarities(collection, verbatim_only, query_vectors[0]).items():
            found[card_id] = (similarity, *found[card_id][1:])
        hits = [
            Hit(card_id, sim, exact, min(1.0, max(0.0, sim) + EXACT_BONUS * len(exact)), members)
            for card_id, (sim, exact, members) in found.items()
        ]
        return sorted(hits, key=lambda h: -h.score)[: k + MAX_EXACT_TERMS]

    def _exact(
        self, namespace: Namespace, terms: list[str], k: int, *, cold: bool
    ) -> Iterable[tuple[str, list[str], list[Any]]]:
        """For each term, the ids and metadata of up to ``k`` cards whose text holds it."""
        if not terms:
            return []
        collection, twin = self.collection(namespace, cold=cold), self.terms(namespace, cold=cold)
        if twin is None:
            found = []
            for term in terms:
                got = collection.get(where_document={"$contains": term}, include=["metadatas"], limit=k)
                found.append((term, list(got["ids"]), list(got["metadatas"] or [])))
            return found
        queue = _postings(twin, terms)
        held: dict[str, list[tuple[str, Any]]] = {t: [] for t in terms}
        cards: dict[str, tuple[Any, str] | None] = {}
        while batch := {t: ids[: k - len(held[t])] for t, ids in queue.items() if ids and len(held[t]) < k}:
            # the newest k cards of each posting, then more only where some were retired or rewritten
            missing = list(dict.fromkeys(i for ids in batch.values() for i in ids if i not in cards))
            if missing:
                got = collection.get(ids=missing, include=["metadatas", "documents"])
                cards.update(dict.fromkeys(missing))
                metas, documents = got["metadatas"] or [], got["documents"] or []
                cards.update(zip(got["ids"], zip(metas, map(str, documents), strict=True), strict=True))
            for term, ids in batch.items():
                del queue[term][: len(ids)]
                held[term] += [
                    (i, card[0]) for i in ids if (card := cards[i]) is not None and term in card[1]
                ]
        return [(t, [i for i, _ in held[t]], [m for _, m in held[t]]) for t in terms]

    # -- lifecycle -----------------------------------------------------------------------------
    @_reopening
    def retire(self, namespace: Namespace, card_ids: Iterable[str]) -> int:
        """Move cards from the live index to cold storage; returns how many moved."""
        ids = _card_ids(card_ids)
        return sum(self._retire(namespace, chunk) for chunk in _chunks(ids))

    def _retire(self, namespace: Namespace, ids: list[str]) -> int:
        """:meth:`retire` of at most ``_WRITE_ROWS`` cards: one write each to the cold and live
        collections (Chroma refuses a write past its ``max_batch_size``)."""
        if not ids:
            return 0
        live = self.collection(namespace)
        got = live.get(ids=ids, include=["embeddings", "documents", "metadatas"])
        if not got["ids"]:
            return 0
        self.collection(namespace, cold=True).upsert(
            ids=got["ids"],
            embeddings=got["embeddings"],
            documents=got["documents"],
            metadatas=got["metadatas"],
        )
        postings = _postings_of(got["ids"], [str(d) for d in got["documents"] or []])
        _post(self.terms(namespace, cold=True), postings)
        live.delete(ids=got["ids"])
        _post(self.terms(namespace), postings, remove=True)
        return len(got["ids"])

    @_reopening
    def merge_near_duplicates(self, namespace: Namespace, *, threshold: float = 0.97) -> list[Merged]:
        """Fold live cards whose embeddings are within ``threshold`` cosine similarity of an older
        card into one summary entry that names every member; the members go cold."""
        if not finite_number(threshold) or not 0 < threshold <= 1:
            raise ConfigError(f"threshold must be a number in (0, 1], got {threshold!r}")
        key = namespace.key
        live = self.collection(namespace)
        got = live.get(include=["embeddings", "documents", "metadatas"])
        metas = got["metadatas"] or []
        entries = [(int(str(m["seq"])), str(m["card"]), i) for i, m in enumerate(metas) if not _members(m)]
        if len(entries) < 2:
            return []
        entries.sort()
        vectors = _unit_rows(got["embeddings"])[[i for _, _, i in entries]]
        documents = got["documents"] or []
        taken = np.zeros(len(entries), dtype=bool)
        merged: list[Merged] = []
        for first, similarity in _similarity_rows(vectors):
            if taken[first]:
                continue
            group = [j for j in np.flatnonzero(similarity >= threshold) if not taken[j]]
            if len(group) < 2:
                continue
            taken[group] = True
            members = tuple(entries[j][1] for j in group)
            centroid = vectors[group].mean(axis=0)
            centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
            head = documents[entries[first][2]]
            document = f"{head} (+{len(members) - 1} near-duplicates: {', '.join(members[1:])})"
            entry_id = f"m{members[0]}"
            live.upsert(
                ids=[entry_id],
                embeddings=[centroid.tolist()],
                documents=[document],
                metadatas=[
                    {
                        "ns": key,
                        "card": entry_id,
                        "seq": entries[first][0],
                        "kind": "merged",
                        "tool": "",
                        "members": _listed(members),
                    }
                ],
            )
            _post(self.terms(namespace), _postings_of([entry_id], [document]))
            self.retire(namespace, members)
            merged.append(Merged(entry_id, members, document))
        return merged

    # -- lifecycle state -----------------------------------------------------------------------
    @_reopening
    def low_since(self, namespace: Namespace) -> dict[str, int]:
        """Live card id -> the event sequence number since which it has been valued low."""
        marked = cast("Where", {LOW_SINCE: {"$gte": 0}})
        got = self.collection(namespace).get(where=marked, include=["metadatas"])
        return {
            card_id: int(str(meta[LOW_SINCE]))
            for card_id, meta in zip(got["ids"], got["metadatas"] or [], strict=True)
        }

    @_reopening
    def mark_low(self, namespace: Namespace, changes: Mapping[str, int | None]) -> None:
        """Record when cards went low (a sequence number) or that they recovered (``None``).
        Ids not in the live index are ignored."""
        if not changes:
            return
        ids = sorted(_card_ids(changes))
        live = self.collection(namespace)
        for chunk in _chunks(ids):  # one write of them all would pass Chroma's max_batch_size
            live.update(ids=chunk, metadatas=[{LOW_SINCE: changes[i]} for i in chunk])


def _checked_embedder(embedder: Any) -> Embedder:
    """The embedder, if it is one: a Chroma embedding function or a plain callable given in its
    place is a ``ConfigError`` saying how to wrap it, rather than an ``AttributeError`` on
    ``name`` or a ``TypeError`` from deep in making the collection name."""
    name = getattr(embedder, "name", None)
    if not isinstance(name, str) or not name or not callable(getattr(embedder, "embed", None)):
        raise ConfigError(
            f"CardIndex(embedder=...) takes an Embedder (a text name, a dimension and embed(texts)), got "
            f"{type(embedder).__name__}; wrap a Chroma embedding function or a callable in a class "
            "with those (see the README's OpenAIEmbedder)"
        )
    return cast(Embedder, embedder)


def _namespace_key(namespace: Namespace) -> str:
    """The namespace's key, one Chroma can hold: a namespace with half an emoji in it (not UTF-8;
    made past :class:`Namespace`'s checks, or unpickled from a release before them) is a
    ``ConfigError`` naming it rather than a ``UnicodeEncodeError``, before anything is written."""
    key = namespace.key
    if SURROGATE.search(key):
        raise ConfigError(f"a namespace must be UTF-8 text, got {key!r}")
    return key


def _card_ids(ids: Iterable[str]) -> list[str]:
    """The ids, each one Chroma can hold; an empty one, or one with half an emoji (not UTF-8), is
    a ``ConfigError`` naming it rather than Chroma's error. One id given as it is (``"c12"``) is
    one too: read as ids ``c``, ``1`` and ``2``, it would retire or delete nothing, silently."""
    checked = list(_not_text(ids, "card ids"))
    for card_id in checked:
        if not isinstance(card_id, str) or not card_id or SURROGATE.search(card_id):
            raise ConfigError(f"a card id must be non-empty UTF-8 text, got {card_id!r}")
    return checked


def _not_text(items: Iterable[str], what: str) -> Iterable[str]:
    """``items``, unless it is one string: its characters are no ids or identifiers."""
    if isinstance(items, str):
        raise ConfigError(f"{what} must be a list of them, got the text {items!r}: pass [{items!r}]")
    return items


def _unit_rows(vectors: Any) -> np.ndarray:
    """Vectors as float32 rows of unit length (a zero row stays zero). Similarities are dot
    products of unit rows; an embedder of one's own need not return them so (many models'
    vectors are longer), and an entry stored before they were made so may not be either."""
    rows = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit: np.ndarray = rows / np.maximum(norms, 1e-12)
    return unit


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    """The ids ``_WRITE_ROWS`` at a time: a write of more rows than Chroma's ``max_batch_size``
    (5461 embedded) is refused whole."""
    for start in range(0, len(ids), _WRITE_ROWS):
        yield ids[start : start + _WRITE_ROWS]


def _listed(card_ids: Iterable[str]) -> str:
    """Card ids as one metadata value: comma-separated, a ``,`` or ``\\`` in an id escaped, so card
    ``c16,c0`` is one id, not two. Ids without either are written as they always were."""
    return ",".join(i.replace("\\", "\\\\").replace(",", "\\,") for i in card_ids)


def _unlisted(value: str) -> list[str]:
    """The card ids of a :func:`_listed` value."""
    return [re.sub(r"\\(.)", r"\1", found, flags=re.DOTALL) for found in _LISTED_ID.findall(value)]


def _members(meta: Any) -> tuple[str, ...]:
    return tuple(_unlisted(str(meta.get("members") or "")))


def _postings_of(card_ids: Sequence[str], documents: Sequence[str]) -> dict[str, list[str]]:
    """Identifier -> the ids of the given cards (oldest first) whose document holds it."""
    wanted: dict[str, list[str]] = {}
    for card_id, document in zip(card_ids, documents, strict=True):
        for term in identifier_terms(document):
            wanted.setdefault(term, []).append(card_id)
    return wanted


def _post(twin: Collection | None, wanted: Mapping[str, list[str]], *, remove: bool = False) -> None:
    """Add cards to (or remove them from) the postings of their identifiers (see :func:`_postings_of`)."""
    if twin is None:
        return
    terms = list(wanted)
    for start in range(0, len(terms), _WRITE_ROWS):
        chunk = terms[start : start + _WRITE_ROWS]
        held = _postings(twin, chunk)
        changed: dict[str, list[str]] = {}
        for term in chunk:
            old = held.get(term, [])
            if remove:
                gone = set(wanted[term])
                new = [i for i in old if i not in gone]
            else:
                new = list(dict.fromkeys([*reversed(wanted[term]), *old]))[:POSTINGS]
            if new != old:
                changed[term] = new
        if changed:
            twin.upsert(
                ids=list(changed),
                embeddings=np.array([[_point(t)] for t in changed], dtype=np.float32),
                metadatas=[{"cards": _listed(ids)} for ids in changed.values()],
            )


def _point(term: str) -> float:
    """A 1-d vector for an identifier entry (Chroma wants one; spread so the graph stays sound)."""
    return zlib.crc32(term.encode("utf-8")) / 2**32


def _postings(twin: Collection, terms: list[str]) -> dict[str, list[str]]:
    got = twin.get(ids=terms, include=["metadatas"])
    cards = (str(m.get("cards") or "") for m in got["metadatas"] or [])
    return {term: _unlisted(ids) for term, ids in zip(got["ids"], cards, strict=True) if ids}


def _longest(term: str) -> tuple[int, str]:
    return (-len(term), term)


SIMILARITY_BLOCK_FLOATS = 8_000_000
"""Similarities computed at once by :func:`_similarity_rows` (32 MB): a block of rows against
every vector, never the whole n x n matrix (40 GB for 100,000 cards)."""


def _similarity_rows(vectors: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each vector's index and its similarities with every vector, a block of rows at a time."""
    rows = max(1, SIMILARITY_BLOCK_FLOATS // max(1, len(vectors)))
    for start in range(0, len(vectors), rows):
        for offset, similarity in enumerate(vectors[start : start + rows] @ vectors.T):
            yield start + offset, similarity
