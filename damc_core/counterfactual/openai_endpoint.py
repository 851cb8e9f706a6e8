"""A scorer on an OpenAI-compatible completions endpoint (vLLM, llama.cpp's server), via ``openai``.

The endpoint is asked to echo the prompt with per-token log-probabilities and to generate one
token; the log-probabilities of the prompt tokens that carry the continuation are summed. Servers
with prefix caching (vLLM's automatic prefix caching, llama.cpp's prompt cache) reuse the shared
head of consecutive requests, so requests are sent one by one in the order given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConfigError
from .problem import ScoreRequest
from .scorer import ContextTooLong


class OpenAICompatibleScorer:
    """``log P(continuation | context)`` from a ``/v1/completions`` endpoint with ``echo`` and ``logprobs``.

    ``client`` is an ``openai.OpenAI`` client; without one, a client is made for ``base_url``
    (``api_key`` defaults to a placeholder: local servers ignore it).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any | None = None,
        timeout: float = 120.0,
    ) -> None:
        if not model:
            raise ConfigError("OpenAICompatibleScorer needs the served model's name")
        if client is None:
            if base_url is None:
                raise ConfigError(
                    "OpenAICompatibleScorer needs base_url (e.g. http://127.0.0.1:8000/v1) or a client"
                )
            try:
                import openai
            except ImportError as exc:
                raise ConfigError("OpenAICompatibleScorer needs openai; pip install 'damc[openai]'") from exc
            client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout)
        self.model = model
        self.client = client

    @property
    def name(self) -> str:
        return f"openai-completions:{self.model}"

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]:
        return [self._score(request) for request in requests]

    def _score(self, request: ScoreRequest) -> float:
        if not request.continuation:
            raise ValueError("ScoreRequest.continuation is empty: there is nothing to score")
        prompt = request.context + request.continuation
        try:
            response = self.client.completions.create(
                model=self.model, prompt=prompt, echo=True, logprobs=0, max_tokens=1, temperature=0.0
            )
        except Exception as exc:
            if _context_length_exceeded(exc):
                raise ContextTooLong(f"{self.name}: {exc}") from exc
            raise
        logprobs = response.choices[0].logprobs if response.choices else None
        if logprobs is None or not logprobs.tokens or logprobs.token_logprobs is None:
            raise RuntimeError(
                f"{self.name}: the endpoint returned no prompt log-probabilities; it must support "
                "echo=True with logprobs on /v1/completions (llama.cpp's server needs logits_all)"
            )
        generated = response.usage.completion_tokens if response.usage is not None else 1
        return continuation_log_prob(
            list(logprobs.tokens), list(logprobs.token_logprobs), len(request.continuation), generated
        )


def _context_length_exceeded(exc: Exception) -> bool:
    """Whether a request error is the server refusing a prompt longer than its context (OpenAI,
    vLLM and llama.cpp's server answer 400 with this code or wording)."""
    if getattr(exc, "status_code", None) != 400:
        return False
    return getattr(exc, "code", None) == "context_length_exceeded" or "maximum context length" in str(exc)


def continuation_log_prob(
    tokens: Sequence[str], log_probs: Sequence[float | None], continuation_chars: int, generated: int
) -> float:
    """Sum of the log-probabilities of the echoed prompt tokens that spell the continuation.

    The echo is the prompt's tokens then ``generated`` new ones; the continuation is the shortest
    run of prompt tokens, counted back from the prompt's end, whose text is at least as long as
    it (a token that straddles the context's end counts with the continuation). Counting by token
    text, not by ``text_offset``, holds when servers leave special tokens out of the offsets.
    """
    end = len(tokens) - generated
    total = 0.0
    chars = 0
    index = end
    while chars < continuation_chars:
        index -= 1
        if index < 0:
            raise RuntimeError("the endpoint echoed fewer tokens than the continuation has")
        value = log_probs[index]
        if value is None:
            raise RuntimeError("the endpoint gave no log-probability for a continuation token")
        total += value
        chars += len(tokens[index])
    return total
