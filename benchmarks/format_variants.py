"""The same trajectories with their tool results printed the ways tools print data besides JSON.

Recorded traces mostly hold JSON tool results, but agents meet many other shapes: LlamaIndex's
``FunctionTool`` sends ``str(dict)``, model-backed tools fence JSON in Markdown or introduce it,
tools written for a model print ``key: value`` lines or Markdown tables, JavaScript APIs use
camelCase keys and wrap records in envelopes, SQL and analytics APIs send column names beside rows,
an SQL tool prints a query's rows as tuples and a spreadsheet tool as CSV. Each variant rewrites
every JSON tool result (and, for camelCase, the call arguments, whose keys come from the same API)
and nothing else, so the decision-fact judge scores the same needed values on each::

    python benchmarks/format_variants.py TRACE --out-dir /tmp/variants
    damc replay /tmp/variants/yaml.json --budget 3000 --budget-ratio 0.07 --min-budget 275 --out y.jsonl
    python ../shared/eval/retention.py /tmp/variants/yaml.json --contexts y.jsonl damc
"""

from __future__ import annotations

import argparse
import copy
import csv
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(value: Any) -> Any:
    """Keys in camelCase; keyed collections (ids or numbers as keys) keep theirs."""
    if isinstance(value, dict):
        return {(_camel(k) if not re.search(r"\d", k) else k): camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    return value


def markdown(value: Any) -> str:
    """A list of records as a Markdown table (nested values as JSON cells); anything else as YAML."""
    if isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
        columns = list(dict.fromkeys(key for row in value for key in row))

        def cell(item: Any) -> str:
            return (json.dumps(item) if isinstance(item, (dict, list)) else str(item)).replace("|", "\\|")

        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in value]
        return "\n".join(lines)
    return yaml_text(value)


def _records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(row, dict) for row in value)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row))


def csv_text(value: Any) -> str:
    """A list of records as CSV with a header (nested values as JSON cells); anything else as JSON."""
    if not _records(value):
        return json.dumps(value)
    columns = _columns(value)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in value:
        cells = (row.get(column, "") for column in columns)
        writer.writerow(json.dumps(cell) if isinstance(cell, (dict, list)) else cell for cell in cells)
    return out.getvalue()


def column_split(value: Any) -> Any:
    """Every list of records, at any depth, as ``{"columns": [...], "rows": [[...], ...]}``: how SQL
    APIs and ``DataFrame.to_json(orient="split")`` send tables."""
    if _records(value):
        columns = _columns(value)
        return {"columns": columns, "rows": [[column_split(row.get(c)) for c in columns] for row in value]}
    if isinstance(value, dict):
        return {key: column_split(item) for key, item in value.items()}
    if isinstance(value, list):
        return [column_split(item) for item in value]
    return value


def tuples(value: Any) -> str:
    """A list of records as the repr of a list of tuples, its column names lost (what an SQL tool
    returns for a query's rows); anything else as JSON."""
    if not _records(value):
        return json.dumps(value)
    columns = _columns(value)
    return repr([tuple(row.get(c) for c in columns) for row in value])


def yaml_text(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True)


VARIANTS: dict[str, Callable[[Any], str]] = {
    "repr": str,
    "fenced": lambda value: "```json\n" + json.dumps(value, indent=2) + "\n```",
    "introduced": lambda value: "Tool returned: " + json.dumps(value),
    "yaml": yaml_text,
    "markdown": markdown,
    "envelope": lambda value: json.dumps(
        {"success": True, "data": value, "meta": {"request_id": "req_8f3a2c91"}}
    ),
    "camel": lambda value: json.dumps(camel_keys(value)),
    "csv": csv_text,
    "columns": lambda value: json.dumps(column_split(value)),
    "tuples": tuples,
}


def rewrite(trajectories: list[Any], variant: str) -> list[Any]:
    """A copy of tau-bench-shaped trajectories with every JSON tool result printed as ``variant``."""
    printed = VARIANTS[variant]
    out = copy.deepcopy(trajectories)
    for item in out:
        for message in item["traj"] if isinstance(item, dict) else item:
            if message.get("role") == "tool" and isinstance(message.get("content"), str):
                try:
                    value = json.loads(message["content"])
                except ValueError:
                    continue
                if isinstance(value, (dict, list)):
                    message["content"] = printed(value)
            if variant == "camel":
                for call in message.get("tool_calls") or []:
                    try:
                        arguments = json.loads(call["function"]["arguments"] or "{}")
                    except ValueError:
                        continue
                    call["function"]["arguments"] = json.dumps(camel_keys(arguments))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trace", type=Path, help="tau-bench-shaped trajectories ([{'traj': [...]}, ...])")
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
    trajectories = json.loads(args.trace.read_text(encoding="utf-8"))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for variant in args.variants:
        path = args.out_dir / f"{variant}.json"
        path.write_text(json.dumps(rewrite(trajectories, variant), ensure_ascii=False), encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
