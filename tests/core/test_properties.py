"""Any conversation, however malformed, keeps the memory's promises.

Hypothesis drives a memory on a SQLite file with random events (user turns, assistant turns with
or without tool calls, tool results answering any call id or none, system prompts; text, JSON cut
short, content parts with images, None) and random builds, and checks after every step:

* ``observe`` never raises, and ``recall`` gives back every event verbatim;
* every build is a message list an OpenAI-style chat API accepts (see ``check_context``);
* without media, a build stays within a budget that fits the newest call's arguments;
* a memory reopened on the file has the same cards and builds the same context.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from conftest import ManualClock, check_context, openai_tool_calls
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from damc_core import DecisionMemory, MemorySettings, Namespace, SQLiteStore, TiktokenCounter
from damc_core.tokens import count_messages

COUNTER = TiktokenCounter()
NAMESPACE = Namespace(user="mia_li_3668", session="trip")
VALUES = ["HAT136", "2024-05-20", "$250", "sold out", "confirmed", "economy", "gift_card_7480005", "Mia"]
CALL_IDS = ["call_1", "call_2", "call_3", "", None]
TOOLS = ["search_flights", "book_reservation", "get_user_details", "think"]
FITTING_BUDGET = 300
"""A budget above what the generated calls' arguments take (the newest call is always sent)."""

words = st.lists(st.sampled_from([*VALUES, "ok", "no"]), max_size=12).map(" ".join)
image = st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}})
text_part = st.builds(lambda text: {"type": "text", "text": text}, st.text(max_size=30))
parts = st.lists(st.one_of(image, text_part), min_size=1, max_size=3)
content = st.one_of(st.none(), st.text(max_size=80), words, parts)
scalar = st.one_of(
    st.sampled_from(VALUES), st.integers(-5, 10**6), st.booleans(), st.none(), st.text(max_size=20)
)
keys = st.sampled_from(["id", "status", "price", "date", "flight_number", "seats", "error", "rows"])
json_value = st.recursive(
    st.one_of(scalar, st.dictionaries(keys, scalar, max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=8), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=40,
)
tool_output = st.one_of(content, json_value.map(json.dumps), json_value.map(lambda v: json.dumps(v)[:-3]))
arguments = st.one_of(st.dictionaries(keys, scalar, max_size=4).map(json.dumps), st.text(max_size=20))
tool_call = openai_tool_calls(CALL_IDS, TOOLS, arguments)


class AnyConversation(RuleBasedStateMachine):
    @initialize(recent=st.integers(0, 5))
    def open_memory(self, recent: int) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="damc-properties-")) / "memory.db"
        self.clock = ManualClock()
        self.settings = MemorySettings(recent_messages=recent)
        self.store = SQLiteStore(self.path)
        self.memory = self._memory()
        self.observed: list[tuple[str, dict[str, Any]]] = []

    def _memory(self) -> DecisionMemory:
        return DecisionMemory(
            namespace=NAMESPACE, store=self.store, counter=COUNTER, clock=self.clock, settings=self.settings
        )

    def _observe(self, event: dict[str, Any]) -> None:
        self.clock.advance(1)
        card = self.memory.observe(event)
        self.observed.append((card.id, event))

    @rule(text=content)
    def user_says(self, text: Any) -> None:
        self._observe({"role": "user", "content": text})

    @rule(text=content, calls=st.lists(tool_call, max_size=3))
    def assistant_answers(self, text: Any, calls: list[dict[str, Any]]) -> None:
        self._observe({"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})})

    @rule(call_id=st.sampled_from(CALL_IDS), name=st.sampled_from(TOOLS), output=tool_output)
    def tool_returns(self, call_id: str | None, name: str, output: Any) -> None:
        self._observe({"role": "tool", "tool_call_id": call_id, "name": name, "content": output})

    @rule(text=content)
    def system_prompt_changes(self, text: Any) -> None:
        self._observe({"role": "system", "content": text})

    @rule(
        budget=st.integers(1, 3000),
        recent=st.none() | st.integers(0, 6),
        query=st.none() | content,
        system=st.none() | content,
        sent_by_caller=st.integers(0, 4),
    )
    def build(self, budget: int, recent: int | None, query: Any, system: Any, sent_by_caller: int) -> None:
        exclude = [card_id for card_id, _ in self.observed[len(self.observed) - sent_by_caller :]]
        built = self.memory.build(
            budget=budget, recent_messages=recent, query=query, system=system, exclude=exclude
        )

        check_context(built.messages)
        if budget >= FITTING_BUDGET and "image_url" not in json.dumps(built.messages):
            dialogue = [m for m in built.messages if m["role"] != "system"]
            memory = COUNTER.count(built.memory) + 1 if built.memory else 0
            assert count_messages(dialogue, COUNTER) + memory <= budget

    @rule(budget=st.integers(FITTING_BUDGET, 2000))
    def reopen(self, budget: int) -> None:
        before, cards = self.memory.build(budget=budget), self.memory.cards()
        self.store.close()
        self.store = SQLiteStore(self.path)
        self.memory = self._memory()

        assert self.memory.cards() == cards
        after = self.memory.build(budget=budget)
        assert (after.messages, after.decisions) == (before.messages, before.decisions)

    @invariant()
    def every_event_is_recalled_verbatim(self) -> None:
        if self.observed:
            card_id, event = self.observed[-1]
            assert self.memory.recall(card_id) == event

    def teardown(self) -> None:
        if hasattr(self, "store"):
            self.store.close()
            shutil.rmtree(self.path.parent)


AnyConversation.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_any_conversation = AnyConversation.TestCase
