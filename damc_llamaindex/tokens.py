"""A tokenizer for LlamaIndex that works offline whatever ``TIKTOKEN_CACHE_DIR`` says.

llama-index-core points tiktoken at its bundled BPE files only while ``TIKTOKEN_CACHE_DIR`` is
unset; a user-set cache directory without the files makes ``ChatMemoryBuffer.from_defaults()`` and
``Memory`` download them, which fails offline. DAMC's loader reads the bundled files directly.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from damc_core import load_encoding


def offline_tokenizer(encoding: str = "cl100k_base") -> Callable[[str], list[int]]:
    """``tokenizer_fn=`` for LlamaIndex memories, or ``llama_index.core.set_global_tokenizer(...)``."""
    return partial(load_encoding(encoding).encode, allowed_special="all")
