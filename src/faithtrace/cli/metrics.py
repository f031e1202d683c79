"""Summary statistics for ``faithtrace eval``: computed here, in plain Python (no numpy/sklearn needed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HALLUCINATED = "hallucinated"
FAITHFUL = "faithful"
LABELS = (FAITHFUL, HALLUCINATED)


def auroc(scores: Sequence[float], positives: Sequence[bool]) -> float | None:
    """Area under the ROC curve of ``scores`` ranking the positives first (Mann-Whitney U, ties averaged).

    ``None`` when one class is missing: the area is undefined then.
    """
    pairs = sorted(zip(scores, positives, strict=True), key=lambda p: p[0])
    n_pos = sum(positives)
    n_neg = len(positives) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum = 0.0
    i = 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        mean_rank = (i + j) / 2 + 1  # ranks are 1-based; tied values share their average rank
        rank_sum += mean_rank * sum(1 for k in range(i, j + 1) if pairs[k][1])
        i = j + 1
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@dataclass
class Confusion:
    """Hallucinated is the positive class: the detector's job is to flag it."""

    tp: int = 0  # hallucinated, flagged
    fn: int = 0  # hallucinated, passed
    fp: int = 0  # faithful, flagged
    tn: int = 0  # faithful, passed

    def add(self, hallucinated: bool, flagged: bool) -> None:
        if hallucinated:
            self.tp += flagged
            self.fn += not flagged
        else:
            self.fp += flagged
            self.tn += not flagged

    @property
    def balanced_accuracy(self) -> float | None:
        if not (self.tp + self.fn) or not (self.fp + self.tn):
            return None
        return (self.tp / (self.tp + self.fn) + self.tn / (self.tn + self.fp)) / 2

    @property
    def precision(self) -> float | None:
        """The share of the flagged answers that are hallucinated."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        """The share of the hallucinated answers that are flagged."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def flagged_rate(self) -> float | None:
        total = self.tp + self.fp + self.tn + self.fn
        return (self.tp + self.fp) / total if total else None


@dataclass
class Summary:
    rows: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    passed: int = 0
    failed: int = 0
    failed_for_contradiction: int = 0  # failed with a score at or above the threshold: a contradicted claim
    mean_score: float | None = None
    mean_faithfulness: float | None = None
    tokens_per_eval: float | None = None
    calls_per_eval: float | None = None
    cost_per_eval: float | None = None  # None when any cost is unknown (e.g. the local judge)
    seconds_per_eval: float | None = None
    labelled: int = 0  # labelled rows that have a score
    unscored_labelled: int = 0  # labelled rows without a score (no claims, errors): left out of the metrics
    balanced_accuracy: float | None = None
    auroc: float | None = None
    confusion: Confusion | None = None
    threshold: float = 0.7
    # Where a detector ran: evaluations it read, spans it flagged, and claims where it and the verdict that
    # counts differ on "supported or not" (it decided none of those: it was beside a judge).
    detector_evaluations: int = 0
    detector_spans: int = 0
    detector_disagreements: int = 0


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(records: Sequence[Mapping[str, Any]], threshold: float) -> Summary:
    """Aggregate result records (as written to the output JSONL) into the table ``faithtrace eval`` prints."""
    s = Summary(rows=len(records), threshold=threshold)
    s.outcomes = Counter(str(r.get("outcome")) for r in records)
    scores = [float(r["score"]) for r in records if r.get("score") is not None]
    s.passed = sum(r.get("passed") is True for r in records)
    failed = [r for r in records if r.get("passed") is False]
    s.failed = len(failed)
    s.failed_for_contradiction = sum(float(r.get("score") or 0.0) >= threshold for r in failed)
    s.mean_score = _mean(scores)
    s.mean_faithfulness = _mean(
        [float(r["faithfulness"]) for r in records if r.get("faithfulness") is not None]
    )
    usage = [r.get("usage") or {} for r in records]
    # A count recorded as null (results not written by eval) is no tokens, not an error.
    s.tokens_per_eval = _mean(
        [float((u.get("input_tokens") or 0) + (u.get("output_tokens") or 0)) for u in usage]
    )
    s.calls_per_eval = _mean([float(u.get("llm_calls") or 0) for u in usage])
    costs = [u.get("cost_usd") for u in usage]
    known = [float(c) for c in costs if c is not None]
    s.cost_per_eval = _mean(known) if costs and len(known) == len(costs) else None
    s.seconds_per_eval = _mean([float(r.get("duration_s") or 0.0) for r in records])

    labelled = [r for r in records if r.get("label") in LABELS]
    scored = [r for r in labelled if r.get("score") is not None]
    s.labelled = len(scored)
    s.unscored_labelled = len(labelled) - len(scored)
    if scored:
        confusion = Confusion()
        for r in scored:
            confusion.add(r["label"] == HALLUCINATED, float(r["score"]) < threshold)
        s.confusion = confusion
        s.balanced_accuracy = confusion.balanced_accuracy
        # A low score should rank the hallucinated answers first.
        s.auroc = auroc([-float(r["score"]) for r in scored], [r["label"] == HALLUCINATED for r in scored])
    ran = [
        r["detector"]
        for r in records
        if isinstance(r.get("detector"), dict) and not r["detector"].get("error")
    ]
    s.detector_evaluations = len(ran)
    s.detector_spans = sum(len(d.get("spans") or []) for d in ran)
    s.detector_disagreements = sum(
        (
            c.get("detector_verdict") is not None
            and (c["detector_verdict"] == "yes") != (c.get("verdict") == "yes")
        )
        for r in records
        for c in r.get("claims") or []
    )
    return s
