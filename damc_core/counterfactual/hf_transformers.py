"""A scorer on any local Hugging Face causal language model, through ``transformers`` and PyTorch.

Models are read from disk only (``local_files_only``): a directory with ``config.json`` and the
weights, or a GGUF file inside a directory (``gguf_file=``, dequantized by ``transformers``).
Like :class:`~damc_core.counterfactual.llama_cpp.LlamaCppScorer`, it keeps the KV cache of the last
request and evaluates only what a new request does not share with it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .problem import ScoreRequest
from .scorer import ContextTooLong, TokenLogProbs, common_prefix, token_ends

_INSTALL_HINT = "install them with: pip install 'damc[transformers]'"


class TransformersScorer:
    """``log P(continuation | context)`` from a local causal LM directory, on ``device``."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        gguf_file: str | None = None,
        device: str = "cpu",
        reuse_prefix: bool = True,
    ) -> None:
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise ConfigError(f"TransformersScorer needs torch and transformers; {_INSTALL_HINT}") from exc
        path = Path(model_dir)
        if not path.is_dir():
            raise ConfigError(f"TransformersScorer: {path} is not a model directory")
        if gguf_file is not None and not (path / gguf_file).is_file():
            raise ConfigError(f"TransformersScorer: no GGUF file {gguf_file} in {path}")
        options: dict[str, Any] = {"local_files_only": True}
        if gguf_file is not None:
            options["gguf_file"] = gguf_file
        auto_tokenizer: Any = transformers.AutoTokenizer
        auto_model: Any = transformers.AutoModelForCausalLM
        try:
            self.tokenizer: Any = auto_tokenizer.from_pretrained(str(path), **options)
            self.model: Any = auto_model.from_pretrained(str(path), dtype=torch.float32, **options)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"TransformersScorer cannot load a causal LM from {path}: {exc}") from exc
        self.model.to(device).eval()
        self._torch: Any = torch
        self.device = device
        self.model_name = gguf_file or path.name
        self.reuse_prefix = reuse_prefix
        self.evaluated_tokens = 0
        """Tokens run through the model so far."""
        self._lock = threading.Lock()
        self._cache: Any = None
        self._cached: list[int] = []

    @property
    def name(self) -> str:
        return f"transformers:{self.model_name}"

    def tokens(self, request: ScoreRequest) -> tuple[list[int], int]:
        """The request's tokens and where the continuation starts (tokenized apart, as llama.cpp's)."""
        if not request.continuation:
            raise ValueError("ScoreRequest.continuation is empty: there is nothing to score")
        context = list(self.tokenizer(request.context, add_special_tokens=True)["input_ids"])
        continuation = list(self.tokenizer(request.continuation, add_special_tokens=False)["input_ids"])
        if not context:
            raise ValueError("ScoreRequest.context is empty and the tokenizer adds no start token")
        return context + continuation, len(context)

    def score(self, requests: Sequence[ScoreRequest]) -> list[float]:
        return [float(sum(values)) for _, values in self._evaluate(requests)]

    def token_log_probs(self, requests: Sequence[ScoreRequest]) -> list[TokenLogProbs]:
        """``log P`` of each continuation token, with where in the continuation's text it ends."""
        out = []
        for request, (continuation, values) in zip(requests, self._evaluate(requests), strict=True):
            # a prefix that ends inside a multi-byte character decodes with U+FFFD in its place
            spelled = [
                len(self.tokenizer.decode(continuation[:stop]).rstrip("\ufffd"))
                for stop in range(1, len(continuation) + 1)
            ]
            out.append(TokenLogProbs(token_ends(spelled, request.continuation), tuple(values)))
        return out

    def _evaluate(self, requests: Sequence[ScoreRequest]) -> list[tuple[list[int], list[float]]]:
        """Each request's continuation tokens and their log-probabilities."""
        encoded = [self.tokens(r) for r in requests]
        limit = getattr(self.model.config, "max_position_embeddings", None)
        for tokens, _ in encoded:
            if limit is not None and len(tokens) > limit:
                raise ContextTooLong(
                    f"a request of {len(tokens)} tokens exceeds the model's {limit} positions"
                )
        out: list[tuple[list[int], list[float]]] = [([], []) for _ in encoded]
        with self._lock, self._torch.inference_mode():  # one KV cache: one pass at a time
            for i in sorted(range(len(encoded)), key=lambda i: encoded[i][0]):
                tokens, start = encoded[i]
                try:
                    out[i] = (tokens[start:], self._score_tokens(tokens, start))
                except BaseException:
                    self._cache, self._cached = None, []  # a failed pass leaves the cache unknown
                    raise
        return out

    def _score_tokens(self, tokens: list[int], start: int) -> list[float]:
        torch = self._torch
        keep = 0
        if self.reuse_prefix and self._cache is not None:
            keep = min(common_prefix(self._cached, tokens), start - 1)
        if not keep:
            self._cache = None
        elif keep < len(self._cached):
            self._cache.crop(keep - len(self._cached))  # negative: tokens to drop (transformers 4 and 5)
        rest = torch.tensor([tokens[keep:]], device=self.device)
        output = self.model(input_ids=rest, past_key_values=self._cache, use_cache=True)
        self._cache = output.past_key_values
        self._cached = list(tokens)
        self.evaluated_tokens += len(tokens) - keep
        # logits[j] predicts tokens[keep + j + 1]; the continuation is tokens[start:]
        logits = output.logits[0, start - 1 - keep : len(tokens) - 1 - keep].double()
        targets = torch.tensor(tokens[start:], device=self.device)
        log_probs = torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])
        return [float(value) for value in log_probs[:, 0]]
