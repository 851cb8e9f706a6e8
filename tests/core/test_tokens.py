"""Token counting works offline: BPE files come from installed packages, never from the network."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import textwrap

import pytest

from damc_core import CharEstimateCounter, TiktokenCounter, TokenizerUnavailableError, load_encoding
from damc_core.tokens import MESSAGE_OVERHEAD, count_messages


@pytest.fixture
def fresh_encodings():
    """Forget loaded encodings so the test exercises the file search; restore the cache after."""
    load_encoding.cache_clear()
    yield
    load_encoding.cache_clear()


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[1:] or kwargs}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_hello_world_is_two_tokens():
    assert TiktokenCounter().count("hello world") == 2


def test_counts_match_the_cl100k_encoding():
    counter = TiktokenCounter()

    assert counter.encoding.name == "cl100k_base"
    assert counter.count("") == 0
    assert counter.count("HAT069 costs $121") == len(counter.encoding.encode("HAT069 costs $121"))


def test_special_token_text_is_counted_not_rejected():
    assert TiktokenCounter().count("<|endoftext|> is just text here") > 0


def test_a_loaded_encoding_can_be_passed_in():
    encoding = load_encoding("cl100k_base")

    assert TiktokenCounter(encoding).count("hello world") == 2
    assert load_encoding("cl100k_base") is encoding  # loaded once per process


def test_unknown_encoding_raises_tokenizer_unavailable():
    with pytest.raises(TokenizerUnavailableError, match=r"'nope'.*known: \['cl100k_base', 'o200k_base'\]"):
        load_encoding("nope")
    with pytest.raises(TokenizerUnavailableError):
        TiktokenCounter("nope")


def test_empty_tiktoken_cache_dir_does_not_matter(monkeypatch, tmp_path, fresh_encodings, no_network):
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(empty))
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(empty))

    assert TiktokenCounter().count("hello world") == 2


def test_unwritable_tiktoken_cache_dir_does_not_matter(monkeypatch, tmp_path, fresh_encodings, no_network):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(blocker / "cache"))

    assert TiktokenCounter().count("hello world") == 2


def test_o200k_needs_an_installed_copy_or_says_how_to_get_one(
    monkeypatch, tmp_path, fresh_encodings, no_network
):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    if importlib.util.find_spec("llama_index") is None:
        with pytest.raises(TokenizerUnavailableError, match=r"o200k_base.*searched: .*damc\[llamaindex\]"):
            load_encoding("o200k_base")
    else:
        assert TiktokenCounter("o200k_base").count("hello world") == 2


def test_char_estimate_counter_is_four_characters_per_token():
    counter = CharEstimateCounter()

    assert counter.count("") == 0
    assert counter.count("abc") == 1
    assert counter.count("a" * 40) == 10


def test_message_count_includes_tool_calls_and_overhead(msg):
    counter = TiktokenCounter()
    call = msg.call("call_1", "get_user_details", {"user_id": "mia_li_3668"})

    expected = counter.count('\nget_user_details({"user_id": "mia_li_3668"})') + MESSAGE_OVERHEAD
    assert count_messages([call], counter) == expected
    assert count_messages([msg.user("hello world")], counter) == 2 + MESSAGE_OVERHEAD


OFFLINE_SCRIPT = textwrap.dedent(
    """
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network disabled by the test")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse

    import damc_core
    from damc_core import DecisionMemory, InMemoryStore, TiktokenCounter

    assert TiktokenCounter().count("hello world") == 2
    memory = DecisionMemory(store=InMemoryStore())
    memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
    assert memory.build().total_tokens > 0
    print("offline ok")
    """
)


def test_import_and_count_in_a_fresh_process_without_network(tmp_path):
    empty = tmp_path / "cache"
    empty.mkdir()
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(empty),
        "DATA_GYM_CACHE_DIR": str(empty),
        "TMPDIR": str(tmp_path),
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
    }

    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "offline ok"
