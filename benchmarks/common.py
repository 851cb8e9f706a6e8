"""Names and message builders shared by the benchmark event generators."""

from __future__ import annotations

import json
from typing import Any

FIRST = [
    "Mia",
    "Omar",
    "Sofia",
    "Yusuf",
    "Lucas",
    "Chen",
    "Aarav",
    "Emma",
    "Noah",
    "Ivan",
    "Fatima",
    "Raj",
    "Lena",
    "Mateo",
    "Ava",
    "Kenji",
    "Amelia",
    "Daiki",
    "Olivia",
    "Ethan",
    "Harper",
    "Liam",
]
LAST = [
    "Li",
    "Rossi",
    "Garcia",
    "Kim",
    "Brown",
    "Nguyen",
    "Patel",
    "Smith",
    "Ahmed",
    "Silva",
    "Muller",
    "Lopez",
    "Sato",
    "Khan",
    "Davis",
    "Moore",
    "Wilson",
    "Taylor",
    "Thomas",
    "Lee",
    "Martin",
]


def call_message(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style assistant message making one tool call."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def result_message(call_id: str, name: str, result: object) -> dict[str, Any]:
    """The tool message answering ``call_id``; non-string results are sent as JSON."""
    content = result if isinstance(result, str) else json.dumps(result)
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}
