"""Real Chroma for the tests: an embedded folder per test, and one Chroma server on loopback for
the session (started with ``chroma run``, stopped at the end). Each server test gets its own
collection prefix, so tests never see each other's data."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from damc_core.stores.chroma import ChromaConfig

if importlib.util.find_spec("chromadb") is None:  # the chroma extra is not installed
    collect_ignore_glob = ["test_*.py"]

SERVER_START_TIMEOUT = 90.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_chroma_server(data: Path) -> tuple[subprocess.Popen[bytes], ChromaConfig]:
    """``chroma run`` on a free loopback port, as a fleet of agents would share one; waits until
    it answers."""
    data.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    chroma = Path(sys.executable).parent / "chroma"
    with (data / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [str(chroma), "run", "--path", str(data / "db"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    config = ChromaConfig(host="127.0.0.1", port=port)
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while True:
        try:
            config.client().heartbeat()
            return process, config
        except Exception:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"chroma server did not start; see {data / 'server.log'}") from None
            time.sleep(0.3)


def stop_chroma_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaConfig]:
    """One Chroma server for the session's server-mode tests."""
    process, config = start_chroma_server(tmp_path_factory.mktemp("chroma-server"))
    yield config
    stop_chroma_server(process)


@pytest.fixture(params=["embedded", "server"])
def chroma_config(request: pytest.FixtureRequest, tmp_path: Path) -> ChromaConfig:
    """The same tests against an embedded folder and against the shared server."""
    if request.param == "embedded":
        return ChromaConfig(path=tmp_path / "chroma")
    server: ChromaConfig = request.getfixturevalue("chroma_server")
    return ChromaConfig(host=server.host, port=server.port, prefix=f"t{uuid.uuid4().hex[:12]}")
