"""Training data for the detector: RAGTruth-QA rows → examples, grouped splits, token labels.

Pure Python on purpose (no torch, no tokenizer library): the test suite checks these rules without the
training environment. An :class:`Example` is what the model is trained on: the first segment built by
faithtrace's own :func:`~faithtrace.judge.detector.inputs.context_segment` (so training and the runtime read
the same text), the answer, and the answer's hallucinated character spans.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._contract import inputs, metrics

context_segment = inputs.context_segment
HALLUCINATED_LABEL: int = inputs.HALLUCINATED_LABEL
# faithtrace eval's own: the recipe's figures and the CLI's are the same computation.
auroc = metrics.auroc

__all__ = [
    "IGNORE",
    "Example",
    "Splits",
    "auroc",
    "examples_from_rows",
    "load_rows",
    "main",
    "split_rows",
    "token_labels",
]

# The label a token gets when the loss must not see it (the first segment, special tokens, padding): the value
# torch's cross-entropy ignores by default.
IGNORE = -100
FAITHFUL_LABEL = 0

_REQUIRED = ("id", "source_id", "question", "contexts", "answer", "spans")


@dataclass(frozen=True)
class Example:
    """One training or evaluation input and its answer-side labels."""

    id: str
    source_id: str
    context: str
    answer: str
    # Half-open character ranges of ``answer`` that are not supported by ``context``.
    spans: tuple[tuple[int, int], ...]
    # "ragtruth", or "synthetic:<kind>" for the generated examples (see ``synth``).
    origin: str = "ragtruth"

    @property
    def hallucinated(self) -> bool:
        return bool(self.spans)


@dataclass
class Splits:
    """Rows divided by ``source_id`` group, so no question's passages are both trained on and evaluated."""

    train: list[dict[str, Any]] = field(default_factory=list)
    validation: list[dict[str, Any]] = field(default_factory=list)
    heldout: list[dict[str, Any]] = field(default_factory=list)
    dev: list[dict[str, Any]] = field(default_factory=list)
    # Other models' answers to a dev question: trained on, they would show the model the dev passages.
    dev_siblings: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        def part(rows: list[dict[str, Any]]) -> dict[str, int]:
            return {
                "answers": len(rows),
                "hallucinated": sum(1 for r in rows if r["spans"]),
                "questions": len({r["source_id"] for r in rows}),
            }

        return {
            "train": part(self.train),
            "validation": part(self.validation),
            "heldout": part(self.heldout),
            "dev": part(self.dev),
            "dev_siblings_excluded": len(self.dev_siblings),
            "skipped": dict(self.skipped),
        }


def _bad_row(row: Any) -> str | None:
    """Why a row cannot be used, or None: a bad row is counted and skipped, never guessed at."""
    if not isinstance(row, dict):
        return "not_an_object"
    for key in _REQUIRED:
        if key not in row:
            return f"missing_{key}"
    if not isinstance(row["answer"], str) or not row["answer"].strip():
        return "empty_answer"
    if not isinstance(row["contexts"], list) or not all(isinstance(c, str) for c in row["contexts"]):
        return "bad_contexts"
    if row.get("split", "train") != "train":
        return "not_train_split"
    for span in row["spans"]:
        start, end = span.get("start"), span.get("end")
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(row["answer"])):
            return "bad_span"
    return None


def load_rows(path: Path, skipped: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The usable rows of a RAGTruth-QA JSONL file (``.gz`` too); ``skipped`` counts the rest by reason."""
    counts = skipped if skipped is not None else {}
    opener = gzip.open if path.suffix == ".gz" else open
    rows: list[dict[str, Any]] = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                counts["bad_json"] = counts.get("bad_json", 0) + 1
                continue
            reason = _bad_row(row)
            if reason is not None:
                counts[reason] = counts.get(reason, 0) + 1
                continue
            row["source_id"] = str(row["source_id"])
            rows.append(row)
    return rows


def split_rows(
    rows: Sequence[dict[str, Any]],
    *,
    validation_fraction: float = 0.1,
    heldout_fraction: float = 0.1,
    seed: int = 13,
) -> Splits:
    """Divide rows into train / validation / held-out by ``source_id`` group; dev rows never reach training.

    The ``in_dev_set`` rows form ``dev``; the other answers to those questions are set aside
    (``dev_siblings``). The remaining groups are shuffled with ``seed`` and the first ``heldout_fraction`` of
    them (by group count) become the held-out part, the next ``validation_fraction`` the validation part, the
    rest training.
    """
    if not (
        0 <= validation_fraction < 1
        and 0 <= heldout_fraction < 1
        and validation_fraction + heldout_fraction < 1
    ):
        raise ValueError("validation_fraction + heldout_fraction must lie in [0, 1)")
    splits = Splits()
    dev_groups = {r["source_id"] for r in rows if r.get("in_dev_set")}
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("in_dev_set"):
            splits.dev.append(row)
        elif row["source_id"] in dev_groups:
            splits.dev_siblings.append(row)
        else:
            groups[row["source_id"]].append(row)
    order = sorted(groups)
    random.Random(f"split:{seed}").shuffle(order)
    n_heldout = round(len(order) * heldout_fraction)
    n_validation = round(len(order) * validation_fraction)
    for i, key in enumerate(order):
        target = (
            splits.heldout
            if i < n_heldout
            else splits.validation
            if i < n_heldout + n_validation
            else splits.train
        )
        target.extend(groups[key])
    return splits


def examples_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Example]:
    """One :class:`Example` per row: every labelled span counts as unsupported, whatever its RAGTruth type.

    "Baseless" spans that happen to be true (``implicit_true``) stay labelled: the detector judges support by
    the passages, not truth in the world.
    """
    return [
        Example(
            id=str(row["id"]),
            source_id=str(row["source_id"]),
            context=context_segment(row["question"], row["contexts"]),
            answer=row["answer"],
            spans=tuple(sorted((int(s["start"]), int(s["end"])) for s in row["spans"])),
        )
        for row in rows
    ]


def token_labels(
    offsets: Sequence[tuple[int, int]],
    sequence_ids: Sequence[int | None],
    spans: Sequence[tuple[int, int]],
) -> list[int]:
    """Per-token labels for a tokenizer pair encoding, LettuceDetect-style.

    ``offsets`` are each token's character range within its own segment and ``sequence_ids`` say which segment
    (0 the context, 1 the answer, None a special token), as a fast tokenizer reports them. Context and special
    tokens, and empty answer tokens, are :data:`IGNORE`; an answer token is hallucinated if its characters
    overlap any span, faithful otherwise.
    """
    if len(offsets) != len(sequence_ids):
        raise ValueError("offsets and sequence_ids differ in length")
    labels: list[int] = []
    for (start, end), seq in zip(offsets, sequence_ids, strict=True):
        if seq != 1 or end <= start:
            labels.append(IGNORE)
        elif any(start < s_end and end > s_start for s_start, s_end in spans):
            labels.append(HALLUCINATED_LABEL)
        else:
            labels.append(FAITHFUL_LABEL)
    return labels


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m training.prep ids --part heldout``: the row ids of one part, as
    ``benchmarks/judgment/accuracy.py --ids-from`` reads them, so that a judge is scored on exactly the
    answers the detector was evaluated on."""
    p = argparse.ArgumentParser(description="The row ids of one part of the detector's splits (JSON).")
    p.add_argument("action", choices=("ids",))
    p.add_argument("--data", type=Path, required=True, help="the RAGTruth-QA train file")
    p.add_argument("--part", choices=("train", "validation", "heldout", "dev"), default="heldout")
    p.add_argument("--validation-fraction", type=float, default=0.1)
    p.add_argument("--heldout-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--out", type=Path, help="default: stdout")
    args = p.parse_args(argv)
    splits = split_rows(
        load_rows(args.data),
        validation_fraction=args.validation_fraction,
        heldout_fraction=args.heldout_fraction,
        seed=args.seed,
    )
    rows: list[dict[str, Any]] = getattr(splits, args.part)
    doc = {
        "subset": f"the {args.part} part of the detector's splits: {len(rows)} answers, "
        f"{sum(1 for r in rows if r['spans'])} hallucinated",
        "note": f"python -m training.prep ids --data {args.data.name} --part {args.part} --seed {args.seed} "
        f"--validation-fraction {args.validation_fraction} --heldout-fraction {args.heldout_fraction}",
        "row_ids": [str(r["id"]) for r in rows],
    }
    text = json.dumps(doc, indent=1) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
