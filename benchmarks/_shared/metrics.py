"""Agreement with human labels, computed without numpy/sklearn (the project venv need not have them)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any


def auroc(labels: Sequence[bool], scores: Sequence[float]) -> float | None:
    """Probability that a random positive outranks a random negative (ties count half). None if one class."""
    pos = [s for y, s in zip(labels, scores, strict=True) if y]
    neg = [s for y, s in zip(labels, scores, strict=True) if not y]
    if not pos or not neg:
        return None
    wins = 0.0
    for p in pos:
        for n in neg:
            wins += 1.0 if p > n else 0.5 if p == n else 0.0
    return wins / (len(pos) * len(neg))


def balanced_accuracy(labels: Sequence[bool], predicted: Sequence[bool]) -> float | None:
    tp = sum(1 for y, p in zip(labels, predicted, strict=True) if y and p)
    fn = sum(1 for y, p in zip(labels, predicted, strict=True) if y and not p)
    tn = sum(1 for y, p in zip(labels, predicted, strict=True) if not y and not p)
    fp = sum(1 for y, p in zip(labels, predicted, strict=True) if not y and p)
    if tp + fn == 0 or tn + fp == 0:
        return None
    return (tp / (tp + fn) + tn / (tn + fp)) / 2


def confusion(labels: Sequence[bool], predicted: Sequence[bool]) -> dict[str, int]:
    pairs = list(zip(labels, predicted, strict=True))
    return {
        "tp": sum(1 for y, p in pairs if y and p),
        "fn": sum(1 for y, p in pairs if y and not p),
        "tn": sum(1 for y, p in pairs if not y and not p),
        "fp": sum(1 for y, p in pairs if not y and p),
    }


def summarise(records: list[dict[str, Any]], threshold_note: str) -> dict[str, Any]:
    """``records``: one per row with ``hallucinated`` (label), ``risk`` (higher = more likely hallucinated),
    ``predicted`` (bool), ``invalid`` (bool) and usage fields."""
    labels = [bool(r["hallucinated"]) for r in records]
    n = len(records)

    def mean(key: str) -> float | None:
        vals = [r[key] for r in records if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    return {
        "rows": n,
        "balanced_accuracy": balanced_accuracy(labels, [bool(r["predicted"]) for r in records]),
        "auroc": auroc(labels, [float(r["risk"]) for r in records]),
        "confusion": confusion(labels, [bool(r["predicted"]) for r in records]),
        "invalid_rate": (sum(1 for r in records if r.get("invalid")) / n) if n else None,
        "llm_calls_per_eval": mean("llm_calls"),
        "input_tokens_per_eval": mean("input_tokens"),
        "output_tokens_per_eval": mean("output_tokens"),
        "seconds_per_eval": mean("seconds"),
        "decision_rule": threshold_note,
        # Each row's [risk, hallucinated], in the records' order: what a ROC curve is drawn from.
        "per_row": [[float(r["risk"]), bool(r["hallucinated"])] for r in records],
    }


def roc_points(labels: Sequence[bool], scores: Sequence[float]) -> list[tuple[float, float]]:
    """The ROC curve's corners, (false positive rate, true positive rate) from (0, 0) to (1, 1).

    One corner per distinct score, highest first, so tied rows make one diagonal step: the area under these
    points (trapezoids) is exactly ``auroc`` with its ties counted half.
    """
    pos = sum(1 for y in labels if y)
    neg = len(labels) - pos
    if not pos or not neg:
        return []
    points = [(0.0, 0.0)]
    tp = fp = 0
    pairs = sorted(zip(scores, labels, strict=True), key=lambda sy: -sy[0])
    for i, (score, label) in enumerate(pairs):
        tp += bool(label)
        fp += not label
        if i + 1 == len(pairs) or pairs[i + 1][0] != score:
            points.append((fp / neg, tp / pos))
    return points


def area(points: Sequence[tuple[float, float]]) -> float:
    """The area under a curve of (x, y) corners joined by straight lines."""
    return sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in itertools.pairwise(points))


def paired_bootstrap(
    labels: Sequence[bool],
    a: Sequence[dict[str, Any]],
    b: Sequence[dict[str, Any]],
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """95 % intervals of (a − b) in AUROC and balanced accuracy, resampling the same rows for both systems.

    ``a`` and ``b``: records in the same row order, with ``risk`` and ``predicted``. On a few dozen rows a
    gap of 0.05 is often noise; the interval says whether it is.
    """
    rng = random.Random(seed)
    n = len(labels)
    d_auc: list[float] = []
    d_ba: list[float] = []
    for _ in range(resamples):
        pick = [rng.randrange(n) for _ in range(n)]
        ys = [labels[i] for i in pick]
        auc_a = auroc(ys, [float(a[i]["risk"]) for i in pick])
        auc_b = auroc(ys, [float(b[i]["risk"]) for i in pick])
        ba_a = balanced_accuracy(ys, [bool(a[i]["predicted"]) for i in pick])
        ba_b = balanced_accuracy(ys, [bool(b[i]["predicted"]) for i in pick])
        if None in (auc_a, auc_b, ba_a, ba_b):
            continue  # a resample with one class only
        d_auc.append(auc_a - auc_b)  # type: ignore[operator]
        d_ba.append(ba_a - ba_b)  # type: ignore[operator]

    def interval(values: list[float]) -> list[float]:
        values.sort()
        return [round(values[int(0.025 * len(values))], 3), round(values[int(0.975 * len(values)) - 1], 3)]

    return {
        "auroc_diff_95": interval(d_auc),
        "balanced_accuracy_diff_95": interval(d_ba),
        "resamples": len(d_auc),
    }
