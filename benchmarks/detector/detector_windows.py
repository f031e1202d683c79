"""How the detector's windows should combine, measured: first window only, min, or max over windows.

A context longer than the model is read in windows (``faithtrace.judge.detector.windows``); each answer token
gets one P(not supported) per window. Per row of the dev file this script runs every window once and scores
the answer three ways from the same probabilities:

- ``first``: the first window only (the context cut to fit, as a model without windows reads it);
- ``min``: each token's lowest probability over the windows (supported if some window supports it);
- ``max``: its highest (LettuceDetect's combination).

It prints, per combination, answer-level AUROC (risk = the highest token probability) and balanced accuracy
(hallucinated iff some token reaches 0.5) against the labels, and token-level AUROC against the human spans
(a token is hallucinated when its characters overlap a labelled span). ``--window-tokens`` reads with shorter
windows than the model's own length, so that more rows need several windows.

    python benchmarks/detector/detector_windows.py --model DIR [--window-tokens 256] [--limit 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common
from benchmarks._shared import metrics

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared/data/ragtruth_qa_dev.jsonl"
COMBINATIONS = ("first", "min", "max")


def _token_labels(row: dict[str, Any], offsets: list[tuple[int, int]]) -> list[bool]:
    spans = [(s["start"], s["end"]) for s in row.get("spans") or []]
    return [any(a < e and b > s for s, e in spans) for a, b in offsets]


def score_row(model: Any, row: dict[str, Any]) -> dict[str, Any]:
    """Per combination: every answer token's probability; and the tokens' human labels."""
    from faithtrace.judge.detector import windows

    answer = row["answer"].strip()
    inputs = windows.plan(model, row["question"], row["contexts"], answer)
    per_part: dict[int, list[np.ndarray]] = {}
    offsets: dict[int, list[tuple[int, int]]] = {}
    for item in inputs:
        probs = model.hallucination_probabilities(item.ids)[item.answer_positions]
        per_part.setdefault(item.part, []).append(probs)
        offsets[item.part] = item.offsets
    combined: dict[str, list[float]] = {c: [] for c in COMBINATIONS}
    for part in sorted(per_part):
        stacked = np.vstack(per_part[part])
        combined["first"] += stacked[0].tolist()
        combined["min"] += stacked.min(axis=0).tolist()
        combined["max"] += stacked.max(axis=0).tolist()
    all_offsets = [o for part in sorted(offsets) for o in offsets[part]]
    return {
        "id": row["id"],
        "hallucinated": row["label"] == "hallucinated",
        "windows": len(inputs) // max(1, len(per_part)),
        "probs": combined,
        "token_labels": _token_labels(row, all_offsets),
    }


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    truth = [r["hallucinated"] for r in records]
    several = [r for r in records if r["windows"] > 1]
    out = []
    for c in COMBINATIONS:
        risk = [max(r["probs"][c], default=0.0) for r in records]
        tokens = [p for r in records for p in r["probs"][c]]
        labels = [t for r in records for t in r["token_labels"]]
        sev_truth = [r["hallucinated"] for r in several]
        sev_risk = [max(r["probs"][c], default=0.0) for r in several]
        sev_tokens = [p for r in several for p in r["probs"][c]]
        sev_labels = [t for r in several for t in r["token_labels"]]
        out.append(
            {
                "combination": c,
                "rows": len(records),
                "answer_auroc": metrics.auroc(truth, risk),
                "balanced_accuracy": metrics.balanced_accuracy(truth, [x >= 0.5 for x in risk]),
                "token_auroc": metrics.auroc(labels, tokens),
                "rows_with_several_windows": len(several),
                "answer_auroc_several_windows": metrics.auroc(sev_truth, sev_risk),
                "token_auroc_several_windows": metrics.auroc(sev_labels, sev_tokens),
            }
        )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a detector model directory")
    p.add_argument("--data", default=str(DEFAULT_DATA), help=f"JSONL rows (default {DEFAULT_DATA})")
    p.add_argument("--window-tokens", type=int, help="read with windows this long (at most the model's)")
    p.add_argument("--limit", type=int, default=0, help="only the first N rows (0: all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="JSON output (default results/detector_windows.json)")
    args = p.parse_args()

    from faithtrace.judge.detector import model as detector_model

    model = detector_model.load(args.model, threads=args.threads)
    if args.window_tokens:
        if args.window_tokens > model.max_length:
            print(f"--window-tokens exceeds the model's {model.max_length}", file=sys.stderr)
            return 2
        model = dataclasses.replace(model, max_length=args.window_tokens)
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    if args.limit:
        rows = rows[: args.limit]
    t0 = time.perf_counter()
    records = [score_row(model, r) for r in rows]
    elapsed = time.perf_counter() - t0
    summary = summarise(records)
    name = model.name + (" (TINY test model: figures not meaningful)" if model.metadata.get("tiny") else "")
    print(f"\n{name}, {model.max_length}-token windows, {len(rows)} rows of {Path(args.data).name}\n")
    headers = ["combination", "rows", "answer AUROC", "bal.acc@0.5", "token AUROC"]
    headers += [">1 window", "answer AUROC there", "token AUROC there"]
    keys = ["combination", "rows", "answer_auroc", "balanced_accuracy", "token_auroc"]
    keys += ["rows_with_several_windows", "answer_auroc_several_windows", "token_auroc_several_windows"]
    print(_common.table(headers, [[s[k] for k in keys] for s in summary]))
    print(f"\n{elapsed:.0f} s for {sum(r['windows'] for r in records)} windows")
    out = args.out or _common.RESULTS_DIR / "detector_windows.json"
    doc = {"model": name, "window_tokens": model.max_length, "data": args.data, "summary": summary}
    print(f"wrote {_common.write_results('detector_windows', doc, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
