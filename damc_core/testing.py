"""Conformance checks every ``MemoryStore`` backend must pass, and a booking conversation every
framework adapter must turn into the same cards.

A backend's test suite runs the store checks in a few lines::

    def test_my_store_conforms(tmp_path):
        run_store_conformance(lambda: MyStore(tmp_path / "db"))

``make_store`` is called once per check and must return a new, empty store each time.

An adapter's tests wrap the booking tools (:data:`BOOKING_TOOLS`) in their framework's tool type
and script the model with :data:`BOOKING_STEPS`; the cards DAMC makes must not depend on the
framework that carried the conversation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from .errors import RecordExistsError, StoreClosedError, StoreError
from .stores import MemoryStore
from .types import Card, CardKind, Fact, Namespace, RawRecord, Score, Table

ALICE = Namespace(user="alice", session="trip-1")
BOB = Namespace(user="bob", session="trip-1")


def sample_card(seq: int, **fields: object) -> Card:
    """A card with every field set to something other than its default."""
    values: dict[str, object] = {
        "id": f"c{seq}",
        "record_id": f"r{seq}",
        "seq": seq,
        "created_at": 1_715_785_200.0 + seq,
        "kind": CardKind.TOOL_RESULT,
        "summary": f"[c{seq}] search(date=2024-05-20) -> HAT069 | 121",
        "facts": (Fact("status", "available", "status"),),
        "tables": (Table("rows", ("flight_number", "price"), (("HAT069", "121"),)),),
        "text": "extract",
        "tool_name": "search",
        "tool_call_id": "call_1",
        "arguments": {"date": "2024-05-20", "cabin": ["economy"]},
        "decision_links": ("c9",),
        "used_terms": frozenset({"hat069"}),
        "constraints": ("HAT083: status=sold out",),
        "source": "tool:search",
        "trust": 0.8,
        "as_of": 1_715_785_200.0,
        "volatile": True,
        "entity_keys": (("HAT069", "price"),),
        "stale_rows": (("hat069", "c12"),),
        "stale_cells": (("hat070", "available_seats", "c12"),),
        "stale_facts": (("price", "c12"),),
        "superseded_by": "c12",
        "prior": 0.7,
        "scores": (Score("causal", 0.5, "used by c9"),),
        "tokens": 17,
        "raw_tokens": 90,
        "terms": frozenset({"hat069", "121"}),
    }
    values.update(fields)
    return Card(**values)  # type: ignore[arg-type]


def _record(namespace: Namespace, seq: int, body: str = '{"role": "user", "content": "hi"}') -> RawRecord:
    return RawRecord(id=f"r{seq}", namespace=namespace, seq=seq, created_at=1_715_785_200.0 + seq, body=body)


def check_records_round_trip_verbatim(store: MemoryStore) -> None:
    body = '{"role": "tool", "content": "Error: ünïcode \\u0000 kept", "tool_call_id": "x"}'
    store.append(_record(ALICE, 0, body))
    got = store.record(ALICE, "r0")
    assert got is not None and got.body == body and got.seq == 0
    assert store.record(ALICE, "r404") is None


def check_records_come_back_in_sequence_order(store: MemoryStore) -> None:
    for seq in (2, 0, 1):
        store.append(_record(ALICE, seq))
    assert [r.seq for r in store.records(ALICE)] == [0, 1, 2]


def check_reads_since_a_sequence_number(store: MemoryStore) -> None:
    for seq in (0, 1, 2, 3):
        store.append(_record(ALICE, seq))
    store.put_cards(ALICE, [sample_card(seq) for seq in (3, 0, 2, 1)])
    store.append(_record(BOB, 5))
    assert [r.seq for r in store.records(ALICE, since=2)] == [2, 3]
    assert [c.id for c in store.cards(ALICE, since=2)] == ["c2", "c3"]
    assert store.records(ALICE, since=4) == [] and store.cards(ALICE, since=4) == []


def check_reads_start_at_sequence_zero_unless_asked(store: MemoryStore) -> None:
    """``since`` defaults to 0 in every backend: a row numbered below it is read only from there."""
    for seq in (0, -1):
        store.append(_record(ALICE, seq))
    store.put_cards(ALICE, [sample_card(0), sample_card(-1)])
    assert [r.seq for r in store.records(ALICE)] == [0] and [c.seq for c in store.cards(ALICE)] == [0]
    assert [r.seq for r in store.records(ALICE, since=-1)] == [-1, 0]
    assert [c.seq for c in store.cards(ALICE, since=-1)] == [-1, 0]


def check_records_are_never_replaced(store: MemoryStore) -> None:
    store.append(_record(ALICE, 0, '{"role": "user", "content": "first"}'))
    try:
        store.append(_record(ALICE, 0, '{"role": "user", "content": "second"}'))
    except RecordExistsError:
        got = store.record(ALICE, "r0")
        assert got is not None and "first" in got.body, "a refused append must leave the record as it was"
        return
    raise AssertionError("appending a record id the namespace holds must raise RecordExistsError")


def check_records_without_a_text_body_are_refused(store: MemoryStore) -> None:
    """A body that is not text (``None``, bytes, a number) is a ``StoreError`` saying so, the
    same in every backend: read back, it would not be the event that was stored."""
    bodies = (None, b'{"role": "user", "content": "hi"}', 5)
    bad = ((f"a body of {body!r}", _record(ALICE, 0, body)) for body in bodies)  # type: ignore[arg-type]
    _check_refused(store, bad, says="has no text body")


def check_records_without_a_time_are_refused(store: MemoryStore) -> None:
    """A ``created_at`` that is not a finite number (NaN from a broken clock, an infinity,
    ``None``, a string) is a ``StoreError`` saying so, the same in every backend."""
    body = _record(ALICE, 0).body
    times = (float("nan"), float("inf"), float("-inf"), None, "2024-05-20")
    bad = ((f"a time of {at!r}", RawRecord("r0", ALICE, 0, at, body)) for at in times)  # type: ignore[arg-type]
    _check_refused(store, bad, says="has no time")


def _check_refused(store: MemoryStore, bad: Iterable[tuple[str, RawRecord]], *, says: str) -> None:
    """Each bad record of id ``r0`` is refused with a ``StoreError`` that ``says`` why (not as a
    taken id) and leaves nothing stored: the id stays free for the real record."""
    for what, record in bad:
        try:
            store.append(record)
        except RecordExistsError:
            raise AssertionError(f"{what} was refused as a taken id") from None
        except StoreError as exc:
            assert says in str(exc), f"{what} was refused with {exc}"
        else:
            raise AssertionError(f"appending a record with {what} must raise StoreError")
        assert store.record(ALICE, "r0") is None and store.records(ALICE) == []
    good = _record(ALICE, 0)
    store.append(good)
    assert [(r.body, r.created_at) for r in store.records(ALICE)] == [(good.body, good.created_at)]


def check_cards_round_trip_every_field(store: MemoryStore) -> None:
    card = sample_card(3)
    store.put_cards(ALICE, [card])
    assert store.cards(ALICE) == [card]


def check_put_cards_replaces_by_id(store: MemoryStore) -> None:
    store.put_cards(ALICE, [sample_card(1, prior=0.1), sample_card(0)])
    store.put_cards(ALICE, [sample_card(1, prior=0.9)])
    assert [(c.id, c.prior) for c in store.cards(ALICE)] == [("c0", 0.7), ("c1", 0.9)]
    store.put_cards(ALICE, [sample_card(0, prior=0.2), sample_card(0, prior=0.3)])  # the last one counts
    assert [(c.id, c.prior) for c in store.cards(ALICE)] == [("c0", 0.3), ("c1", 0.9)]


def check_namespaces_never_leak(store: MemoryStore) -> None:
    store.append(_record(ALICE, 0))
    store.put_cards(ALICE, [sample_card(0)])
    assert store.record(ALICE, "r0") is not None and store.cards(ALICE) == [sample_card(0)]
    assert store.records(BOB) == [] and store.cards(BOB) == []
    assert store.record(BOB, "r0") is None


def check_ids_holding_a_separator_stay_in_their_namespace(store: MemoryStore) -> None:
    """A session named ``t1|b`` and a card ``b|c0`` of session ``t1`` must not share a row."""
    longer, shorter = Namespace("shop", "t1|b"), Namespace("shop", "t1")
    store.put_cards(longer, [sample_card(0)])
    store.put_cards(shorter, [sample_card(1, id="b|c0")])
    store.append(RawRecord("left|right", shorter, 0, 1.0, '{"role": "user", "content": "hi"}'))
    store.append(_record(longer, 0))
    store.append(RawRecord("\\|r1", shorter, 1, 1.0, '{"role": "user", "content": "hi"}'))
    assert [c.id for c in store.cards(longer)] == ["c0"]
    assert [c.id for c in store.cards(shorter)] == ["b|c0"]
    assert [r.id for r in store.records(shorter)] == ["left|right", "\\|r1"]
    assert [r.id for r in store.records(longer)] == ["r0"]


def check_closed_store_refuses_work(store: MemoryStore) -> None:
    store.close()
    try:
        store.records(ALICE)
    except StoreClosedError:
        return
    raise AssertionError("a closed store must raise StoreClosedError")


CHECKS: tuple[Callable[[MemoryStore], None], ...] = (
    check_records_round_trip_verbatim,
    check_records_come_back_in_sequence_order,
    check_reads_since_a_sequence_number,
    check_reads_start_at_sequence_zero_unless_asked,
    check_records_are_never_replaced,
    check_records_without_a_text_body_are_refused,
    check_records_without_a_time_are_refused,
    check_cards_round_trip_every_field,
    check_put_cards_replaces_by_id,
    check_namespaces_never_leak,
    check_ids_holding_a_separator_stay_in_their_namespace,
    check_closed_store_refuses_work,
)


def run_store_conformance(make_store: Callable[[], MemoryStore]) -> None:
    """Run every check on a fresh store; raises ``AssertionError`` naming the first that fails."""
    for check in CHECKS:
        store = make_store()
        try:
            check(store)
        except AssertionError as exc:
            raise AssertionError(f"{check.__name__}: {exc}") from exc
        finally:
            store.close()


# -- the booking conversation of the adapter tests ---------------------------------------------
BOOKING_FLIGHTS = [
    {
        "flight_number": f"HAT{100 + i}",
        "status": "available" if i != 3 else "sold out",
        "prices": {"economy": 100 + 7 * i},
        "gate": f"B{i}",
        "aircraft": "A320neo",
        "meal": "snack box",
    }
    for i in range(30)
]
"""Thirty flights, one sold out: a long tool result with one option excluded."""
BOOKING_QUESTION = "Book HAT107 on 2024-05-20 for mia_li_3668 with my visa"
BOOKING_ANSWER = "Booked HAT107, reservation 4WQ150."


def get_user_details(user_id: str) -> str:
    """Look up a user."""
    return json.dumps(
        {
            "user_id": user_id,
            "payment_methods": {
                "credit_card_4421486": {"id": "credit_card_4421486", "brand": "visa"},
                "certificate_7504069": {"id": "certificate_7504069", "amount": 250},
            },
            "address": {"address1": "975 Sunset Drive " * 20},
        }
    )


def search_flights(date: str) -> str:
    """Search flights on a date."""
    return json.dumps(BOOKING_FLIGHTS)


def book(flight_number: str, payment_id: str) -> str:
    """Book a flight."""
    return json.dumps({"reservation_id": "4WQ150", "status": "confirmed", "flight_number": flight_number})


BOOKING_TOOLS = (get_user_details, search_flights, book)
BOOKING_STEPS: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("get_user_details", {"user_id": "mia_li_3668"}, "c1"),
    ("search_flights", {"date": "2024-05-20"}, "c2"),
    ("book", {"flight_number": "HAT107", "payment_id": "credit_card_4421486"}, "c3"),
)
"""The model's tool calls, in order: (tool name, arguments, call id)."""
