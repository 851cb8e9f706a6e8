"""DAMC's embedders as a registered Chroma embedding function.

Registered under the name ``damc`` with config ``{"model": ...}``: a collection created with it
records both, and reopening the collection (``client.get_collection(name)``, another process, the
server) rebuilds the same function instead of Chroma's default, which downloads a model.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.utils.embedding_functions import register_embedding_function

from ..errors import ConfigError
from .embed import (
    HASHING,
    MINILM,
    Embedder,
    HashingEmbedder,
    MiniLMEmbedder,
    embedder_signature,
    load_embedder,
    registered_embedder,
    utf8_text,
)


@functools.lru_cache(maxsize=1)
def _shared_minilm() -> Embedder:
    """The MiniLM embedder, loaded once; raises ``ConfigError`` when its packages are missing."""
    return MiniLMEmbedder()


@functools.lru_cache(maxsize=8)
def _shared_embedder(model: str) -> Embedder:
    """One embedder per model name in a process: Chroma rebuilds the function from the
    collection's config on every write, and loading a model each time would cost a second. MiniLM
    is the one :func:`_shared_minilm` holds; where it cannot load, ``load_embedder`` falls back."""
    if model == MINILM:
        try:
            return _shared_minilm()
        except ConfigError:
            pass
    return load_embedder(model)


@register_embedding_function
class DamcEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma embedding function over a DAMC :class:`~damc_core.retrieval.Embedder`."""

    def __init__(self, model: str | None = None, *, embedder: Embedder | None = None) -> None:
        if embedder is None and model is None:
            raise ConfigError("DamcEmbeddingFunction needs model= ('minilm-int8', 'hashing') or embedder=")
        self.embedder = embedder if embedder is not None else _shared_embedder(str(model))

    def __call__(self, input: Documents) -> Embeddings:
        """The texts' vectors, half an emoji read as U+FFFD, so an embedder of one's own is handed
        UTF-8 text too (a collection's ``query(query_texts=...)`` with one failed in its tokenizer)."""
        return list(self.embedder.embed([utf8_text(text) for text in input]))

    @staticmethod
    def name() -> str:
        return "damc"

    def get_config(self) -> dict[str, Any]:
        """``{"model": name}``; a ``HashingEmbedder``'s settings, and an embedder of one's own's
        class and dimension (``"signature": "Mine:64"``), besides."""
        embedder = self.embedder
        if isinstance(embedder, HashingEmbedder):
            weight = embedder.trigram_weight
            return {"model": HASHING, "dimension": embedder.dimension, "trigram_weight": weight}
        config: dict[str, Any] = {"model": embedder.name}
        signature = embedder.signature if isinstance(embedder, _Unknown) else embedder_signature(embedder)
        if signature is not None:
            config["signature"] = signature
        return config

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> DamcEmbeddingFunction:
        """The function a collection was made with. Any embedder other than DAMC's two must be
        known to this process (a ``CardIndex`` made with it, or :func:`register_embedder`): the
        collection's config holds only its name (and its class and dimension), and no other
        embedder may stand in for it."""
        model = str(config.get("model", MINILM))
        if config.get("signature") is not None:  # an embedder of one's own, told from others of its name
            signature = str(config["signature"])
            found = registered_embedder(model, signature)
            return DamcEmbeddingFunction(embedder=found or _Unknown(model, signature=signature))
        if model == HASHING:
            settings = {k: config[k] for k in ("dimension", "trigram_weight") if k in config}
            return DamcEmbeddingFunction(embedder=HashingEmbedder(**settings))
        found = registered_embedder(model)
        if found is not None:
            return DamcEmbeddingFunction(embedder=found)
        if model == MINILM:  # this model or none: the lexical fallback would search another space
            try:
                return DamcEmbeddingFunction(embedder=_shared_minilm())
            except ConfigError as exc:
                return DamcEmbeddingFunction(embedder=_Unknown(model, reason=str(exc)))
        return DamcEmbeddingFunction(embedder=_Unknown(model))  # raised here, Chroma would use its default

    def default_space(self) -> Space:
        return "cosine"

    def supported_spaces(self) -> list[Space]:
        return ["cosine", "ip", "l2"]


@dataclass(frozen=True)
class _Unknown:
    """An embedder this process does not know: embedding with it says what to do (a model that
    embeds otherwise would search another vector space, and Chroma's default downloads one)."""

    name: str
    dimension: int = 0
    reason: str = ""
    """Why a known embedder could not be loaded here (its packages are missing)."""
    signature: str | None = None
    """The class and dimension the collection recorded (see :func:`embedder_signature`)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.reason:
            raise ConfigError(
                f"this collection was embedded by {self.name!r}, which cannot load here: {self.reason}"
            )
        made_by = repr(self.name) + (f" ({self.signature})" if self.signature else "")
        raise ConfigError(
            f"this collection was embedded by {made_by}: register_embedder() it in this process, "
            "or pass embedding_function=DamcEmbeddingFunction(embedder=...)"
        )
