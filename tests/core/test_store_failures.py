"""When the SQLite file is locked by another process or damaged: a clear ``StoreError``,
nothing already stored is lost, and the memory works again once the cause is gone."""

from __future__ import annotations

import json
import logging
import sqlite3
import time

import pytest

from damc_core import ConfigError, DecisionMemory, InMemoryStore, Namespace, SQLiteStore, StoreError

TRIP = Namespace("mia", "trip")


def memory_on(path, store_class=SQLiteStore) -> DecisionMemory:
    return DecisionMemory(namespace=TRIP, store=store_class(path, timeout=0.1))


def another_process_writing(path) -> sqlite3.Connection:
    """A connection of its own holding the file's write lock, as another process would."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_an_event_observed_while_another_process_holds_the_lock_is_a_store_error(tmp_path):
    path = tmp_path / "m.sqlite3"
    memory = memory_on(path)
    memory.observe({"role": "user", "content": "Book HAT107"})
    other = another_process_writing(path)

    with pytest.raises(StoreError, match=r"could not store record 'r1'.*locked"):
        memory.observe({"role": "user", "content": "With my visa"})
    other.execute("ROLLBACK")
    memory.observe({"role": "user", "content": "With credit_card_4421486"})

    assert [m["content"] for m in memory_on(path).messages()] == ["Book HAT107", "With credit_card_4421486"]


class LockedBetweenRecordAndCard(SQLiteStore):
    """Another process takes the write lock right after the raw record is stored."""

    lock_next = None

    def append(self, record):
        super().append(record)
        if LockedBetweenRecordAndCard.lock_next:
            LockedBetweenRecordAndCard.lock_next.execute("BEGIN IMMEDIATE")
            LockedBetweenRecordAndCard.lock_next = None


def test_a_card_write_that_fails_loses_nothing_and_leaves_the_file_free(tmp_path, caplog):
    path = tmp_path / "m.sqlite3"
    memory = memory_on(path, LockedBetweenRecordAndCard)
    memory.observe({"role": "user", "content": "Book HAT107"})
    other = LockedBetweenRecordAndCard.lock_next = sqlite3.connect(path, isolation_level=None)

    with caplog.at_level(logging.WARNING, logger="damc"):
        card = memory.observe({"role": "user", "content": "With my visa"})
    other.execute("ROLLBACK")
    memory.observe_tool("get_user_details", {"user_id": "mia_li_3668"}, {"payment": "credit_card_4421486"})
    another_session = DecisionMemory(
        namespace=Namespace("mia", "other"), store=SQLiteStore(path, timeout=0.1)
    )
    another_session.observe({"role": "user", "content": "Hello"})  # the file is not held by a stuck write

    assert "rebuilt from its record" in caplog.text
    assert card.summary == "[c1] user: With my visa"  # the live memory has the card all the same
    memory.store.close()
    reopened = memory_on(path)
    assert [c.id for c in reopened.cards()] == ["c0", "c1", "c2", "c3"]
    assert reopened.card("c1").summary == card.summary


def test_a_damaged_card_is_encoded_again_from_its_record(tmp_path, caplog):
    path = tmp_path / "m.sqlite3"
    memory = memory_on(path)
    memory.observe({"role": "user", "content": "Book HAT107"})
    memory.observe({"role": "user", "content": "With credit_card_4421486"})
    expected = [c.summary for c in memory.cards()]
    with sqlite3.connect(path) as db:
        db.execute("UPDATE cards SET data = '{\"id\": ' WHERE id = 'c1'")

    with caplog.at_level(logging.WARNING, logger="damc"):
        reopened = memory_on(path)

    assert [c.summary for c in reopened.cards()] == expected
    assert "damaged card" in caplog.text


def test_a_damaged_record_is_named_and_the_rest_of_the_conversation_is_read(tmp_path, caplog):
    path = tmp_path / "m.sqlite3"
    memory = memory_on(path)
    for text in ("Book HAT107", "With my visa", "On 2024-05-20"):
        memory.observe({"role": "user", "content": text})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE records SET body = 'not json' WHERE id = 'r1'")
        db.execute("DELETE FROM cards")

    with caplog.at_level(logging.WARNING, logger="damc"):
        reopened = memory_on(path)

    assert [m["content"] for m in reopened.messages()] == ["Book HAT107", "On 2024-05-20"]
    assert [c.id for c in reopened.cards()] == ["c0", "c2"]
    assert "record 'r1' of 'mia/trip' is damaged" in caplog.text
    with pytest.raises(StoreError, match="record 'r1' of 'mia/trip' is damaged"):
        reopened.recall("c1")
    assert reopened.handle_recall({"card_id": "c1"}).startswith("Could not recall 'c1'")


def test_a_record_or_card_damaged_into_bytes_that_are_not_text_is_named_and_the_rest_is_read(
    tmp_path, caplog
):
    path = tmp_path / "m.sqlite3"
    memory = memory_on(path)
    for text in ("Book HAT107", "With my visa", "On 2024-05-20"):
        memory.observe({"role": "user", "content": text})
    damaged = '{"role": "user", "content": "With my \xff visa"}'.encode("latin-1")  # a byte flipped on disk
    with sqlite3.connect(path) as db:
        db.execute("UPDATE records SET body = CAST(? AS TEXT) WHERE id = 'r1'", (damaged,))
        db.execute("UPDATE cards SET data = CAST(? AS TEXT) WHERE id = 'c2'", (b'{"id": "c2\xff"}',))

    with caplog.at_level(logging.WARNING, logger="damc"):
        reopened = memory_on(path)

    read = [m["content"] for m in reopened.messages()]
    assert read == ["Book HAT107", "With my \ufffd visa", "On 2024-05-20"]
    assert [c.summary for c in reopened.cards()] == [  # c2 encoded again from its record
        "[c0] user: Book HAT107",
        "[c1] user: With my visa",
        "[c2] user: On 2024-05-20",
    ]
    assert "record 'r1' of 'mia/trip'" in caplog.text
    assert "damaged card" in caplog.text
    assert reopened.recall("c1") == {"role": "user", "content": "With my \ufffd visa"}


def test_a_record_whose_fields_lost_their_kind_on_disk_is_read_without_them_and_numbering_goes_on(
    tmp_path, caplog
):
    path = tmp_path / "m.sqlite3"
    memory = memory_on(path)
    for text in ("Book HAT107", "With my visa", "On 2024-05-20", "And a hotel"):
        memory.observe({"role": "user", "content": text})
    with sqlite3.connect(path) as db:  # bytes flipped on disk: SQLite reads the cells back as blobs
        db.execute("UPDATE records SET created_at = x'00ff', v = x'1f' WHERE id = 'r2'")
        db.execute("UPDATE records SET seq = x'07' WHERE id = 'r1'")

    with caplog.at_level(logging.WARNING, logger="damc"):
        reopened = memory_on(path)
        reopened.observe({"role": "user", "content": "Thanks"})

    read = [m["content"] for m in reopened.messages()]
    assert read == ["Book HAT107", "On 2024-05-20", "And a hotel", "Thanks"]
    assert [c.id for c in reopened.cards()] == ["c0", "c2", "c3", "c4"]  # the next event is c4
    assert (
        "record 'r2' of 'mia/trip' in" in caplog.text
        and "its time and format version unreadable" in caplog.text
    )
    assert "record 'r1' of 'mia/trip' in" in caplog.text and "no sequence number" in caplog.text


def test_a_file_whose_schema_is_damaged_is_a_store_error(tmp_path):
    path = tmp_path / "m.sqlite3"
    with SQLiteStore(path) as store:  # closed: all of it is in the file, none in its journal
        DecisionMemory(namespace=TRIP, store=store).observe({"role": "user", "content": "Book HAT107"})
    data = bytearray(path.read_bytes())
    schema = data.index(b"CREATE TABLE")  # the schema's text, on the file's first page
    data[schema + 5 : schema + 25] = b"\xab" * 20  # quoted by SQLite's error, not text
    path.write_bytes(bytes(data))

    with pytest.raises(StoreError, match="cannot open SQLite store"):
        memory_on(path)


def test_an_event_spelled_like_the_clear_mark_does_not_clear_the_conversation(tmp_path):
    path = tmp_path / "m.sqlite3"
    memory = memory_on(path)
    memory.observe({"role": "user", "content": "Book HAT107"})
    forged = memory.observe({"role": "damc", "event": "clear"})

    reopened = memory_on(path)

    assert [c.id for c in reopened.cards()] == ["c0", forged.id]
    assert reopened.recall(forged.id) == {"role": "damc", "event": "clear"}
    assert json.loads(json.dumps(reopened.messages()[1])) == {"role": "damc", "event": "clear"}


@pytest.mark.parametrize("card_id", ["b|r0", "r0", "c0; DROP", "../c0", ""])
def test_recall_looks_up_only_card_ids_of_this_namespace(tmp_path, card_id):
    store = SQLiteStore(tmp_path / "m.sqlite3")
    DecisionMemory(namespace=Namespace("mia", "trip|b"), store=store).observe(
        {"role": "user", "content": "My card is credit_card_4421486"}
    )
    memory = DecisionMemory(namespace=TRIP, store=store)

    assert memory.recall(card_id) is None


@pytest.mark.parametrize("bad", [("c\ud800", 2), ("c2", 2**63)], ids=["half an emoji", "past 64 bits"])
def test_a_card_sqlite_cannot_bind_is_a_store_error_and_later_writes_are_kept(tmp_path, bad):
    from dataclasses import replace

    from damc_core import RawRecord
    from damc_core.testing import sample_card

    path = tmp_path / "m.sqlite3"
    store = SQLiteStore(path, timeout=0.1)

    with pytest.raises(StoreError, match="could not store 2 cards"):
        card_id, seq = bad
        store.put_cards(TRIP, [sample_card(1), replace(sample_card(2), id=card_id, seq=seq)])
    store.append(RawRecord("r3", TRIP, 3, 1.0, "{}"))  # not inside the failed write's transaction
    SQLiteStore(path, timeout=0.1).append(RawRecord("r4", TRIP, 4, 1.0, "{}"))  # the file is free
    store.put_cards(TRIP, [sample_card(5)])
    store.close()

    reopened = SQLiteStore(path)
    assert [r.id for r in reopened.records(TRIP)] == ["r3", "r4"]
    assert [c.id for c in reopened.cards(TRIP)] == ["c5"]  # the failed write left nothing half done


def test_a_record_missing_a_value_is_a_store_error_not_a_taken_id(tmp_path):
    from damc_core import RawRecord, RecordExistsError

    store = SQLiteStore(tmp_path / "m.sqlite3")

    with pytest.raises(StoreError, match="NOT NULL") as raised:
        store.append(RawRecord("r0", TRIP, None, 1.0, "{}"))  # type: ignore[arg-type]
    assert not isinstance(raised.value, RecordExistsError)  # a memory would retry a taken id
    assert store.record(TRIP, "r0") is None


@pytest.mark.parametrize("store", [InMemoryStore, lambda: SQLiteStore(":memory:")], ids=["memory", "sqlite"])
def test_a_clock_that_gives_no_time_is_replaced_by_wall_time_and_the_event_kept(store, caplog):
    """A broken clock (NaN, None, a number past a float's range) must not cost an event its
    record: wall time stands in for it, and the memory says so once."""
    times = iter([float("nan"), None, 10**400, 1_715_785_200.0])
    memory = DecisionMemory(namespace=TRIP, store=store(), clock=lambda: next(times))
    said_by_user = ["Book HAT107", "With my visa", "Aisle seat", "Window seat"]

    with caplog.at_level(logging.WARNING, logger="damc"):
        for text in said_by_user:
            memory.observe({"role": "user", "content": text})

    records = memory.store.records(TRIP)
    assert [r.id for r in records] == ["r0", "r1", "r2", "r3"]
    assert all(abs(r.created_at - time.time()) < 600 for r in records[:3])
    assert records[3].created_at == 1_715_785_200.0
    assert [m["content"] for m in memory.messages()] == said_by_user
    said = [r.getMessage() for r in caplog.records if "clock()" in r.getMessage()]
    assert said == ["damc: clock() gave nan, not seconds; wall time is used instead"]


def test_a_clock_in_nanoseconds_is_replaced_by_wall_time_and_the_context_still_built(caplog):
    """``clock=time.time_ns`` (or a clock in milliseconds) gives no Unix seconds: its times are
    past year 9999, where an ``as of`` tag cannot be printed (``time.gmtime`` fails)."""
    memory = DecisionMemory(namespace=TRIP, store=InMemoryStore(), clock=time.time_ns)

    with caplog.at_level(logging.WARNING, logger="damc"):
        memory.observe({"role": "user", "content": "Is HAT107 still available?"})
        memory.observe_tool(
            "get_flight", {"flight": "HAT107"}, {"flight": "HAT107", "seats": 3, "price": 140}
        )
        memory.observe({"role": "user", "content": "And HAT108?"})
        memory.observe_tool("get_flight", {"flight": "HAT108"}, {"flight": "HAT108", "seats": 0, "price": 99})
        context = memory.build(budget=600)

    assert all(abs(r.created_at - time.time()) < 600 for r in memory.store.records(TRIP))
    assert "HAT107" in context.memory
    said = [r.getMessage() for r in caplog.records if "clock()" in r.getMessage()]
    assert len(said) == 1 and "not seconds; wall time is used instead" in said[0]


def test_a_store_whose_folder_is_a_file_is_a_store_error(tmp_path):
    (tmp_path / "notes").write_text("a file, not a folder")

    with pytest.raises(StoreError, match="cannot open SQLite store"):
        SQLiteStore(tmp_path / "notes" / "m.sqlite3")


@pytest.mark.parametrize("path", [None, 42, ["m.sqlite3"]])
def test_a_store_path_that_is_no_path_is_a_config_error_and_no_file_is_made(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)  # as text, None would name the file ./None

    with pytest.raises(ConfigError, match="file path"):
        SQLiteStore(path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("timeout", ["5", None, -1, float("nan")])
def test_a_lock_timeout_that_is_no_number_of_seconds_is_a_config_error(tmp_path, timeout):
    with pytest.raises(ConfigError, match="timeout"):
        SQLiteStore(tmp_path / "m.sqlite3", timeout=timeout)


def test_a_store_path_given_as_bytes_opens_that_file(tmp_path):
    path = tmp_path / "m.sqlite3"
    DecisionMemory(namespace=TRIP, store=SQLiteStore(bytes(path))).observe({"role": "user", "content": "hi"})

    assert [c.text for c in DecisionMemory(namespace=TRIP, store=SQLiteStore(path)).cards()] == ["hi"]
