"""An agent whose tool fetches pages with ``requests.get(url).text``, served over loopback: the
model reads what the pages say and their links, not their markup."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("langchain")
pytest.importorskip("requests")

import requests
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from damc_core import DecisionMemory, InMemoryStore, MemorySettings
from damc_langchain import DamcMiddleware

from .scenario import call, text

PAGES = {
    "/search": """<!DOCTYPE html><html><head><title>heater recall - Search</title>
<script>window.__cfg={"experiments":["a1","b2"],"nonce":"8f2c1d"};</script>
<style>.r h3{font-size:18px;color:#1a0dab}</style></head><body>
<div class="r"><h3><a href="/news/acme-recall">Acme recalls 12,000 HX-200 heaters</a></h3></div>
<div class="r"><h3><a href="https://forum.example.org/t/88213">HX-200 burning smell?</a></h3></div>
</body></html>""",
    "/news/acme-recall": """<!DOCTYPE html><html><head><title>Acme recalls 12,000 heaters</title>
<script src="/static/app.3c9d1e.js"></script><style>p{margin:0 0 1em}</style></head><body>
<nav><a href="/">Home</a></nav><article><h1>Acme recalls 12,000 heaters</h1>
<p>Owners get a refund of $89.99; call 1-800-555-0199 or see
<a href="https://www.cpsc.example.gov/Recalls/2024/24-187">CPSC notice 24-187</a>.</p></article>
</body></html>""",
}


class _Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGES[self.path.split("?")[0]].encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@tool
def requests_get(url: str) -> str:
    """Fetch a web page and return its HTML."""
    return requests.get(url, timeout=10).text


def test_the_model_reads_fetched_pages_as_their_text_and_links(recording_model, site):
    model = recording_model(
        call("requests_get", {"url": f"{site}/search?q=heater+recall"}, "call_1"),
        call("requests_get", {"url": f"{site}/news/acme-recall"}, "call_2"),
        AIMessage("Acme refunds $89.99 (CPSC notice 24-187)."),
    )
    memory = DecisionMemory(store=InMemoryStore(), settings=MemorySettings(budget=600, recent_messages=2))
    agent = create_agent(model, [requests_get], middleware=[DamcMiddleware(memory)])

    agent.invoke(
        {"messages": [HumanMessage("Is there a recall on the HX-200 heater? How much is the refund?")]}
    )

    after_search, after_article = text(model.received[1]), text(model.received[2])
    assert f"Acme recalls 12,000 HX-200 heaters ({site}/news/acme-recall)" in after_search
    assert f"{site}/news/acme-recall" in after_article  # the search's card, now in the memory section
    assert "refund of $89.99; call 1-800-555-0199" in after_article
    assert "CPSC notice 24-187 (https://www.cpsc.example.gov/Recalls/2024/24-187)" in after_article
    for markup in ("<script", "<style", "font-size", "nonce", "app.3c9d1e.js", 'href="'):
        assert markup not in after_search and markup not in after_article
