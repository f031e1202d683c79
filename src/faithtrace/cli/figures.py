"""Every figure of an evaluation run, as one JSON-ready dict: what ``--json`` prints and the report shows.

One function computes them, so that the HTML report, the ``--json`` output and the gate cannot disagree. The
figures that the summary table also prints (mean score, balanced accuracy, AUROC, the confusion at the pass
mark) come from ``metrics.summarise``, the same code.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from faithtrace._version import __version__
from faithtrace.cli import curves
from faithtrace.cli.metrics import FAITHFUL, HALLUCINATED, Summary, summarise

HISTOGRAM_BINS = 20
# The report lists this many answers, worst first; its figures count them all. An answer takes about 5 KB
# with its claims and passages: thousands would make a file too large to attach to a CI run or open quickly.
DEFAULT_REPORT_ANSWERS = 200
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class Skip:
    """A line that was not scored or read, and why: counted and listed, never silently lost."""

    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True)
class Gate:
    """The CI gate: the run fails when the mean score is under ``fail_under`` or the share of answers
    labelled "fail" is over ``max_fail_rate``."""

    fail_under: float | None = None
    max_fail_rate: float | None = None

    @property
    def active(self) -> bool:
        return self.fail_under is not None or self.max_fail_rate is not None


@dataclass(frozen=True)
class Source:
    """Where the records came from: the file, its valid rows (None when only results were read), its
    skipped lines, and the valid rows that have no result yet (an interrupted run)."""

    file: str
    rows: int | None
    skipped: Sequence[Skip]
    not_scored: int = 0


def _percentile(values: Sequence[float], p: int) -> float | None:
    """The ``p``-th percentile, interpolated between the nearest ranks (numpy's default)."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def _run(records: Sequence[Mapping[str, Any]], s: Summary) -> dict[str, Any]:
    usage = [r.get("usage") or {} for r in records]
    seconds = sorted(float(r.get("duration_s") or 0.0) for r in records)
    settings: Counter[str] = Counter()
    for r in records:
        options = r.get("options")
        if not isinstance(options, Mapping):  # results written without them: what each result says
            options = {k: r.get(k) for k in ("threshold", "idk_policy")}
        judge = r.get("judge") if isinstance(r.get("judge"), Mapping) else {"model": r.get("judge_model")}
        settings[json.dumps({"judge": judge, "options": options}, sort_keys=True)] += 1
    return {
        "judge_models": dict(Counter(str(r.get("judge_model") or "none") for r in records).most_common()),
        "settings": [{**json.loads(k), "rows": n} for k, n in settings.most_common()],
        "evaluations": len(records),
        "outcomes": dict(sorted(s.outcomes.items())),
        "llm_calls": sum(int(u.get("llm_calls") or 0) for u in usage),
        "input_tokens": sum(int(u.get("input_tokens") or 0) for u in usage),
        "output_tokens": sum(int(u.get("output_tokens") or 0) for u in usage),
        "tokens_per_evaluation": s.tokens_per_eval,
        "cost_usd": None if s.cost_per_eval is None else s.cost_per_eval * len(records),
        "cost_per_evaluation_usd": s.cost_per_eval,
        "seconds": {
            "p50": _percentile(seconds, 50),
            "p95": _percentile(seconds, 95),
            "mean": s.seconds_per_eval,
            "total": sum(seconds),
        },
    }


def _bin(score: float) -> int:
    return min(HISTOGRAM_BINS - 1, int(round(score * HISTOGRAM_BINS, 6)))


def _scores(records: Sequence[Mapping[str, Any]], s: Summary) -> dict[str, Any]:
    hist = {name: [0] * HISTOGRAM_BINS for name in (FAITHFUL, HALLUCINATED, "unlabelled")}
    for r in records:
        if r.get("score") is not None:
            hist[r.get("label") or "unlabelled"][_bin(float(r["score"]))] += 1
    judged = s.passed + s.failed
    return {
        "scored": sum(r.get("score") is not None for r in records),
        "mean": s.mean_score,
        "mean_faithfulness": s.mean_faithfulness,
        "passed": s.passed,
        "failed": s.failed,
        "failed_for_contradiction": s.failed_for_contradiction,
        "fail_rate": s.failed / judged if judged else None,
        "histogram": {
            "edges": [round(i / HISTOGRAM_BINS, 4) for i in range(HISTOGRAM_BINS + 1)],
            **{k: v for k, v in hist.items() if any(v)},
        },
    }


def _curve(curve: curves.Curve | None, x: str, y: str) -> dict[str, Any] | None:
    return None if curve is None else {x: curve.x, y: curve.y, "cuts": curve.cuts}


def _labels(records: Sequence[Mapping[str, Any]], s: Summary, seed: int) -> dict[str, Any] | None:
    if s.confusion is None:
        return None
    scored = [r for r in records if r.get("label") in (FAITHFUL, HALLUCINATED) and r.get("score") is not None]
    scores = [float(r["score"]) for r in scored]
    positives = [r["label"] == HALLUCINATED for r in scored]
    c = s.confusion
    roc = curves.roc_curve(scores, positives)
    pr = curves.pr_curve(scores, positives)
    rates = curves.sweep(scores, positives)
    best = curves.best_mark(rates)
    interval = curves.bootstrap_best_mark(scores, positives, seed=seed) if best is not None else None
    return {
        "labelled": s.labelled,
        "unscored": s.unscored_labelled,
        "hallucinated": sum(positives),
        "faithful": len(positives) - sum(positives),
        "auroc": s.auroc,
        "average_precision": None if pr is None else curves.average_precision(pr),
        "at_pass_mark": {
            "pass_mark": s.threshold,
            **{k: getattr(c, k) for k in ("tp", "fp", "tn", "fn")},
            "precision": c.precision,
            "recall": c.recall,
            "balanced_accuracy": s.balanced_accuracy,
        },
        "roc": _curve(roc, "fpr", "tpr"),
        "pr": _curve(pr, "recall", "precision"),
        "sweep": {
            "pass_marks": list(curves.MARKS),
            "balanced_accuracy": [r.balanced_accuracy for r in rates],
            "precision": [r.precision for r in rates],
            "recall": [r.recall for r in rates],
            "flagged_rate": [r.flagged_rate for r in rates],
        },
        "best": None
        if best is None
        else {
            "pass_mark": curves.MARKS[best],
            **{k: getattr(rates[best], k) for k in ("tp", "fp", "tn", "fn")},
            "balanced_accuracy": rates[best].balanced_accuracy,
            "precision": rates[best].precision,
            "recall": rates[best].recall,
            "interval": None
            if interval is None
            else {
                "low": interval.low,
                "high": interval.high,
                "level": interval.level,
                "resamples": interval.resamples,
                "seed": interval.seed,
            },
        },
    }


def _verdicts(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """What the answer filters show: by the answers' own pass / fail labels (a contradicted claim fails an
    answer whatever its score)."""
    return {
        "failed": sum(r.get("passed") is False for r in records),
        "false_alarms": sum(r.get("passed") is False and r.get("label") == FAITHFUL for r in records),
        "misses": sum(r.get("passed") is True and r.get("label") == HALLUCINATED for r in records),
    }


def gate_result(gate: Gate, scores: Mapping[str, Any]) -> dict[str, Any] | None:
    """The gate's verdict and, when it is missed, one line saying why."""
    if not gate.active:
        return None
    missed: list[str] = []
    if gate.fail_under is not None:
        mean = scores["mean"]
        if mean is None:
            missed.append("no answer has a score")
        elif mean < gate.fail_under:
            missed.append(f"mean score {mean:.3f} is under --fail-under {gate.fail_under:g}")
    if gate.max_fail_rate is not None:
        rate = scores["fail_rate"]
        if rate is None:
            missed.append("no answer has a pass/fail label")
        elif rate > gate.max_fail_rate:
            missed.append(
                f"{scores['failed']} of {scores['passed'] + scores['failed']} answers failed "
                f"({rate:.1%}), over --max-fail-rate {gate.max_fail_rate:g}"
            )
    return {
        "fail_under": gate.fail_under,
        "max_fail_rate": gate.max_fail_rate,
        "passed": not missed,
        "message": "; ".join(dict.fromkeys(missed)) or None,
    }


def compute(
    records: Sequence[Mapping[str, Any]],
    source: Source,
    *,
    threshold: float,
    gate: Gate | None = None,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """All figures of the run; ``records`` are result records (as the output JSONL holds them), one a row."""
    s = summarise(records, threshold)
    scores = _scores(records, s)
    return {
        "faithtrace": __version__,
        "pass_mark": threshold,
        "input": {
            "file": source.file,
            "rows": source.rows,
            "skipped": [{"line": k.line, "reason": k.reason} for k in source.skipped],
            "not_scored": source.not_scored,
        },
        "run": _run(records, s),
        "scores": scores,
        "labels": _labels(records, s, seed),
        "verdicts": _verdicts(records),
        "detector": {
            "evaluations": s.detector_evaluations,
            "spans": s.detector_spans,
            "disagreements": s.detector_disagreements,
        },
        "gate": gate_result(gate or Gate(), scores),
    }
