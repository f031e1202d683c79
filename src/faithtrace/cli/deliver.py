"""What ``faithtrace eval`` and ``faithtrace report`` do with finished results: the summary table (or the
figures as JSON), the HTML report, and the CI gate's exit status."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from faithtrace.cli.figures import DEFAULT_REPORT_ANSWERS, Gate, Skip, Source, compute
from faithtrace.cli.metrics import Summary, summarise
from faithtrace.cli.output import Output

T = TypeVar("T")
REPORT_EXTRA = "pip install 'faithtrace[report]'"


@dataclass(frozen=True)
class Deliver:
    report: Path | None = None
    json: bool = False
    gate: Gate = field(default_factory=Gate)
    report_answers: int = DEFAULT_REPORT_ANSWERS


def read_lines(
    out: Output, command: str, file: Path, load: Callable[[Path], tuple[list[T], list[Skip]]]
) -> tuple[list[T], list[Skip]] | None:
    """``load(file)``, each skipped line named on stderr; None (said) when the file cannot be read."""
    try:
        items, skips = load(file)
    except OSError as exc:
        out.error(f"faithtrace {command}: cannot read {file}: {exc.strerror or exc}")
        return None
    for skip in skips:
        out.error(f"faithtrace {command}: {file}: {skip} (skipped)")
    return items, skips


def report_problem(path: Path) -> str | None:
    """Why a report cannot be written to ``path`` (checked before any scoring), or None."""
    try:
        import jinja2  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"--report needs the report extra ({exc.name} is missing): {REPORT_EXTRA}"
    parent = path.resolve().parent
    if path.is_dir():
        return f"--report {path}: is a folder"
    if not parent.is_dir():
        return f"--report {path}: no folder {parent}"
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f"--report {path}: not writable"
    return None


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def print_summary(out: Output, s: Summary, figures: Mapping[str, Any]) -> None:
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(s.outcomes.items())) or "none"
    seconds = figures["run"]["seconds"]
    rows = [
        ["evaluations", str(s.rows)],
        ["outcomes", outcomes],
        [
            "labels",
            f"pass {s.passed}, fail {s.failed} ({s.failed_for_contradiction} for a contradicted claim alone)",
        ],
        ["mean score", _fmt(s.mean_score)],
        ["mean faithfulness", _fmt(s.mean_faithfulness)],
        ["tokens / evaluation", _fmt(s.tokens_per_eval, ".0f")],
        ["LLM calls / evaluation", _fmt(s.calls_per_eval, ".2f")],
        ["cost / evaluation (USD)", _fmt(s.cost_per_eval, ".6f")],
        [
            "seconds / evaluation",
            f"{_fmt(s.seconds_per_eval, '.1f')} (p50 {_fmt(seconds['p50'], '.1f')}, "
            f"p95 {_fmt(seconds['p95'], '.1f')})",
        ],
    ]
    if s.detector_evaluations:
        rows.append(
            [
                "detector",
                f"{s.detector_evaluations} evaluations read, {s.detector_spans} spans flagged, "
                f"{s.detector_disagreements} claims where it and the verdict differ",
            ]
        )
    labels = figures["labels"]
    if s.confusion is not None and labels is not None:
        rows += [
            [
                "labelled rows with a score",
                f"{s.labelled} (+{s.unscored_labelled} without a score, left out)",
            ],
            [f"balanced accuracy (score < {s.threshold:g} = hallucinated)", _fmt(s.balanced_accuracy)],
            ["AUROC (low score = hallucinated)", _fmt(s.auroc)],
        ]
        best = labels["best"]
        if best is not None:
            ci = best["interval"]
            around = (
                ""
                if ci is None
                else f"; {ci['level']:.0%} bootstrap interval {ci['low']:.2f}-{ci['high']:.2f}"
            )
            rows.append(
                [
                    "pass mark with the best balanced accuracy",
                    f"{best['pass_mark']:.2f} (balanced accuracy {_fmt(best['balanced_accuracy'])}{around})",
                ]
            )
    out.table("faithtrace eval: summary", ["metric", "value"], rows)
    if s.confusion is not None:
        c = s.confusion
        out.table(
            f"confusion matrix at threshold {s.threshold:g}",
            ["label \\ predicted", "hallucinated (score < t)", "faithful (score >= t)"],
            [["hallucinated", str(c.tp), str(c.fn)], ["faithful", str(c.fp), str(c.tn)]],
        )


def deliver_results(
    out: Output,
    records: Sequence[Mapping[str, Any]],
    source: Source,
    threshold: float,
    deliver: Deliver,
    *,
    command: str,
) -> int:
    """Summary or JSON, the report, then the gate: 0, or 1 with one line saying what the gate missed."""
    figures = compute(records, source, threshold=threshold, gate=deliver.gate)
    if deliver.json:
        print(json.dumps(figures, ensure_ascii=False), file=sys.stdout, flush=True)
    else:
        print_summary(out, summarise(records, threshold), figures)
    if deliver.report is not None:
        from faithtrace.cli.report import write_report

        try:
            write_report(deliver.report, figures, records, max_answers=deliver.report_answers)
        except OSError as exc:
            out.error(f"faithtrace {command}: cannot write {deliver.report}: {exc.strerror or exc}")
            return 2
        out.line(f"report: {deliver.report.resolve()}")
    gate = figures["gate"]
    if gate is not None and not gate["passed"]:
        out.error(f"faithtrace {command}: gate failed: {gate['message']}")
        return 1
    return 0
