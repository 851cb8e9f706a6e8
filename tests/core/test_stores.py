"""Every store backend passes the same conformance checks (``damc_core.testing``)."""

from __future__ import annotations

import itertools

import pytest

from damc_core import InMemoryStore, SQLiteStore
from damc_core.testing import CHECKS, run_store_conformance

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
