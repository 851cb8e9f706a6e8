"""Cards rendered for one decision: at a detail, for a focus, cut to a token count.

The compressor says how a card reads; this module fits that text to a decision. A decision renders
hundreds of cards at several details, and most renderings repeat the previous decision's, so
renderings and line token counts are cached: a new focus costs only what it changes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

from .compress import (
    Compressor,
    Detail,
    identity_columns,
    row_identifiers,
    rows_by_focus,
    shown_in,
    table_heading,
    text_handles,
)
from .tokens import TokenCounter, message_tokens
from .types import Card, CardKind, DecisionFocus, Message, updated
from .value import vocabulary_of

RENDER_CACHE_SIZE = 50_000
"""Renderings (and, separately, lines) cached before the cache starts over."""
CUT_NAMES_SHARE = 1 / 3
"""Most of a cut card's tokens that its hint may spend naming the rows left out."""
CUT_NAMES_MIN_ROWS = 7
"""Tables of at least this many rows are named in a cut's hint before its lines; a shorter one's
rows are named only in the room its lines leave."""

_LEVELLED = frozenset(
    {CardKind.TOOL_RESULT, CardKind.TOOL_ERROR, CardKind.USER_INSTRUCTION, CardKind.ASSISTANT_CONCLUSION}
)
"""Kinds rendered differently at each detail; the others always read as their summary."""

_CacheKey = tuple[
    str, Detail, bool, frozenset[str] | None, frozenset[str], frozenset[str], frozenset[str], int, int | None
]


class CardRenderer:
    """Renders cards through a compressor and counts the tokens of what it renders.

    >>> from damc_core import TemplateCompressor, TiktokenCounter
    >>> renderer = CardRenderer(TemplateCompressor(), TiktokenCounter())
    >>> renderer.count("HAT136 on 2024-05-20")
    11
    """

    def __init__(self, compressor: Compressor, counter: TokenCounter) -> None:
        self.compressor = compressor
        self.counter = counter
        self._renderings: dict[_CacheKey, Card] = {}
        self._line_tokens: dict[str, int] = {}
        self._reads: Callable[..., frozenset[str]] | None = getattr(compressor, "terms_read", None)
        self._terms_read: dict[tuple[str, Detail, int], frozenset[str]] = {}

    def summarized(self, card: Card, **changes: object) -> Card:
        """The card with its default rendering as summary and that summary's token cost (and any
        other ``changes``, made in the same copy)."""
        summary = self.compressor.render(card)
        return updated(card, summary=summary, tokens=self.count(summary) + 1, **changes)

    def render(
        self,
        card: Card,
        focus: DecisionFocus | None,
        detail: Detail,
        *,
        call: bool = True,
        cut_in_focus_order: int | None = None,
    ) -> Card:
        """The card rendered at ``detail`` for this decision (see ``Detail``), cached.

        A rendering that depends on the focus depends on it only through the focus terms the
        card holds, so it is cached under those; the others are cached once per card state.
        ``focus=None`` renders long tables whole (the result the agent is about to pick from);
        ``call=False`` leaves the call out of a result's header (it is sent right after its call;
        pass it only to compressors that take it); ``cut_in_focus_order``: tables whole with the
        rows ``focus`` matches first, cut to that many tokens.
        """
        if card.kind not in _LEVELLED:
            return card
        # Each of these only grows.
        version = sum(map(len, (card.stale_rows, card.stale_cells, card.stale_facts, card.facts)))
        # What the rendering reads of the wanted terms; None: all the card's terms.
        read = self._read(card, detail, version) if cut_in_focus_order is None else None
        # None: a rendering that ignores the focus (no long table, or shown whole).
        relevant: frozenset[str] | None = None
        if focus is not None and (
            (cut_in_focus_order is not None and card.tables)
            or self.compressor.depends_on_focus(card, detail=detail)
        ):
            relevant = card.terms & focus.terms if read is None else read & focus.terms & card.terms
        fields = focus.fields if focus is not None and detail == "skeleton" else frozenset()
        named = (
            focus.named & vocabulary_of(card)
            if focus is not None and focus.named and detail != "full"
            else frozenset()
        )
        cache_key: _CacheKey = (
            card.id,
            detail,
            call,
            relevant,
            fields,
            named,
            card.used_terms if read is None else card.used_terms & read,
            version,
            cut_in_focus_order,
        )
        rendered = self._renderings.get(cache_key)
        if rendered is None:
            if len(self._renderings) > RENDER_CACHE_SIZE:
                self._renderings.clear()
                self._terms_read.clear()
            local = (
                DecisionFocus(focus.query, relevant or frozenset(), fields=fields, named=named)
                if focus is not None and (relevant is not None or named)
                else None
            )
            if cut_in_focus_order is not None:
                if local:
                    ranked = updated(card, tables=tuple(rows_by_focus(t, local) for t in card.tables))
                    whole = self.with_summary(ranked, self._text(ranked, None, detail, call=call))
                else:  # the rendering in focus order is the plain one, rendered (or summarized) once
                    whole = self.render(card, None, detail, call=call)
                fits = whole.tokens <= cut_in_focus_order
                rendered = whole if fits else self.cut(whole, cut_in_focus_order)
            else:
                rendered = self.with_summary(card, self._text(card, local, detail, call=call))
        if rendered.scores is not card.scores:  # rescored or relinked since rendered
            rendered = updated(
                rendered,
                prior=card.prior,
                scores=card.scores,
                decision_links=card.decision_links,
                superseded_by=card.superseded_by,
            )
        self._renderings[cache_key] = rendered
        return rendered

    def _read(self, card: Card, detail: Detail, version: int) -> frozenset[str] | None:
        """The compressor's ``terms_read`` for the card in this state, remembered; ``None`` for a
        compressor without it."""
        if self._reads is None:
            return None
        key = (card.id, detail, version)
        read = self._terms_read.get(key)
        if read is None:
            read = self._terms_read[key] = self._reads(card, detail=detail)
        return read

    def _text(self, card: Card, focus: DecisionFocus | None, detail: Detail, *, call: bool) -> str:
        if call:
            return self.compressor.render(card, focus=focus, detail=detail)
        return self.compressor.render(card, focus=focus, detail=detail, call=False)  # type: ignore[call-arg]

    def cut(self, card: Card, tokens: int, *, clip: bool = False) -> Card:
        """The card's first lines that fit in ``tokens``, with a hint to recall the rest; the card
        as it is when not even its first line fits, unless ``clip`` (a message that must be sent,
        where a card could be left out) asks for that line's first characters.

        The hint names the rows left out by their identifiers (``UA1687 B6123``): those of long
        tables in up to ``CUT_NAMES_SHARE`` of ``tokens``, taken before any line (of a long list
        most rows are cut anyway, and the handles the agent's next call takes, and what to recall,
        are worth more than the last few rows shown in full); those of short tables, and the links
        and handles of a free text, in the room the lines leave, where the header of a table whose
        rows are all cut gives way to them."""
        first = self.count(card.summary.partition("\n")[0])
        if not clip and first > tokens - self.count(_cut_hint([])) - 2:
            return card  # not even its first line fits beside the shortest hint
        naming = self.count(_cut_hint([""]))
        room = tokens - first - naming - 2
        long = _row_identifiers(card, long=True)
        listed = self._names_within(long, min(int(tokens * CUT_NAMES_SHARE), room))
        # the hint's newline, and the card's own token (see with_summary)
        left = tokens - self.count(_cut_hint(listed)) - 2
        kept: list[str] = []
        for line in card.summary.split("\n"):
            cost = self.count(line) + (1 if kept else 0)
            if cost > left:
                break
            kept.append(line)
            left -= cost
        if not kept:
            if not clip:
                return card
            kept = [self._prefix_within(card.summary, left)]
        headers = tuple(table_heading(table) for table in card.tables)
        while len(kept) > 1 and kept[-1].startswith(headers):
            kept.pop()  # a table's header without its rows: the hint names them instead
        shown = "\n".join(kept)
        in_shown = shown_in(shown)
        listed = [name for name in listed if not in_shown(name)]
        room = tokens - self.count(shown) - self.count(_cut_hint(listed or [""])) - 2
        short = (
            name
            for name in itertools.chain(_row_identifiers(card, long=False), text_handles(card))
            if not in_shown(name)
        )
        named = listed + self._names_within(short, room)
        while len(named) > len(listed) and self.count(f"{shown}\n{_cut_hint(named)}") + 1 > tokens:
            named.pop()  # a name tokenized dearer beside its neighbours than alone
        return self.with_summary(card, f"{shown}\n{_cut_hint(named)}")

    def _prefix_within(self, text: str, tokens: int) -> str:
        """The longest start of ``text`` that counts at most ``tokens``: a token holds from less
        than one character (emoji) to five and more (English, JSON), so no fixed ratio fits."""
        low, high = 0, min(len(text), max(0, tokens) * 16)
        while low < high:
            middle = (low + high + 1) // 2
            if self.count(text[:middle]) <= tokens:
                low = middle
            else:
                high = middle - 1
        return text[:low]

    def _names_within(self, names: Iterator[str], tokens: int) -> list[str]:
        """The first ``names`` that fit in ``tokens``, a space before each."""
        listed: list[str] = []
        for name in names:
            tokens -= self.count(name) + 1
            if tokens < 0:
                break
            listed.append(name)
        return listed

    def with_summary(self, card: Card, summary: str) -> Card:
        """The card reading ``summary``, its token cost counted with the line it takes."""
        if summary == card.summary:
            return card
        return updated(card, summary=summary, tokens=self.count(summary) + 1)

    def count_messages(self, messages: list[Message]) -> int:
        return sum(message_tokens(m, self.count) for m in messages)

    def count(self, text: str) -> int:
        """Token count of a rendering, line by line with a cache: focused renderings of one table
        share most rows, so a new focus costs only its new lines."""
        cache = self._line_tokens
        if len(cache) > RENDER_CACHE_SIZE:
            cache.clear()
        total = 0
        for line in text.split("\n"):
            tokens = cache.get(line)
            if tokens is None:
                tokens = cache[line] = self.counter.count(line) + 1
            total += tokens
        return total - 1


def _cut_hint(unseen: list[str]) -> str:
    if not unseen:
        return " (cut)"
    return f" (cut; not shown: {' '.join(unseen)})"


def _row_identifiers(card: Card, *, long: bool) -> Iterator[str]:
    """The identifiers of the rows of the card's ``long`` tables (those of ``CUT_NAMES_MIN_ROWS``
    and more), or of its short ones (``identity_columns``), each once, in row order."""
    seen: set[str] = set()
    for table in card.tables:
        if (len(table.rows) >= CUT_NAMES_MIN_ROWS) != long or not identity_columns(table.columns):
            continue
        for row in table.rows:
            for identifier in row_identifiers(table, row):
                if identifier not in seen:
                    seen.add(identifier)
                    yield identifier
