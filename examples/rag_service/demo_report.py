"""The demo's HTML report: the evaluations read back from the spans, as the results `faithtrace eval --out`
writes, then rendered by faithtrace's report (`faithtrace report RESULTS` makes the same page again).

The demo knows which answers the scripted model was told to make up, so each result carries a label:
the report then also shows how well the scores tell the made-up answers from the faithful ones.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from faithtrace.cli.figures import Source, compute
from faithtrace.cli.report import write_report

from .readback import EvaluationView


def result_record(number: int, made_up: bool, view: EvaluationView) -> dict[str, Any]:
    """One evaluation in the shape of a `faithtrace eval` result line."""
    return {
        "id": f"question-{number}",
        "line": number,
        "label": "hallucinated" if made_up else "faithful",
        "question": view.question,
        "contexts": view.contexts,
        "answer": view.answer,
        "outcome": view.outcome or "error",
        "score": view.score,
        "passed": None if view.label is None else view.label == "pass",
        "threshold": view.threshold,
        "counts": {"yes": view.yes, "no": view.no, "idk": view.idk},
        "claims": [
            {"text": c.text, "verdict": c.verdict, "status": c.status, "reason": c.reason}
            for c in view.claims
        ],
        "reason": view.explanation,
        "judge_model": view.judge_model,
        "duration_s": view.seconds,
        "usage": {
            "llm_calls": sum(s.llm_calls for s in view.steps),
            "input_tokens": view.input_tokens,
            "output_tokens": view.output_tokens,
            "cost_usd": view.cost_usd,
        },
        "error": None
        if view.error_type is None
        else {"type": view.error_type, "message": view.error_message or ""},
    }


def write_demo_report(path: Path, scored: Sequence[tuple[bool, EvaluationView]]) -> Path:
    """Write the report to ``path`` and the results next to it (``.jsonl``); returns the results file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [result_record(i, made_up, view) for i, (made_up, view) in enumerate(scored, start=1)]
    results = path.with_suffix(".jsonl")
    results.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    thresholds = [r["threshold"] for r in records if r["threshold"] is not None]
    figures = compute(
        records, Source(str(results), len(records), []), threshold=thresholds[0] if thresholds else 0.7
    )
    write_report(path, figures, records)
    return results
