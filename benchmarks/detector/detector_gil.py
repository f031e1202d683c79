"""Does the detector in a thread of the host's process hurt the host more than in a process of its own?

The host loop of ``throughput.py`` (100 requests/s, ~1 ms of pure-Python work each) runs three ways, in
alternating rounds: with nothing else running, while a thread of this process runs the detector on the first
dev row over and over (the GIL is shared: tokenizing and the spans hold it, onnxruntime releases it), and
while another process does the same (no GIL in common, the same CPU taken). If the thread is no worse than
the process, a shared detector process would buy nothing.

    python benchmarks/detector/detector_gil.py --model DIR [--rounds 4] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common
from benchmarks.request_path import throughput

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared/data/ragtruth_qa_dev.jsonl"


def _busy(model_dir: str, data: str, stop: threading.Event) -> None:
    from faithtrace.judge.detector import model, windows

    loaded = model.load(model_dir, threads=1)
    row = json.loads(Path(data).read_text(encoding="utf-8").splitlines()[0])
    while not stop.is_set():
        windows.detect(loaded, row["question"], row["contexts"], row["answer"])


def _percentiles(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    return ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=8.0, help="host loop per condition and round")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help="JSON output (default results/detector_gil.json)")
    args = p.parse_args()
    if args.child:  # the other process: compute until killed (bounded by the parent's rounds)
        _busy(args.model, args.data, threading.Event())
        return 0
    rows: dict[str, list[tuple[float, float]]] = {"idle": [], "thread": [], "process": []}
    for _ in range(args.rounds):
        rows["idle"].append(_percentiles(throughput._host_loop(throughput._host_work, 100, args.seconds)))
        stop = threading.Event()
        worker = threading.Thread(target=_busy, args=(args.model, args.data, stop), daemon=True)
        worker.start()
        time.sleep(3)  # the model loads before the window starts
        rows["thread"].append(_percentiles(throughput._host_loop(throughput._host_work, 100, args.seconds)))
        stop.set()
        worker.join()
        child = subprocess.Popen(
            [sys.executable, __file__, "--child", "--model", args.model, "--data", args.data]
        )
        try:
            time.sleep(5)
            rows["process"].append(
                _percentiles(throughput._host_loop(throughput._host_work, 100, args.seconds))
            )
        finally:
            child.kill()
            child.wait()
    table = [
        [
            name,
            *(f"{v:.2f}" for _, v in got),
            statistics.median(v for _, v in got),
            statistics.median(m for m, _ in got),
        ]
        for name, got in rows.items()
    ]
    headers = ["detector", *(f"p99 ms r{i + 1}" for i in range(args.rounds)), "median p99", "median p50"]
    print(f"\nhost latency at 100 req/s, {args.rounds} rounds of {args.seconds:g} s per condition\n")
    print(_common.table(headers, table))
    out = args.out or _common.RESULTS_DIR / "detector_gil.json"
    doc = {"model": args.model, "rounds": {k: [list(x) for x in v] for k, v in rows.items()}}
    print(f"wrote {_common.write_results('detector_gil', doc, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
