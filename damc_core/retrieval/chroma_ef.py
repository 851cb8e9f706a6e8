"""DAMC's embedders as a registered Chroma embedding function.

Registered under the name ``damc`` with config ``{"model": ...}``: a collection created with it
records both, and reopening the collection (``client.get_collection(name)``, another process, the
server) rebuilds the same function instead of Chroma's default, which downloads a model.
"""

from __future__ import annotations

import functools
from typing import Any

from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.utils.embedding_functions import register_embedding_function

from ..errors import ConfigError
from .embed import Embedder, load_embedder


@functools.lru_cache(maxsize=8)
def _shared_embedder(model: str) -> Embedder:
    """One embedder per model name in a process: Chroma rebuilds the function from the
    collection's config on every write, and loading a model each time would cost a second."""
    return load_embedder(model)


@register_embedding_function
class DamcEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma embedding function over a DAMC :class:`~damc_core.retrieval.Embedder`."""

    def __init__(self, model: str | None = None, *, embedder: Embedder | None = None) -> None:
        if embedder is None and model is None:
            raise ConfigError("DamcEmbeddingFunction needs model= ('minilm-int8', 'hashing') or embedder=")
        self.embedder = embedder if embedder is not None else _shared_embedder(str(model))

    def __call__(self, input: Documents) -> Embeddings:
        return list(self.embedder.embed(list(input)))

    @staticmethod
    def name() -> str:
        return "damc"

    def get_config(self) -> dict[str, Any]:
        return {"model": self.embedder.name}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> DamcEmbeddingFunction:
        return DamcEmbeddingFunction(model=str(config.get("model", "minilm-int8")))

    def default_space(self) -> Space:
        return "cosine"

    def supported_spaces(self) -> list[Space]:
        return ["cosine", "ip", "l2"]
