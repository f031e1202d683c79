"""Per-evaluation latency and peak memory of the detector alone, against the answer-length rule.

Each system runs in its own fresh interpreter (so that its peak RSS is its own): the length rule (word count,
no model), then ``faithtrace.evaluate`` with ``verdict_source="detector"`` on the same dev rows, the whole
pipeline included (claims, windows, spans, verdicts; no LLM). Printed: p50 / p95 / max seconds per
evaluation, model inputs (windows) per evaluation, the first evaluation's time (model load included) and
peak RSS. ``--model`` may be an untrained export (``_untrained_detector.py``): timing needs no training.

    python benchmarks/detector/detector_latency.py --model DIR [--limit 40] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared/data/ragtruth_qa_dev.jsonl"
LENGTH_RULE_WORDS = 130


def _rows(data: str, limit: int) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in Path(data).read_text().splitlines() if line.strip()]
    return rows[:limit] if limit else rows


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(system: str, args: argparse.Namespace) -> dict[str, Any]:
    """In this interpreter: time ``system`` on the rows; returns the raw figures."""
    rows = _rows(args.data, args.limit)
    seconds: list[float] = []
    windows: list[int] = []
    name = "length rule"
    if system == "length":
        for row in rows:
            t0 = time.perf_counter()
            _ = len(row["answer"].split()) > LENGTH_RULE_WORDS
            seconds.append(time.perf_counter() - t0)
    else:
        import faithtrace

        threads = {"detector_threads": args.threads} if args.threads else {}
        options = faithtrace.ScoringOptions(verdict_source="detector", detector_model=args.model, **threads)
        for row in rows:
            t0 = time.perf_counter()
            res = faithtrace.evaluate(row["question"], row["contexts"], row["answer"], options=options)
            seconds.append(time.perf_counter() - t0)
            assert res.outcome in ("scored", "no_claims"), res.error
            if res.detector is not None:
                windows.append(res.detector.windows)
                name = res.detector.model
    return {"system": name, "seconds": seconds, "windows": windows, "peak_rss_mb": _peak_rss_mb()}


def _summary(raw: dict[str, Any]) -> dict[str, Any]:
    s = raw["seconds"]
    steady = s[1:] or s  # the first evaluation loads the model
    q = statistics.quantiles(steady, n=20, method="inclusive") if len(steady) > 1 else steady * 19
    return {
        "system": raw["system"],
        "evaluations": len(s),
        "first_s": s[0] if s else None,
        "p50_s": statistics.median(steady) if steady else None,
        "p95_s": q[18] if steady else None,
        "max_s": max(steady) if steady else None,
        "windows_per_eval": statistics.mean(raw["windows"]) if raw["windows"] else 0.0,
        "peak_rss_mb": raw["peak_rss_mb"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a detector model directory")
    p.add_argument("--data", default=str(DEFAULT_DATA), help=f"JSONL rows (default {DEFAULT_DATA})")
    p.add_argument("--limit", type=int, default=40, help="first N rows (0: all)")
    p.add_argument("--threads", type=int, default=0, help="onnxruntime threads (default: the option's)")
    p.add_argument("--only", choices=("length", "detector"), help=argparse.SUPPRESS)  # the child's mode
    p.add_argument("--out", help="JSON output (default results/detector_latency.json)")
    args = p.parse_args()
    if args.only:
        print("RESULT " + json.dumps(run_one(args.only, args)))
        return 0
    summaries = []
    for system in ("length", "detector"):
        cmd = [sys.executable, __file__, "--only", system, "--model", args.model, "--data", args.data]
        cmd += ["--limit", str(args.limit), "--threads", str(args.threads or 0)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        raw = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
        summaries.append(_summary(raw))
    headers = ["system", "evals", "first s", "p50 s", "p95 s", "max s", "windows/eval", "peak RSS MB"]
    keys = ["system", "evaluations", "first_s", "p50_s", "p95_s", "max_s", "windows_per_eval", "peak_rss_mb"]
    threads = args.threads or "default"
    print(f"\nper evaluation, onnxruntime threads: {threads}, {_common.machine()['cpu']}\n")
    print(_common.table(headers, [[s[k] for k in keys] for s in summaries]))
    out_path = args.out or _common.RESULTS_DIR / "detector_latency.json"
    doc = {"model": args.model, "threads": args.threads, "data": args.data, "systems": summaries}
    print(f"wrote {_common.write_results('detector_latency', doc, out_path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
