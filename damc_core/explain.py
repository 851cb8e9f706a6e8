"""``explain()``: a readable account of a built context: every card, its scores, why kept or dropped."""

from __future__ import annotations

import json

from .tokens import content_text
from .types import BuiltContext


def explain(built: BuiltContext) -> str:
    """Cards with value, tokens and reason, then totals and the assembled messages."""
    kept = [d for d in built.decisions if d.kept]
    # what the cards save: those sent as messages (recent dialogue, the system prompt) save nothing
    saved = sum(d.raw_tokens - d.tokens for d in built.decisions if not (d.kept and d.tokens == 0))
    lines = [f"{'card':>6} {'kept':>4} {'value':>6} {'tokens':>6} {'raw':>6}  reason"]
    for d in built.decisions:
        lines.append(
            f"{d.card_id:>6} {'yes' if d.kept else 'no':>4} {d.value:6.3f} {d.tokens:6d} "
            f"{d.raw_tokens:6d}  {d.reason}"
        )
        for score in d.scores:
            lines.append(f"{'':>33}{score.name}={score.value:.2f}: {score.provenance}")
    if built.unconsidered:
        lines.append(f"{built.unconsidered} older cards outside the shortlist were not valued")
    lines.append(
        f"\n{len(kept)} of {len(built.decisions)} cards kept; memory {built.memory_tokens} tokens; "
        f"sent {built.total_tokens} of {built.raw_tokens} tokens (ratio {built.compression_ratio:.2f}); "
        f"cards save {saved} tokens over their raw records"
    )
    lines.append("\nassembled messages:")
    for message in built.messages:
        calls = message.get("tool_calls")
        content = message.get("content") or ""
        if isinstance(content, list):  # parts: their text, and an image or a file named, not its data
            content = content_text(content, reasoning=True)
        lines.append(
            f"--- {message.get('role')}"
            + (f" (tool_call_id {message['tool_call_id']})" if message.get("tool_call_id") else "")
        )
        if content:
            lines.append(str(content))
        if calls:
            lines.append(json.dumps(calls, ensure_ascii=False))
    return "\n".join(lines)
