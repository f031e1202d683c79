"""``faithtrace report``'s input: the result records ``faithtrace eval --out`` wrote, read leniently.

A finished, interrupted or resumed run's file: the last record of each id counts (a rerun appends the rows it
retried), and a line that is not a result record is a counted skip with its line number, never a crash.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from faithtrace.cli.eval_dataset import Row
from faithtrace.cli.figures import Skip
from faithtrace.cli.metrics import LABELS

# The fields the figures and the report read, and their types: a record that breaks them is a counted skip.
_SHAPES: dict[str, type | tuple[type, ...]] = {
    "passed": bool,
    "answer": str,
    "question": str,
    "contexts": list,
    "claims": list,
    "unjudged": list,
    "usage": dict,
    "detector": dict,
    "error": dict,
    "reason": str,
}
_KIND_NAMES: dict[type | tuple[type, ...], str] = {
    bool: "true or false",
    str: "a string",
    list: "a list",
    dict: "an object",
}
_USAGE = ("llm_calls", "input_tokens", "output_tokens", "cost_usd")


def _problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    if not isinstance(record.get("id"), str | int) or isinstance(record.get("id"), bool):
        return "no 'id': not a faithtrace eval result"
    if not isinstance(record.get("outcome"), str):
        return "no 'outcome': not a faithtrace eval result"
    label = record.get("label")
    if label is not None and label not in LABELS:
        return f"'label' must be one of {', '.join(LABELS)} (got {label!r})"
    score = record.get("score")
    if score is not None and (not _number(score) or not 0.0 <= score <= 1.0):
        return f"'score' must be a number from 0 to 1 (got {score!r})"
    for key in ("faithfulness", "threshold", "duration_s"):
        if record.get(key) is not None and not _number(record[key]):
            return f"'{key}' must be a number"
    for key, kind in _SHAPES.items():
        if record.get(key) is not None and not isinstance(record[key], kind):
            return f"'{key}' must be {_KIND_NAMES[kind]}"
    usage = record.get("usage") or {}
    if any(usage.get(k) is not None and not _number(usage[k]) for k in _USAGE):
        return f"'usage' must hold numbers ({', '.join(_USAGE)})"
    if not all(
        isinstance(c, dict) and isinstance(c.get("text", ""), str) for c in record.get("claims") or []
    ):
        return "'claims' must be a list of objects with a 'text'"
    if not all(isinstance(c, str) for c in record.get("contexts") or []):
        return "'contexts' must be a list of strings"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def load_scored(path: Path) -> tuple[list[dict[str, Any]], list[Skip]]:
    """The latest record of each id, in the order the ids first appear, and the lines skipped.

    Raises OSError when the file cannot be read.
    """
    latest: dict[str, dict[str, Any]] = {}
    skips: list[Skip] = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for line_no, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError as exc:
                skips.append(Skip(line_no, f"invalid JSON ({exc})"))
                continue
            problem = _problem(record)
            if problem is not None:
                skips.append(Skip(line_no, problem))
                continue
            record["id"] = str(record["id"])
            latest[record["id"]] = record  # a retried row's new record keeps the row's first place
    return list(latest.values()), skips


def with_inputs(records: Sequence[dict[str, Any]], rows: Sequence[Row]) -> tuple[list[dict[str, Any]], int]:
    """Records in the input's order, with the input's texts and label where a record lacks them; and how many
    valid input rows have no record yet."""
    by_id = {r["id"]: r for r in records}
    ordered: list[dict[str, Any]] = []
    for row in rows:
        record = by_id.pop(row.id, None)
        if record is None:
            continue
        for key, value in (
            ("question", row.question),
            ("contexts", row.contexts),
            ("answer", row.answer),
            ("label", row.label),
        ):
            if record.get(key) is None:
                record[key] = value
        ordered.append(record)
    return ordered + list(by_id.values()), len(rows) - len(ordered)
