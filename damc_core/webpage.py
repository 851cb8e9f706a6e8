"""A tool output that is an HTML page, read as the text a browser shows.

``requests.get(url).text``, LangChain's ``RequestsGetTool`` and web readers return a page as it
was served: its ``<head>``, scripts, styles, icons and every tag's attributes are most of it, so
read as free text the card keeps markup and little of what the page says. :func:`page_text`
keeps the title, the headings, paragraphs, list items and table rows as lines (a row's cells
joined by `` | ``), and each link's address beside its text, so a later call can fetch it.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

_PAGE_START = re.compile(
    r"(?:\ufeff|\s|<\?xml[^>]*>|<!--.*?-->)*<(?:!doctype\s+html|html[\s>])", re.IGNORECASE | re.DOTALL
)
"""How a page starts: ``<!DOCTYPE html>`` or ``<html>``, after an XML declaration or comments."""
_SAMPLE = 20_000
"""Characters of an output that does not start as a page read to tell whether it is one."""
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)\b[^<>]*>")
_HTML_TAG_NAMES = """
a abbr article aside b body br button div em footer form h1 h2 h3 h4 h5 h6 header i img input
label li link main meta nav ol option p script section select small span strong style table
tbody td th thead tr ul
"""
HTML_TAGS = frozenset(_HTML_TAG_NAMES.split())
"""Names of common HTML elements: markup made of them is a page, or a part of one."""
_TAG_SHARE = 0.5
"""Least share of an output's characters inside tags for a fragment (``<div>...</div>``, what a
scraper returns of one element) to be read as a page: a Markdown answer with a ``<br>`` is text."""
_FRAGMENT_TAGS = 8
"""Least HTML tags a fragment has; a short snippet of markup stays as it is."""

_HIDDEN = frozenset({"head", "script", "style", "svg", "math", "noscript", "template", "iframe"})
"""Elements whose content a browser does not show as text (the title in ``<head>`` is read apart)."""
_BLOCK_NAMES = """
address article aside blockquote body br dd details dialog div dl dt fieldset figcaption figure
footer form h1 h2 h3 h4 h5 h6 header hr html li main nav ol option p pre section summary table
tbody tfoot thead title tr ul
"""
_BLOCKS = frozenset(_BLOCK_NAMES.split())
"""Elements that start a new line."""
_HIDDEN_DEPTH = 32
"""Hidden elements left open that are tracked; past it, markup that never closes them costs no
more to parse."""
_CELLS = frozenset({"td", "th"})
_APART = frozenset({"span", "cite", "label", "button", "time"})
"""Inline elements whose text a page's style sets apart (a title and its price, a site and a
date): a space after each, so their words do not run together."""
_CLOSING = frozenset(".,;:!?)]")
_SPACES = re.compile(r"[ \t\r\n\f\v\u00a0\u200b]+")
_NOT_FOLLOWED = ("#", "javascript:", "data:")
"""Link targets that are no address to fetch: a place on the same page, a script, inline data."""


def is_page(text: str) -> bool:
    """Whether ``text`` (stripped) is an HTML page: it starts as one, or it is a fragment made
    mostly of HTML tags (:data:`_TAG_SHARE`). Reads at most :data:`_SAMPLE` characters."""
    if not text.startswith(("<", "\ufeff")):
        return False
    if _PAGE_START.match(text, 0, _SAMPLE):
        return True
    if not text.endswith(">"):
        return False
    sample = text[:_SAMPLE]
    tags = [m for m in _TAG.finditer(sample) if m.group(2).lower() in HTML_TAGS]
    return len(tags) >= _FRAGMENT_TAGS and sum(m.end() - m.start() for m in tags) >= _TAG_SHARE * len(sample)


_CHUNK = 65_536
"""Characters of a page parsed between two checks of how much text it has shown."""


def page_text(html: str, url: str = "", *, limit: int = 1 << 62) -> tuple[str, bool]:
    """What a browser shows of ``html``, one block per line, entities decoded; each link's
    address after its text (``recall page (https://example.com/recall)``), resolved against the
    page's ``<base>`` or ``url`` (the address it was fetched from) when relative. The parse
    stops once the text is ``limit`` characters long (the page's start is where its content
    is), and says whether it read all of the page."""
    reader = _PageReader(url)
    for start in range(0, len(html), _CHUNK):
        reader.feed(html[start : start + _CHUNK])
        if reader.shown >= limit:
            text = reader.text()
            cut = text.rfind("\n", 0, limit)  # at a line's end: not inside an address
            return text[: cut if cut > 0 else limit], False
    reader.close()
    return reader.text(), True


class _PageReader(HTMLParser):
    def __init__(self, url: str) -> None:
        super().__init__(convert_charrefs=True)
        self._base = self._origin = ""
        self.base(url)
        self._lines: list[str] = []
        self._line: list[str] = []
        self._hidden: list[str] = []
        """The hidden elements open around the text read now (``head`` inside ``html``, ...)."""
        self._title: list[str] = []
        self._in_title = False
        self._link: tuple[str, int] | None = None
        """The address of the link open, and where its text starts in the line."""
        self._cells = 0
        """Cells read so far in the table row the line is."""
        self._pre = 0
        self.shown = 0
        """Characters of text read so far."""
        self._apart = False
        """Whether the text that follows is set apart from the line by a space (after a link's
        address, or an element of :data:`_APART`) unless it is punctuation."""

    def base(self, url: str) -> None:
        """Resolve relative links against ``url`` from now on."""
        self._base = url
        parts = urlsplit(url)
        self._origin = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "base" and (href := dict(attrs).get("href")):
            self.base(urljoin(self._base, href))
        if tag == "title" and not self._title and not {"svg", "math"}.intersection(self._hidden):
            self._in_title = True  # the page's, in ``<head>``; an icon's ``<title>`` is no page title
            return
        if self._hidden == ["head"] and (tag == "body" or tag in _BLOCKS or tag in _CELLS or tag == "a"):
            self._hidden = []  # ``</head>`` may be left out: the body starts with its first element
        if tag in _HIDDEN:
            if len(self._hidden) < _HIDDEN_DEPTH:
                self._hidden.append(tag)
            return
        if self._hidden:
            return
        if tag in _CELLS:
            if self._cells:
                self._line.append(" | ")
            self._cells += 1
        elif tag in _BLOCKS:
            self._break()
            self._cells = 0
        if tag == "pre":
            self._pre += 1
        elif tag == "a":
            self._link_end()  # a link inside a link ends it, as in a browser
            self._link = (dict(attrs).get("href") or "", len(self._line))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:  # ``<svg/>``, ``<iframe/>``: nothing opened
            return
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._in_title:
            self._in_title = False
            return
        if tag in _HIDDEN:
            if tag in self._hidden:  # close it and anything left open inside it
                del self._hidden[len(self._hidden) - 1 - self._hidden[::-1].index(tag) :]
            return
        if self._hidden:
            return
        if tag == "a":
            self._link_end()
        elif tag in _APART:
            self._apart = True
        elif tag == "pre" and self._pre:
            self._pre -= 1
            self._break()
        elif tag in _BLOCKS:
            self._break()
            if tag == "tr":
                self._cells = 0

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title.append(data)
            return
        if self._hidden:
            return
        if self._apart and data[:1] not in _CLOSING:
            data = " " + data
        self._apart = False
        self.shown += len(data)
        if self._pre:
            lines = data.split("\n")
            for line in lines[:-1]:
                self._line.append(line)
                self._break(keep_spaces=True)
            self._line.append(lines[-1])
        else:
            self._line.append(data)

    def _link_end(self) -> None:
        if self._link is None:
            return
        href, start = self._link
        self._link = None
        href = href.strip()
        said = _SPACES.sub(" ", "".join(self._line[start:])).strip()
        if not said or not href or href.startswith(_NOT_FOLLOWED):
            return
        address = self._address(href)
        if address.rstrip("/") != said.rstrip("/"):
            self._line.append(f" ({address})")
            self.shown += len(address) + 3
            self._apart = True

    def _address(self, href: str) -> str:
        """``href`` made absolute; without ``urljoin`` when it is already, or starts at the site's
        root (``/p/00042``): a results page has thousands of links."""
        if not self._base or href.startswith(("https://", "http://")):
            return href
        if href.startswith("/") and not href.startswith("//") and self._origin:
            return self._origin + href
        return urljoin(self._base, href)

    def _break(self, *, keep_spaces: bool = False) -> None:
        self._link_end()  # a link left open at a block's end ends with it
        line = "".join(self._line)
        line = line.rstrip() if keep_spaces else _SPACES.sub(" ", line).strip()
        if line and line.strip(" |"):
            self._lines.append(line)
        self._line = []

    def text(self) -> str:
        self._break()
        title = _SPACES.sub(" ", "".join(self._title)).strip()
        return "\n".join([title, *self._lines] if title else self._lines)
