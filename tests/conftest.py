"""Shared fixtures for the damc_core tests.

* ``msg``: builders for OpenAI-style messages (user turns, tool calls, tool results).
* ``airline_messages``: a scripted tau-bench-like airline conversation (user details, a flight
  search with a sold-out option, a booking).
* ``memory`` / ``make_memory``: ``DecisionMemory`` on a real SQLite file with the real offline
  tiktoken counter and a clock that only moves when a test moves it.
* ``assert_valid_context``: checks a message list the way an OpenAI-style chat API would.
* ``memory_in_ram`` and ``openai_tool_calls``: a memory and random tool calls for property tests.
  Hypothesis runs the same examples on every run (profile ``repeatable``), so a run passes or
  fails the same way on any machine; ``HYPOTHESIS_PROFILE=explore`` draws new ones each run.
* ``completion_server`` / ``chat_server``: llama-cpp-python's OpenAI-compatible server with the
  bundled SmolLM2-135M on loopback (prompt log-probabilities; chat with tool calls);
  ``recorded_http``: an httpx transport that keeps every request a client sends it; and
  ``short_arguments``: a tool's argument schema that keeps that model's values short.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import hypothesis.strategies as st
import pytest
from hypothesis import settings

from damc_core import DecisionMemory, InMemoryStore, MemorySettings, Namespace, SQLiteStore, TiktokenCounter

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

T0 = 1_715_785_200.0
"""2024-05-15 15:00 UTC, the "current time" of the tau-bench airline domain."""


class ManualClock:
    """A clock that stands still until the test advances it (so builds are reproducible)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


class Msg:
    """Builders for OpenAI-style chat messages."""

    @staticmethod
    def system(text: str) -> dict[str, Any]:
        return {"role": "system", "content": text}

    @staticmethod
    def user(text: str | None) -> dict[str, Any]:
        return {"role": "user", "content": text}

    @staticmethod
    def assistant(text: str | None) -> dict[str, Any]:
        return {"role": "assistant", "content": text}

    @staticmethod
    def call(call_id: str, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """An assistant message requesting one tool call."""
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            ],
        }

    @staticmethod
    def calls(calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
        """An assistant message requesting several tool calls at once: (id, name, arguments)."""
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, n, a in calls
            ],
        }

    @staticmethod
    def result(call_id: str, name: str, payload: Any) -> dict[str, Any]:
        """A tool message; dicts and lists are sent as JSON text, as agents do."""
        content = payload if isinstance(payload, (str, bytes)) or payload is None else json.dumps(payload)
        return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


USER_DETAILS = {
    "user_id": "mia_li_3668",
    "name": {"first_name": "Mia", "last_name": "Li"},
    "email": "mia.li3818@example.com",
    "dob": "1990-04-05",
    "membership": "gold",
    "payment_methods": {
        "credit_card_4421486": {
            "source": "credit_card",
            "brand": "visa",
            "last_four": "7447",
            "id": "credit_card_4421486",
        },
        "certificate_7504069": {"source": "certificate", "amount": 250, "id": "certificate_7504069"},
    },
    "reservations": ["NO6JO3", "AIXC49"],
}

FLIGHTS = [
    {
        "flight_number": "HAT069",
        "origin": "JFK",
        "destination": "SEA",
        "scheduled_departure_time_est": "06:00:00",
        "status": "available",
        "available_seats": {"basic_economy": 17, "economy": 12, "business": 3},
        "prices": {"basic_economy": 51, "economy": 121, "business": 239},
    },
    {
        "flight_number": "HAT083",
        "origin": "JFK",
        "destination": "SEA",
        "scheduled_departure_time_est": "01:00:00",
        "status": "available",
        "available_seats": {"basic_economy": 0, "economy": 0, "business": 5},
        "prices": {"basic_economy": 87, "economy": 100, "business": 470},
    },
]

BOOKING = {
    "reservation_id": "HATHAT",
    "user_id": "mia_li_3668",
    "origin": "JFK",
    "destination": "SEA",
    "flight_type": "one_way",
    "cabin": "economy",
    "flights": [{"flight_number": "HAT069", "date": "2024-05-20", "price": 121}],
    "payment_history": [{"payment_id": "credit_card_4421486", "amount": 121}],
    "created_at": "2024-05-15T15:00:00",
    "status": "confirmed",
}


def airline_conversation() -> list[dict[str, Any]]:
    """System prompt, user request, get_user_details, search_direct_flight, book_reservation."""
    m = Msg
    return copy.deepcopy(
        [
            m.system("You are an airline agent. Follow the airline policy."),
            m.user("Hi, I'm mia_li_3668. I want a one-way flight from JFK to SEA on 2024-05-20 in economy."),
            m.call("call_1", "get_user_details", {"user_id": "mia_li_3668"}),
            m.result("call_1", "get_user_details", USER_DETAILS),
            m.call(
                "call_2",
                "search_direct_flight",
                {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"},
            ),
            m.result("call_2", "search_direct_flight", FLIGHTS),
            m.assistant(
                "HAT069 departs 06:00 and costs $121 in economy; HAT083 is sold out in economy. Book HAT069?"
            ),
            m.user("Yes, book HAT069 and pay with my credit card."),
            m.call(
                "call_3",
                "book_reservation",
                {
                    "user_id": "mia_li_3668",
                    "origin": "JFK",
                    "destination": "SEA",
                    "flight_type": "one_way",
                    "cabin": "economy",
                    "flights": [{"flight_number": "HAT069", "date": "2024-05-20"}],
                    "payment_methods": [{"payment_id": "credit_card_4421486", "amount": 121}],
                },
            ),
            m.result("call_3", "book_reservation", BOOKING),
            m.assistant("Booked: reservation HATHAT on HAT069, $121 charged to credit_card_4421486."),
        ]
    )


@pytest.fixture
def msg() -> type[Msg]:
    return Msg


@pytest.fixture
def airline_messages() -> list[dict[str, Any]]:
    return airline_conversation()


@pytest.fixture(scope="session")
def counter() -> TiktokenCounter:
    return TiktokenCounter()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.sqlite3"


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(db_path) as opened:
        yield opened


@pytest.fixture
def make_memory(
    store: SQLiteStore, counter: TiktokenCounter, clock: ManualClock
) -> Callable[..., DecisionMemory]:
    """``make_memory(**overrides)``: DecisionMemory on the test's SQLite file, real counter, manual clock."""

    def make(**overrides: Any) -> DecisionMemory:
        options: dict[str, Any] = {
            "namespace": Namespace(user="mia_li_3668", session="trip-1"),
            "store": store,
            "counter": counter,
            "clock": clock,
        }
        options.update(overrides)
        return DecisionMemory(**options)

    return make


@pytest.fixture
def memory(make_memory: Callable[..., DecisionMemory]) -> DecisionMemory:
    return make_memory()


def memory_in_ram(*, recent_messages: int = 2) -> DecisionMemory:
    """A memory in RAM with the real counter and a still clock: a property test makes one per
    example (a fixture would be shared by all of a test's examples)."""
    return DecisionMemory(
        namespace=Namespace(user="mia_li_3668", session="trip"),
        store=InMemoryStore(),
        counter=TiktokenCounter(),
        clock=ManualClock(),
        settings=MemorySettings(recent_messages=recent_messages),
    )


PATCH = "*** Begin Patch\n*** Update File: app.py\n-retries = 1\n+retries = 3\n*** End Patch"
"""The input of an OpenAI custom tool call (``apply_patch``) that :func:`observe_custom_tool_step` records."""


def observe_custom_tool_step(memory: DecisionMemory) -> None:
    """A step an agent made through the OpenAI SDK: a request, a custom tool's call (``call_9``,
    ``apply_patch`` with :data:`PATCH` as its input) and its result."""
    memory.observe({"role": "user", "content": "Raise the retries in app.py to 3"})
    memory.observe(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_9", "type": "custom", "custom": {"name": "apply_patch", "input": PATCH}}
            ],
        }
    )
    memory.observe({"role": "tool", "tool_call_id": "call_9", "content": "Done: app.py, 1 hunk"})


def openai_tool_calls(
    ids: Sequence[str | None], names: Sequence[str], arguments: st.SearchStrategy[str]
) -> st.SearchStrategy[dict[str, Any]]:
    """Random OpenAI-style tool calls (``{"id", "type", "function": {"name", "arguments"}}``)."""
    return st.builds(
        lambda call_id, name, args: {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": args},
        },
        st.sampled_from(ids),
        st.sampled_from(names),
        arguments,
    )


KNOWN_ROLES = {"system", "developer", "user", "assistant", "tool"}


def check_context(messages: Sequence[dict[str, Any]], *, content: bool = True) -> None:
    """Raise AssertionError when an OpenAI-style chat API would reject ``messages``.

    Always checked: known roles; a dialogue with a user turn opens with one (Anthropic's and
    Gemini's APIs reject a dialogue that opens with the assistant); every tool message
    answers an open call of the assistant message right before it (only tool messages in between);
    every tool call gets its result.
    With ``content=True`` also: no null content except on an assistant message that calls tools.
    """
    assert isinstance(messages, list), f"messages must be a list, got {type(messages).__name__}"
    dialogue = [m for m in messages if m.get("role") not in ("system", "developer")]
    user_turns = any(m.get("role") == "user" for m in dialogue)
    assert not user_turns or dialogue[0].get("role") == "user", (
        f"the dialogue opens with {dialogue[0].get('role')!r}, not a user turn"
    )
    open_calls: list[str] = []
    in_tool_block = False
    for index, message in enumerate(messages):
        where = f"message {index} ({message.get('role')!r})"
        role = message.get("role")
        assert role in KNOWN_ROLES, f"{where}: unknown role"
        if role == "tool":
            assert in_tool_block, f"{where}: tool result without an assistant tool call right before it"
            call_id = message.get("tool_call_id")
            assert call_id in open_calls, (
                f"{where}: tool_call_id {call_id!r} answers no open call {open_calls}"
            )
            open_calls.remove(call_id)
            if content:
                assert isinstance(message.get("content"), (str, list)), f"{where}: content must be text"
            continue
        assert not open_calls, f"{where}: tool calls {open_calls} got no result"
        in_tool_block = False
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            for call in calls:
                assert isinstance(call, dict) and call.get("id"), f"{where}: malformed tool call {call!r}"
                function = call.get("function") if call.get("type") != "custom" else call.get("custom")
                assert isinstance(function, dict) and function.get("name"), f"{where}: call without a name"
                open_calls.append(call["id"])
            in_tool_block = True
        elif content:
            assert isinstance(message.get("content"), (str, list)), (
                f"{where}: content is {message.get('content')!r}"
            )
    assert not open_calls, f"tool calls {open_calls} at the end got no result"


@pytest.fixture
def assert_valid_context() -> Callable[..., None]:
    return check_context


def memory_section(messages: Sequence[dict[str, Any]]) -> str:
    """The fenced memory text of a built context ("" when there is none)."""
    for message in messages:
        text = message.get("content")
        if isinstance(text, str) and "<memory>" in text:
            return text[text.index("<memory>") :]
    return ""


@pytest.fixture
def memory_text() -> Callable[[Sequence[dict[str, Any]]], str]:
    return memory_section


class Retail:
    """A retail exchange used by several tests: a long request naming an order of five products,
    then lookups of those products, each with its option variants."""

    @staticmethod
    def long_request_and_order(memory: DecisionMemory) -> None:
        memory.observe(
            Msg.user(
                "I am Daiki Sanchez in 46236. My card has only $1131 left but order #W9348897 costs more. "
                "Can you split the payment with another card? If not, tell me the most expensive item and "
                "its price, and whether I can cancel just that item. If not, switch every item to its "
                "cheapest option to bring the total under $1131. If that fails too, cancel the order so "
                "that I can order again. I am in a hurry, so please keep it short and do it in one go."
            )
        )
        memory.observe(Msg.call("o", "get_order_details", {"order_id": "#W9348897"}))
        names = ["Action Camera", "Patio Umbrella", "Garden Hose", "Desk Lamp", "Backpack"]
        items = [
            {
                "name": name,
                "product_id": f"33776183{i:02d}",
                "item_id": f"61171891{i:02d}",
                "price": 481.5 - i,
            }
            for i, name in enumerate(names)
        ]
        memory.observe(Msg.result("o", "get_order_details", {"order_id": "#W9348897", "items": items}))

    @staticmethod
    def product_lookup(memory: DecisionMemory, product: int, *, variants: int) -> None:
        """The lookup of the order's ``product``-th product (``33776183{product:02d}``)."""
        product_id = f"33776183{product:02d}"
        memory.observe(Msg.call(f"p{product}", "get_product_details", {"product_id": product_id}))
        options = {
            f"70{product}{v:07d}": {
                "item_id": f"70{product}{v:07d}",
                "options": {"size": f"{6 + v % 3} ft", "color": ["blue", "red", "green"][v % 3]},
                "available": v % 2 == 0,
                "price": 280.0 + v,
            }
            for v in range(variants)
        }
        memory.observe(
            Msg.result(f"p{product}", "get_product_details", {"product_id": product_id, "variants": options})
        )


@pytest.fixture
def retail() -> type[Retail]:
    return Retail


# -- a real model behind an OpenAI-compatible endpoint -------------------------------------------


@contextlib.contextmanager
def llama_server(*options: str) -> Iterator[str]:
    """``python -m llama_cpp.server`` with the bundled SmolLM2-135M (alias ``smollm2``) on a free
    loopback port; yields its ``/v1`` URL once it answers."""
    pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")
    from damc_core.counterfactual.llama_cpp import bundled_model_path

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_model_path())]
    command += ["--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port), *options]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("llama_cpp.server did not start") from None
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="session")
def completion_server() -> Iterator[str]:
    """The server for scoring: ``/v1/completions`` echoes prompt log-probabilities."""
    with llama_server("--n_ctx", "512", "--logits_all", "true") as url:
        yield url


@pytest.fixture(scope="session")
def chat_server() -> Iterator[str]:
    """The server for agents: ``/v1/chat/completions`` with tool calls (a named ``tool_choice``
    is grammar-constrained, so the 135M model always answers with that call)."""
    with llama_server("--n_ctx", "4096", "--chat_format", "chatml-function-calling") as url:
        yield url


class RecordingTransport:
    """An httpx transport to a real server, for sync and async clients alike, that keeps each
    JSON body sent (``requests``) and each status received (``statuses``).

    llama-cpp-python's server requires an assistant message's ``content`` to be a string, where
    OpenAI's API (and LangChain's and LlamaIndex's OpenAI clients, for a message that only calls
    tools) use ``null``; such a ``null`` is sent as ``""``, which means the same.
    """

    def __init__(self) -> None:
        import httpx

        self._http = httpx.HTTPTransport()
        self._async_http = httpx.AsyncHTTPTransport()
        self.requests: list[dict[str, Any]] = []
        self.statuses: list[int] = []

    def _recorded(self, request: Any) -> Any:
        import httpx

        body = json.loads(request.content)
        for message in body.get("messages", ()):
            if message.get("role") == "assistant" and message.get("content") is None:
                message["content"] = ""
        self.requests.append(body)
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        return httpx.Request(request.method, request.url, headers=headers, json=body)

    def handle_request(self, request: Any) -> Any:
        response = self._http.handle_request(self._recorded(request))
        self.statuses.append(response.status_code)
        return response

    async def handle_async_request(self, request: Any) -> Any:
        response = await self._async_http.handle_async_request(self._recorded(request))
        self.statuses.append(response.status_code)
        return response

    def close(self) -> None:
        self._http.close()

    async def aclose(self) -> None:
        await self._async_http.aclose()


@pytest.fixture
def recorded_http() -> Iterator[RecordingTransport]:
    pytest.importorskip("httpx")
    transport = RecordingTransport()
    yield transport
    transport.close()


def short_arguments_schema(function: Callable[..., Any]) -> Any:
    """A pydantic model of ``function``'s string arguments, each at most 24 characters: the
    server's grammar then holds the 135M model to short values instead of a string that runs to
    ``max_tokens`` and leaves the call's JSON unterminated."""
    import inspect

    from pydantic import Field, create_model

    fields: dict[str, Any] = {
        name: (Annotated[str, Field(max_length=24)], ...) for name in inspect.signature(function).parameters
    }
    return create_model(function.__name__, **fields)


@pytest.fixture
def short_arguments() -> Callable[[Callable[..., Any]], Any]:
    return short_arguments_schema
