"""Request-path overhead of @trace_faithfulness against a bare OTel span and the peers' decorators.

Every variant wraps the same tiny RAG function and runs in this one process, with in-memory span exporters.
Rounds are interleaved (variant order shuffled per round) and medians are reported, because this machine is
shared and noisy. Two figures per variant: the latency of each call on the calling thread (p50, p99: what a
request feels), and the process's CPU time per call with every thread counted, after the variant's deferred
work has drained (what the machine pays; faithtrace ends its span on its worker thread, Langfuse exports
from a batch thread). Each timed block follows an untimed lead-in of calls to the same variant, so that a
variant's background thread is already at work when timing starts: a block timed from a standing start can
catch faithtrace's worker asleep for its first poll interval and report calls that no steady stream of
traffic sees. The judge is a loopback stand-in that never answers within the run, so
sampled-in calls pay for the span and the enqueue but scoring itself costs nothing here (it runs off the
request path; throughput.py measures it).

The peers (OpenInference, Logfire, Langfuse) are imported when installed; if they are not, and the peers'
venv exists (see README), the script re-runs itself under that venv's interpreter so all variants share one
process. A peer that still cannot be imported is reported as "not installed".

    python benchmarks/request_path/overhead.py --quick
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common
from benchmarks.request_path import _overhead_variants as variants
from benchmarks.request_path._overhead_bench import CONTEXTS, Variant

PEERS_VENV_PYTHON = Path.home() / ".cache/faithtrace/bench-peers-venv/bin/python"

TARGET_SAMPLED_IN_RATIO = 1.3
TARGET_SAMPLED_OUT_EXTRA_NS = 1000.0


def _maybe_reexec(args: argparse.Namespace) -> None:
    if args.no_peers or os.environ.get("FAITHTRACE_BENCH_REEXEC"):
        return
    if variants.peers_importable():
        return
    python = Path(args.peers_python) if args.peers_python else PEERS_VENV_PYTHON
    # Compare venvs, not binaries: both venvs' pythons are symlinks to the same interpreter.
    if python.exists() and python.parent.parent.resolve() != Path(sys.prefix).resolve():
        print(f"peers not importable here; re-running under {python}", flush=True)
        os.environ["FAITHTRACE_BENCH_REEXEC"] = "1"
        # This checkout's code, whatever checkout the peers' venv was installed from (it is shared in the
        # user cache, and an editable install there may point at another clone, or a deleted one).
        src = str(Path(__file__).resolve().parents[2] / "src")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
        os.execv(str(python), [str(python), *sys.argv])


def _time_block(v: Variant, n: int, lead_in: int = 0) -> tuple[float, float, float]:
    """One block: ``lead_in`` untimed calls, then ``n`` timed ones: (median ns per call, 99th percentile,
    CPU ns per call).

    Each call is timed on its own: the median is what a request feels, and work a variant defers to a
    background thread does not hide in it only to show up as a slower loop. That deferred work is not
    dropped from the figures either: the block's process CPU time (all threads, lead-in included) is read
    after ``v.drain()`` has waited for it, and reported per call made.
    """
    q = "What is the refund window?"
    ctx = CONTEXTS
    fn = v.fn
    perf = time.perf_counter_ns
    lat = [0] * n
    cpu0 = time.process_time_ns()
    for _ in range(lead_in):
        fn(q, ctx)
    for i in range(n):
        t0 = perf()
        fn(q, ctx)
        lat[i] = perf() - t0
    v.drain()
    cpu = (time.process_time_ns() - cpu0) / (n + lead_in)
    lat.sort()
    return float(lat[n // 2]), float(lat[min(n - 1, (n * 99) // 100)]), cpu


FLOOR = "otel span (floor)"
BARE = "bare function"


def _ratios(vals: list[float], base: list[float]) -> list[float]:
    return [v / b for v, b in zip(vals, base, strict=True)]


def _median_ratio(vals: list[float], base: list[float] | None) -> float | None:
    if not base:
        return None
    return _common.median(_ratios(vals, base))


def _median_diff(vals: list[float], base: list[float] | None) -> float | None:
    if not base:
        return None
    return _common.median([v - b for v, b in zip(vals, base, strict=True)])


def _ratio_spread(vals: list[float], base: list[float] | None) -> list[float] | None:
    """The 25th and 75th percentiles of the per-round ratios: how settled the median is on this machine."""
    if not base:
        return None
    ratios = _ratios(vals, base)
    return [_common.percentile(ratios, 25), _common.percentile(ratios, 75)]


def run(n: int, rounds: int, include_peers: bool, seed: int, lead_in: int = 0) -> dict[str, Any]:
    bench = variants.build(include_peers=include_peers)
    rng = random.Random(seed)
    samples: dict[str, list[float]] = {v.name: [] for v in bench.variants}
    p99s: dict[str, list[float]] = {v.name: [] for v in bench.variants}
    cpus: dict[str, list[float]] = {v.name: [] for v in bench.variants}
    try:
        for v in bench.variants:  # warm-up: imports, first-span setup, caches
            v.setup()
            _time_block(v, min(n, 500))
        for _ in range(rounds):
            order = list(bench.variants)
            rng.shuffle(order)
            for v in order:
                v.setup()
                bench.clear()
                gc.collect()
                gc.disable()  # a collection landing in one variant's block is noise, not overhead
                try:
                    p50, p99, cpu = _time_block(v, n, lead_in)
                finally:
                    gc.enable()
                samples[v.name].append(p50)
                p99s[v.name].append(p99)
                cpus[v.name].append(cpu)
        checks = bench.check()
    finally:
        bench.close()

    med = {name: _common.median(vals) for name, vals in samples.items()}
    floor_samples = samples.get(FLOOR)
    bare_samples = samples.get(BARE)
    rows = []
    for v in bench.variants:
        vals = samples[v.name]
        rows.append(
            {
                "variant": v.name,
                "ns_per_call_median": med[v.name],
                "ns_min": min(vals),
                "ns_max": max(vals),
                # Within one round every variant ran back to back, so per-round ratios cancel the machine's
                # slow drift; their median is the figure the targets use.
                "ratio_to_otel_floor": _median_ratio(vals, floor_samples),
                "ns_over_bare": _median_diff(vals, bare_samples),
                "ns_p99": _common.median(p99s[v.name]),
                "cpu_ns_per_call": _common.median(cpus[v.name]),
                "cpu_ratio_to_otel_floor": _median_ratio(cpus[v.name], cpus.get(FLOOR)),
                # Every round's p50 and p99: the spread the docs' plot draws.
                "ns_p50_rounds": vals,
                "ns_p99_rounds": p99s[v.name],
                "note": v.note,
            }
        )
    for name, note in bench.missing.items():
        rows.append({"variant": name, "ns_per_call_median": None, "note": note})
    targets: dict[str, Any] = {}
    if floor_samples and "faithtrace sampled in" in samples:
        r = _median_ratio(samples["faithtrace sampled in"], floor_samples)
        targets["sampled_in_ratio_to_floor"] = {
            "value": r,
            "target": TARGET_SAMPLED_IN_RATIO,
            "met": r <= TARGET_SAMPLED_IN_RATIO,
            "per_round_quartiles": _ratio_spread(samples["faithtrace sampled in"], floor_samples),
        }
    if bare_samples and "faithtrace sampled out" in samples:
        extra = _median_diff(samples["faithtrace sampled out"], bare_samples)
        targets["sampled_out_ns_over_bare"] = {
            "value": extra,
            "target": TARGET_SAMPLED_OUT_EXTRA_NS,
            "met": extra <= TARGET_SAMPLED_OUT_EXTRA_NS,
        }
    return {
        "calls_per_round": n,
        "lead_in_calls": lead_in,
        "rounds": rounds,
        "results": rows,
        "targets": targets,
        "checks": checks,
        "versions": bench.versions,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Request-path overhead per call (ns), ratios to an OTel span."
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds (about 30 s)")
    parser.add_argument("--calls", type=int, help="calls per timed block (default 10000, quick 3000)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 21, quick 5)")
    parser.add_argument(
        "--lead-in",
        type=int,
        default=2000,
        help="untimed calls before each timed block, so background threads are at work (default 2000)",
    )
    parser.add_argument("--no-peers", action="store_true", help="measure faithtrace and OTel only")
    parser.add_argument("--peers-python", help=f"interpreter with the peers installed ({PEERS_VENV_PYTHON})")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--out", help="JSON output (default results/overhead.json, --quick: results/overhead-quick.json)"
    )
    args = parser.parse_args(argv)
    _maybe_reexec(args)
    n = args.calls or (3000 if args.quick else 10000)
    rounds = args.rounds or (5 if args.quick else 21)
    lead_in = max(0, args.lead_in)
    data = run(n, rounds, include_peers=not args.no_peers, seed=args.seed, lead_in=lead_in)
    headers = [
        "variant", "p50 ns", "x OTel floor*", "ns over bare*", "p99 ns", "CPU ns/call", "CPU x floor*", "note"
    ]  # fmt: skip
    print(
        f"\noverhead per call: {n} calls (after {lead_in} untimed) x {rounds} interleaved rounds,"
        " median of the rounds\n"
    )
    print(
        _common.table(
            headers,
            [
                [
                    r["variant"],
                    r.get("ns_per_call_median"),
                    r.get("ratio_to_otel_floor"),
                    r.get("ns_over_bare"),
                    r.get("ns_p99"),
                    r.get("cpu_ns_per_call"),
                    r.get("cpu_ratio_to_otel_floor"),
                    r.get("note", ""),
                ]
                for r in data["results"]
            ],
        )
    )
    print("* median over rounds of the within-round ratio / difference")
    print(
        "p50/p99: per-call latency on the calling thread; CPU: the process CPU time (all threads) per call,"
        " including work a variant defers to a background thread"
    )
    for name, t in data["targets"].items():
        spread = t.get("per_round_quartiles")
        iqr = f", per-round quartiles {spread[0]:.2f}-{spread[1]:.2f}" if spread else ""
        verdict = "met" if t["met"] else "MISSED"
        print(f"target {name}: {t['value']:.2f}{iqr} (target {t['target']}) -> {verdict}")
    for name, ok in data["checks"].items():
        print(f"check {name}: {ok}")
    path = _common.write_results("overhead", data, args.out or _common.default_out("overhead", args.quick))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
