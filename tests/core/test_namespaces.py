"""Namespaces and persistence: tenants sharing one SQLite file never see each other's memory, and a
reopened file restores cards and history."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest

from damc_core import (
    ConfigError,
    DecisionMemory,
    InMemoryStore,
    MemorySettings,
    Namespace,
    SQLiteStore,
    StoreClosedError,
)


def test_two_tenants_on_one_sqlite_file_never_see_each_other(db_path, counter, clock, msg, memory_text):
    with SQLiteStore(db_path) as first_handle, SQLiteStore(db_path) as second_handle:
        mia = DecisionMemory(
            namespace=Namespace(user="mia", session="trip"), store=first_handle, counter=counter, clock=clock
        )
        omar = DecisionMemory(
            namespace=Namespace(user="omar", session="trip"),
            store=second_handle,
            counter=counter,
            clock=clock,
        )
        mia.observe(msg.user("My reservation is ZFA04Y, pay with credit_card_4421486."))
        mia.observe(msg.call("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
        mia_card = mia.observe(msg.result("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
        omar.observe(msg.user("My reservation is 5RJ7UH."))

        assert [c.id for c in mia.cards()] == ["c0", "c1", "c2"]
        assert [c.id for c in omar.cards()] == ["c0"]
        assert omar.recall(mia_card.id) is None
        assert omar.recall("c0")["content"] == "My reservation is 5RJ7UH."
        assert mia.recall("c0")["content"].startswith("My reservation is ZFA04Y")
        assert "No memory card 'c2'" in omar.handle_recall({"card_id": "c2"})
        omar_sent = str(omar.build().messages)
        assert "ZFA04Y" not in omar_sent and "credit_card_4421486" not in omar_sent
        assert "5RJ7UH" not in str(mia.build().messages)


def test_sessions_of_one_user_are_separate(store, counter, clock, msg):
    morning = DecisionMemory(
        namespace=Namespace(user="mia", session="morning"), store=store, counter=counter, clock=clock
    )
    evening = DecisionMemory(
        namespace=Namespace(user="mia", session="evening"), store=store, counter=counter, clock=clock
    )

    morning.observe(msg.user("Cancel ZFA04Y."))

    assert evening.cards() == []
    assert evening.recall("c0") is None


@pytest.mark.parametrize(
    ("owner", "other"),
    [
        (Namespace(user="a/b", session="c"), Namespace(user="a", session="b/c")),
        (Namespace(user="acme/alice", session="s1"), Namespace(user="acme%2Falice", session="s1")),
    ],
    ids=["slash", "escaped slash"],
)
def test_names_that_look_alike_once_escaped_never_share_a_memory(store, counter, clock, msg, owner, other):
    alice = DecisionMemory(namespace=owner, store=store, counter=counter, clock=clock)
    mallory = DecisionMemory(namespace=other, store=store, counter=counter, clock=clock)

    alice.observe(msg.user("My card is card_4242, order W77."))

    assert owner.key != other.key
    assert mallory.recall("c0") is None
    assert "card_4242" not in str(mallory.build().messages)


def _key_before_percent_was_escaped(namespace: Namespace) -> str:
    """``Namespace.key`` as releases before fe00fd2 made it: only ``/`` escaped, as ``%2F``."""
    return f"{namespace.user.replace('/', '%2F')}/{namespace.session.replace('/', '%2F')}"


def _as_an_older_release_stored_it(db_path, namespace: Namespace) -> None:
    """Move the namespace's rows under the key a release before ``%`` was escaped gave them."""
    with contextlib.closing(sqlite3.connect(db_path)) as db, db:
        for table in ("records", "cards"):
            db.execute(
                f"UPDATE {table} SET ns = ? WHERE ns = ?",
                (_key_before_percent_was_escaped(namespace), namespace.key),
            )


def test_a_memory_stored_before_percent_was_escaped_opens_after_the_upgrade(db_path, counter, clock, msg):
    tenant = Namespace(user="acme%40corp", session="trip")
    with SQLiteStore(db_path) as store:
        memory = DecisionMemory(namespace=tenant, store=store, counter=counter, clock=clock)
        memory.observe(msg.user("My reservation is ZFA04Y."))
        memory.observe_tool("get_reservation_details", {"reservation_id": "ZFA04Y"}, {"cabin": "economy"})
        before = memory.cards()
    _as_an_older_release_stored_it(db_path, tenant)

    with SQLiteStore(db_path) as store:
        reopened = DecisionMemory(namespace=tenant, store=store, counter=counter, clock=clock)

        assert reopened.cards() == before
        assert reopened.recall("c0") == msg.user("My reservation is ZFA04Y.")
        assert store.record(tenant, "r2") is not None
        assert reopened.observe(msg.user("Upgrade it to business.")).id == "c3"
        assert [r.id for r in store.records(tenant)] == ["r0", "r1", "r2", "r3"]
        with contextlib.closing(sqlite3.connect(db_path)) as db:  # new events go under the new key
            assert db.execute("SELECT ns FROM records WHERE id = 'r3'").fetchall() == [(tenant.key,)]
        for neighbour in (Namespace(user="acme@corp", session="trip"), Namespace(user="acme%40corp")):
            assert store.records(neighbour) == [] and store.record(neighbour, "r0") is None


@pytest.mark.parametrize(
    ("reader", "writer"),
    [
        (Namespace(user="acme%2Falice", session="s1"), Namespace(user="acme/alice", session="s1")),
        (Namespace(user="50%25", session="s1"), Namespace(user="50%", session="s1")),
    ],
    ids=["escaped slash", "escaped percent"],
)
def test_a_key_from_before_the_upgrade_that_another_namespace_holds_is_not_read(
    store, counter, clock, msg, reader, writer
):
    """``reader``'s key before ``%`` was escaped is ``writer``'s key now: whose records are stored
    under it cannot be told, so ``reader`` does not look there."""
    DecisionMemory(namespace=writer, store=store, counter=counter, clock=clock).observe(
        msg.user("My card is card_4242.")
    )
    intruder = DecisionMemory(namespace=reader, store=store, counter=counter, clock=clock)

    assert _key_before_percent_was_escaped(reader) == writer.key
    assert intruder.messages() == [] and intruder.recall("c0") is None


def test_two_memories_on_one_session_keep_both_writers_events(db_path, counter, clock, msg):
    """Two workers (or two ``for_session`` handles) on one conversation: the second to write a
    sequence number reads the first one's records in, and nothing is overwritten."""
    session = Namespace(user="omar", session="trip")
    with SQLiteStore(db_path) as first_handle, SQLiteStore(db_path) as second_handle:
        worker_a = DecisionMemory(namespace=session, store=first_handle, counter=counter, clock=clock)
        worker_b = DecisionMemory(namespace=session, store=second_handle, counter=counter, clock=clock)

        worker_a.observe(msg.user("My order is W111."))
        late = worker_b.observe(msg.user("Also cancel reservation ABC123."))
        worker_a.observe(msg.user("Refund to gift_card_5."))

        assert late.id == "c1"
        assert [c.summary for c in worker_b.cards()] == [
            "[c0] user: My order is W111.",
            "[c1] user: Also cancel reservation ABC123.",
        ]
        assert "W111" in str(worker_b.build().messages)

    with SQLiteStore(db_path) as reopened:
        contents = [m["content"] for m in DecisionMemory(namespace=session, store=reopened).messages()]
    assert contents == ["My order is W111.", "Also cancel reservation ABC123.", "Refund to gift_card_5."]


def test_two_workers_recording_tool_calls_in_one_go_never_share_a_call_id(db_path, counter, clock):
    session = Namespace(user="omar", session="trip")
    with SQLiteStore(db_path) as first_handle, SQLiteStore(db_path) as second_handle:
        worker_a = DecisionMemory(namespace=session, store=first_handle, counter=counter, clock=clock)
        worker_b = DecisionMemory(namespace=session, store=second_handle, counter=counter, clock=clock)

        worker_a.observe_tool("get_user", {"user_id": "omar_1"}, {"user_id": "omar_1", "orders": ["W111"]})
        worker_b.observe_tool("get_order", {"order_id": "W111"}, {"order_id": "W111", "status": "pending"})

        calls = [m for m in worker_b.messages() if m["role"] == "assistant"]
        assert len({c["tool_calls"][0]["id"] for c in calls}) == 2
        assert "pending" in str(worker_b.build().messages)


class ReadCountingStore(SQLiteStore):
    """A real SQLite store that notes how many records each read returned."""

    def __init__(self, path):
        super().__init__(path)
        self.records_read: list[int] = []

    def records(self, namespace, *, since=0):
        found = super().records(namespace, since=since)
        self.records_read.append(len(found))
        return found


def test_refresh_reads_only_what_the_other_worker_wrote_since(db_path, counter, clock, msg):
    """A worker catching up on a long conversation reads the new records, not the whole thread."""
    session = Namespace(user="omar", session="trip")
    with SQLiteStore(db_path) as first_handle, ReadCountingStore(db_path) as second_handle:
        worker_a = DecisionMemory(namespace=session, store=first_handle, counter=counter, clock=clock)
        for turn in range(30):
            worker_a.observe(msg.user(f"Note {turn}: order W{turn:03d}."))
        worker_b = DecisionMemory(namespace=session, store=second_handle, counter=counter, clock=clock)
        worker_a.observe(msg.user("Refund to gift_card_5."))

        worker_b.refresh()

        assert second_handle.records_read == [30, 1]
        assert worker_b.cards()[-1].summary == "[c30] user: Refund to gift_card_5."
        assert len(worker_b.cards()) == 31
        assert worker_b.history(since=30) == [("c30", {"role": "user", "content": "Refund to gift_card_5."})]


def test_a_cleared_conversation_stays_cleared_when_the_store_is_reopened(db_path, counter, clock, msg):
    with SQLiteStore(db_path) as store:
        memory = DecisionMemory(store=store, counter=counter, clock=clock)
        memory.observe(msg.user("My reservation is ZFA04Y."))
        memory.clear()
        card = memory.observe(msg.user("Book a new flight to SEA."))

        assert "ZFA04Y" not in str(memory.build().messages)
        assert card.id == "c2"

    with SQLiteStore(db_path) as store:
        reopened = DecisionMemory(store=store, counter=counter, clock=clock)
        assert [c.summary for c in reopened.cards()] == ["[c2] user: Book a new flight to SEA."]
        assert "ZFA04Y" not in str(reopened.build().messages)
        assert [m["content"] for m in reopened.messages()] == [
            "My reservation is ZFA04Y.",
            "Book a new flight to SEA.",
        ]
        assert reopened.recall("c0") == msg.user("My reservation is ZFA04Y.")  # the record is kept
        assert reopened.recall("c1") is None  # where the conversation was cleared: no event


def test_in_memory_store_isolates_namespaces_too(counter, clock, msg):
    store = InMemoryStore()
    one = DecisionMemory(namespace=Namespace(user="u1"), store=store, counter=counter, clock=clock)
    two = DecisionMemory(namespace=Namespace(user="u2"), store=store, counter=counter, clock=clock)

    one.observe(msg.user("Order #W4923227"))

    assert two.cards() == [] and two.recall("c0") is None
    assert one.recall("c0") == msg.user("Order #W4923227")


@pytest.mark.parametrize(("user", "session"), [("", "s"), ("u", ""), (None, "s")])
def test_empty_namespace_parts_are_rejected(user, session):
    with pytest.raises(ConfigError, match="must be a non-empty string"):
        Namespace(user=user, session=session)  # type: ignore[arg-type]


def test_a_namespace_part_cut_inside_an_emoji_is_rejected():
    with pytest.raises(ConfigError, match=r"Namespace\.session must be valid text"):
        Namespace(user="mia", session="trip \ud83d")


def test_reopening_the_sqlite_file_restores_cards_and_history(db_path, counter, clock, airline_messages, msg):
    namespace = Namespace(user="mia_li_3668", session="trip-1")
    settings = MemorySettings(budget=900)
    with SQLiteStore(db_path) as store:
        memory = DecisionMemory(
            namespace=namespace, store=store, counter=counter, clock=clock, settings=settings
        )
        for message in airline_messages:
            memory.observe(message)
        before = memory.build()
        cards_before = memory.cards()

    with SQLiteStore(db_path) as store:
        reopened = DecisionMemory(
            namespace=namespace, store=store, counter=counter, clock=clock, settings=settings
        )
        after = reopened.build()

        assert reopened.cards() == cards_before
        assert after.messages == before.messages
        assert after.decisions == before.decisions
        assert after.raw_tokens == before.raw_tokens
        assert reopened.recall("c5") == airline_messages[5]

        card = reopened.observe(msg.user("One more thing."))
        assert card.id == f"c{len(airline_messages)}"


def test_supersession_survives_reopening(db_path, counter, clock, msg):
    namespace = Namespace(user="mia", session="s")
    reservation = {"reservation_id": "ZFA04Y", "cabin": "economy", "status": "confirmed"}
    with SQLiteStore(db_path) as store:
        memory = DecisionMemory(namespace=namespace, store=store, counter=counter, clock=clock)
        memory.observe(msg.call("call_1", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
        old = memory.observe(msg.result("call_1", "get_reservation_details", reservation))
        memory.observe(msg.call("call_2", "get_reservation_details", {"reservation_id": "ZFA04Y"}))
        new = memory.observe(
            msg.result("call_2", "get_reservation_details", {**reservation, "cabin": "business"})
        )

    with SQLiteStore(db_path) as store:
        reopened = DecisionMemory(namespace=namespace, store=store, counter=counter, clock=clock)

        assert reopened.card(old.id).superseded_by == new.id


def test_reopening_between_a_tool_call_and_its_result_keeps_the_pairing(db_path, counter, clock, msg):
    namespace = Namespace(user="mia", session="s")
    with SQLiteStore(db_path) as store:
        memory = DecisionMemory(namespace=namespace, store=store, counter=counter, clock=clock)
        memory.observe(msg.call("call_1", "search_direct_flight", {"origin": "JFK", "destination": "SEA"}))

    with SQLiteStore(db_path) as store:
        reopened = DecisionMemory(namespace=namespace, store=store, counter=counter, clock=clock)
        card = reopened.observe(
            {"role": "tool", "tool_call_id": "call_1", "content": '[{"flight_number": "HAT069"}]'}
        )

        assert card.tool_name == "search_direct_flight"
        assert dict(card.arguments) == {"origin": "JFK", "destination": "SEA"}


def test_closed_store_raises_store_closed_error(db_path, counter, clock, msg):
    store = SQLiteStore(db_path)
    memory = DecisionMemory(store=store, counter=counter, clock=clock)
    store.close()

    with pytest.raises(StoreClosedError):
        memory.observe(msg.user("Hello"))


def test_a_session_of_the_same_user_shares_the_store_and_settings_not_the_records(db_path, msg):
    with SQLiteStore(db_path) as store:
        trip = DecisionMemory(
            namespace=Namespace(user="mia", session="trip"), store=store, settings=MemorySettings(budget=700)
        )
        trip.observe(msg.user("My reservation is ZFA04Y."))

        refund = trip.for_session("refund")
        refund.observe(msg.user("Refund order #W4923227."))

        assert refund.namespace == Namespace(user="mia", session="refund")
        assert refund.store is store and refund.settings is trip.settings
        assert [m["content"] for m in trip.messages()] == ["My reservation is ZFA04Y."]
        assert [m["content"] for m in refund.messages()] == ["Refund order #W4923227."]
        assert [m["content"] for m in trip.for_session("refund").messages()] == ["Refund order #W4923227."]
