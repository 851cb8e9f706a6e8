"""Reading recorded agent traces: OpenAI-format messages in the common file shapes."""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import TraceError
from .events import is_roleless_item, normalize_event
from .types import Message


def load_trajectories(path: str | Path) -> list[list[Message]]:
    """Trajectories from a JSON list of messages, a JSONL of messages, or ``[{"traj": [...]}, ...]``
    (tau-bench's results; ``{"messages": [...]}`` items, as OpenAI chat files have them, alike).
    Items of the Responses API and legacy ``function_call`` messages are read as the chat
    messages they stand for, as ``DecisionMemory.observe`` reads them (see :func:`parse_trajectories`).

    A JSONL whose lines are themselves lists, ``{"traj": ...}`` or ``{"messages": ...}`` objects
    gives one trajectory per line. Errors name the file, the line and what was expected.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc}") from exc
    encoding = _encoding(data)
    data = data.removeprefix(codecs.BOM_UTF8)  # (as Windows tools write it)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line_number = data[: exc.start].count(b"\n") + 1
        where = f"byte 0x{data[exc.start]:02x} on line {line_number}"
        raise TraceError(
            f"{path} is not {_ENCODING_NAMES[encoding]} text ({where}); save it as UTF-8"
        ) from exc
    try:
        whole = _json(text, str(path))
    except json.JSONDecodeError as whole_error:
        items, numbers = [], []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(_json(line, f"{path}:{number}"))
            except json.JSONDecodeError as exc:
                if _ends_in_a_comma(line):
                    raise TraceError(
                        f"{path}:{number}: a comma after the line's JSON value; JSONL has one value a line "
                        "and nothing after it"
                    ) from exc
                if number == 1:
                    raise TraceError(f"{path} is neither JSON nor JSONL: {whole_error}") from exc
                raise TraceError(f"{path}:{number}: invalid JSON line (truncated trace?): {exc}") from exc
            numbers.append(number)
        return parse_trajectories(items, source=str(path), line_numbers=numbers)
    return parse_trajectories(whole, source=str(path))


def _ends_in_a_comma(line: str) -> bool:
    """Whether the line is a JSON value and a comma, as lines copied out of a JSON array are."""
    stripped = line.rstrip()
    if not stripped.endswith(","):
        return False
    try:
        json.loads(stripped[:-1])
    except (ValueError, RecursionError):
        return False
    return True


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16's, which begins it
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_ENCODING_NAMES = {"utf-8": "UTF-8", "utf-16": "UTF-16", "utf-32": "UTF-32"}


def _encoding(data: bytes) -> str:
    """The codec of a trace: UTF-16 or UTF-32 by its byte order mark (Windows PowerShell's ``>``
    and ``Out-File`` write UTF-16), else UTF-8."""
    return next((codec for bom, codec in _BOMS if data.startswith(bom)), "utf-8")


def _json(text: str, where: str) -> Any:
    """Parsed JSON; what is JSON but beyond reading (nested past the interpreter's depth, a number
    of thousands of digits) is a ``TraceError`` naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"{where}: JSON that cannot be read ({type(exc).__name__}: {exc})") from exc


def parse_trajectories(
    data: Any, *, source: str = "trace", line_numbers: Sequence[int] | None = None
) -> list[list[Message]]:
    """Trajectories from parsed JSON: a list of messages (one trajectory) when its first item is
    a message, else a list of trajectories. ``line_numbers``: the JSONL line of each item, for
    errors.

    A Responses API item (``function_call``, ``function_call_output``, ``reasoning``, ``message``)
    or a legacy ``function_call`` / ``function`` message becomes the chat message it stands for,
    and a step's parallel ``function_call`` items one assistant message: replays see its calls as
    decisions, as a chat trace's ``tool_calls``."""
    if isinstance(data, dict) and _trajectory_key(data):
        data = [data]
    if not isinstance(data, list) or not data:
        raise TraceError(
            f"{source}: expected a non-empty list of messages or of {{'traj': [...]}} "
            "or {'messages': [...]} items"
        )

    def where(index: int) -> str:
        return f"{source}:{line_numbers[index]}" if line_numbers else f"{source}: item {index}"

    if _is_message(data[0]):
        return [_messages(data, where)]
    _check_format(data[0], where(0))
    out = []
    for index, item in enumerate(data):
        key = _trajectory_key(item) if isinstance(item, dict) else None
        messages = item.get(key) if isinstance(item, dict) and key else item
        if not isinstance(messages, list):
            raise TraceError(
                f"{where(index)}: no message list "
                "(expected a list of messages, 'traj': [...] or 'messages': [...])"
            )
        out.append(_messages(messages, _messages_of(where(index))))
    return out


def _messages_of(item: str) -> Callable[[int], str]:
    return lambda index: f"{item}: message {index}"


def _trajectory_key(item: dict[str, Any]) -> str | None:
    """Where an item holds its messages: ``traj`` (tau-bench) or ``messages`` (OpenAI chat files)."""
    if "traj" in item:
        return "traj"
    return "messages" if "messages" in item and "role" not in item else None


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and ("role" in item or is_roleless_item(item)) and "traj" not in item


def _in_chat_form(message: dict[str, Any]) -> bool:
    """Whether the message is read as it is: not a Responses API item nor a legacy function call."""
    return not (
        is_roleless_item(message)
        or message.get("type") == "message"
        or message.get("role") == "function"
        or (isinstance(message.get("function_call"), dict) and not message.get("tool_calls"))
    )


def _messages(items: Sequence[Any], where: Callable[[int], str]) -> list[Message]:
    """The items, each checked to be a message, in chat form; ``where(i)`` names item ``i`` in an
    error."""
    out: list[Message] = []
    parallel = False  # the last message is a Responses call, which the next call joins
    for index, message in enumerate(items):
        if not isinstance(message, dict):
            raise TraceError(f"{where(index)}: {type(message).__name__}, expected a message object")
        _check_format(message, where(index))
        if _in_chat_form(message):
            if "role" not in message:
                raise TraceError(f"{where(index)}: a message without 'role'")
            out.append(message)
            parallel = False
            continue
        chat = normalize_event(message)[0]
        call = message.get("type") in ("function_call", "custom_tool_call") and bool(chat.get("tool_calls"))
        if call and parallel:
            out[-1] = {**out[-1], "tool_calls": [*out[-1]["tool_calls"], *chat["tool_calls"]]}
        else:
            out.append(chat)
        parallel = call
    return out


_LANGCHAIN_TYPES = frozenset({"human", "ai", "system", "tool", "function", "chat", "AIMessageChunk"})
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "server_tool_use"})
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def _check_format(item: Any, where: str) -> None:
    """Refuse messages of another format than OpenAI's, whose tool calls would be read as text (a
    trace without decision points) or whose list would be taken for a list of trajectories."""
    if not isinstance(item, dict):
        return
    if "role" not in item and item.get("type") in _LANGCHAIN_TYPES:
        raise TraceError(
            f"{where}: a LangChain message (type {item['type']!r}); DAMC reads OpenAI-style messages "
            "with 'role' (convert them with langchain_core.messages.convert_to_openai_messages)"
        )
    if "role" in item and "content" not in item and isinstance(item.get("blocks"), list):
        raise TraceError(
            f"{where}: a LlamaIndex ChatMessage (its text in 'blocks', its tool calls in "
            "'additional_kwargs'); DAMC reads OpenAI-style messages (convert them with "
            "llama_index.llms.openai.utils.to_openai_message_dicts)"
        )
    role = item.get("role")
    if isinstance(role, str) and role not in _ROLES and role.lower() in _ROLES:
        raise TraceError(f"{where}: role {role!r}; OpenAI-style roles are lower case ({role.lower()!r})")
    calls = item.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise TraceError(f"{where}: 'tool_calls' is a {type(calls).__name__}, expected a list of calls")
    content = item.get("content")
    if "role" in item and isinstance(content, list):
        block = next((b for b in content if isinstance(b, dict) and b.get("type") in _ANTHROPIC_BLOCKS), None)
        if block is not None:
            raise TraceError(
                f"{where}: Anthropic-style {block['type']!r} content block; DAMC reads OpenAI-style "
                "messages (assistant 'tool_calls' and 'tool' role results), so its tool calls would "
                "not be seen"
            )
