"""``LLMJudgeValuator``: a chat model rates each card's importance for the current decision.

The model is anything that turns a prompt into text (:class:`JudgeModel`): an OpenAI client
through :class:`OpenAIJudge`, a LangChain chat model through ``damc_langchain.ChatModelJudge``.
Replies are parsed leniently; a reply without a score in 0-10, or a model that fails, gives the
``default`` value with the reason recorded in the score's provenance, so a judge can never stop
the agent. Ratings are cached per card rendering and decision query.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..checks import finite_number, in_unit, whole_number
from ..errors import ConfigError
from ..types import Card, Score, ScoredCard
from ..value import ValuationContext

logger = logging.getLogger("damc")

PROMPT = """You help an agent decide what to keep in its memory.
The agent's current decision: {query}
Memory card:
{card}

How important is this card for the current decision, 0-10, and why?
Answer as: SCORE: <0-10> - <one short reason>"""

_LABELLED = re.compile(
    r"\bscore\b\**[\"']?\s*[:=]\s*\**\s*[\"']?(-?\d+(?:\.\d+)?)(?!\s*[-\u2013]\s*10\b)", re.I
)
"""``SCORE: 7``, ``**Score:** 7``, ``"score": 7``: the word, then a colon or ``=`` (not the
``score 720`` of a credit score, nor the ``underscore`` of a text, nor the scale ``SCORE: 0-10``
a judge copies from the prompt)."""
_UNSCORED = re.compile(r"\bscore\b\**[\"']?\s*[:=]\s*\**\s*[\"']?(?=[^\W\d_]|\d+\s*[-\u2013]\s*10\b)", re.I)
"""``SCORE: N/A``, ``"score": null``, ``SCORE: 0-10``: the judge declined to rate, or repeated
the scale, so a number in its reason is not a score."""
_RATED = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*(?:/\s*10\b|out of 10\b)", re.I)
_NUMBER = re.compile(
    r"(?<![\w.])(?<!\w[-\u2013])(?<!\d\s[-\u2013]\s)(?<!\d[-\u2013]\s)(?<!\d\s[-\u2013])"
    r"(-?\d+(?:\.\d+)?)(?![\w]|\s*[-\u2013]\s*10\b)"
)
"""A number on its own: not the ``3`` of the card id ``[c3]``, of ``ZXQ987`` or the ``8`` of
``HX-8`` that judges echo, nor either end of the scale ``0-10`` the prompt names (small models
repeat it: "not very important, 0-10"); of a range (``7-8``), its first."""


_PLACEHOLDER = re.compile(r"\{(query|card)\}")
"""Where a judge prompt takes the decision and the card; any other brace is text (a prompt may
show the JSON it wants back)."""


class JudgeModel(Protocol):
    """A chat model seen as prompt -> reply text."""

    @property
    def name(self) -> str:
        """Identifies the model in score provenance."""
        ...

    def complete(self, prompt: str) -> str: ...


@dataclass(frozen=True, slots=True)
class Rating:
    """A parsed judge reply."""

    score: float | None
    """0-10, or ``None`` when the reply held no usable score."""
    reason: str


def parse_rating(reply: object) -> Rating:
    """The 0-10 score and reason in a reply; ``score=None`` (with why) when there is none.

    A labelled ``SCORE: 7`` wins over other numbers, then a rating (``9/10``, ``9 out of 10``),
    then the first number on its own; a label with a word after it (``SCORE: N/A``) is no score.
    A number outside 0-10 is not clamped: a judge that answers 70 did not use the scale, so it
    is unusable.
    """
    if not isinstance(reply, str) or not reply.strip():
        return Rating(None, f"empty or non-text reply ({type(reply).__name__})")
    text = reply.strip()
    labelled = _LABELLED.search(text)
    if labelled is None and _UNSCORED.search(text):
        return Rating(None, f"no score after the score label in reply {_clip(text)!r}")
    match = labelled or _RATED.search(text) or _NUMBER.search(text)
    if match is None:
        return Rating(None, f"no score in reply {_clip(text)!r}")
    score = float(match.group(1))
    if not 0 <= score <= 10:
        return Rating(None, f"score {match.group(1)} is outside 0-10 in reply {_clip(text)!r}")
    reason = re.sub(r"^\s*(?:/\s*10|out of 10)\b", "", text[match.end() :]).strip(" \t\n-\u2013\u2014:.*")
    reason = reason or text[: match.start()].strip()
    return Rating(score, _clip(reason or "no reason given"))


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LLMJudgeValuator:
    """Asks ``model`` how important each card is for the decision; value = score / 10.

    Cards are rated one prompt each, at most ``max_cards`` per decision (the rest, by newest first,
    keep ``default``: the judge is for the cards heuristics cannot tell apart, not for every card
    of a long session). Combine it with others through ``WeightedValuators``.
    """

    def __init__(
        self,
        model: JudgeModel,
        *,
        prompt: str = PROMPT,
        default: float = 0.3,
        max_cards: int = 24,
        cache_size: int = 4096,
    ) -> None:
        if not in_unit(default):
            raise ConfigError(f"default must be a number in [0, 1], got {default!r}")
        if not whole_number(max_cards) or max_cards < 0:
            raise ConfigError(f"max_cards must be a whole number >= 0, got {max_cards!r}")
        if not whole_number(cache_size) or cache_size < 0:  # else the first rating stored fails
            raise ConfigError(f"cache_size must be a whole number >= 0, got {cache_size!r}")
        if "{card}" not in prompt or "{query}" not in prompt:
            raise ConfigError("prompt must contain the {card} and {query} placeholders")
        self.model = model
        self.prompt = prompt
        self.default = default
        self.max_cards = max_cards
        self.cache_size = cache_size
        self._cache: dict[tuple[str, str, str], Score] = {}
        self._failed: tuple[ValuationContext, str] | None = None
        """The decision whose rating failed for every card, and that card: a build values its
        candidates and then its recent results in the same context, which would otherwise wait
        out a server that is down once more."""
        self._lock = threading.Lock()

    def value(self, cards: Sequence[Card], *, context: ValuationContext) -> list[ScoredCard]:
        rated = {c.id for c in sorted(cards, key=lambda c: -c.seq)[: self.max_cards]}
        with self._lock:
            failed = self._failed[1] if self._failed is not None and self._failed[0] is context else None
        out = []
        for card in cards:
            if card.id in rated:
                score, failure = self._rate(card, context.focus.query, failed)
                failed = card.id if failure is not None and _fails_every_card(failure) else failed
            else:
                score = Score("judge", self.default, f"judge {self.model.name}: not rated (max_cards)")
            out.append(ScoredCard(card, score.value, (score,)))
        if failed is not None:
            with self._lock:
                self._failed = (context, failed)
        return out

    def _rate(self, card: Card, query: str, failed: str | None) -> tuple[Score, Exception | None]:
        """The card's score, and the model's error when it failed to give one. Once it failed on
        card ``failed``, the decision's other cards are not asked: a server that is down or times
        out would otherwise hold the step once per card."""
        key = (card.id, card.summary, query)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached, None
        if failed is not None:
            why = f"judge {self.model.name}: not asked, it failed on card {failed}; default"
            return Score("judge", self.default, why), None
        filled = {"query": query or "(not stated)", "card": card.summary}
        prompt = _PLACEHOLDER.sub(lambda found: filled[found.group(1)], self.prompt)
        try:
            reply: Any = self.model.complete(prompt)
        except Exception as exc:  # a judge must never stop the agent
            logger.warning(
                "damc: judge %s failed on card %s (%s)%s",
                self.model.name,
                card.id,
                exc,
                "; the decision's cards not rated yet keep the default" if _fails_every_card(exc) else "",
            )
            why = f"judge {self.model.name} failed ({type(exc).__name__}); default"
            return Score("judge", self.default, why), exc
        rating = parse_rating(reply)
        if rating.score is None:
            score = Score("judge", self.default, f"judge {self.model.name}: {rating.reason}; default")
        else:
            score = Score("judge", rating.score / 10, f"judge {self.model.name}: {rating.reason}")
        with self._lock:
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
            self._cache[key] = score
        return score, None


def _fails_every_card(exc: Exception) -> bool:
    """Whether a judge's error would come back for any card: a server down, slow or failing, a key
    it refuses (401, 403), a model it does not serve (404), a setting it rejects (a 400 naming
    ``max_tokens``). Not a request error about this card's prompt (a 400 such as a card longer
    than the model's context), after which the other cards can still be rated."""
    status = getattr(exc, "status_code", None)
    if status not in (400, 413, 422):
        return True
    param = getattr(exc, "param", None)
    return isinstance(param, str) and re.split(r"[\[.]", param)[0] not in ("messages", "prompt", "input")


class OpenAIJudge:
    """A :class:`JudgeModel` over an ``openai.OpenAI`` client (or any with the same chat API).

    Works with OpenAI-compatible servers too: pass a client made with their ``base_url``. OpenAI's
    reasoning models (o1, o3, o4-mini, gpt-5) refuse ``max_tokens`` and any ``temperature`` but
    their default: pass ``temperature=None`` (none is sent) and ``max_completion_tokens`` (sent
    instead of ``max_tokens``), with room for their reasoning, which it counts: ~1000.
    """

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        temperature: float | None = 0.0,
        max_tokens: int = 80,
        max_completion_tokens: int | None = None,
        timeout: float | None = 120.0,
    ) -> None:
        if not isinstance(model, str) or not model:  # else every rating fails, at every build
            raise ConfigError(f"OpenAIJudge needs the model's name, got {model!r}")
        if not callable(getattr(getattr(getattr(client, "chat", None), "completions", None), "create", None)):
            raise ConfigError(
                f"OpenAIJudge needs an openai.OpenAI client (client.chat.completions.create), got {client!r}"
            )
        if timeout is not None and not (finite_number(timeout) and timeout > 0):
            raise ConfigError(f"timeout must be > 0 seconds (or None for the client's own), got {timeout!r}")
        if temperature is not None and not (finite_number(temperature) and 0 <= temperature <= 2):
            raise ConfigError(
                f"temperature must be a number in [0, 2] (or None for the model's own), got {temperature!r}"
            )
        for setting, limit in (("max_tokens", max_tokens), ("max_completion_tokens", max_completion_tokens)):
            if limit is not None and not (whole_number(limit) and limit > 0):
                raise ConfigError(f"{setting} must be a whole number > 0, got {limit!r}")
        self.client = client
        # each retry of the client's would wait out the timeout again (the ``openai`` package makes
        # two): the step is held for the timeout once, then the card keeps the default
        self._client = (
            client.with_options(max_retries=0)
            if timeout is not None and hasattr(client, "with_options")
            else client
        )
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_completion_tokens = max_completion_tokens
        self.timeout = timeout
        """Seconds a rating may take, tried once (a small local model on a busy CPU reads a card of
        1,400 tokens in over 30); ``None`` leaves it to the client, whose default (the ``openai``
        package's: 10 minutes, tried three times) would hold the agent's step that long on a server
        that stopped answering."""

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    def complete(self, prompt: str) -> str:
        limit = (
            {"max_completion_tokens": self.max_completion_tokens}
            if self.max_completion_tokens is not None
            else {"max_tokens": self.max_tokens}
        )
        response = self._client.chat.completions.create(
            model=self.model,
            messages=[{"role": "user", "content": prompt}],
            **limit,
            **({"temperature": self.temperature} if self.temperature is not None else {}),
            **({"timeout": self.timeout} if self.timeout is not None else {}),
        )
        choice = response.choices[0] if response.choices else None
        content = choice.message.content if choice is not None else None
        if not content and getattr(choice, "finish_reason", None) == "length":
            # a reasoning model spent the limit thinking; so would it on every card
            (setting, tokens), *_ = limit.items()
            raise ValueError(f"the reply was cut at {setting}={tokens} before any text; give it more room")
        return content if isinstance(content, str) else ""
