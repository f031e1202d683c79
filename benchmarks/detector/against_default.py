"""Does a trained detector beat today's default judge? Its int8 figures beside the default's and the length
rule's.

``training/train.py finish --scores FILE`` writes each evaluated answer's highest token probability from the
shipped int8 file (validation, held-out, dev and the held-out synthetic set). This script reads that file and
the model's ``detector.json`` (its answer threshold, chosen on validation), and per part prints:

- the detector: AUROC of the highest token probability, balanced accuracy at the validation threshold;
- the length rule (hallucinated iff more than 130 words; AUROC of the word count) on the same answers;
- today's default (``benchmarks/judgment/accuracy.py`` results given with ``--default PART=FILE``) on the rows
  it scored, with the detector and the length rule on exactly those rows and paired bootstrap intervals of the
  differences.

The gate (``--gate-part``, default ``heldout``): the detector's AUROC at least ``--gate-margin`` (0.05) above
the default's on the same rows. The held-out part never chose anything; dev is where the default was tuned, so
it is reported beside and not gated on.

    python benchmarks/detector/against_default.py --model build/detector-cpu --scores scores.jsonl \\
        --rows /work/shared/data/ragtruth_qa_train.jsonl \\
        --default heldout=results/accuracy-heldout.json --default dev=benchmarks/results/accuracy.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common
from benchmarks._shared import metrics
from benchmarks.judgment import accuracy

LENGTH_RULE_WORDS = 130
PARTS = ("validation", "heldout", "dev", "heldout_synthetic")


def _records(rows: list[dict[str, Any]], threshold: float) -> list[dict[str, Any]]:
    return [
        {"risk": r["risk"], "predicted": r["risk"] >= threshold, "hallucinated": r["hallucinated"]}
        for r in rows
    ]


def _length(rows: list[dict[str, Any]], words: dict[str, int]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        n = words[r["id"]]
        out.append({"risk": float(n), "predicted": n > LENGTH_RULE_WORDS, "hallucinated": r["hallucinated"]})
    return out


def _figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    labels = [bool(r["hallucinated"]) for r in records]
    auc = metrics.auroc(labels, [float(r["risk"]) for r in records])
    ba = metrics.balanced_accuracy(labels, [bool(r["predicted"]) for r in records])
    return {
        "rows": len(records),
        "hallucinated": sum(labels),
        "auroc": None if auc is None else round(auc, 4),
        "balanced_accuracy": None if ba is None else round(ba, 4),
    }


def _default_records(
    path: Path, labels: dict[str, str]
) -> tuple[list[str], list[dict[str, Any]], dict[str, Any]]:
    """Today's default's rows from an accuracy.py result and its per-row file: the ids it finished, in order,
    their records (risk, decision) as accuracy.py computes them, and how that run was made."""
    doc = json.loads(path.read_text())
    rows_file = path.with_name(path.stem + "_rows.jsonl")
    if not rows_file.exists():
        raise SystemExit(f"{rows_file} is missing: the default's per-row decisions are needed")
    kept: dict[str, dict[str, Any]] = {}
    for line in rows_file.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if rec.get("system") == "faithtrace":
                kept[rec["id"]] = rec  # the per-row file is appended to: the last record of a row counts
    ids = [i for i in doc["row_ids"] if i in kept]
    run = {k: doc.get(k) for k in ("command", "date", "machine", "judge", "subset")}
    run["decision_rule"] = doc["systems"]["faithtrace"].get("decision_rule")
    return ids, [accuracy.faithtrace_record(kept[i], labels[i]) for i in ids], run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="the model folder (its detector.json)")
    p.add_argument("--scores", type=Path, required=True, help="finish --scores JSONL of that model")
    p.add_argument("--rows", type=Path, required=True, help="the RAGTruth-QA file the parts came from")
    p.add_argument(
        "--default",
        action="append",
        default=[],
        metavar="PART=FILE",
        help="an accuracy.py result of today's default on rows of PART (repeatable)",
    )
    p.add_argument("--gate-part", default="heldout")
    p.add_argument("--gate-margin", type=float, default=0.05)
    p.add_argument("--out", type=Path, default=_common.RESULTS_DIR / "detector-against-default.json")
    args = p.parse_args(argv)

    meta = json.loads((args.model / "detector.json").read_text())
    threshold = float(meta["figures"]["validation"]["validation_threshold"])
    words, labels = {}, {}
    for line in args.rows.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            words[row["id"]] = len(row["answer"].split())
            labels[row["id"]] = row["label"]
    scored = [json.loads(line) for line in args.scores.read_text().splitlines() if line.strip()]
    by_part: dict[str, list[dict[str, Any]]] = {}
    for r in scored:
        by_part.setdefault(r["part"], []).append(r)

    parts: dict[str, Any] = {}
    table_rows = []
    for part in PARTS:
        rows = by_part.get(part, [])
        if not rows:
            continue
        entry: dict[str, Any] = {"detector": _figures(_records(rows, threshold))}
        if all(r["id"] in words for r in rows):
            entry["length rule"] = _figures(_length(rows, words))
        parts[part] = entry
        table_rows.append(
            [
                part,
                len(rows),
                entry["detector"]["auroc"],
                entry["detector"]["balanced_accuracy"],
                entry.get("length rule", {}).get("auroc"),
                entry.get("length rule", {}).get("balanced_accuracy"),
            ]
        )
    print(f"detector {args.model} (threshold {threshold}, chosen on validation); int8 file, every answer")
    headers = ["part", "answers", "detector AUROC", "detector BA", "length AUROC", "length BA"]
    print(_common.table(headers, table_rows))

    gate: dict[str, Any] = {"part": args.gate_part, "margin": args.gate_margin, "passed": None}
    paired_rows = []
    for spec in args.default:
        part, _, file = spec.partition("=")
        ids, default_recs, default_run = _default_records(Path(file), labels)
        by_id = {r["id"]: r for r in by_part.get(part, [])}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise SystemExit(
                f"{len(missing)} of the default's {part} rows have no detector score: {missing[:3]}"
            )
        mine = _records([by_id[i] for i in ids], threshold)
        theirs = [
            {"risk": float(r["risk"]), "predicted": bool(r["predicted"]), "hallucinated": r["hallucinated"]}
            for r in default_recs
        ]
        length = _length([by_id[i] for i in ids], words)
        truth = [bool(by_id[i]["hallucinated"]) for i in ids]
        same = {
            "rows": len(ids),
            "default_run": default_run,
            "detector": _figures(mine),
            "default": _figures(theirs),
            "length rule": _figures(length),
            "detector_vs_default": metrics.paired_bootstrap(truth, mine, theirs),
            "detector_vs_length_rule": metrics.paired_bootstrap(truth, mine, length),
            "default_file": file,
            # Each row's [id, hallucinated, detector risk, default risk, default decision]: the result stands
            # on its own when the default's files are not kept beside it.
            "per_row": [
                [i, t, round(float(m["risk"]), 6), round(float(d["risk"]), 6), bool(d["predicted"])]
                for i, t, m, d in zip(ids, truth, mine, theirs, strict=True)
            ],
        }
        parts.setdefault(part, {})["same_rows_as_default"] = same
        diff = round(same["detector"]["auroc"] - same["default"]["auroc"], 4)
        paired_rows.append(
            [
                part,
                len(ids),
                same["detector"]["auroc"],
                same["default"]["auroc"],
                same["length rule"]["auroc"],
                diff,
                same["detector_vs_default"]["auroc_diff_95"],
                same["detector"]["balanced_accuracy"],
                same["default"]["balanced_accuracy"],
                same["length rule"]["balanced_accuracy"],
            ]
        )
        if part == args.gate_part:
            gate.update(auroc_diff=diff, passed=diff >= args.gate_margin)
    if paired_rows:
        print("\non the rows today's default scored (paired bootstrap 95 % interval of detector - default):")
        headers = [
            "part",
            "rows",
            "detector AUROC",
            "default AUROC",
            "length AUROC",
            "diff",
            "95 %",
            "detector BA",
            "default BA",
            "length BA",
        ]
        print(_common.table(headers, paired_rows))
    print(f"\ngate ({args.gate_part}: detector AUROC >= default + {args.gate_margin}): {gate['passed']}")
    data = {
        "model": str(args.model),
        "threshold": threshold,
        "training": {
            k: meta["training"].get(k)
            for k in (
                "freeze_below",
                "trained_parameters",
                "best_epoch",
                "epochs",
                "train_seconds",
                "history",
            )
        },
        "parts": parts,
        "gate": gate,
    }
    print(f"-> {_common.write_results('detector-against-default', data, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
