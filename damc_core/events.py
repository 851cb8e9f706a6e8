"""What ``observe`` accepts, as the one chat message it stands for.

Callers pass Chat Completions messages (dicts, or the OpenAI SDK's objects), whole responses,
items of the Responses API, legacy function calls, content that is bytes, arrays or objects JSON
cannot hold. Each is read here as an OpenAI-style message plus the verbatim body the store keeps,
so the rest of the pipeline sees one shape.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from .documents import SURROGATE
from .encode import HOSTED_TOOL, parse_arguments
from .tokens import is_content_parts
from .types import Message

REASONING = "reasoning"
"""The role a reasoning item of the Responses API is read as: its summary is a card, but no turn
of the dialogue, since no chat API takes one."""


def normalize_event(event: Mapping[str, Any] | Any) -> tuple[Message, str]:
    """An OpenAI-style message dict and its verbatim JSON body, whatever the caller passed.

    ``None`` content stays ``None``; bytes become text (or base64 when not UTF-8); a NumPy array
    becomes its items (its ``repr`` leaves out the middle of a long one); content that is not
    JSON-serializable is kept as its ``repr``; a non-mapping event becomes an ``unknown`` note.
    """
    event = _model_fields(_first_choice(event))
    message = dict(event) if isinstance(event, Mapping) else {"role": "unknown", "content": event}
    calls = message.get("tool_calls")
    if isinstance(calls, (list, tuple)) and not all(isinstance(call, Mapping) for call in calls):
        message["tool_calls"] = [_model_fields(call) for call in calls]  # ``msg.tool_calls`` in a dict
    content = message.get("content")
    if isinstance(content, np.ndarray):
        content = message["content"] = content.tolist()
    if isinstance(content, (bytes, bytearray)):
        try:
            message["content"] = bytes(content).decode("utf-8")
        except UnicodeDecodeError:
            message["content"] = f"[binary content, {len(content)} bytes, base64] " + base64.b64encode(
                bytes(content)
            ).decode("ascii")
    elif content is not None and not isinstance(content, str) and not _are_parts(content):
        try:
            message["content"] = json.dumps(content, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            message["content"] = _safe_repr(content)
    role = message.get("role")
    if not isinstance(role, str):
        message["role"] = "unknown" if role is None else str(role)
    try:
        body = json.dumps(message, ensure_ascii=False, default=_safe_repr)
    except (TypeError, ValueError, RecursionError):  # a field JSON cannot hold: only it is its repr
        message = {str(key): _encodable(value) for key, value in message.items()}
        body = json.dumps(message, ensure_ascii=False, default=_safe_repr)
    if "tool_calls" in message and not isinstance(message["tool_calls"], (list, tuple)):
        del message["tool_calls"]  # not calls a model could have made; the record keeps them as sent
    if SURROGATE.search(body):  # text cut inside an emoji: not UTF-8, so no store or tokenizer takes it
        message = json.loads(SURROGATE.sub("\ufffd", body))
        body = SURROGATE.sub(lambda half: f"\\u{ord(half.group()):04x}", body)  # escaped: still verbatim
    return with_tool_calls(message), body


FOREIGN_FORMATS = {
    "langchain": "a LangChain message (its role in 'type'), not an OpenAI-style one, so it is read as a "
    "note of no role: convert it with langchain_core.messages.convert_to_openai_messages, or let "
    "damc_langchain record the agent",
    "llamaindex": "a LlamaIndex ChatMessage (its text in 'blocks'), not an OpenAI-style message, so it "
    "is read without its text: convert it with llama_index.llms.openai.utils.to_openai_message_dicts, "
    "or let damc_llamaindex record the agent",
}
"""What ``observe`` says of a framework's own message passed as it is, by framework."""
_LANGCHAIN_TYPES = frozenset({"human", "ai", "system", "tool", "function", "chat", "AIMessageChunk"})


def foreign_format(event: object, message: Message) -> str | None:
    """Which framework's own message ``event`` is (see :data:`FOREIGN_FORMATS`), if it is one."""
    if isinstance(event, Mapping):
        langchain = "role" not in event and event.get("type") in _LANGCHAIN_TYPES
    else:
        langchain = hasattr(event, "content") and getattr(event, "type", None) in _LANGCHAIN_TYPES
    if langchain:
        return "langchain"
    blocks = message.get("blocks")
    texts = isinstance(blocks, list) and any(
        isinstance(block, Mapping) and block.get("block_type") == "text" for block in blocks
    )
    return "llamaindex" if texts and message.get("content") is None else None


def _first_choice(event: object) -> object:
    """A whole Chat Completions response (the SDK's ``ChatCompletion`` or its dict) as the message
    of its first choice, the reply it brings; anything else as it is."""
    kind = event.get("object") if isinstance(event, Mapping) else getattr(event, "object", None)
    if kind != "chat.completion":
        return event
    choices = event.get("choices") if isinstance(event, Mapping) else getattr(event, "choices", None)
    if not isinstance(choices, list) or not choices:
        return event
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, Mapping) else getattr(choice, "message", None)
    return event if message is None else message


def _model_fields(value: object) -> object:
    """A pydantic model of a message or a tool call as the dict of its fields (the OpenAI SDK's
    ``response.choices[0].message`` and its tool calls, which its docs append to the messages as
    they are, and the call and reasoning items of a Responses API ``response.output``, which have
    no role), a message keeping its ``content`` when that is ``None``; anything else as it is."""
    dump = getattr(value, "model_dump", None)
    if isinstance(value, (Mapping, type)) or not callable(dump):
        return value
    try:
        fields = dump(exclude_none=True)
    except Exception:  # not pydantic's model_dump after all: the value is kept as its repr
        return value
    if not isinstance(fields, dict):
        return value
    if fields.get("type") in _RESPONSES_CALL_ITEMS and isinstance(fields.get("call_id"), str):
        return fields
    if _is_reasoning_item(fields) or fields.get("type") in _HOSTED_ITEMS:
        return fields
    if not {"role", "function", "custom"} & fields.keys():
        return value  # not a message nor a tool call: kept as its repr, which the card reads
    if "role" in fields:
        fields.setdefault("content", None)
    return fields


_RESPONSES_CALL_ITEMS = (
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
)
"""The kinds of Responses API item that are a tool call or its output (see :func:`_from_responses_item`)."""


def with_tool_calls(message: Message) -> Message:
    """A message of OpenAI's legacy function calling (an assistant's ``function_call``, a
    ``function`` result) as the tool call and tool result it is, paired by the function's name;
    an item of its Responses API likewise (see :func:`_from_responses_item`)."""
    message = _from_responses_item(message)
    role = message["role"]
    call = message.get("function_call")
    if role == "assistant" and isinstance(call, Mapping) and not message.get("tool_calls"):
        name = str(call.get("name") or "unknown_tool")
        function = {"name": name, "arguments": call.get("arguments") or "{}"}
        tool_calls = [{"id": f"function:{name}", "type": "function", "function": function}]
        rest = {key: value for key, value in message.items() if key != "function_call"}
        return {**rest, "tool_calls": tool_calls}
    if role == "function":
        name = str(message.get("name") or "unknown_tool")
        return {**message, "role": "tool", "tool_call_id": f"function:{name}"}
    return message


def _from_responses_item(message: Message) -> Message:
    """A call or a call's output of OpenAI's Responses API (``{"type": "function_call", "call_id",
    "name", "arguments"}``, ``{"type": "function_call_output", "call_id", "output"}`` and their
    custom-tool kinds), which has no role, as the assistant tool call or tool result it is; a
    reasoning item as the text of its summary (see :data:`REASONING`). Its other items with a
    role are messages, whose text, image and file parts (``input_text``, ``output_text``,
    ``input_image``, ``input_file``) are read as chat parts."""
    content = message.get("content")
    if message.get("type") == "message":  # its other fields (id, status, phase) are no chat message's
        message = {key: message[key] for key in ("role", "content") if key in message}
    if isinstance(content, list) and _are_parts(content):  # chat parts are kept as they are
        message = {**message, "content": [_chat_part(part) for part in content]}
    kind, call_id = message.get("type"), message.get("call_id")
    if message["role"] == "unknown" and _is_reasoning_item(message):
        return {"role": REASONING, "content": "\n".join(_reasoning_texts(message))}
    if message["role"] == "unknown" and kind in _HOSTED_ITEMS:
        return _hosted_tool(message, _HOSTED_ITEMS[kind])
    if message["role"] != "unknown" or not isinstance(call_id, str):
        return message
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = message.get("output")
        if isinstance(output, list) and _are_parts(output):
            output = [_chat_part(part) for part in output]
        elif not isinstance(output, str):
            output = json.dumps(output, default=str)
        return {"role": "tool", "tool_call_id": call_id, "content": output}
    if kind == "function_call":
        function = {"name": message.get("name"), "arguments": message.get("arguments")}
        call = {"id": call_id, "type": "function", "function": function}
    elif kind == "custom_tool_call":
        call = {
            "id": call_id,
            "type": "custom",
            "custom": {"name": message.get("name"), "input": message.get("input")},
        }
    else:
        return message
    return {"role": "assistant", "content": None, "tool_calls": [call]}


_HOSTED_ITEMS: dict[object, str] = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "image_generation_call": "image_generation",
    "code_interpreter_call": "code_interpreter",
    "computer_call": "computer",
    "computer_call_output": "computer",
    "local_shell_call": "local_shell",
    "local_shell_call_output": "local_shell",
    "shell_call": "shell",
    "shell_call_output": "shell",
    "apply_patch_call": "apply_patch",
    "apply_patch_call_output": "apply_patch",
    "tool_search_call": "tool_search",
    "tool_search_output": "tool_search",
    "mcp_call": "mcp",
    "mcp_list_tools": "mcp_list_tools",
    "mcp_approval_request": "mcp_approval_request",
    "mcp_approval_response": "mcp_approval_response",
}
"""Responses API items of the tools the provider runs (or hands to the caller to run) -> the tool's
name; an MCP call is named after the server's tool it called."""
_ASKED_FIELDS = ("server_label", "queries", "code", "action", "actions", "arguments", "operation")
"""Fields of such an item that say what the tool was asked; the rest, but bookkeeping, is what it did."""
_BOOKKEEPING_FIELDS = frozenset(
    {"role", "id", "type", "call_id", "name", "created_by", "caller", "execution", "max_output_length"}
)


def _hosted_tool(item: Message, name: str) -> Message:
    """A tool item of the Responses API as what the tool was asked and what it found (see
    :data:`~damc_core.encode.HOSTED_TOOL`): a web search's query and sources, a file search's
    queries and results, an MCP call's arguments and output. Inline media (a generated image, a
    screenshot) are named, not carried: the record keeps them."""
    if item.get("type") in ("mcp_call", "mcp_approval_request") and isinstance(item.get("name"), str):
        name = item["name"]
    asked = {key: _without_media(item[key]) for key in _ASKED_FIELDS if item.get(key) is not None}
    found = {
        key: _without_media(value, key)
        for key, value in item.items()
        if key not in _BOOKKEEPING_FIELDS and key not in asked and value not in (None, [])
    }
    if isinstance(action := asked.pop("action", None), Mapping):  # search(query=...), click(x=..., y=...)
        asked.update({"action": action.get("type"), **{k: v for k, v in action.items() if k != "type"}})
        if "sources" in asked:  # what a web search found
            found["sources"] = asked.pop("sources")
    elif action is not None:
        asked["action"] = action
    if "arguments" in asked:  # an MCP tool's own, beside the server's label
        arguments = asked.pop("arguments")
        parsed = parse_arguments(arguments) if isinstance(arguments, str) else arguments
        asked.update(parsed if isinstance(parsed, Mapping) else {"arguments": parsed})
    message: Message = {"role": HOSTED_TOOL, "name": name, "arguments": asked}
    if found.get("status") == "completed":
        del found["status"]
    failed = found.get("status") in ("failed", "incomplete") or bool(found.get("error"))
    if failed:
        message["status"] = "error"
    if found.keys() == {"output"} and isinstance(found["output"], str):  # an MCP tool's or a shell's
        message["content"] = found["output"]
    else:
        message["content"] = _json_text(found) if found else ""
    return message


def _json_text(value: object) -> str:
    """``value`` as JSON text, or as its ``repr`` when JSON cannot hold it (a structure too deep)."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return _safe_repr(value)


def _without_media(value: Any, key: str = "", depth: int = 0) -> Any:
    """``value`` with the media it carries inline (a data URL, a generated image's base64) named,
    to the depth an API puts them at (data nested deeper is left as it is)."""
    if isinstance(value, str):
        if value.startswith("data:"):
            return f"[{value[5:].split(';', 1)[0].split(',', 1)[0] or 'data'}]"
        return "[image]" if key == "result" and len(value) > 200 and " " not in value else value
    if depth >= MEDIA_DEPTH:
        return value
    if isinstance(value, Mapping):
        return {k: _without_media(v, str(k), depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_media(v, depth=depth + 1) for v in value]
    return value


MEDIA_DEPTH = 8
"""Levels of a tool item searched for inline media: a screenshot sits at the second."""


def is_roleless_item(item: Mapping[str, Any]) -> bool:
    """Whether the item is one of the Responses API's items without a role that DAMC reads: a
    call or its output, the model's reasoning, a provider-run tool's call (see
    :data:`_HOSTED_ITEMS`)."""
    if "role" in item:
        return False
    kind = item.get("type")
    return kind in _RESPONSES_CALL_ITEMS or kind in _HOSTED_ITEMS or _is_reasoning_item(item)


def _is_reasoning_item(item: Mapping[str, Any]) -> bool:
    return item.get("type") == "reasoning" and isinstance(item.get("summary"), list)


def _reasoning_texts(item: Mapping[str, Any]) -> list[str]:
    """The text of a reasoning item's summary; its encrypted reasoning is for the API that made it."""
    parts = item["summary"]
    return [part["text"] for part in parts if isinstance(part, Mapping) and isinstance(part.get("text"), str)]


def _are_parts(content: object) -> bool:
    """Chat content parts, or a Responses API message's (see :func:`_chat_part`)."""
    return is_content_parts(content) or (
        isinstance(content, list)
        and bool(content)
        and all(is_content_parts([_chat_part(part)]) for part in content)  # stops at a record of data
    )


def _chat_part(part: Any) -> Any:
    """A Responses API content part as the chat part it stands for (others, and a file by URL,
    which Chat Completions does not take, as they are)."""
    if not isinstance(part, dict):
        return part
    if part.get("type") in ("input_text", "output_text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if part.get("type") == "input_image" and isinstance(part.get("image_url"), str):
        detail = {"detail": part["detail"]} if part.get("detail") in ("auto", "low", "high") else {}
        return {"type": "image_url", "image_url": {"url": part["image_url"], **detail}}
    if part.get("type") == "input_file" and not part.get("file_url"):  # chat has no file by URL
        file = {
            key: part[key] for key in ("file_id", "file_data", "filename") if isinstance(part.get(key), str)
        }
        return {"type": "file", "file": file} if file.keys() - {"filename"} else part
    return part


def tool_events(
    name: str,
    arguments: Mapping[str, Any] | str | None,
    result: object,
    *,
    call_id: str | None = None,
    error: bool = False,
    artifact: object = None,
) -> tuple[Message, Message]:
    """The assistant message making a tool call and the tool message answering it, as
    ``DecisionMemory.observe_tool`` records them: a caller that observes them one by one can try
    again the one a store refused (a full disk) without recording the other twice."""
    call_id = call_id or f"call_{uuid.uuid4().hex[:24]}"
    args_text = arguments if isinstance(arguments, str) else _arguments_text(arguments)
    call: Message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args_text}}
        ],
    }
    answer: Message = {"role": "tool", "tool_call_id": call_id, "name": name, "content": result}
    if error:
        answer["status"] = "error"
    if artifact is not None:
        answer["artifact"] = artifact
    return call, answer


def _arguments_text(arguments: object) -> str:
    """A call's arguments as the JSON a model would send; what JSON cannot hold (a cycle, a key
    that is not text) is kept as its ``repr``, which the card reads as unparsed arguments."""
    try:
        return json.dumps(arguments if arguments is not None else {}, default=str)
    except Exception:  # (a value's __str__ may raise anything)
        return _safe_repr(arguments)


def _encodable(value: object) -> object:
    """``value`` if JSON can hold it, else its ``repr`` (a cycle, a key that is not text, a
    structure too deep or a number too long to print)."""
    try:
        json.dumps(value, ensure_ascii=False, default=_safe_repr)
    except (TypeError, ValueError, RecursionError):
        return _safe_repr(value)
    return value


def _safe_repr(value: object) -> str:
    """``repr`` that cannot fail: a structure too deep to print, or an object whose ``repr``
    raises, is named, not raised."""
    try:
        return repr(value)
    except Exception as exc:  # a __repr__ of the caller's may raise anything
        return f"[unprintable {type(value).__name__}: {type(exc).__name__}]"
