"""A scorer on an OpenAI-compatible completions endpoint (vLLM, llama.cpp's server), via ``openai``.

The endpoint is asked to echo the prompt with per-token log-probabilities and to generate one
token; the log-probabilities of the prompt tokens that carry the continuation are summed. Servers
with prefix caching (vLLM's automatic prefix caching, llama.cpp's prompt cache) reuse the shared
head of consecutive requests, so requests are sent one by one in the order given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..checks import finite_number
from ..errors import ConfigError
from .problem import ScoreRequest
from .scorer import ContextTooLong, TokenLogProbs


class OpenAICompatibleScorer:
    """``log P(continuation | context)`` from a ``/v1/completions`` endpoint with ``echo`` and ``logprobs``.

    ``client`` is an ``openai.OpenAI`` client; without one, a client is made for ``base_url``
    (``api_key`` defaults to a placeholder: local servers ignore it). ``timeout`` (seconds a
    request may take) applies to either; ``None`` keeps a given client's own and gives a made one
    120 s. ``bos_text`` goes before
    every prompt: the model's beginning-of-sequence token as text, for a server that scores the
    echoed prompt right only after one. llama-cpp-python's server pairs each echoed token with
    the logits *after* it when the model adds no such token itself (SmolLM2: pass
    ``bos_text="<|im_start|>"``); its numbers are then not log-probabilities of the prompt at all.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any | None = None,
        timeout: float | None = None,
        bos_text: str = "",
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(f"OpenAICompatibleScorer needs the served model's name, got {model!r}")
        if timeout is not None and not (finite_number(timeout) and timeout > 0):
            raise ConfigError(f"timeout must be > 0 seconds (or None for the client's own), got {timeout!r}")
        if not isinstance(bos_text, str):  # else every prompt fails at the first score
            raise ConfigError(f"bos_text must be text ('' for none), got {bos_text!r}")
        if client is not None and timeout is not None:
            client = client.with_options(timeout=timeout)
        if client is None:
            if base_url is None:
                raise ConfigError(
                    "OpenAICompatibleScorer needs base_url (e.g. http://127.0.0.1:8000/v1) or a client"
                )
            try:
                import openai
            except ImportError as exc:
                raise ConfigError("OpenAICompatibleScorer needs openai; pip install 'damc[openai]'") from exc
            client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout or 120.0)
        self.model = model
        self.client = client
        self.bos_text = bos_text

    @property
    def name(self) -> str:
        return f"openai-completions:{self.model}"

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]:
        return [sum(self._score(request).log_probs) for request in requests]

    def token_log_probs(self, requests: Sequence[ScoreRequest]) -> list[TokenLogProbs]:
        """``log P`` of each continuation token as the endpoint echoes it."""
        return [self._score(request) for request in requests]

    def _score(self, request: ScoreRequest) -> TokenLogProbs:
        if not request.continuation:
            raise ValueError("ScoreRequest.continuation is empty: there is nothing to score")
        prompt = self.bos_text + request.context + request.continuation
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
        offsets = list(logprobs.text_offset) if logprobs.text_offset else None
        return continuation_tokens(
            list(logprobs.tokens),
            list(logprobs.token_logprobs),
            len(request.continuation),
            generated,
            offsets,
        )


def _context_length_exceeded(exc: Exception) -> bool:
    """Whether a request error is the server refusing a prompt longer than its context (OpenAI,
    vLLM, llama-cpp-python's and llama.cpp's servers answer 400 with one of these codes or
    wordings)."""
    if getattr(exc, "status_code", None) != 400:
        return False
    return (
        getattr(exc, "code", None) == "context_length_exceeded"
        or getattr(exc, "type", None) == "exceed_context_size_error"  # llama.cpp's server
        or any(
            words in str(exc) for words in ("maximum context length", "exceeds the available context size")
        )
    )


def continuation_tokens(
    tokens: Sequence[str],
    log_probs: Sequence[float | None],
    continuation_chars: int,
    generated: int,
    offsets: Sequence[int] | None = None,
) -> TokenLogProbs:
    """The echoed prompt tokens that spell the continuation: their log-probabilities, and where in
    the continuation each ends.

    The echo is the prompt's tokens then ``generated`` new ones; the continuation is the prompt's
    last ``continuation_chars`` characters, and a token that straddles the context's end counts
    with it. With ``offsets`` (each token's ``text_offset``) the tokens are found by position,
    counted back from where the prompt ends: servers leave special tokens out of the offsets (so
    they are not counted from the start) and echo the byte pieces of a multi-byte character (é,
    東, an emoji) as empty text at that character's offset (so token text alone undercounts).
    Without offsets, token text is counted back from the end.
    """
    end = len(tokens) - generated
    if offsets is not None and len(offsets) == len(tokens) and end > 0:
        # (a last token echoed as an empty byte piece is part of one character that ends the prompt)
        stop = offsets[end] if generated else offsets[end - 1] + (len(tokens[end - 1]) or 1)
        start = stop - continuation_chars
        index = end
        while index > 0 and (
            offsets[index - 1] >= start or offsets[index - 1] + len(tokens[index - 1]) > start
        ):
            index -= 1
        ends = [offsets[i] + len(tokens[i]) - start for i in range(index, end)]
    else:
        index, chars = end, 0
        while chars < continuation_chars:
            index -= 1
            if index < 0:
                raise RuntimeError("the endpoint echoed fewer tokens than the continuation has")
            chars += len(tokens[index])
        ends = [continuation_chars - sum(len(t) for t in tokens[i + 1 : end]) for i in range(index, end)]
    if index == end:
        raise RuntimeError("the endpoint echoed no token of the continuation")
    values = log_probs[index:end]
    if any(value is None for value in values):
        raise RuntimeError("the endpoint gave no log-probability for a continuation token")
    ends[-1] = continuation_chars  # the last token ends the prompt, whatever its echoed text
    clamped = tuple(min(continuation_chars, max(0, e)) for e in ends)
    return TokenLogProbs(clamped, tuple(value for value in values if value is not None))
