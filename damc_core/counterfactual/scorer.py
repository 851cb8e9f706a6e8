"""The scorer protocol: log-probability of a continuation given a context, from a language model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .problem import ScoreRequest


class LogProbScorer(Protocol):
    """Measures ``log P(continuation | context)`` in nats, summed over the continuation's tokens.

    ``score`` takes a batch so a backend can share work between requests: requests that share a
    context prefix (every ablation of one decision does) should reuse its evaluation. Results are
    in request order.
    """

    @property
    def name(self) -> str:
        """Identifies model and backend in score provenance, e.g. ``llama.cpp:SmolLM2-135M-Instruct``."""
        ...

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class TokenLogProbs:
    """``log P`` of each token of a continuation, and where in its text each token ends.

    Token boundaries are given as character offsets into the continuation, not as token text:
    a byte-level token can hold half of a multi-byte character, which no string slice can.
    """

    ends: tuple[int, ...]
    """Characters of the continuation spelled by its tokens up to and including each one."""
    log_probs: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.ends) != len(self.log_probs):
            raise ValueError("ends and log_probs must have the same length")


@runtime_checkable
class TokenLogProbScorer(LogProbScorer, Protocol):
    """A scorer that also tells ``log P`` token by token, for estimators that read where in the
    action a context helps (:class:`~damc_core.counterfactual.estimators.CopyAttribution`)."""

    def token_log_probs(self, requests: Sequence[ScoreRequest]) -> list[TokenLogProbs]: ...


def token_ends(spelled: Sequence[int], continuation: str) -> tuple[int, ...]:
    """Character offsets in ``continuation`` where each token ends, from the length of the text
    its tokens spell up to each one.

    A tokenizer that spells the continuation with an extra leading space (SentencePiece) is
    counted from where the continuation's own text starts.
    """
    extra = max(0, (spelled[-1] if spelled else 0) - len(continuation))
    return tuple(min(len(continuation), max(0, end - extra)) for end in spelled)


def byte_piece_ends(pieces: Sequence[bytes], continuation: str) -> tuple[int, ...]:
    """:func:`token_ends` of tokens given as the bytes they spell: a token that ends inside a
    multi-byte character ends where that character starts."""
    spelled, lengths = b"", []
    for piece in pieces:
        spelled += piece
        lengths.append(len(spelled.decode("utf-8", "ignore")))
    return token_ends(lengths, continuation)


class ContextTooLong(ValueError):
    """A request is longer than the scorer's model or context window takes. Callers that score
    many decision points skip that point and count it; any other error stops them."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the token prefix two requests share: the part of a KV cache a scorer can keep."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
