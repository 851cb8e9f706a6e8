from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings

from damc_core import DecisionFocus, DecisionMemory, InMemoryStore, MemorySettings, Namespace
from damc_core.errors import ConfigError, StoreClosedError
from damc_core.retrieval import (
    CardIndex,
    HashingEmbedder,
    Lifecycle,
    MiniLMEmbedder,
    RetrievalValuator,
    focus_query,
    identifier_terms,
    load_embedder,
)
from damc_core.retrieval.chroma_ef import DamcEmbeddingFunction
from damc_core.stores.chroma import ChromaConfig
from damc_core.testing import sample_card

from .conftest import start_chroma_server, stop_chroma_server

ALICE = Namespace(user="alice", session="trip")
BOB = Namespace(user="bob", session="trip")


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def _card(seq: int, summary: str, **fields: object) -> object:
    return sample_card(seq, summary=summary, **fields)


def test_minilm_embeds_offline_and_ranks_by_meaning(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed(
        ["when do I check in at the hotel", "hotel check-in date is May 3", "the flight was sold out"]
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_hashing_fallback_matches_shared_words_and_ids() -> None:
    embedder = HashingEmbedder()
    query, same, other = embedder.embed(["order #W4923227 status", "#w4923227 pending", "sunny weather"])
    assert query @ same > 0.3 > query @ other
    assert load_embedder("hashing").name == "hashing"


def test_focus_query_puts_the_decision_before_the_request() -> None:
    focus = DecisionFocus(query="book the hotel", terms=frozenset({"w4923227"}), tools=frozenset({"book"}))
    assert focus_query(focus) == "decision focus: book w4923227; request: book the hotel"


def test_index_finds_by_meaning_and_exact_id_without_leaking(
    chroma_config: ChromaConfig, minilm: MiniLMEmbedder
) -> None:
    index = CardIndex(chroma_config, embedder=minilm)
    index.add(
        ALICE,
        [
            _card(0, "[c0] search_hotels -> Hilton Seattle, check-in 2024-05-03, king room 210 USD"),
            _card(1, "[c1] get_order_details(order_id=#W4923227) -> status=pending total=120.50"),
            _card(2, "[c2] user: my favourite colour is blue"),
        ],
    )
    index.add(BOB, [_card(0, "[c0] search_hotels -> Hyatt Boston, check-in 2024-06-01")])
    hits = index.search(ALICE, "decision focus: check-in date; request: book the hotel", k=3)
    assert hits[0].card_id == "c0"
    exact = index.search(ALICE, "what did the user like", terms=["w4923227"], k=1)
    assert any(h.card_id == "c1" and h.exact == ("w4923227",) for h in exact)
    assert {h.card_id for h in index.search(BOB, "hotel", k=5)} == {"c0"}
    assert index.ids(BOB) == {"c0"} and index.ids(Namespace(user="carol")) == set()


def test_reopened_collection_embeds_with_the_registered_function(
    chroma_config: ChromaConfig, minilm: MiniLMEmbedder
) -> None:
    index = CardIndex(chroma_config, embedder=minilm)
    index.add(ALICE, [_card(0, "[c0] hotel check-in 2024-05-03")])
    collection = chroma_config.client().get_collection(index.collection(ALICE).name)
    assert collection.configuration["embedding_function"].get_config() == {"model": "minilm-int8"}
    found = collection.query(query_texts=["when is check-in"], n_results=1, include=["documents"])
    assert found["documents"] == [["hotel check-in 2024-05-03"]]


def test_a_reopened_collection_embeds_with_the_embedder_it_was_made_with(chroma_config: ChromaConfig) -> None:
    class Mine:  # an embedder of the user's own, in 64 dimensions
        name, dimension = "mine-64", 64

        def embed(self, texts: list[str]) -> np.ndarray:
            return HashingEmbedder(dimension=64).embed(texts)

    for embedder in (HashingEmbedder(dimension=64), Mine()):
        index = CardIndex(chroma_config, embedder=embedder)
        index.add(ALICE, [_card(0, "[c0] hotel check-in 2024-05-03")])
        collection = chroma_config.client().get_collection(index.collection(ALICE).name)

        found = collection.query(query_texts=["hotel check-in"], n_results=1)
        assert found["ids"] == [["c0"]]


def test_hashing_embedders_of_other_settings_keep_collections_of_their_own(
    chroma_config: ChromaConfig,
) -> None:
    """Same name, other vector spaces: one collection would refuse the 64-d vectors and silently
    mix the words-only ones with the default's."""
    default = CardIndex(chroma_config, embedder=HashingEmbedder())
    narrow = CardIndex(chroma_config, embedder=HashingEmbedder(dimension=64))
    words_only = CardIndex(chroma_config, embedder=HashingEmbedder(trigram_weight=0.0))
    default.add(ALICE, [_card(0, "[c0] refund #W4923227 approved")])
    narrow.add(ALICE, [_card(1, "[c1] flight HAT069 booked")])
    words_only.add(ALICE, [_card(2, "[c2] flight HAT070 booked")])

    assert [h.card_id for h in narrow.search(ALICE, "flight booked", k=3)] == ["c1"]
    assert [h.card_id for h in words_only.search(ALICE, "flight booked", k=3)] == ["c2"]
    assert CardIndex(chroma_config, embedder=HashingEmbedder(dimension=64)).ids(ALICE) == {"c1"}
    namespace_digest = hashlib.sha256(ALICE.key.encode("utf-8")).hexdigest()[:24]
    assert default.collection(ALICE).name == f"{chroma_config.prefix}_live_hashing_{namespace_digest}"


class TeamEmbedder:
    """An embedder of one's own: hashed words and trigrams in 64 dimensions."""

    name, dimension = "team-embedder", 64

    def embed(self, texts: list[str]) -> np.ndarray:
        return HashingEmbedder(dimension=64).embed(texts)


class WideTeamEmbedder:
    """Another team's embedder under the same name, in 384 dimensions."""

    name, dimension = "team-embedder", 384

    def embed(self, texts: list[str]) -> np.ndarray:
        return HashingEmbedder().embed(texts)


class WordsOnlyTeamEmbedder:
    """Another model under the same name and dimension: words only, no trigrams."""

    name, dimension = "team-embedder", 64

    def embed(self, texts: list[str]) -> np.ndarray:
        return HashingEmbedder(dimension=64, trigram_weight=0.0).embed(texts)


def test_embedders_of_ones_own_sharing_a_name_keep_collections_of_their_own(
    chroma_config: ChromaConfig,
) -> None:
    """Same name, another dimension or another model: one collection would refuse the other's
    vectors or mix the two spaces. Each searches its own cards, and its collection reopened by
    name embeds queries with it."""
    indexes = {
        "c0": CardIndex(chroma_config, embedder=TeamEmbedder()),
        "c1": CardIndex(chroma_config, embedder=WideTeamEmbedder()),
        "c2": CardIndex(chroma_config, embedder=WordsOnlyTeamEmbedder()),
    }
    for seq, (card_id, index) in enumerate(indexes.items()):
        index.add(ALICE, [_card(seq, f"[{card_id}] flight HAT06{seq} booked")])

    for card_id, index in indexes.items():
        hits = index.search(ALICE, "flight booked", k=3)
        assert [h.card_id for h in hits] == [card_id]
        reopened = chroma_config.client().get_collection(index.collection(ALICE).name)
        found = reopened.query(query_texts=["flight booked"], n_results=3, include=["distances"])
        assert found["ids"] == [[card_id]]
        assert found["distances"] == [[pytest.approx(1 - hits[0].similarity, abs=1e-5)]]
    assert CardIndex(chroma_config, embedder=TeamEmbedder()).ids(ALICE) == {"c0"}


def test_damcs_embedders_keep_the_collection_names_they_always_had(
    chroma_config: ChromaConfig, minilm: MiniLMEmbedder
) -> None:
    """A store indexed before keeps opening its collections."""
    namespace_digest = hashlib.sha256(ALICE.key.encode("utf-8")).hexdigest()[:24]
    names = {
        label: CardIndex(chroma_config, embedder=embedder).collection(ALICE).name
        for label, embedder in (
            ("minilm-int8", minilm),
            ("hashing", HashingEmbedder()),
            ("hashing-b6c6e9a9", HashingEmbedder(dimension=64)),
        )
    }

    assert names == {label: f"{chroma_config.prefix}_live_{label}_{namespace_digest}" for label in names}


def test_a_collection_of_an_embedder_of_ones_own_unknown_here_names_its_class() -> None:
    config = DamcEmbeddingFunction(embedder=WordsOnlyTeamEmbedder()).get_config()
    assert config == {"model": "team-embedder", "signature": "WordsOnlyTeamEmbedder:64"}

    with pytest.raises(ConfigError, match=r"'team-embedder' \(SomeoneElses:64\).*register_embedder"):
        DamcEmbeddingFunction.build_from_config({**config, "signature": "SomeoneElses:64"})(["hotel"])


def test_a_collection_of_an_embedder_this_process_does_not_know_says_so() -> None:
    function = DamcEmbeddingFunction.build_from_config({"model": "someone-elses"})

    with pytest.raises(ConfigError, match="register_embedder"):
        function(["hotel"])  # Chroma's default, in its place, would download a model


def test_cold_storage_and_near_duplicate_merge(chroma_config: ChromaConfig) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    index.add(
        ALICE,
        [
            _card(0, "[c0] get_flight_status(HAT069) -> status=available"),
            _card(1, "[c1] get_flight_status(HAT069) -> status=available"),
            _card(2, "[c2] get_flight_status(HAT069) -> status=available"),
            _card(3, "[c3] user: please use the visa card ending 7447"),
        ],
    )
    merged = index.merge_near_duplicates(ALICE, threshold=0.99)
    assert [m.members for m in merged] == [("c0", "c1", "c2")]
    assert index.ids(ALICE) == {"mc0", "c3"} and index.ids(ALICE, cold=True) == {"c0", "c1", "c2"}
    hit = index.search(ALICE, "flight status HAT069", k=1)[0]
    assert hit.card_id == "mc0" and hit.members == ("c0", "c1", "c2")
    assert index.retire(ALICE, ["c3"]) == 1
    assert index.search(ALICE, "visa card", terms=["7447"], k=2)[0].card_id == "mc0"
    assert [h.card_id for h in index.search(ALICE, "visa card", terms=["7447"], k=1, cold=True)] == ["c3"]


def test_identifier_terms_are_whole_parts_of_identifier_runs() -> None:
    document = (
        "get_order_details(order_id=#w4923227) -> paid with credit_card_4421486 on 2024-05-27, total 17447"
    )
    terms = identifier_terms(document)
    assert {"w4923227", "#w4923227", "4421486", "card_4421486", "credit_card_4421486"} <= set(terms)
    assert {"2024-05-27", "05-27", "17447"} <= set(terms)
    assert "7447" not in terms and "get_order_details" not in terms


def _weather(seq: int) -> object:
    return _card(seq, f"[c{seq}] get_weather(city=seattle) -> rain, {seq} mm expected")


def test_identifier_only_in_the_text_is_found_by_exact_match(chroma_config: ChromaConfig) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    target = _card(40, "[c40] get_user_details(user_id=mia_li_3668) -> payment credit_card_4421486")
    index.add(ALICE, [*(_weather(s) for s in range(40)), target])
    nearest = index.search(ALICE, "weather in seattle", k=3)
    assert "c40" not in {h.card_id for h in nearest}
    hits = index.search(
        ALICE, "weather in seattle", terms=["CREDIT_CARD_4421486", "4421486", "nope9999"], k=3
    )
    found = next(h for h in hits if h.card_id == "c40")
    assert set(found.exact) == {"credit_card_4421486", "4421486"}
    assert found.score == pytest.approx(max(0.0, found.similarity) + 0.5)


def test_an_old_exact_match_ranks_above_newer_near_duplicates_without_the_id(
    chroma_config: ChromaConfig,
) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    order = _card(1, "[c1] get_order_details(order_id=#W4923227) -> status delivered; items keyboard")
    lookups = [
        _card(s, f"[c{s}] get_order_details(order_id=#W10{s:05d}) -> status delivered; items keyboard, mouse")
        for s in range(2, 40)
    ]
    index.add(ALICE, [order, *lookups])
    query = "delivered keyboard, mouse"
    assert "c1" not in {h.card_id for h in index.search(ALICE, query, k=3)}  # nearer ones fill k

    hits = index.search(ALICE, query, terms=["#W4923227"], k=3)

    assert hits[0].card_id == "c1" and hits[0].exact == ("#w4923227",)
    # scored as if the vector search had returned it
    everything = {h.card_id: h for h in index.search(ALICE, query, terms=["#W4923227"], k=40)}
    assert hits[0].similarity == pytest.approx(everything["c1"].similarity, abs=1e-5)


def test_an_identifier_in_every_card_finds_the_newest_cards(chroma_config: ChromaConfig) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    for start in range(0, 100, 25):  # cards indexed as they are made
        index.add(
            ALICE,
            [
                _card(s, f"[c{s}] get_reservation(user_id=mia_li_3668) -> seat {s}A")
                for s in range(start, start + 25)
            ],
        )
    hits = index.search(ALICE, "weather in seattle", terms=["mia_li_3668"], k=3)
    assert [h.card_id for h in hits if h.exact][:3] == ["c99", "c98", "c97"]


def test_a_cleared_conversations_cards_leave_the_index(chroma_config: ChromaConfig) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    memory = DecisionMemory(namespace=ALICE, store=InMemoryStore(), valuator=RetrievalValuator(index, k=4))
    for flight in range(10):
        memory.observe(
            {"role": "user", "content": f"old note {flight}: reservation ZXQ987 on HAT0{flight:02d}"}
        )
    memory.build()

    memory.clear()
    memory.observe({"role": "user", "content": "New start: please cancel reservation ZXQ987"})
    memory.build()

    hits = index.search(ALICE, "cancel reservation ZXQ987", terms=["zxq987"], k=4)
    assert [h.card_id for h in hits] == ["c11"]  # the old notes (c0-c9) would fill every place


@pytest.mark.parametrize("store", ["in memory", "deleted file"])
def test_a_store_that_starts_empty_leaves_no_earlier_conversation_in_the_index(
    chroma_config: ChromaConfig, tmp_path: Path, store: str
) -> None:
    """The index outlives the store (an ``InMemoryStore`` of a process that ended, a store file
    deleted): the new conversation's cards take the old ids, and the old ones are found no more."""
    from damc_core import SQLiteStore

    def conversation(*turns: str) -> tuple[DecisionMemory, CardIndex]:
        index = CardIndex(chroma_config, embedder=HashingEmbedder())  # a new process each time
        path = tmp_path / "memory.sqlite3"
        path.unlink(missing_ok=True)
        memory = DecisionMemory(
            namespace=ALICE,
            store=InMemoryStore() if store == "in memory" else SQLiteStore(path),
            valuator=RetrievalValuator(index, k=4),
        )
        for turn in turns:
            memory.observe({"role": "user", "content": turn})
        memory.build()
        return memory, index

    _, old = conversation(*(f"old note {n}: reservation ZXQ987 on HAT0{n:02d}" for n in range(10)))
    old.retire(ALICE, ["c9"])
    old.close()
    memory, index = conversation("please cancel reservation ZXQ987")

    hits = index.search(ALICE, "cancel reservation ZXQ987", terms=["zxq987"], k=4)
    assert [h.card_id for h in hits] == ["c0"]  # the old notes c1-c8 would be found beside it
    assert index.search(ALICE, "reservation ZXQ987", terms=["zxq987"], k=4, cold=True) == []
    assert [c.id for c in memory.cards()] == ["c0"]


def test_a_memory_reopened_on_its_store_keeps_its_index(chroma_config: ChromaConfig, tmp_path: Path) -> None:
    from damc_core import SQLiteStore

    def reopened() -> tuple[DecisionMemory, CardIndex]:
        index = CardIndex(chroma_config, embedder=HashingEmbedder())
        store = SQLiteStore(tmp_path / "memory.sqlite3")
        return DecisionMemory(namespace=ALICE, store=store, valuator=RetrievalValuator(index)), index

    memory, _ = reopened()
    memory.observe({"role": "user", "content": "where is my order #W111"})
    memory.build()
    memory, index = reopened()  # a new process on the same store and index

    assert index.ids(ALICE) == {"c0"} and index.drops(ALICE) == 0


def test_a_clear_by_one_worker_leaves_the_others_retrieval_working(
    chroma_config: ChromaConfig, tmp_path
) -> None:
    """Two workers (their own index handles) serve one conversation; one clears it."""
    from damc_core import SQLiteStore
    from damc_core.counterfactual.valuator import CounterfactualValuator

    def worker() -> tuple[DecisionMemory, CardIndex]:
        index = CardIndex(chroma_config, embedder=HashingEmbedder())
        retrieval = CounterfactualValuator(base=RetrievalValuator(index, k=4))  # a wrapper passes it on
        return DecisionMemory(
            namespace=ALICE, store=SQLiteStore(tmp_path / "m.sqlite3"), valuator=retrieval
        ), index

    (first, _), (second, second_index) = worker(), worker()
    for flight in range(6):
        first.observe(
            {"role": "user", "content": f"old note {flight}: reservation ZXQ987 on HAT0{flight:02d}"}
        )
    first.build()
    second.refresh()
    second.build()

    first.clear()
    first.observe({"role": "user", "content": "New start: please cancel reservation ZXQ987"})
    second.build()  # before it reads the clear: what it indexed stays out of the index all the same
    second.refresh()
    second.build()

    hits = second_index.search(ALICE, "cancel reservation ZXQ987", terms=["zxq987"], k=4)
    assert [h.card_id for h in hits] == ["c7"]


def test_exact_match_follows_cards_to_cold_storage_and_new_text(chroma_config: ChromaConfig) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    order = _card(1, "[c1] get_order_details(order_id=#W4923227) -> pending")
    index.add(ALICE, [_weather(0), order, _card(2, "[c2] book_flight(HAT069) -> booked")])
    index.retire(ALICE, ["c1"])
    assert "c1" not in {h.card_id for h in index.search(ALICE, "order", terms=["w4923227"], k=3)}
    assert index.search(ALICE, "order", terms=["w4923227"], k=3, cold=True)[0].exact == ("w4923227",)
    index.add(ALICE, [_card(2, "[c2] book_flight(HAT170) -> booked")])
    assert all(not h.exact for h in index.search(ALICE, "flight", terms=["hat069"], k=3))
    assert [h.exact for h in index.search(ALICE, "flight", terms=["hat170"], k=3) if h.card_id == "c2"] == [
        ("hat170",)
    ]


def test_collection_made_before_identifier_twins_is_searched_by_text(chroma_config: ChromaConfig) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    name = index.collection(ALICE).name
    client = chroma_config.client()
    client.delete_collection(name)
    client.create_collection(  # as CardIndex made them before
        name,
        embedding_function=DamcEmbeddingFunction(embedder=HashingEmbedder()),
        metadata={"hnsw:space": "cosine", "damc_namespace": ALICE.key},
    )
    old = CardIndex(chroma_config, embedder=HashingEmbedder())
    old.add(ALICE, [*(_weather(s) for s in range(10)), _card(10, "[c10] refund #W4923227 approved")])
    assert old.terms(ALICE) is None
    hits = old.search(ALICE, "weather in seattle", terms=["w4923227"], k=2)
    assert any(h.card_id == "c10" and h.exact == ("w4923227",) for h in hits)


def _hotel_memory(valuator: RetrievalValuator | None, namespace: Namespace) -> DecisionMemory:
    memory = DecisionMemory(namespace=namespace, store=InMemoryStore(), valuator=valuator)
    memory.observe({"role": "user", "content": "I need a room in Seattle for my conference"})
    memory.observe_tool(
        "search_hotels",
        {"city": "Seattle"},
        [{"hotel": "Hilton", "check_in": "2024-05-03", "price": 210}],
    )
    for day in range(6):
        memory.observe_tool("get_weather", {"city": "Seattle", "day": day}, {"forecast": f"rain day {day}"})
    memory.observe({"role": "user", "content": "ok, go ahead and book the hotel on the check-in date"})
    return memory


def test_retrieval_lifts_the_card_the_decision_is_about(
    chroma_config: ChromaConfig, minilm: MiniLMEmbedder
) -> None:
    index = CardIndex(chroma_config, embedder=minilm)
    with_retrieval = _hotel_memory(RetrievalValuator(index), ALICE)
    heuristic = _hotel_memory(None, ALICE)

    def hotel_value(memory: DecisionMemory) -> float:
        decisions = memory.build(budget=2000).decisions
        return next(d.value for d in decisions if d.card_id == "c2")

    assert hotel_value(with_retrieval) > hotel_value(heuristic)
    retrieval = [s for d in with_retrieval.build(budget=2000).decisions for s in d.scores]
    assert any(s.name == "retrieval" and "similarity" in s.provenance for s in retrieval)


def test_graph_lifts_what_informed_a_matching_decision_and_what_it_produced(
    chroma_config: ChromaConfig, minilm: MiniLMEmbedder
) -> None:
    index = CardIndex(chroma_config, embedder=minilm)
    valuator = RetrievalValuator(index)
    memory = DecisionMemory(namespace=ALICE, store=InMemoryStore(), valuator=valuator)
    memory.observe_tool("get_user_details", {"user_id": "mia_li_3668"}, {"payment": "credit_card_4421486"})
    memory.observe_tool(
        "book_reservation", {"payment_id": "credit_card_4421486"}, {"reservation_id": "NO6JO3"}
    )
    assert memory.card("c1") is not None and "c2" in memory.card("c1").decision_links  # type: ignore[union-attr]
    scored = {
        s.card.id: s
        for s in valuator.value(
            memory.cards(),
            context=_context(memory, "decision focus: book_reservation; request: book the trip"),
        )
    }
    # c2 (the booking call) matches the focus; c1 gave it its payment id, c3 is what it produced.
    assert [s.provenance for s in scored["c1"].scores if s.name == "retrieval"] == [
        "retrieval: informed c2, which matched"
    ]
    lift = {
        card_id: next(s.value for s in scored[card_id].scores if s.name == "retrieval") for card_id in scored
    }
    assert lift["c1"] > lift["c0"] and lift["c3"] >= 0.6 * lift["c2"]


def _context(memory: DecisionMemory, query: str) -> object:
    from damc_core import ValuationContext

    return ValuationContext(
        focus=DecisionFocus(query=query, tools=frozenset({"book_reservation"})),
        current_seq=len(memory.cards()),
        now=0.0,
        namespace=memory.namespace,
    )


def test_lifecycle_retires_long_low_cards(chroma_config: ChromaConfig) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    valuator = RetrievalValuator(index, lifecycle=Lifecycle(cold_below=0.99, cold_after=2, every=1))
    memory = DecisionMemory(
        namespace=ALICE,
        store=InMemoryStore(),
        valuator=valuator,
        settings=MemorySettings(recent_messages=0),
    )
    memory.observe({"role": "user", "content": "hello"})
    memory.observe({"role": "assistant", "content": "hi, how can I help"})
    memory.observe({"role": "user", "content": "just browsing"})  # the request: valued 1, stays live
    memory.build(budget=500)  # c0 and c1 go low at event 3
    memory.observe({"role": "assistant", "content": "take your time"})
    memory.build(budget=500)
    assert index.ids(ALICE, cold=True) == set()
    memory.observe({"role": "user", "content": "thanks"})
    memory.build(budget=500)  # two events later
    assert index.ids(ALICE, cold=True) == {"c0", "c1"}
    assert memory.recall("c0") == {"role": "user", "content": "hello"}


def test_another_process_continues_the_lifecycle_count(chroma_config: ChromaConfig) -> None:
    """How long a card has stayed low is kept with the vectors, not in the process that counted."""
    store = InMemoryStore()
    lifecycle = Lifecycle(cold_below=0.99, cold_after=3, every=1)

    def process() -> tuple[DecisionMemory, CardIndex]:
        index = CardIndex(chroma_config, embedder=HashingEmbedder())
        valuator = RetrievalValuator(index, lifecycle=lifecycle)
        memory = DecisionMemory(
            namespace=ALICE, store=store, valuator=valuator, settings=MemorySettings(recent_messages=0)
        )
        return memory, index

    first, index = process()
    first.observe({"role": "user", "content": "hello"})
    first.observe({"role": "assistant", "content": "hi, how can I help"})
    first.observe({"role": "user", "content": "just browsing"})  # the request: valued 1, stays live
    first.build(budget=500)  # c0 and c1 go low at event 3
    assert index.low_since(ALICE) == {"c0": 3, "c1": 3}

    second, index = process()  # a fresh process: nothing carried over in memory
    second.observe({"role": "assistant", "content": "take your time"})
    second.observe({"role": "user", "content": "thanks"})
    second.observe({"role": "assistant", "content": "you are welcome"})
    second.build(budget=500)  # event 6: three events since c0 and c1 went low
    assert {"c0", "c1"} <= index.ids(ALICE, cold=True)
    assert "c0" not in index.low_since(ALICE)


def test_unreachable_index_falls_back_to_heuristics(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server, config = start_chroma_server(tmp_path / "server")
    try:
        index = CardIndex(config, embedder=HashingEmbedder())
        memory = DecisionMemory(store=InMemoryStore(), valuator=RetrievalValuator(index))
        memory.observe({"role": "user", "content": "Book HAT069"})
        assert "HAT069" in str(memory.build(budget=300).messages)
    finally:
        stop_chroma_server(server)
    memory.observe({"role": "user", "content": "and seat 14C, please"})
    with caplog.at_level(logging.WARNING, logger="damc"):
        context = memory.build(budget=300)
    assert "HAT069" in str(context.messages) and "14C" in str(context.messages)
    assert "retrieval unavailable" in caplog.text


def test_damc_core_imports_without_chromadb(tmp_path: Path) -> None:
    blocker = tmp_path / "chromadb.py"
    blocker.write_text("raise ImportError('chromadb is not installed')\n")
    code = "import damc_core, damc_core.retrieval.embed; print('ok')"
    out = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(tmp_path)}, capture_output=True, text=True
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_counterfactual_values_over_retrieval_keep_its_candidates(
    chroma_config: ChromaConfig, minilm: MiniLMEmbedder
) -> None:
    from damc_core.counterfactual import CounterfactualValuator
    from damc_core.value import CandidateSource

    retrieval = RetrievalValuator(CardIndex(chroma_config, embedder=minilm))
    memory = _hotel_memory(CounterfactualValuator(base=retrieval), ALICE)
    memory.build(budget=2000)  # indexes the cards
    cards = {c.id: c for c in memory.cards()}
    focus = DecisionFocus(query="book the hotel on the check-in date")

    assert isinstance(memory.valuator, CandidateSource)
    found = memory.valuator.candidates(cards, focus=focus, limit=4, namespace=ALICE)
    assert found == retrieval.candidates(cards, focus=focus, limit=4, namespace=ALICE) and "c2" in found


def test_retrieval_in_a_weighted_mix_keeps_feeding_candidates(
    chroma_config: ChromaConfig, minilm: MiniLMEmbedder
) -> None:
    from damc_core import HeuristicValuator, WeightedValuators

    retrieval = RetrievalValuator(CardIndex(chroma_config, embedder=minilm))
    memory = _hotel_memory(WeightedValuators(((retrieval, 1.0), (HeuristicValuator(), 1.0))), ALICE)
    memory.build(budget=2000)  # indexes the cards
    cards = {c.id: c for c in memory.cards()}
    focus = DecisionFocus(query="book the hotel on the check-in date")

    found = memory.valuator.candidates(cards, focus=focus, limit=4, namespace=ALICE)
    assert found == retrieval.candidates(cards, focus=focus, limit=4, namespace=ALICE) and "c2" in found


def test_a_counterfactual_valuator_inside_retrieval_still_learns(tmp_path: Path, airline_messages) -> None:
    """``RetrievalValuator(index, base=CounterfactualValuator(...))``: the calls made from a built
    context reach the counterfactual part, as they do when it is the memory's own valuator."""
    from damc_core.counterfactual import CounterfactualValuator
    from damc_core.counterfactual.book import ValuedDecision
    from damc_core.value import ObservedDecision

    measured: list[ObservedDecision] = []

    def profile_carried_it(decision: ObservedDecision) -> ValuedDecision:
        measured.append(decision)
        return ValuedDecision(ALICE, decision.seq, decision.built.focus.terms, {"c1": 1.0}, "rule")

    counterfactual = CounterfactualValuator(value_decision=profile_carried_it, batch_every=1)
    index = CardIndex(ChromaConfig(path=tmp_path / "index"), embedder=HashingEmbedder())
    memory = DecisionMemory(
        namespace=ALICE, store=InMemoryStore(), valuator=RetrievalValuator(index, base=counterfactual)
    )
    for message in airline_messages[:2]:
        memory.observe(message)
    memory.build(budget=400)
    memory.observe(airline_messages[2])  # get_user_details, called from the context just built
    memory.observe(airline_messages[3])  # its clean result

    assert [d.seq for d in measured] == [2] and len(counterfactual.book) == 1


def test_retrieval_tells_the_valuator_it_wraps_of_a_clear_and_of_an_empty_store(tmp_path: Path) -> None:
    """A valuator of the user's that keeps notes of each conversation outside the store
    (``Forgetting``, ``Emptying``) drops them when it is wrapped in retrieval, too."""
    from damc_core import HeuristicValuator

    class NotesPerConversation:
        def __init__(self) -> None:
            self.heuristics = HeuristicValuator()
            self.told: list[str] = []

        def value(self, cards, *, context):
            return self.heuristics.value(cards, context=context)

        def forget(self, namespace: Namespace, *, before: int) -> None:
            self.told.append(f"forget {namespace.key} before {before}")

        def empty(self, namespace: Namespace) -> None:
            self.told.append(f"empty {namespace.key}")

    notes = NotesPerConversation()
    index = CardIndex(ChromaConfig(path=tmp_path / "index"), embedder=HashingEmbedder())
    memory = DecisionMemory(
        namespace=ALICE, store=InMemoryStore(), valuator=RetrievalValuator(index, base=notes)
    )
    memory.observe({"role": "user", "content": "Cancel reservation ZFA04Y"})
    memory.clear()

    # a memory new to the namespace (nothing in its store), then the clear, whose mark is event 1
    assert notes.told == [f"empty {ALICE.key}", f"forget {ALICE.key} before 2"]


def test_sessions_of_one_memory_share_the_valuator_and_keep_their_own_index(
    chroma_config: ChromaConfig,
) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    trip = DecisionMemory(
        namespace=ALICE,
        store=InMemoryStore(),
        valuator=RetrievalValuator(index),
        settings=MemorySettings(recent_messages=0),
    )
    trip.observe({"role": "user", "content": "Cancel reservation ZFA04Y, the Paris trip"})
    trip.build(budget=500)
    other = trip.for_session("baggage")
    other.observe({"role": "user", "content": "What is the baggage allowance for gold members"})
    other.observe({"role": "user", "content": "and for silver members"})
    built = other.build(query="baggage allowance gold")

    assert index.ids(ALICE) == {"c0"}
    assert index.ids(other.namespace) == {"c0", "c1"}
    documents = index.collection(other.namespace).get(ids=["c0"], include=["documents"])["documents"]
    assert documents is not None and "baggage allowance for gold" in documents[0]
    lifted = {d.card_id: s.value for d in built.decisions for s in d.scores if s.name == "retrieval"}
    assert lifted["c0"] > lifted["c1"]  # ranked by its own cards, not by the first session's c0


def test_an_id_indexed_with_other_text_is_embedded_again(chroma_config: ChromaConfig) -> None:
    """A store holding another conversation than the index (a store file swapped for another's
    copy) has other cards under the same ids: those are embedded again, the ones with the same
    text are not."""

    def conversation(*turns: str) -> CardIndex:
        store = InMemoryStore()
        written = DecisionMemory(namespace=ALICE, store=store)  # written where the index never saw
        for turn in turns:
            written.observe({"role": "user", "content": turn})
        index = CardIndex(chroma_config, embedder=HashingEmbedder())  # a new process each time
        memory = DecisionMemory(
            namespace=ALICE,
            store=store,
            valuator=RetrievalValuator(index),
            settings=MemorySettings(recent_messages=0),
        )
        memory.build(budget=500)
        return index

    index = conversation("hello", "hi again", "where is my order #W111")
    index.retire(ALICE, ["c0", "c1"])  # as the lifecycle retires long-low cards
    index = conversation("book a hotel", "hi again", "my flight HAT069 is late")

    assert index.ids(ALICE) == {"c0", "c2"} and index.ids(ALICE, cold=True) == {"c1"}
    got = index.collection(ALICE).get(ids=["c0", "c2"], include=["documents"])
    live = dict(zip(got["ids"], got["documents"] or [], strict=True))
    assert "book a hotel" in live["c0"] and "my flight hat069 is late" in live["c2"]
    assert not [h for h in index.search(ALICE, "order", terms=["#w111"], k=2) if h.exact]


def test_one_valuator_embeds_again_a_namespace_reused_or_dropped_in_its_process(
    chroma_config: ChromaConfig,
) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    valuator = RetrievalValuator(index)

    def conversation(*turns: str) -> None:
        memory = DecisionMemory(namespace=ALICE, store=InMemoryStore(), valuator=valuator)
        for turn in turns:
            memory.observe({"role": "user", "content": turn})
        memory.build(budget=500)

    def documents() -> dict[str, str]:
        got = index.collection(ALICE).get(include=["documents"])
        return dict(zip(got["ids"], got["documents"] or [], strict=True))

    conversation("hello", "where is my order #W111", "and my refund?")
    conversation("book a hotel", "my flight HAT069 is late", "and my refund?")
    assert "book a hotel" in documents()["c0"] and "hat069" in documents()["c1"]

    index.drop(ALICE)  # the namespace starts afresh, the valuator goes on serving it
    conversation("book a hotel", "my flight HAT069 is late", "and my refund?")
    assert set(documents()) == {"c0", "c1", "c2"}


def test_an_index_carries_on_after_another_drops_its_namespace(chroma_config: ChromaConfig) -> None:
    """Two workers with their own index on one folder or server: one drops the namespace (as
    ``damc replay --chroma`` does); the other opens its collections afresh instead of failing for
    the namespace until it is made again."""
    dropping, other = (CardIndex(chroma_config, embedder=HashingEmbedder()) for _ in range(2))
    other.add(ALICE, [_card(0, "[c0] refund #W4923227 approved")])
    assert [h.card_id for h in other.search(ALICE, "refund", terms=["#w4923227"], k=1)] == ["c0"]

    dropping.drop(ALICE)

    assert other.search(ALICE, "refund", terms=["#w4923227"], k=1) == []
    assert other.drops(ALICE) == 1  # what a reader knew to be indexed is gone
    other.add(ALICE, [_card(1, "[c1] flight HAT069 booked")])
    assert other.ids(ALICE) == {"c1"} and dropping.ids(ALICE) == {"c1"}


def test_a_valuator_indexes_its_cards_again_after_another_worker_drops_the_namespace(
    chroma_config: ChromaConfig, caplog: pytest.LogCaptureFixture
) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    memory = DecisionMemory(namespace=ALICE, store=InMemoryStore(), valuator=RetrievalValuator(index))
    for turn in ("hello", "where is my order #W111", "and my refund?"):
        memory.observe({"role": "user", "content": turn})
    memory.build(budget=500)

    CardIndex(chroma_config, embedder=HashingEmbedder()).drop(ALICE)  # another worker starts it afresh
    memory.observe({"role": "user", "content": "my flight HAT069 is late"})
    with caplog.at_level(logging.WARNING, logger="damc"):
        memory.build(budget=500)

    assert "retrieval unavailable" not in caplog.text
    assert {"c0", "c1", "c3"} <= index.ids(ALICE)


def test_a_card_id_holding_a_comma_is_one_card_to_the_exact_lookup(chroma_config: ChromaConfig) -> None:
    """Postings and merged members list card ids in one value: ``c16,c0`` must not read as two."""
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    index.add(
        ALICE,
        [
            _card(0, "[c0] order #W111222 pending"),
            _card(16, "[c16] order #W777123 shipped", id="c16,c0"),
            _card(17, "[c17] order #W777123 shipped", id="c17\\"),
        ],
    )

    hits = index.search(ALICE, "order", terms=["#w777123"], k=3)
    assert {h.card_id for h in hits if h.exact} == {"c16,c0", "c17\\"}
    index.retire(ALICE, ["c16,c0"])
    assert [h.card_id for h in index.search(ALICE, "order", terms=["#w111222"], k=3) if h.exact] == ["c0"]
    assert index.search(ALICE, "order", terms=["#w777123"], k=1, cold=True)[0].card_id == "c16,c0"

    index.add(BOB, [_card(seq, "[c0] flight HAT069 available", id=f"c{seq},x") for seq in (1, 2)])
    assert [m.members for m in index.merge_near_duplicates(BOB, threshold=0.99)] == [("c1,x", "c2,x")]
    assert index.search(BOB, "flight HAT069", k=1)[0].members == ("c1,x", "c2,x")


def test_half_an_emoji_is_indexed_and_searched_as_a_replacement_character(
    chroma_config: ChromaConfig, minilm: MiniLMEmbedder
) -> None:
    """A text cut inside an emoji is not UTF-8: no tokenizer, hash or store takes it as it is."""
    index = CardIndex(chroma_config, embedder=minilm)
    index.add(ALICE, [_card(0, "[c0] hotel check-in 2024-05-03 \ud83d"), _card(1, "[c1] flight HAT069 late")])

    hits = index.search(ALICE, "when is the hotel check-in \ud83d", k=1)
    assert [h.card_id for h in hits] == ["c0"]
    assert index.collection(ALICE).get(ids=["c0"])["documents"] == ["hotel check-in 2024-05-03 \ufffd"]
    assert np.array_equal(minilm.embed(["check-in \ud83d"]), minilm.embed(["check-in \ufffd"]))


HALF_AN_EMOJI = ["Great stay \ud83d", "\ud83d", "order #W49\ud83d23227 for caf\udc4d", "no emoji at all"]
"""Texts cut inside an emoji (a lone UTF-16 surrogate), alone, inside a word, and one without."""


class Utf8Only:
    """An embedder of one's own that, like most tokenizers, takes UTF-8 text only."""

    name, dimension = "utf8-only", HashingEmbedder().dimension

    def embed(self, texts: list[str]) -> np.ndarray:
        return HashingEmbedder().embed([text.encode("utf-8").decode("utf-8") for text in texts])


@pytest.mark.parametrize(
    "make",
    ["minilm", HashingEmbedder, lambda: HashingEmbedder(64, 0.0)],
    ids=["minilm", "hashing", "hashing-64-words-only"],
)
def test_every_embedder_reads_half_an_emoji_as_a_replacement_character(
    make: object, request: pytest.FixtureRequest
) -> None:
    embedder = request.getfixturevalue("minilm") if make == "minilm" else make()  # type: ignore[operator]

    vectors = embedder.embed(HALF_AN_EMOJI)

    replaced = [text.replace("\ud83d", "\ufffd").replace("\udc4d", "\ufffd") for text in HALF_AN_EMOJI]
    assert np.array_equal(vectors, embedder.embed(replaced))
    assert vectors.shape == (len(HALF_AN_EMOJI), embedder.dimension)


def test_an_embedder_of_ones_own_is_handed_no_half_emoji(chroma_config: ChromaConfig) -> None:
    """Chroma's embedding function and the index hand any embedder UTF-8 text: the card, the search
    and a collection queried by text all work with half an emoji in them."""
    index = CardIndex(chroma_config, embedder=Utf8Only())
    index.add(ALICE, [_card(0, "[c0] hotel check-in 2024-05-03 \ud83d"), _card(1, "[c1] flight HAT069 late")])

    assert [h.card_id for h in index.search(ALICE, "hotel check-in \ud83d", k=1)] == ["c0"]
    found = index.collection(ALICE).query(query_texts=["hotel check-in \ud83d"], n_results=1)
    assert found["ids"] == [["c0"]]
    function = DamcEmbeddingFunction(embedder=Utf8Only())
    assert np.array_equal(function(["check-in \ud83d"]), function(["check-in \ufffd"]))


def test_an_add_keeps_the_last_card_of_an_id_given_twice(chroma_config: ChromaConfig) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    index.add(ALICE, [_card(0, "[c0] flight HAT069 booked"), _card(0, "[c0] flight HAT069 cancelled")])

    assert index.collection(ALICE).get(ids=["c0"])["documents"] == ["flight hat069 cancelled"]


def test_an_empty_or_broken_card_id_and_a_missing_query_are_config_errors(
    chroma_config: ChromaConfig,
) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())

    with pytest.raises(ConfigError, match="card id must be non-empty UTF-8 text, got ''"):
        index.add(ALICE, [_card(0, "[c0] flight HAT069 booked", id="")])
    with pytest.raises(ConfigError, match="card id must be non-empty UTF-8 text"):
        index.retire(ALICE, ["c\ud83d"])
    with pytest.raises(ConfigError, match="query must be text, got NoneType"):
        index.search(ALICE, None, k=3)  # type: ignore[arg-type]
    assert index.ids(ALICE) == set()


def _unchecked_namespace(user: str, session: str) -> Namespace:
    """A namespace made past ``Namespace``'s checks, as one unpickled from a release before them."""
    namespace = Namespace(user, "unchecked")
    object.__setattr__(namespace, "session", session)
    return namespace


def test_a_namespace_cut_inside_an_emoji_is_a_config_error_and_nothing_is_written(
    chroma_config: ChromaConfig,
) -> None:
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    half = _unchecked_namespace("alice", "trip \ud83d")
    operations = {
        "add": lambda: index.add(half, [_card(0, "[c0] flight HAT069 booked")]),
        "search": lambda: index.search(half, "flight booked", k=3),
        "ids": lambda: index.ids(half),
        "retire": lambda: index.retire(half, ["c0"]),
        "mark_low": lambda: index.mark_low(half, {"c0": 3}),
        "drop": lambda: index.drop(half),
    }

    for operation in operations.values():
        with pytest.raises(ConfigError, match=r"namespace must be UTF-8 text, got 'alice/trip \\ud83d'"):
            operation()
    made = [c.name for c in chroma_config.client().list_collections()]
    assert [name for name in made if name.startswith(f"{chroma_config.prefix}_")] == []


def test_retrieval_on_a_namespace_cut_inside_an_emoji_leaves_the_agent_running(
    chroma_config: ChromaConfig, caplog: pytest.LogCaptureFixture
) -> None:
    half = _unchecked_namespace("alice", "trip \ud83d")
    valuator = RetrievalValuator(CardIndex(chroma_config, embedder=HashingEmbedder()))
    memory = DecisionMemory(namespace=half, store=InMemoryStore(), valuator=valuator)

    with caplog.at_level(logging.WARNING, logger="damc"):
        memory.observe({"role": "user", "content": "book HAT069"})
        context = memory.build()

    assert [m["content"] for m in context.messages] == ["book HAT069"]
    assert "retrieval unavailable (a namespace must be UTF-8 text" in caplog.text


def test_an_embedder_named_like_a_hub_model_gets_a_collection(chroma_config: ChromaConfig) -> None:
    class HubNamed:
        name, dimension = "BAAI/bge-small-en", HashingEmbedder().dimension

        def embed(self, texts: list[str]) -> np.ndarray:
            return HashingEmbedder().embed(texts)

    index = CardIndex(chroma_config, embedder=HubNamed())
    memory = DecisionMemory(namespace=ALICE, store=InMemoryStore(), valuator=RetrievalValuator(index))
    memory.observe({"role": "user", "content": "book HAT069"})
    memory.build()

    assert index.ids(ALICE) == {"c0"}


def test_a_closed_index_lets_its_folder_be_made_again(tmp_path: Path) -> None:
    config = ChromaConfig(path=tmp_path / "index")
    with CardIndex(config, embedder=HashingEmbedder()) as index:
        index.add(ALICE, [_card(0, "[c0] refund #W4923227 approved")])
    shutil.rmtree(tmp_path / "index")

    with CardIndex(config, embedder=HashingEmbedder()) as index:
        index.add(ALICE, [_card(1, "[c1] flight HAT069 sold out")])
        assert index.ids(ALICE) == {"c1"}
    with pytest.raises(StoreClosedError, match="CardIndex was closed"):
        index.search(ALICE, "flight", k=1)


def test_near_duplicates_merge_the_same_when_similarities_come_a_row_at_a_time(
    chroma_config: ChromaConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    import damc_core.retrieval.index as index_module

    texts = [
        "get_flight_status(HAT069) -> available",
        "user: visa ending 7447",
        "get_flight_status(HAT069) -> available",
    ]
    cards = [_card(i, f"[c{i}] {texts[i % 3]}") for i in range(9)]
    whole, by_rows = (Namespace(user="alice", session=name) for name in ("whole", "rows"))
    index = CardIndex(chroma_config, embedder=HashingEmbedder())
    index.add(whole, cards)
    index.add(by_rows, cards)

    expected = index.merge_near_duplicates(whole, threshold=0.99)
    monkeypatch.setattr(index_module, "SIMILARITY_BLOCK_FLOATS", 1)  # one row of n similarities at a time

    assert index.merge_near_duplicates(by_rows, threshold=0.99) == expected
    assert [m.members for m in expected] == [("c0", "c2", "c3", "c5", "c6", "c8"), ("c1", "c4", "c7")]


def test_a_minilm_collection_reopened_without_minilms_packages_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from damc_core.retrieval import chroma_ef

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # MiniLM's runtime is not installed here
    chroma_ef._shared_minilm.cache_clear()
    try:
        function = DamcEmbeddingFunction.build_from_config({"model": "minilm-int8"})

        with pytest.raises(ConfigError, match=r"minilm-int8.*cannot load.*onnxruntime"):
            function(["hotel"])  # the lexical fallback would search another vector space
    finally:
        chroma_ef._shared_minilm.cache_clear()


class _CountingIndex(CardIndex):
    """A real index that counts its searches."""

    searches = 0

    def search(self, *args, **kwargs):
        self.searches += 1
        return super().search(*args, **kwargs)


@pytest.mark.parametrize("max_candidates", [96, 2], ids=["all cards valued", "a shortlist retrieved"])
def test_a_decision_searches_once_and_counts_once(chroma_config: ChromaConfig, max_candidates: int) -> None:
    index = _CountingIndex(chroma_config, embedder=HashingEmbedder())
    valuator = RetrievalValuator(index, lifecycle=Lifecycle(every=50))
    namespace = Namespace("mia", "trip")
    memory = DecisionMemory(
        namespace=namespace,
        store=InMemoryStore(),
        valuator=valuator,
        settings=MemorySettings(max_candidates=max_candidates),
    )
    memory.observe({"role": "user", "content": "Book HAT069 with my visa"})
    for day in range(3):
        memory.observe_tool("get_weather", {"city": "Seattle", "day": day}, {"forecast": "rain " * 200})
    memory.observe_tool("get_user_details", {"user_id": "mia_li_3668"}, {"payment": "credit_card_7815826"})

    for decision in range(1, 3):
        index.searches = 0
        memory.build(query="Book it", budget=300)  # values the recent tool result as well
        assert index.searches == 1
        assert valuator._states[namespace.key].decisions == decision
        memory.observe({"role": "user", "content": f"And the weather on day {decision}?"})


def test_more_cards_than_chroma_takes_in_one_write_go_low_and_cold(chroma_config: ChromaConfig) -> None:
    """A lifecycle pass over a long conversation: Chroma refuses a write of more rows than its
    ``max_batch_size``, so marking and retiring that many cards must not be one write."""
    client = chroma_config.client()
    count = client.get_max_batch_size() + 1
    index = CardIndex(chroma_config, client=client, embedder=HashingEmbedder())
    cards = [_card(i, f"[c{i}] get_flight_status(HAT{i:04d}) -> available") for i in range(count)]
    index.add(ALICE, cards)

    index.mark_low(ALICE, {card.id: 7 for card in cards})
    assert len(index.low_since(ALICE)) == count

    assert index.retire(ALICE, [card.id for card in cards]) == count
    assert index.ids(ALICE) == set() and len(index.ids(ALICE, cold=True)) == count
    hits = index.search(ALICE, "status", terms=["hat0042"], k=1, cold=True)
    assert [hit.card_id for hit in hits if hit.exact] == ["c42"]


class _LongVectors:
    """An embedder of one's own whose vectors are not of unit length, as many models' are (a
    sentence-transformers model without ``normalize_embeddings``)."""

    name, dimension = "long-vectors", 384

    def embed(self, texts: list[str]) -> np.ndarray:
        return HashingEmbedder().embed(texts) * 7.0


def test_an_embedder_whose_vectors_are_not_unit_length_ranks_and_merges_by_cosine(
    chroma_config: ChromaConfig,
) -> None:
    cities = ["boston", "denver", "miami", "seattle", "austin", "chicago"]
    cards = [_card(i, f"[c{i}] flight search to {city} for HAT{i:03d}") for i, city in enumerate(cities)]
    cards.append(_card(6, "[c6] flight weather in paris w4923227"))
    unit = CardIndex(chroma_config, embedder=HashingEmbedder())
    long = CardIndex(chroma_config, embedder=_LongVectors())
    unit.add(ALICE, cards)
    long.add(ALICE, cards)

    def scores(index: CardIndex) -> dict[str, float]:
        hits = index.search(ALICE, "flight search", terms=["w4923227"], k=3)
        return {hit.card_id: round(hit.score, 4) for hit in hits}

    assert scores(long) == scores(unit)  # c6, found by its id only, is not lifted above the rest
    assert max(scores(long), key=scores(long).__getitem__) != "c6"
    assert long.merge_near_duplicates(ALICE, threshold=0.98) == []  # six different flights
    assert len(long.ids(ALICE)) == len(cards)


class _ChromaFunction(EmbeddingFunction[Documents]):
    """A Chroma embedding function, as a Chroma user has one at hand."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Documents) -> Embeddings:
        return list(HashingEmbedder().embed(list(input)))

    @staticmethod
    def name() -> str:
        return "my-function"


@pytest.mark.parametrize(
    "function", [_ChromaFunction(), HashingEmbedder().embed], ids=["chroma-function", "callable"]
)
def test_an_embedding_function_given_for_an_embedder_says_how_to_wrap_it(
    tmp_path: Path, function: object
) -> None:
    with pytest.raises(ConfigError, match="wrap"):
        CardIndex(ChromaConfig(path=tmp_path / "index"), embedder=function)  # type: ignore[arg-type]


class _Resized:
    """An embedder of one's own whose model was swapped for a larger one, ``dimension`` left as it was."""

    name, dimension = "company-embeddings", 64

    def __init__(self, length: int) -> None:
        self.length = length

    def embed(self, texts: list[str]) -> np.ndarray:
        return HashingEmbedder(dimension=self.length).embed(texts)


def test_an_embedder_whose_vectors_are_not_its_dimension_is_a_config_error_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = ChromaConfig(path=tmp_path / "index")
    CardIndex(config, embedder=_Resized(64)).add(ALICE, [_card(0, "[c0] hotel check-in 2024-05-03")])
    reopened = CardIndex(config, embedder=_Resized(128))  # the same collection: the same name and dimension
    with pytest.raises(
        ConfigError, match=r"'company-embeddings' \(_Resized\) returned rows of 128 numbers.*64"
    ):
        reopened.search(ALICE, "when is check-in")
    with pytest.raises(ConfigError, match="rows of 128 numbers"):
        reopened.add(ALICE, [_card(1, "[c1] king room 210 USD")])
    assert reopened.ids(ALICE) == {"c0"}  # nothing half written

    memory = DecisionMemory(namespace=ALICE, store=InMemoryStore(), valuator=RetrievalValuator(reopened))
    memory.observe({"role": "user", "content": "Book HAT069"})
    with caplog.at_level(logging.WARNING, logger="damc"):
        assert "HAT069" in str(memory.build(budget=300).messages)  # the agent carries on
    assert "retrieval unavailable" in caplog.text and "set dimension to the length" in caplog.text


@pytest.mark.parametrize(
    ("vectors", "said"),
    [
        (lambda texts: np.ones(64, dtype=np.float32), r"an array of shape \(64,\) for 2 texts"),
        (lambda texts: np.ones((1, 64), dtype=np.float32), r"an array of shape \(1, 64\) for 2 texts"),
        (lambda texts: np.full((len(texts), 64), np.nan), "NaN or infinite values for 2 texts"),
    ],
    ids=["flat", "one-row-for-two-texts", "nan"],
)
def test_an_embedder_returning_rows_chroma_cannot_hold_is_a_config_error(
    tmp_path: Path, vectors: object, said: str
) -> None:
    class Broken:
        name, dimension = "broken", 64
        embed = staticmethod(vectors)

    index = CardIndex(ChromaConfig(path=tmp_path / "index"), embedder=Broken())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=said):
        index.add(ALICE, [_card(0, "[c0] hotel"), _card(1, "[c1] flight")])
    assert index.ids(ALICE) == set()


def test_one_id_or_identifier_given_as_text_is_a_config_error_not_its_characters(tmp_path: Path) -> None:
    index = CardIndex(ChromaConfig(path=tmp_path / "index"), embedder=HashingEmbedder())
    index.add(ALICE, [_card(12, "[c12] get_order_details(order_id=#W4923227) -> status=pending")])

    with pytest.raises(
        ConfigError, match=r"terms must be a list of them, got the text '#W4923227': pass \['#W4923227'\]"
    ):
        index.search(ALICE, "the order", terms="#W4923227")
    with pytest.raises(ConfigError, match=r"card ids must be a list of them, got the text 'c12'"):
        index.retire(ALICE, "c12")
    with pytest.raises(ConfigError, match="card ids must be a list"):
        index.delete(ALICE, "c12")
    assert index.ids(ALICE) == {"c12"} and index.ids(ALICE, cold=True) == set()
    assert index.search(ALICE, "the order", terms=["#W4923227"], k=1)[0].exact == ("#w4923227",)
    assert index.retire(ALICE, ["c12"]) == 1


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda index: RetrievalValuator(index, k=16.0), "k must be a whole number > 0, got 16.0"),
        (lambda index: RetrievalValuator(index, k="16"), "k must be a whole number > 0, got '16'"),
        (lambda index: RetrievalValuator(index, weight="0.3"), r"weight must be in \(0, 1\].*got '0.3'"),
        (lambda index: RetrievalValuator(index, graph=float("nan")), r"graph in \[0, 1\], got 0.3, nan"),
        (lambda index: index.search(ALICE, "hotel", k=2.5), "k must be a whole number > 0, got 2.5"),
        (lambda index: index.search(ALICE, "hotel", k=True), "k must be a whole number > 0, got True"),
        (lambda index: index.merge_near_duplicates(ALICE, threshold="0.9"), r"in \(0, 1\], got '0.9'"),
        (lambda index: Lifecycle(cold_after=400.5), "cold_after must be a whole number > 0, got 400.5"),
        (lambda index: Lifecycle(every="50"), "every must be a whole number > 0, got '50'"),
        (lambda index: Lifecycle(cold_below=float("nan")), "cold_below must be a finite number, got nan"),
    ],
)
def test_retrieval_settings_of_the_wrong_kind_are_config_errors_where_they_are_set(
    tmp_path: Path, make: object, said: str
) -> None:
    """A ``k`` of 16.0 (a number read from a config file) would fail every search, each failure
    a warning that retrieval is unavailable; a ``weight`` of ``"0.3"`` a TypeError."""
    index = CardIndex(ChromaConfig(path=tmp_path / "index"), embedder=HashingEmbedder())
    index.add(ALICE, [_card(0, "[c0] hotel check-in 2024-05-03")])
    with pytest.raises(ConfigError, match=said):
        make(index)  # type: ignore[operator]
    valuator = RetrievalValuator(index, k=np.int64(4))  # a whole number of NumPy's is one
    assert [hit.card_id for hit in index.search(ALICE, "hotel", k=valuator.k)] == ["c0"]
