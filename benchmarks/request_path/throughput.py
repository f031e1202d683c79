"""Background scoring under load: evaluations/s vs worker concurrency, drops, memory, and the host's latency.

The judge is a stand-in on 127.0.0.1 with a fixed latency per request (300 ms by default), speaking the
OpenAI chat API in its own process, so litellm's real client path and faithtrace's real parsing path run and
the judge takes no CPU or GIL from this process. Three phases:

1. sweep: for each worker concurrency, enqueue a batch of evaluations and time ``faithtrace.flush()``;
2. host latency: a host loop calls a CPU-bound request handler at a fixed rate, first undecorated with the
   worker idle, then decorated and sampled in while the queue is full and the worker saturated (overload);
3. memory: RSS sampled every second through the overload phase (``--overload-seconds``, 600 in a full run).

Bounded loops and loopback only; the judge process stops with this one.

``--detector-model DIR``: the trained detector decides every verdict instead (no judge call; inference on the
worker's threads, in this process), against the first RAGTruth dev row's passages (~600 words), so that each
evaluation reads at least one full window. This is the measurement that says whether the detector must run
in a process of its own.

    python benchmarks/request_path/throughput.py --quick
    python benchmarks/request_path/throughput.py --quick --detector-model DIR --concurrency 1,2
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common
from benchmarks.request_path import _throughput_setup as setup

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared/data/ragtruth_qa_dev.jsonl"


def _host_work(question: str, contexts: list[str]) -> str:
    # About a millisecond of pure-Python work, like a request handler: GIL contention from the worker shows.
    acc = 0
    for i in range(20_000):
        acc = (acc * 31 + i) & 0xFFFF
    return f"Answer {acc}: refunds are accepted within 30 days."


def _host_loop(
    fn: Callable[[str, list[str]], str],
    rate: float,
    seconds: float,
    on_tick: Callable[[], None] | None = None,
) -> list[float]:
    """Call ``fn`` at a fixed rate for ``seconds``; return the per-call latencies in ms."""
    # An array, not a list of floats: one float object per call would be the harness's own memory growth
    # (a block per call) in the very measurement that is meant to show faithtrace's memory is flat.
    latencies = array("d")
    interval = 1.0 / rate
    start = time.perf_counter()
    deadline = start + seconds
    next_t = start
    last_tick = start
    while True:
        now = time.perf_counter()
        if now >= deadline:
            break
        if now < next_t:
            time.sleep(next_t - now)
        t0 = time.perf_counter()
        fn("What is the refund window?", setup.CONTEXTS)
        latencies.append((time.perf_counter() - t0) * 1000)
        next_t += interval
        if on_tick is not None and t0 - last_tick >= 1.0:
            on_tick()
            last_tick = t0
    if on_tick is not None:
        on_tick()  # the last sample, before the latencies become a list of float objects
    return list(latencies)


def _latency_summary(lat: list[float], rate: float) -> dict[str, float]:
    worst = max(range(len(lat)), key=lat.__getitem__) if lat else 0
    slow = sorted(range(len(lat)), key=lat.__getitem__)[-5:]
    return {
        "calls": len(lat),
        "p50_ms": _common.percentile(lat, 50),
        "p99_ms": _common.percentile(lat, 99),
        "max_ms": max(lat) if lat else float("nan"),
        # When the slowest calls happened (seconds into the window, at the nominal rate): a one-off at the
        # start points at warm-up (a lazy import in the worker holding the GIL), spread out at steady state.
        "max_at_s": round(worst / rate, 2),
        "slowest5_at_s": [round(i / rate, 2) for i in slow],
        "slowest5_ms": [round(lat[i], 2) for i in slow],
    }


def sweep(
    ft: setup.Faithtrace, concurrencies: list[int], per_worker: int, min_jobs: int
) -> list[dict[str, Any]]:
    # Warm-up: the first evaluation imports litellm (seconds); that belongs to start-up, not to throughput.
    ft.configure(concurrency=1, queue_size=64, rate=1.0)
    ft.decorated(_host_work_fast)("warm-up", setup.CONTEXTS)
    ft.flush(timeout=120)
    rows = []
    for c in concurrencies:
        jobs = max(min_jobs, c * per_worker)
        ft.configure(concurrency=c, queue_size=max(jobs * 2, 64), rate=1.0)
        fn = ft.decorated(_host_work_fast)
        before = ft.exporter.snapshot()
        t0 = time.perf_counter()
        for _ in range(jobs):
            fn("What is the refund window?", setup.CONTEXTS)
        ok = ft.flush(timeout=600)
        elapsed = time.perf_counter() - t0
        after = ft.exporter.snapshot()
        done = after["evaluations"] - before["evaluations"]
        rows.append(
            {
                "concurrency": c,
                "jobs": jobs,
                "evaluations": done,
                "scored": after["scored"] - before["scored"],
                "errors": after["errors"] - before["errors"],
                "dropped": after["dropped"] - before["dropped"],
                "seconds": elapsed,
                "evals_per_s": done / elapsed if elapsed else None,
                "judge_calls_per_eval": (after["judge_calls"] - before["judge_calls"]) / done
                if done
                else None,
                "flushed": ok,
            }
        )
        print(f"  concurrency {c}: {done}/{jobs} evaluations in {elapsed:.1f} s", flush=True)
    return rows


def _host_work_fast(question: str, contexts: list[str]) -> str:
    # Reworded from the context, so that the judge is asked (a contained sentence is proven in code).
    return "With a receipt, refunds are accepted for 30 days."


def overload(ft: setup.Faithtrace, args: argparse.Namespace) -> dict[str, Any]:
    bare = _host_latency_idle(args)
    ft.configure(concurrency=args.overload_concurrency, queue_size=args.queue_size, rate=1.0)
    fn = ft.decorated(_host_work)
    # Fill the queue first, so the measured window is all "saturated".
    for _ in range(args.queue_size + args.overload_concurrency):
        fn("What is the refund window?", setup.CONTEXTS)
    # Samples go into preallocated-style arrays for the same reason as the latencies: the harness must not
    # add Python objects of its own while the live-object count is being watched.
    ticks_t, ticks_rss, ticks_blocks, depth = array("d"), array("d"), array("q"), array("d")
    t_start = time.perf_counter()
    before = ft.exporter.snapshot()

    def tick() -> None:
        ticks_t.append(time.perf_counter() - t_start)
        ticks_rss.append(_common.rss_mb())
        # Live Python objects' memory blocks: flat here and a creeping RSS means allocator fragmentation, a
        # rising count means something keeps objects (a leak).
        ticks_blocks.append(sys.getallocatedblocks())
        d = ft.queue_depth()
        if d is not None:
            depth.append(d)

    if args.gc_freeze:
        # docs/instrumenting.md's recipe for hosts: once warm (litellm imported and used), collect and freeze.
        gc.collect()
        gc.freeze()
    tick()
    with setup.GcPauses() as pauses:
        saturated = _host_loop(fn, args.host_rate, args.overload_seconds, tick)
    after = ft.exporter.snapshot()
    trim = setup.trimmed_rss()
    # The host path without our decorator while the worker is still saturated: the worker thread's own cost.
    ft.refill(fn, args.queue_size)
    bare_busy = _host_loop(_host_work, args.host_rate, min(args.host_seconds, args.overload_seconds))
    side_by_side = _interleaved(ft, fn, args)
    memory = [
        {"t_s": round(t, 1), "rss_mb": r, "py_blocks": b}
        for t, r, b in zip(ticks_t, ticks_rss, ticks_blocks, strict=True)
    ]
    depth_list = list(depth)
    rss = [m["rss_mb"] for m in memory]
    half = len(rss) // 2
    second = memory[half:]
    return {
        "host_rate_per_s": args.host_rate,
        "queue_size": args.queue_size,
        "concurrency": args.overload_concurrency,
        "host_latency": {
            "undecorated, worker idle": _latency_summary(bare, args.host_rate),
            "decorated + sampled in, worker saturated": _latency_summary(saturated, args.host_rate),
            "undecorated, worker saturated": _latency_summary(bare_busy, args.host_rate),
        },
        "host_latency_interleaved": side_by_side,
        "gc_during_overload": pauses.summary(),
        "overload_seconds": args.overload_seconds,
        "evaluations_during_overload": after["evaluations"] - before["evaluations"],
        "dropped_during_overload": after["dropped"] - before["dropped"],
        "queue_depth_max": max(depth_list) if depth_list else None,
        "queue_depth_median": _common.median(depth_list) if depth_list else None,
        "rss_mb_first": rss[0] if rss else None,
        "rss_mb_last": rss[-1] if rss else None,
        "rss_mb_max": max(rss) if rss else None,
        "rss_mb_second_half_growth": (rss[-1] - rss[half]) if len(rss) > 2 else None,
        # Least-squares slopes over the second half, per minute: the steady state, past the warm-up.
        "rss_mb_per_min_second_half": setup.slope_per_min(second, "rss_mb"),
        "py_blocks_first": memory[0]["py_blocks"] if memory else None,
        "py_blocks_last": memory[-1]["py_blocks"] if memory else None,
        "py_blocks_per_min_second_half": setup.slope_per_min(second, "py_blocks"),
        "peak_rss_mb": _common.peak_rss_mb(),
        # RSS right after the overload and after asking glibc to give free heap pages back: what the trim
        # returns was freed memory the allocator kept, not memory anything still holds.
        "rss_mb_before_trim": trim[0],
        "rss_mb_after_trim": trim[1],
        "memory_over_time": memory,
    }


def _interleaved(
    ft: setup.Faithtrace, decorated: Callable[[str, list[str]], str], args: argparse.Namespace
) -> dict[str, Any]:
    """The three host paths in short alternating windows, all with the worker saturated.

    Windows taken minutes apart on a shared machine differ by more than the decorator costs; alternating
    them spreads every condition over the same stretch of time, and each gets the same number of calls.
    The hand-written OTel span is the floor: what tracing the call at all costs.
    """
    tracer = ft.tracer_provider.get_tracer("benchmarks.throughput")

    def otel_span(question: str, contexts: list[str]) -> str:
        with tracer.start_as_current_span("rag-answer"):
            return _host_work(question, contexts)

    paths: dict[str, Callable[[str, list[str]], str]] = {
        "undecorated": _host_work,
        "OTel span by hand (floor)": otel_span,
        "faithtrace, sampled in": decorated,
    }
    window = max(0.5, min(5.0, args.host_seconds / 4))
    latencies: dict[str, list[float]] = {name: [] for name in paths}
    ft.refill(decorated, args.queue_size)
    for _ in range(args.interleaved_rounds):
        for name, path in paths.items():
            latencies[name].extend(_host_loop(path, args.host_rate, window))
    out: dict[str, Any] = {"rounds": args.interleaved_rounds, "window_s": window}
    out["conditions"] = {name: _latency_summary(lat, args.host_rate) for name, lat in latencies.items()}
    return out


def _fmt_mb(value: float | None) -> str:
    return "not glibc" if value is None else f"{value:.1f} MiB"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _latency_table(first: str, summaries: dict[str, dict[str, Any]]) -> str:
    return _common.table(
        [first, "calls", "p50 ms", "p99 ms", "max ms"],
        [[k, v["calls"], v["p50_ms"], v["p99_ms"], v["max_ms"]] for k, v in summaries.items()],
    )


def _host_latency_idle(args: argparse.Namespace) -> list[float]:
    _host_loop(_host_work, args.host_rate, 1.0)  # warm-up
    return _host_loop(_host_work, args.host_rate, args.host_seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Background scorer throughput, drops, memory, host latency.")
    parser.add_argument("--quick", action="store_true", help="a short run (about a minute)")
    parser.add_argument("--latency", type=float, default=0.3, help="fake judge seconds per request")
    parser.add_argument("--concurrency", default=None, help="comma list (default 1,4,16,64; quick 1,8)")
    parser.add_argument(
        "--per-worker", type=int, default=None, help="jobs per unit of concurrency in the sweep"
    )
    parser.add_argument("--queue-size", type=int, default=None, help="worker queue size under overload")
    parser.add_argument("--overload-concurrency", type=int, default=8)
    parser.add_argument("--host-rate", type=float, default=100.0, help="host requests per second")
    parser.add_argument("--host-seconds", type=float, default=None, help="idle-latency window")
    parser.add_argument("--overload-seconds", type=float, default=None, help="overload window (full: 600)")
    parser.add_argument(
        "--gc-freeze", action="store_true", help="gc.collect() + gc.freeze() before the overload window"
    )
    parser.add_argument(
        "--interleaved-rounds",
        type=int,
        default=None,
        help="rounds of bare / OTel span / faithtrace windows after the overload (default 12, quick 3)",
    )
    parser.add_argument("--detector-model", help="score with this detector model directory instead")
    parser.add_argument(
        "--data", default=str(DEFAULT_DATA), help="with --detector-model: the row whose passages are used"
    )
    parser.add_argument(
        "--out", help="JSON output (default results/throughput.json, --quick: results/throughput-quick.json)"
    )
    args = parser.parse_args(argv)
    if args.detector_model:
        row = json.loads(Path(args.data).read_text(encoding="utf-8").splitlines()[0])
        setup.CONTEXTS = row["contexts"]
    q = args.quick
    concurrencies = [int(x) for x in (args.concurrency or ("1,8" if q else "1,4,16,64")).split(",")]
    args.per_worker = args.per_worker or (3 if q else 6)
    args.queue_size = args.queue_size or (200 if q else 1000)
    args.host_seconds = args.host_seconds or (5.0 if q else 20.0)
    args.overload_seconds = args.overload_seconds or (10.0 if q else 600.0)
    args.interleaved_rounds = args.interleaved_rounds or (3 if q else 12)
    max_s = 120 + args.overload_seconds * 2 + sum(concurrencies) * 20

    with (
        _common.fake_judge(args.latency, max_seconds=max_s) as base,
        setup.Faithtrace(base, args.latency) as ft,
    ):
        ft.detector = args.detector_model
        print(f"fake judge at {base}, {args.latency * 1000:.0f} ms per request")
        print("sweep: evaluations/s against worker concurrency")
        rows = sweep(ft, concurrencies, args.per_worker, min_jobs=4)
        print(f"overload: host at {args.host_rate:.0f} req/s for {args.overload_seconds:.0f} s, queue full")
        over = overload(ft, args)
        versions = ft.versions()
    if ft.errors:
        print("faithtrace API errors:", *ft.errors, sep="\n  ")

    print("\nthroughput against worker concurrency (fake judge, fixed latency)\n")
    print(
        _common.table(
            [
                "concurrency",
                "jobs",
                "evaluated",
                "scored",
                "errors",
                "dropped",
                "seconds",
                "evals/s",
                "calls/eval",
            ],
            [
                [
                    r["concurrency"],
                    r["jobs"],
                    r["evaluations"],
                    r["scored"],
                    r["errors"],
                    r["dropped"],
                    r["seconds"],
                    r["evals_per_s"],
                    r["judge_calls_per_eval"],
                ]
                for r in rows
            ],
        )
    )
    print(f"\nhost request latency at {args.host_rate:.0f} req/s (handler ~1 ms of CPU)\n")
    print(_latency_table("condition", over["host_latency"]))
    inter = over["host_latency_interleaved"]
    print(
        f"\nthe same, side by side: {inter['rounds']} rounds of {inter['window_s']:.1f} s windows per path, "
        "worker saturated\n"
    )
    print(_latency_table("host path", inter["conditions"]))
    print(
        "\ngarbage collector pauses during the overload (every thread waits): "
        + _common.gc_pauses_text(over["gc_during_overload"])
    )
    print(
        f"\noverload {over['overload_seconds']:.0f} s: {over['evaluations_during_overload']} evaluated, "
        f"{over['dropped_during_overload']} dropped, queue depth max {over['queue_depth_max']}, "
        f"RSS {over['rss_mb_first']:.1f} -> {over['rss_mb_last']:.1f} MiB (max {over['rss_mb_max']:.1f}, "
        f"second-half growth {over['rss_mb_second_half_growth']}), peak RSS {over['peak_rss_mb']:.1f} MiB"
        f"; second-half slope {_fmt(over['rss_mb_per_min_second_half'])} MiB/min; Python memory blocks "
        f"{over['py_blocks_first']} -> {over['py_blocks_last']}, second-half slope "
        f"{_fmt(over['py_blocks_per_min_second_half'])} blocks/min; after malloc_trim(0): "
        f"{_fmt_mb(over['rss_mb_after_trim'])} (from {over['rss_mb_before_trim']:.1f} MiB)"
    )
    path = _common.write_results(
        "throughput",
        {
            "judge_latency_s": args.latency,
            "detector_model": args.detector_model,
            "sweep": rows,
            "overload": over,
            "versions": versions,
            "faithtrace_api_errors": ft.errors,
        },
        args.out
        or _common.default_out("throughput-detector" if args.detector_model else "throughput", args.quick),
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
