"""A tool that fetches a web page (``requests.get(url).text``, LangChain's ``RequestsGetTool``)
returns raw HTML: its card holds what the page says, its links and its title, not its markup."""

from __future__ import annotations

import json
import time

from damc_core import CardKind, MemorySettings
from damc_core.compress import TemplateCompressor

NEWS = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Acme Corp recalls 12,000 heaters after fire reports | Daily Ledger</title>
  <link rel="stylesheet" href="/static/css/main.8f3a2b.css">
  <script async src="https://www.googletagmanager.com/gtag/js?id=G-ABC123XYZ"></script>
  <script>
    window.dataLayer = window.dataLayer || []; gtag('config', 'G-ABC123XYZ');
    var __NEXT_DATA__ = {"props":{"pageProps":{"articleId":"a-99812","build":"2024-05-01T10:00:00Z"}}};
  </script>
  <style>body{font-family:Georgia,serif} .nav a{color:#333;padding:4px 8px} .ad{min-height:250px}</style>
</head>
<body class="article-page">
<header><nav class="nav" aria-label="Main">
  <a href="/">Home</a> <a href="/world">World</a> <a href="/business">Business</a>
  <svg class="icon" viewBox="0 0 24 24"><title>menu</title><path d="M12 2L2 7l10 5 10-5-10-5z"/></svg>
</nav></header>
<!-- ad slot top: div-gpt-ad-1234567-0 -->
<div class="ad" id="div-gpt-ad-1234567-0" data-ad-unit="/1234/news/article"></div>
<main><article>
  <h1>Acme Corp recalls 12,000 heaters after fire reports</h1>
  <p class="byline">By Jane Doe &middot; <time datetime="2024-05-14">May 14, 2024</time></p>
  <p>Acme Corp said on Tuesday it would recall 12,000 model <strong>HX-200</strong> space heaters
  sold between January&nbsp;2023 and March&nbsp;2024 after 37 reports of overheating.</p>
  <p>Customers can get a full refund of $89.99 by calling 1-800-555-0199 or visiting
  <a href="https://www.acme.example.com/recall/HX-200?utm_source=ledger">the recall page</a>.</p>
  <h2>What owners should do</h2>
  <ul><li>Stop using the heater.</li>
  <li>Register at <a href="https://www.cpsc.example.gov/Recalls/2024/24-187">CPSC notice 24-187</a>.</li></ul>
</article></main>
<footer><p>&copy; 2024 Daily Ledger</p><a href="/privacy">Privacy</a></footer>
<script src="/static/js/app.3c9d1e.js"></script>
</body>
</html>"""

SEARCH = """<!DOCTYPE html><html><head><title>heater recall HX-200 - Search</title>
<style>.r{margin:0}</style><script>var q = "heater recall";</script></head><body>
<form action="/search"><input name="q" value="heater recall HX-200"></form><div id="results">
<div class="r"><h3><a href="https://www.cpsc.example.gov/Recalls/2024/24-187">Acme Recalls HX-200 Space
Heaters | CPSC.gov</a></h3><cite>www.cpsc.example.gov</cite>
<span>May 14, 2024 &mdash; About 12,000 units.</span></div>
<div class="r"><h3><a href="https://news.example.com/business/2024/05/14/acme-recall">Acme Corp recalls
12,000 heaters</a></h3>
<span>Acme Corp said on Tuesday it would recall 12,000 model HX-200 heaters...</span></div>
<div class="r"><h3><a href="https://forum.example.org/t/hx-200-smell/88213">HX-200 burning smell? - Appliance
Forum</a></h3><span>Mine started smelling after 2 weeks, serial HX2-23...</span></div>
</div><nav><a href="/search?q=heater+recall+HX-200&amp;start=10">Next</a></nav></body></html>"""

PRODUCT = """<!doctype html><html><head><meta charset="utf-8">
<title>Trailblazer 2 Tent &ndash; Northpeak Outfitters</title>
<script>!function(e){var t={};function n(r){if(t[r])return t[r].exports}}([]);
window.__STATE__={"cart":[]};</script>
<style>.price-table td{padding:2px}</style></head>
<body><div id="app"><div class="product" itemscope itemtype="https://schema.org/Product">
<h1 itemprop="name">Trailblazer 2 Tent</h1><div class="sku">Item # <span>NP-TB2-0417</span></div>
<table class="price-table">
<thead><tr><th>Variant</th><th>SKU</th><th>Price</th><th>Availability</th></tr></thead>
<tbody>
<tr><td>Olive / 2-person</td><td>NP-TB2-OL</td><td>&#36;249.00</td><td>Out of stock</td></tr>
<tr><td>Sand / 2-person</td><td>NP-TB2-SD</td><td>&#36;229.00</td><td>In stock (14)</td></tr>
<tr><td>Sand / 3-person</td><td>NP-TB3-SD</td><td>&#36;289.00</td><td>Ships 2024-06-03</td></tr>
</tbody></table>
<button type="submit" class="btn btn-primary" data-variant="NP-TB2-SD">Add to cart</button>
<p>Free returns within 30 days. See <a href="/policies/returns">return policy</a>.</p>
</div></div><script src="/assets/vendor.4f1e.js" defer></script></body></html>"""


def fetch(memory, url, page):
    """What an agent's ``requests_get`` tool adds to memory."""
    return memory.observe_tool("requests_get", {"url": url}, page, call_id="call_1")


def test_a_news_page_is_read_as_its_article_with_its_title_links_and_values(memory, counter):
    card = fetch(memory, "https://news.example.com/business/2024/05/14/acme", NEWS)

    assert card.kind is CardKind.TOOL_RESULT
    assert card.text.startswith("Acme Corp recalls 12,000 heaters after fire reports | Daily Ledger")
    assert "refund of $89.99 by calling 1-800-555-0199" in card.text
    assert "January 2023 and March 2024" in card.text  # &nbsp; is a space
    assert "By Jane Doe · May 14, 2024" in card.text  # &middot; decoded
    assert "the recall page (https://www.acme.example.com/recall/HX-200?utm_source=ledger)" in card.text
    assert "CPSC notice 24-187 (https://www.cpsc.example.gov/Recalls/2024/24-187)" in card.text
    for markup in ("<", "gtag", "font-family", "__NEXT_DATA__", "a-99812", "div-gpt-ad", "menu", "M12"):
        assert markup not in card.text
    values = {fact.value for fact in card.facts}
    assert {"$89.99", "1-800-555-0199"} <= values
    assert "https://news.example.com/privacy" in values  # a relative link, resolved
    assert "/static/js/app.3c9d1e.js" not in values and "G-ABC123XYZ" not in values

    shown = str(memory.build(budget=2000).messages)
    assert counter.count(card.text) < counter.count(NEWS) / 3
    assert "https://www.acme.example.com/recall/HX-200?utm_source=ledger" in shown
    assert "font-family" not in shown


def test_the_record_keeps_the_page_as_served_and_recall_by_match_reads_it(memory):
    card = fetch(memory, "https://news.example.com/business/2024/05/14/acme", NEWS)

    assert memory.recall(card.id)["content"] == NEWS
    assert '<a href="https://www.cpsc.example.gov/Recalls/2024/24-187">' in memory.handle_recall(
        {"card_id": card.id, "match": "24-187"}
    )


def test_a_search_results_page_keeps_every_results_title_and_address_even_in_its_leanest_card(memory):
    card = fetch(memory, "https://search.example.com/search?q=heater+recall+HX-200", SEARCH)

    assert card.text.splitlines()[0] == "heater recall HX-200 - Search"
    assert (
        "Acme Recalls HX-200 Space Heaters | CPSC.gov (https://www.cpsc.example.gov/Recalls/2024/24-187)"
        in card.text
    )
    assert (
        "www.cpsc.example.gov May 14, 2024 \N{EM DASH} About 12,000 units." in card.text
    )  # inline parts kept apart
    assert "Next (https://search.example.com/search?q=heater+recall+HX-200&start=10)" in card.text

    skeleton = TemplateCompressor().render(card, detail="skeleton")
    assert skeleton.startswith(
        "[c1] requests_get(url=https://search.example.com/search?q=heater+recall+HX-200)"
    )
    for address in (
        "https://www.cpsc.example.gov/Recalls/2024/24-187",
        "https://news.example.com/business/2024/05/14/acme-recall",
        "https://forum.example.org/t/hx-200-smell/88213",
    ):
        assert address in skeleton
    assert "<" not in skeleton


def test_a_product_page_keeps_its_price_table_as_rows_of_cells(make_memory, msg):
    memory = make_memory(settings=MemorySettings(budget=1200, recent_messages=2))
    card = fetch(memory, "https://shop.example.com/p/trailblazer-2", PRODUCT)
    memory.observe(msg.user("Is the sand 2-person one in stock, and what does it cost?"))

    lines = card.text.splitlines()
    assert lines[:3] == [
        "Trailblazer 2 Tent \N{EN DASH} Northpeak Outfitters",
        "Trailblazer 2 Tent",
        "Item # NP-TB2-0417",
    ]
    assert "Variant | SKU | Price | Availability" in lines
    assert "Sand / 2-person | NP-TB2-SD | $229.00 | In stock (14)" in lines
    assert "Olive / 2-person | NP-TB2-OL | $249.00 | Out of stock" in lines
    assert "return policy (https://shop.example.com/policies/returns)." in card.text
    assert "out of stock" in " ".join(card.constraints).lower()
    assert "Sand / 2-person | NP-TB2-SD | $229.00 | In stock (14)" in str(memory.build().messages)


def test_a_page_without_its_closing_head_tag_still_shows_its_body(memory):
    page = "<!doctype html><html><head><title>Order W1</title><meta charset=utf-8><p>Order #W4923227 shipped"

    card = fetch(memory, "https://shop.example.com/orders/W1", page)

    assert card.text == "Order W1\nOrder #W4923227 shipped"


def test_a_page_titled_like_an_error_is_no_failed_call(memory):
    page = "<!DOCTYPE html><html><head><title>Error codes of the Payments API</title></head><body>"
    page += "<h1>Error codes</h1><table><tr><td>E1001</td><td>card declined</td></tr></table></body></html>"

    card = fetch(memory, "https://docs.example.com/errors", page)

    assert card.kind is CardKind.TOOL_RESULT
    assert "E1001 | card declined" in card.text


def test_a_fragment_of_markup_is_read_as_a_page(memory):
    rows = "".join(f'<li class="item"><a href="/p/{i}" class="link">SKU-{i:04d}</a></li>' for i in range(12))

    card = fetch(memory, "https://shop.example.com/list", f'<ul class="results">{rows}</ul>')

    assert "SKU-0003 (https://shop.example.com/p/3)" in card.text.splitlines()


def test_text_with_a_few_tags_is_left_as_it_is(memory):
    answer = "**Order #W4923227**<br>Status: shipped<br>Tracking: <b>1Z999AA10123456784</b>"

    card = fetch(memory, "https://api.example.com/orders/W4923227", answer)

    assert card.text == answer


def test_a_two_megabyte_page_is_read_up_to_its_limit_and_recalled_whole(memory):
    """How long it takes is measured by ``benchmarks/huge_outputs.py`` (HTML page)."""
    rows = "".join(
        f'<li class="result"><a href="/p/{i:05d}?ref=search" data-sku="SKU-{i:05d}">'
        f'<span class="title">Widget {i}</span><span class="price">${10 + i % 50}.99</span></a></li>'
        for i in range(14_000)
    )
    page = f"<!DOCTYPE html><html><head><title>Widgets</title></head><body><ul>{rows}</ul></body></html>"
    assert len(page) > 2_000_000

    card = fetch(memory, "https://shop.example.com/search?q=widget", page)

    assert "Widget 10 $20.99 (https://shop.example.com/p/00010?ref=search)" in card.text
    assert card.text.endswith("characters the page shows; recall c1 for all)")
    assert "SKU-13999" in memory.handle_recall({"card_id": card.id, "match": "SKU-13999"})


def test_markup_that_never_closes_what_it_opens_is_read_in_linear_time(memory):
    """Read quadratically, these took close to a minute; the bound is far above a linear read
    (a fraction of a second) so that a busy machine does not fail it."""
    links = "<!DOCTYPE html><p>" + '<a href="/p/1">SKU-1' * 200_000  # each link left open
    icons = "<!DOCTYPE html>" + "<svg>" * 20_000 + "</noscript>" * 20_000 + "<p>Order #W4923227</p>"

    started = time.perf_counter()
    linked = fetch(memory, "https://shop.example.com/list", links)
    hidden = fetch(memory, "https://shop.example.com/icons", icons)
    took = time.perf_counter() - started

    assert took < 20
    assert linked.text.startswith("SKU-1 (https://shop.example.com/p/1) SKU-1 (https://shop.example.com/p/1)")
    assert "<" not in hidden.text


def test_recall_by_match_finds_words_of_the_card_that_tags_split_or_entities_spell(memory):
    news = fetch(memory, "https://news.example.com/business/2024/05/14/acme", NEWS)
    product = fetch(memory, "https://shop.example.com/p/trailblazer-2", PRODUCT)
    assert "12,000 model HX-200 space heaters" in news.text

    assert memory.handle_recall({"card_id": news.id, "match": "model HX-200 space heaters"}) == (
        "Acme Corp said on Tuesday it would recall 12,000 model HX-200 space heaters sold between "
        "January 2023 and March 2024 after 37 reports of overheating."
    )
    assert memory.handle_recall({"card_id": product.id, "match": "NP-TB2-SD | $229.00"}) == (
        "Sand / 2-person | NP-TB2-SD | $229.00 | In stock (14)"
    )
    assert "<tr><td>Sand / 2-person</td>" in memory.handle_recall({"card_id": product.id, "match": "sand"})
    assert memory.handle_recall({"card_id": news.id, "match": "fire hazard"}).startswith("Nothing in 'c1'")


def test_a_page_in_a_field_of_a_json_result_shows_its_text(memory):
    scraped = {"url": "https://news.example.com/business/2024/05/14/acme", "status": 200, "html": NEWS}
    card = memory.observe_tool("scrape", {"urls": [scraped["url"]]}, scraped)
    rows = memory.observe_tool(
        "scrape", {"urls": [scraped["url"]]}, [scraped, {**scraped, "url": "https://x.example"}]
    )

    html = next(fact.value for fact in card.facts if fact.path == "html")
    assert html.startswith(
        "Acme Corp recalls 12,000 heaters after fire reports | Daily Ledger Home (/) World"
    )
    assert "<" not in html and html.endswith("…") and len(html) <= 300
    assert rows.tables[0].rows[0][rows.tables[0].columns.index("html")] == html
    assert memory.recall(card.id)["content"] == json.dumps(scraped)
