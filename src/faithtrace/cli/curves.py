"""ROC and precision-recall curves, a pass-mark sweep and its bootstrap interval, in plain Python.

Hallucinated is the positive class, and an answer is flagged when its score is under the pass mark: a low
score should rank the hallucinated answers first. Everything here reads the score alone (the answer's pass /
fail label also fails an answer for a contradicted claim; ``figures`` counts those apart).

The sweep runs over the pass marks 0.00, 0.01, ..., 1.00, the values a team would set. An answer with score
``s`` is flagged from the first grid mark above ``s`` on, so each answer is binned once and every mark's
confusion is a running sum: a bootstrap resample costs O(rows + marks), not O(rows x marks).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from faithtrace.cli.metrics import Confusion

# Pass marks 0.00 .. 1.00 in steps of 0.01 (in hundredths, so that no float sum drifts).
GRID_STEPS = 100
MARKS = tuple(round(k / GRID_STEPS, 2) for k in range(GRID_STEPS + 1))
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_LEVEL = 0.95


@dataclass(frozen=True)
class Curve:
    """Points of a curve, from the strictest cut (nothing flagged) to the loosest (everything flagged)."""

    x: list[float]
    y: list[float]
    # The score cut at each point: flagged = score <= cut (``None`` at the first point: nothing flagged).
    cuts: list[float | None]


def _cuts(scores: Sequence[float], positives: Sequence[bool]) -> list[tuple[float, int, int]]:
    """For each distinct score, lowest first: (score, positives with it, negatives with it)."""
    tally: dict[float, list[int]] = {}
    for score, positive in zip(scores, positives, strict=True):
        counts = tally.setdefault(score, [0, 0])
        counts[0 if positive else 1] += 1
    return [(s, c[0], c[1]) for s, c in sorted(tally.items())]


def roc_curve(scores: Sequence[float], positives: Sequence[bool]) -> Curve | None:
    """False-positive rate (x) against true-positive rate (y), flagging low scores first; tied scores move
    together. ``None`` when one class is missing."""
    n_pos = sum(positives)
    n_neg = len(positives) - n_pos
    if not n_pos or not n_neg:
        return None
    x, y = [0.0], [0.0]
    cuts: list[float | None] = [None]
    tp = fp = 0
    for score, pos, neg in _cuts(scores, positives):
        tp += pos
        fp += neg
        x.append(fp / n_neg)
        y.append(tp / n_pos)
        cuts.append(score)
    return Curve(x, y, cuts)


def pr_curve(scores: Sequence[float], positives: Sequence[bool]) -> Curve | None:
    """Recall (x) against precision (y) at each cut with something flagged. ``None`` without positives."""
    n_pos = sum(positives)
    if not n_pos:
        return None
    x: list[float] = []
    y: list[float] = []
    cuts: list[float | None] = []
    tp = flagged = 0
    for score, pos, neg in _cuts(scores, positives):
        tp += pos
        flagged += pos + neg
        x.append(tp / n_pos)
        y.append(tp / flagged)
        cuts.append(score)
    return Curve(x, y, cuts)


def trapezoid(curve: Curve) -> float:
    """The area under a curve's points (the ROC curve's is the AUROC, ties counted half)."""
    return sum(
        (x1 - x0) * (y0 + y1) / 2
        for x0, x1, y0, y1 in zip(curve.x, curve.x[1:], curve.y, curve.y[1:], strict=False)
    )


def average_precision(curve: Curve) -> float:
    """The area under the precision-recall steps: precision at each cut, weighted by the recall it adds
    (scikit-learn's ``average_precision_score``; no interpolation)."""
    area, previous = 0.0, 0.0
    for recall, precision in zip(curve.x, curve.y, strict=True):
        area += (recall - previous) * precision
        previous = recall
    return area


def rates_at(scores: Sequence[float], positives: Sequence[bool], mark: float) -> Confusion:
    """The confusion at one pass mark: flagged = score < mark."""
    confusion = Confusion()
    for score, positive in zip(scores, positives, strict=True):
        confusion.add(positive, score < mark)
    return confusion


def first_flagged_mark(score: float) -> int:
    """The index in ``MARKS`` of the lowest mark that flags ``score`` (``score < mark``); past the end when
    none does (a score of 1.0). Rounded first: 0.29 * 100 is 28.999..., and 0.29 < 0.29 is false."""
    return math.floor(round(score * GRID_STEPS, 6)) + 1


def _sweep_counts(bins: Sequence[int], positives: Sequence[bool]) -> list[Confusion]:
    size = len(MARKS)
    start_pos = [0] * (size + 1)
    start_neg = [0] * (size + 1)
    for b, positive in zip(bins, positives, strict=True):
        (start_pos if positive else start_neg)[min(b, size)] += 1
    n_pos, n_neg = sum(start_pos), sum(start_neg)
    out: list[Confusion] = []
    tp = fp = 0
    for k in range(size):
        tp += start_pos[k]
        fp += start_neg[k]
        out.append(Confusion(tp=tp, fn=n_pos - tp, fp=fp, tn=n_neg - fp))
    return out


def sweep(scores: Sequence[float], positives: Sequence[bool]) -> list[Confusion]:
    """The confusion at every mark of ``MARKS``."""
    return _sweep_counts([first_flagged_mark(s) for s in scores], positives)


def best_mark(rates: Sequence[Confusion]) -> int | None:
    """The index of the mark with the highest balanced accuracy: the middle of the first run of marks that
    reach it (they split the answers alike, and the middle leaves a margin on both sides). ``None`` when it
    is undefined (one class missing)."""
    values = [r.balanced_accuracy for r in rates]
    known = [v for v in values if v is not None]
    if not known:
        return None
    top = max(known)
    first = next(i for i, v in enumerate(values) if v is not None and math.isclose(v, top))
    last = first
    while (
        last + 1 < len(values) and values[last + 1] is not None and math.isclose(values[last + 1] or 0, top)
    ):
        last += 1
    return (first + last) // 2


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    level: float
    resamples: int  # resamples with both classes (the others have no balanced accuracy, and are left out)
    seed: int


def bootstrap_best_mark(
    scores: Sequence[float],
    positives: Sequence[bool],
    *,
    seed: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = BOOTSTRAP_LEVEL,
) -> Interval | None:
    """A percentile bootstrap interval of the best mark: rows resampled with replacement ``resamples`` times.

    Seeded, on its own ``random.Random``: the same rows and seed give the same interval, and the process's
    global random state is never touched.
    """
    rng = random.Random(seed)
    bins = [first_flagged_mark(s) for s in scores]
    n = len(bins)
    found: list[float] = []
    for _ in range(resamples):
        picks = rng.choices(range(n), k=n)
        best = best_mark(_sweep_counts([bins[i] for i in picks], [positives[i] for i in picks]))
        if best is not None:
            found.append(MARKS[best])
    if not found:
        return None
    found.sort()
    tail = (1 - level) / 2
    low = found[min(len(found) - 1, max(0, math.floor(tail * len(found))))]
    high = found[min(len(found) - 1, max(0, math.ceil((1 - tail) * len(found)) - 1))]
    return Interval(low, high, level, len(found), seed)
