from __future__ import annotations

import itertools
import multiprocessing
import shutil
from pathlib import Path

import pytest

from damc_core import DecisionMemory, Namespace, StoreClosedError
from damc_core.errors import ConfigError, StoreError
from damc_core.stores.chroma import ChromaConfig, ChromaStore, release
from damc_core.testing import run_store_conformance, sample_card

WRITERS = 8
EVENTS_PER_WRITER = 12


def test_chroma_store_conforms(chroma_config: ChromaConfig) -> None:
    counter = itertools.count()

    def fresh() -> ChromaStore:
        # A new prefix per check: each check must start from an empty store.
        return ChromaStore(
            ChromaConfig(
                path=None if chroma_config.host else f"{chroma_config.path}-{next(counter)}",
                host=chroma_config.host,
                port=chroma_config.port,
                prefix=f"{chroma_config.prefix}{next(counter)}",
            )
        )

    run_store_conformance(fresh)


def test_memory_reopens_from_chroma_with_every_card(chroma_config: ChromaConfig) -> None:
    namespace = Namespace(user="u-1", session="trip")
    with ChromaStore(chroma_config) as store:
        memory = DecisionMemory(namespace=namespace, store=store)
        memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
        memory.observe_tool("get_user_details", {"user_id": "mia_li_3668"}, {"reservations": ["NO6JO3"]})
        before = [(c.id, c.summary) for c in memory.cards()]
    with ChromaStore(chroma_config) as store:
        reopened = DecisionMemory(namespace=namespace, store=store)
        assert [(c.id, c.summary) for c in reopened.cards()] == before
        assert reopened.handle_recall({"card_id": "c2"}) == '{"reservations": ["NO6JO3"]}'


def _as_an_older_release_stored_it(config: ChromaConfig, namespace: Namespace) -> None:
    """Rewrite the namespace's rows as releases before fe00fd2 and 1036cc5 wrote them: stored for
    the key that escaped only ``/`` (as ``%2F``), under row ids ``<key>|<id>`` with nothing escaped."""
    old_key = f"{namespace.user.replace('/', '%2F')}/{namespace.session.replace('/', '%2F')}"
    client = config.client()
    try:
        for name, letter in (("records", "r"), ("cards", "c")):
            collection = client.get_collection(f"{config.prefix}_{name}")
            rows = collection.get(
                where={"ns": namespace.key}, include=["documents", "metadatas", "embeddings"]
            )
            collection.delete(ids=rows["ids"])
            metadatas = [
                {k: v for k, v in meta.items() if k != "w"} | {"ns": old_key} for meta in rows["metadatas"]
            ]
            collection.add(
                ids=[f"{old_key}|{letter}{meta['seq']}" for meta in metadatas],
                documents=rows["documents"],
                embeddings=rows["embeddings"],
                metadatas=metadatas,
            )
    finally:
        release(client)


@pytest.mark.parametrize(
    ("namespace", "look_alike", "look_alike_id"),
    [
        (Namespace(user="acme%40corp", session="trip"), Namespace(user="acme@corp", session="trip"), "r0"),
        (Namespace(user="shop", session="t1|b"), Namespace(user="shop", session="t1"), "b|r0"),
    ],
    ids=["percent", "bar"],
)
def test_a_memory_stored_by_an_older_release_opens_after_the_upgrade(
    chroma_config: ChromaConfig, namespace: Namespace, look_alike: Namespace, look_alike_id: str
) -> None:
    with ChromaStore(chroma_config) as store:
        memory = DecisionMemory(namespace=namespace, store=store)
        memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
        memory.observe_tool("get_user_details", {"user_id": "mia_li_3668"}, {"reservations": ["NO6JO3"]})
        before = [(c.id, c.summary) for c in memory.cards()]
    _as_an_older_release_stored_it(chroma_config, namespace)

    with ChromaStore(chroma_config) as store:
        reopened = DecisionMemory(namespace=namespace, store=store)

        assert [(c.id, c.summary) for c in reopened.cards()] == before
        assert reopened.handle_recall({"card_id": "c2"}) == '{"reservations": ["NO6JO3"]}'
        assert reopened.observe({"role": "user", "content": "Cancel NO6JO3"}).id == "c3"
        assert [r.id for r in store.records(namespace)] == ["r0", "r1", "r2", "r3"]
        assert store.records(look_alike) == [] and store.cards(look_alike) == []
        assert store.record(look_alike, look_alike_id) is None


def test_huge_and_odd_records_round_trip(tmp_path: object) -> None:
    store = ChromaStore(ChromaConfig(path=f"{tmp_path}/chroma"))
    memory = DecisionMemory(store=store)
    huge = "x" * 2_000_000
    memory.observe({"role": "tool", "tool_call_id": "t", "content": huge})
    memory.observe({"role": "user", "content": None})
    assert memory.handle_recall({"card_id": "c0"}) == huge
    assert len(store.records(memory.namespace)) == 2


def test_bad_config_says_what_to_do() -> None:
    with pytest.raises(ConfigError, match="not both"):
        ChromaConfig(path="x", host="localhost")
    with pytest.raises(ConfigError, match="port"):
        ChromaConfig(host="localhost", port=0)
    with pytest.raises(ConfigError, match="starting with a letter or digit"):
        ChromaConfig(path="x", prefix="_damc")  # Chroma's collection names start so
    with pytest.raises(StoreError, match="cannot open Chroma"):
        ChromaStore(ChromaConfig(host="127.0.0.1", port=1))


def test_closed_store_refuses_work(tmp_path: object) -> None:
    store = ChromaStore(ChromaConfig(path=f"{tmp_path}/chroma"))
    store.close()
    with pytest.raises(StoreClosedError):
        store.put_cards(Namespace(), [sample_card(0)])


def _writer(host: str, port: int, prefix: str, worker: int) -> None:
    config = ChromaConfig(host=host, port=port, prefix=prefix)
    store = ChromaStore(config)
    memory = DecisionMemory(namespace=Namespace(user="fleet", session=f"agent-{worker}"), store=store)
    shared = Namespace(user="fleet", session="shared")
    for step in range(EVENTS_PER_WRITER):
        memory.observe_tool("get_reservation_details", {"reservation_id": f"R{worker}X{step}"}, {"ok": step})
        store.put_cards(shared, [sample_card(worker * 1000 + step)])


def test_eight_writer_processes_on_one_server_lose_no_card(chroma_server: ChromaConfig) -> None:
    assert chroma_server.host is not None
    prefix = "fleet"
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_writer, args=(chroma_server.host, chroma_server.port, prefix, w))
        for w in range(WRITERS)
    ]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=300)
        assert process.exitcode == 0
    store = ChromaStore(ChromaConfig(host=chroma_server.host, port=chroma_server.port, prefix=prefix))
    shared = store.cards(Namespace(user="fleet", session="shared"))
    assert sorted(c.seq for c in shared) == sorted(
        w * 1000 + s for w in range(WRITERS) for s in range(EVENTS_PER_WRITER)
    )
    for worker in range(WRITERS):
        memory = DecisionMemory(namespace=Namespace(user="fleet", session=f"agent-{worker}"), store=store)
        assert len(memory.cards()) == 2 * EVENTS_PER_WRITER
        last_call = memory.recall(f"c{2 * EVENTS_PER_WRITER - 2}")
        assert last_call is not None
        assert f"R{worker}X{EVENTS_PER_WRITER - 1}" in last_call["tool_calls"][0]["function"]["arguments"]


def _same_session_writer(host: str, port: int, prefix: str, worker: int) -> None:
    store = ChromaStore(ChromaConfig(host=host, port=port, prefix=prefix))
    memory = DecisionMemory(namespace=Namespace(user="fleet", session="one chat"), store=store)
    for step in range(EVENTS_PER_WRITER):
        memory.observe({"role": "user", "content": f"writer {worker} step {step}"})


def test_writers_of_one_session_on_one_server_take_turns(chroma_server: ChromaConfig) -> None:
    """Chroma's add of an id it holds does nothing: a writer that lost the race for a record id
    must find out and take the next one, or its event is lost and its card overwrites the other's."""
    assert chroma_server.host is not None
    context = multiprocessing.get_context("spawn")
    server = (chroma_server.host, chroma_server.port)
    workers = [context.Process(target=_same_session_writer, args=(*server, "turns", w)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=300)
        assert process.exitcode == 0

    store = ChromaStore(ChromaConfig(host=chroma_server.host, port=chroma_server.port, prefix="turns"))
    memory = DecisionMemory(namespace=Namespace(user="fleet", session="one chat"), store=store)
    said = sorted(m["content"] for m in memory.messages())
    assert said == sorted(f"writer {w} step {s}" for w in range(3) for s in range(EVENTS_PER_WRITER))
    for card in memory.cards():
        assert card.text == memory.recall(card.id)["content"]


def test_a_namespace_holding_a_pipe_keeps_its_record_ids(chroma_config: ChromaConfig) -> None:
    namespace = Namespace(user="bob", session="s1|x")
    with ChromaStore(chroma_config) as store:
        memory = DecisionMemory(namespace=namespace, store=store)
        memory.observe({"role": "user", "content": "Book HAT069"})

        assert [r.id for r in store.records(namespace)] == ["r0"]
        assert memory.handle_recall({"card_id": "c0"}) == "Book HAT069"


def test_a_record_id_holding_a_pipe_cannot_read_a_session_whose_name_goes_on_with_it(
    chroma_config: ChromaConfig,
) -> None:
    with ChromaStore(chroma_config) as store:
        DecisionMemory(namespace=Namespace(user="shop", session="t1|b"), store=store).observe(
            {"role": "user", "content": "My card is credit_card_4421486"}
        )
        other = Namespace(user="shop", session="t1")

        assert store.record(other, "b|r0") is None
        assert store.record(Namespace(user="shop", session="t1|b"), "r0") is not None


def test_a_closed_store_lets_its_folder_be_removed_and_made_again(tmp_path: Path) -> None:
    """Closing releases the folder's database, so a store made anew at that path can write."""
    folder = tmp_path / "chroma"
    with ChromaStore(ChromaConfig(path=folder)) as store:
        store.put_cards(Namespace(), [sample_card(0)])
    shutil.rmtree(folder)

    with ChromaStore(ChromaConfig(path=folder)) as store:
        store.put_cards(Namespace(), [sample_card(1)])
        assert [card.id for card in store.cards(Namespace())] == ["c1"]


def test_a_record_without_a_time_is_refused_and_the_session_stays_readable(
    chroma_config: ChromaConfig,
) -> None:
    from damc_core import RawRecord

    namespace = Namespace(user="bob", session="clock")
    with ChromaStore(chroma_config) as store:
        store.append(RawRecord("r0", namespace, 0, 1.0, '{"role": "user", "content": "hi"}'))

        with pytest.raises(StoreError, match="no time"):
            store.append(RawRecord("r1", namespace, 1, float("nan"), '{"role": "user", "content": "?"}'))

        assert [r.id for r in store.records(namespace)] == ["r0"]


def test_a_record_without_a_text_body_is_refused(chroma_config: ChromaConfig) -> None:
    """As SQLite refuses it: a record read back with no body cannot be replayed."""
    from damc_core import RawRecord

    namespace = Namespace(user="bob", session="empty")
    with ChromaStore(chroma_config) as store:
        with pytest.raises(StoreError, match="no text body"):
            store.append(RawRecord("r0", namespace, 0, 1.0, None))  # type: ignore[arg-type]

        assert store.record(namespace, "r0") is None and store.records(namespace) == []
