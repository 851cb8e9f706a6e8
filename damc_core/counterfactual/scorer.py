"""The scorer protocol: log-probability of a continuation given a context, from a language model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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
