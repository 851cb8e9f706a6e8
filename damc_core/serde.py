"""Card serialization, passed to stores so they never format JSON themselves."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from .errors import SchemaVersionError
from .types import CARD_FORMAT_VERSION, Card, CardKind, Fact, Score, Table

logger = logging.getLogger("damc")


class CardSerializer(Protocol):
    def dumps(self, card: Card) -> str: ...
    def loads(self, data: str) -> Card: ...


class JsonCardSerializer:
    """Cards as JSON objects; refuses cards written by a newer format version."""

    def dumps(self, card: Card) -> str:
        return json.dumps(
            {
                "v": card.v,
                "id": card.id,
                "record_id": card.record_id,
                "seq": card.seq,
                "created_at": card.created_at,
                "kind": card.kind.value,
                "summary": card.summary,
                "facts": [[f.path, f.value, f.kind] for f in card.facts],
                "tables": [_table_fields(t) for t in card.tables],
                "text": card.text,
                "tool_name": card.tool_name,
                "tool_call_id": card.tool_call_id,
                "arguments": card.arguments,
                "decision_links": list(card.decision_links),
                "constraints": list(card.constraints),
                "source": card.source,
                "trust": card.trust,
                "as_of": card.as_of,
                "volatile": card.volatile,
                "entity_keys": [list(k) for k in card.entity_keys],
                "superseded_by": card.superseded_by,
                "stale_rows": [list(r) for r in card.stale_rows],
                "stale_cells": [list(r) for r in card.stale_cells],
                "stale_facts": [list(r) for r in card.stale_facts],
                "used_terms": sorted(card.used_terms),
                "prior": card.prior,
                "scores": [[s.name, s.value, s.provenance] for s in card.scores],
                "tokens": card.tokens,
                "raw_tokens": card.raw_tokens,
                "terms": sorted(card.terms),
            },
            ensure_ascii=False,
            default=str,
        )

    def loads(self, data: str) -> Card:
        raw: dict[str, Any] = json.loads(data)
        if raw.get("v", 0) > CARD_FORMAT_VERSION:
            raise SchemaVersionError(
                f"card {raw.get('id')!r} has format v{raw['v']}, this release reads up to "
                f"v{CARD_FORMAT_VERSION}; upgrade damc"
            )
        return Card(
            id=raw["id"],
            record_id=raw["record_id"],
            seq=raw["seq"],
            created_at=raw["created_at"],
            kind=CardKind(raw["kind"]),
            summary=raw["summary"],
            facts=tuple(Fact(*f) for f in raw["facts"]),
            tables=tuple(
                Table(p, tuple(c), tuple(tuple(r) for r in rows), *left_out)
                for p, c, rows, *left_out in raw["tables"]
            ),
            text=raw["text"],
            tool_name=raw["tool_name"],
            tool_call_id=raw["tool_call_id"],
            arguments=raw["arguments"],
            decision_links=tuple(raw["decision_links"]),
            constraints=tuple(raw["constraints"]),
            source=raw["source"],
            trust=raw["trust"],
            as_of=raw["as_of"],
            volatile=raw["volatile"],
            entity_keys=tuple((e, a) for e, a in raw["entity_keys"]),
            superseded_by=raw["superseded_by"],
            stale_rows=tuple((e, c) for e, c in raw.get("stale_rows", ())),
            stale_cells=tuple((e, k, c) for e, k, c in raw.get("stale_cells", ())),
            stale_facts=tuple((p, c) for p, c in raw.get("stale_facts", ())),
            used_terms=frozenset(raw.get("used_terms", ())),
            prior=raw["prior"],
            scores=tuple(Score(*s) for s in raw["scores"]),
            tokens=raw["tokens"],
            raw_tokens=raw["raw_tokens"],
            terms=frozenset(raw["terms"]),
            v=raw["v"],
        )


def readable_cards(serde: CardSerializer, documents: Iterable[str], where: str) -> list[Card]:
    """The cards ``documents`` hold, a damaged one left out with a warning: the memory encodes its
    card again from the raw record, which is stored first. A card of a newer format still stops
    the read (``SchemaVersionError``): this release must not rewrite it."""
    cards = []
    for document in documents:
        try:
            cards.append(serde.loads(document))
        except SchemaVersionError:
            raise
        except Exception as exc:
            logger.warning("damc: a damaged card in %s is encoded again from its record (%r)", where, exc)
    return cards


def _table_fields(table: Table) -> list[Any]:
    """A table as ``[path, columns, rows]``, and the count of rows left out when there are any."""
    fields: list[Any] = [table.path, list(table.columns), [list(r) for r in table.rows]]
    return [*fields, table.left_out] if table.left_out else fields
