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
    if score is not None and (
        not isinstance(score, int | float) or isinstance(score, bool) or not 0.0 <= score <= 1.0
    ):
        return f"'score' must be a number from 0 to 1 (got {score!r})"
    if record.get("answer") is not None and not isinstance(record["answer"], str):
        return "'answer' must be a string"
    return None


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
