"""What a counterfactual estimator works on: one decision, its cards, and the action that was right."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..documents import SURROGATE


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """One scorer call: ``log P(continuation | context)``.

    Spaces or tabs at the end of the context are moved to the start of the continuation: a
    tokenizer reads `` book`` as one token, so a context ending in a space measures a split no
    model writes, and a scorer that tokenizes the two texts apart (in-process) and one that
    tokenizes them together (an endpoint) would measure different things.
    """

    context: str
    """Everything before the action, ending with the action prefix."""
    continuation: str
    """The action's text; starts with a space when the prefix does not end a line."""

    def __post_init__(self) -> None:
        context = self.context.rstrip(" \t")
        if context != self.context:
            object.__setattr__(self, "continuation", self.context[len(context) :] + self.continuation)
            object.__setattr__(self, "context", context)
        # half an emoji (a trace cut inside one) is no UTF-8, which every tokenizer needs: U+FFFD
        for name in ("context", "continuation"):
            text = getattr(self, name)
            if SURROGATE.search(text):
                object.__setattr__(self, name, SURROGATE.sub("\ufffd", text))


@dataclass(frozen=True, slots=True)
class AblationProblem:
    """One decision point, seen as a set of removable cards inside a fixed frame.

    The context for a keep-mask is ``head`` + the kept ``card_texts`` (each followed by a newline)
    + ``tail``; the tail ends with the action prefix, so the gold action's probability is measured
    right where the model would write it.
    """

    card_ids: tuple[str, ...]
    card_texts: tuple[str, ...]
    """Rendered cards, in prompt order (oldest first)."""
    head: str
    """Fixed text before the cards: instructions, the user's request."""
    tail: str
    """Fixed text after the cards, ending with the action prefix."""
    action: str
    """The correct next action, e.g. ``book_reservation({"payment_id": "credit_card_7815826"})``."""

    def __post_init__(self) -> None:
        if len(self.card_ids) != len(self.card_texts):
            raise ValueError("card_ids and card_texts must have the same length")

    def context(self, keep: Sequence[bool]) -> str:
        """The prompt with only the cards whose ``keep`` flag is set."""
        if len(keep) != len(self.card_texts):
            raise ValueError(f"keep mask has {len(keep)} flags for {len(self.card_texts)} cards")
        kept = "".join(text + "\n" for text, flag in zip(self.card_texts, keep, strict=True) if flag)
        return self.head + kept + self.tail

    def request(self, keep: Sequence[bool]) -> ScoreRequest:
        return ScoreRequest(self.context(keep), self.action)


@dataclass(frozen=True, slots=True)
class CardValues:
    """An estimator's answer for one decision: how much each card raises the action's log-probability."""

    card_ids: tuple[str, ...]
    """The cards with a value: all of the problem's, less those only failed passes measured."""
    values: tuple[float, ...]
    """``log P(action | all cards) - log P(action | all but this one)`` (or its estimate), in nats."""
    full: float
    """``log P(action | all cards)``; when it is not finite, no card has a value."""
    passes: int
    """Scorer requests the estimate took."""
    estimator: str
    """Which estimator produced it, for score provenance."""
    failed: int = 0
    """Passes whose score was not a finite number, left out as failed measurements."""

    def source(self, scorer: str) -> str:
        """Estimator and scorer, for score provenance; says when passes failed, since the values
        then rest on fewer measurements."""
        failed = f" ({self.failed} of {self.passes} passes failed)" if self.failed else ""
        return f"{self.estimator}/{scorer}{failed}"
