"""Every store backend passes the same conformance checks (``damc_core.testing``)."""

from __future__ import annotations

import itertools
import sys
import threading

import pytest

from damc_core import InMemoryStore, Namespace, SQLiteStore
from damc_core.errors import RecordExistsError
from damc_core.testing import CHECKS, run_store_conformance, sample_card
from damc_core.types import RawRecord

_files = itertools.count()


@pytest.fixture(params=["memory", "sqlite-file", "sqlite-memory"])
def make_store(request, tmp_path):
    def make():
        if request.param == "memory":
            return InMemoryStore()
        if request.param == "sqlite-memory":
            return SQLiteStore(":memory:")
        return SQLiteStore(tmp_path / f"store-{next(_files)}.sqlite3")

    return make


def test_store_conforms(make_store):
    run_store_conformance(make_store)


class Forgetful(InMemoryStore):
    """Loses every write."""

    def append(self, record):
        self._check()

    def put_cards(self, namespace, cards):
        self._check()


class NeverClosed(InMemoryStore):
    """Keeps working after close()."""

    def _check(self):
        pass


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_each_check_catches_a_broken_store(check):
    broken = NeverClosed() if check.__name__ == "check_closed_store_refuses_work" else Forgetful()
    with pytest.raises(AssertionError):
        check(broken)


def test_sqlite_file_uses_wal(tmp_path):
    with SQLiteStore(tmp_path / "wal.sqlite3") as store:
        mode = store._db().execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_threads_writing_one_namespace_while_others_read_it_lose_nothing(make_store):
    """Workers in threads of one process share a store: a read while another thread writes
    neither fails nor misses what was written, and of two threads storing one record id exactly
    one does."""
    store, namespace, ids = make_store(), Namespace(user="u-42", session="trip"), range(1500)
    taken: list[str] = []
    failures: list[BaseException] = []
    written = threading.Event()

    def write(worker: int) -> None:
        for seq in ids:
            record = RawRecord(f"r{seq}", namespace, seq, 1.0, f'{{"role": "user", "content": "{worker}"}}')
            try:
                store.append(record)
                store.put_cards(namespace, [sample_card(seq)])
            except RecordExistsError:
                taken.append(record.id)

    def read() -> None:
        while not written.is_set():
            store.records(namespace)
            store.cards(namespace)

    def safely(work, *args) -> None:
        try:
            work(*args)
        except BaseException as exc:
            failures.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can
    try:
        writers = [threading.Thread(target=safely, args=(write, w)) for w in range(2)]
        readers = [threading.Thread(target=safely, args=(read,)) for _ in range(2)]
        for thread in writers + readers:
            thread.start()
        for thread in writers:
            thread.join()
        written.set()
        for thread in readers:
            thread.join()
    finally:
        sys.setswitchinterval(interval)

    assert failures == []
    assert sorted(taken) == sorted(f"r{seq}" for seq in ids)  # each id refused to one writer
    assert [r.seq for r in store.records(namespace)] == list(ids)
    assert [c.id for c in store.cards(namespace)] == [f"c{seq}" for seq in ids]
