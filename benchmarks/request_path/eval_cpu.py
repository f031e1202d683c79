"""The CPU a decorated call costs the host process: scoring in-process, or recorded for `faithtrace serve`.

Everything faithtrace does for a sampled-in call counts: the request path's capture and hand-off, the span's
end and export, and the background scoring (prompt building, litellm's client, reply parsing, the
evaluation span and metrics). The judge is the stand-in from ``benchmarks/_shared/fakejudge.py`` in its own
process, so its CPU is not counted; the host function itself does no work. Per round: N decorated calls, then
``faithtrace.flush()``; the process's CPU time (user + system, all threads) over the round, divided by N,
minus the same for N calls of the undecorated function. Rounds are repeated and summarised by the median.

    python benchmarks/request_path/eval_cpu.py --quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

import faithtrace
from benchmarks._shared import common as _common
from benchmarks.request_path import _throughput_setup as setup

QUESTION = "What is the refund window?"


def _answer(question: str, contexts: list[str]) -> str:
    return "Refunds are accepted within 30 days. Store credit is offered after that."


def _cpu() -> float:
    # The whole process (every thread), at the clock's full resolution: os.times() ticks in 10 ms, which is
    # the whole of a round's cost in remote mode.
    return time.process_time()


def _round(fn: Any, n: int, flush: Any) -> tuple[float, float]:
    """CPU seconds and wall seconds for ``n`` calls of ``fn`` and the flush that follows them."""
    cpu0, wall0 = _cpu(), time.perf_counter()
    for _ in range(n):
        fn(QUESTION, setup.CONTEXTS)
    flush()
    return _cpu() - cpu0, time.perf_counter() - wall0


def _measure(mode: str, n: int, rounds: int, latency: float, concurrency: int) -> dict[str, Any]:
    """Per-call CPU over the bare function, for one scoring mode, in milliseconds."""
    remote = mode == "remote"
    with (
        _common.fake_judge(latency, max_seconds=600) as base,
        setup.Faithtrace(base, latency) as ft,
    ):
        ft.configure(
            concurrency=concurrency, queue_size=n * 2, rate=1.0, scoring="remote" if remote else None
        )
        decorated = ft.decorated(_answer)

        def flush() -> None:
            # remote: nothing is scored here; wait for the RAG spans (ended and exported by the worker).
            ok = faithtrace.flush(120, evaluations=not remote) if remote else ft.flush(120)
            ft.tracer_provider.force_flush()
            if not ok:
                raise SystemExit("flush timed out: the figures would be wrong")

        _round(decorated, 20, flush)  # warm-up: imports, litellm's client, first prompts
        bare_cpu, scored_cpu, walls = [], [], []
        for _ in range(rounds):
            cpu, _wall = _round(_answer, n, lambda: None)
            bare_cpu.append(cpu / n)
            cpu, wall = _round(decorated, n, flush)
            scored_cpu.append(cpu / n)
            walls.append(wall)
        ft.tracer_provider.force_flush()
        counts = ft.exporter.snapshot()
        errors = list(ft.errors)
    expected = 20 + rounds * n
    # A benchmark of work that did not happen would prove nothing: every call must have been scored here, or
    # (remote) recorded with its texts for the scorer and not scored.
    if not remote and counts["scored"] != expected:
        errors.append(f"in-process: {counts['scored']} of {expected} evaluations scored ({counts})")
    if remote and (counts["remote_rag_spans"] != expected or counts["evaluations"] or counts["judge_calls"]):
        errors.append(f"remote: expected {expected} remote RAG spans and no scoring ({counts})")
    per_call_ms = [(s - b) * 1000 for s, b in zip(scored_cpu, bare_cpu, strict=True)]
    return {
        "mode": mode,
        "cpu_ms_per_call_median": _common.median(per_call_ms),
        "cpu_ms_per_call_min": min(per_call_ms),
        "cpu_ms_per_call_max": max(per_call_ms),
        "per_round_ms": per_call_ms,
        "rounds": rounds,
        "calls_per_round": n,
        "round_wall_s_median": _common.median(walls),
        "judge_calls_per_call": counts["judge_calls"] / expected,
        "spans": counts,
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CPU per decorated call in the host: in-process vs remote.")
    parser.add_argument("--quick", action="store_true", help="a short run (under a minute)")
    parser.add_argument("--per-round", type=int, default=None, help="calls per round (200; quick 50)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (7; quick 3)")
    parser.add_argument("--latency", type=float, default=0.02, help="fake judge seconds per request")
    parser.add_argument("--concurrency", type=int, default=4, help="worker concurrency")
    parser.add_argument("--modes", default="in-process,remote", help="comma list: in-process, remote")
    parser.add_argument("--out", help="JSON output (default results/eval-cpu.json, --quick: -quick)")
    args = parser.parse_args(argv)
    n = args.per_round or (50 if args.quick else 200)
    rounds = args.rounds or (3 if args.quick else 7)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results = [_measure(m, n, rounds, args.latency, args.concurrency) for m in modes]
    print(
        _common.table(
            ["mode", "host CPU ms / call (median)", "min", "max", "rounds x calls", "judge calls / call"],
            [
                [
                    r["mode"],
                    r["cpu_ms_per_call_median"],
                    r["cpu_ms_per_call_min"],
                    r["cpu_ms_per_call_max"],
                    f"{rounds} x {n}",
                    r["judge_calls_per_call"],
                ]
                for r in results
            ],
        )
    )
    errors = [e for r in results for e in r["errors"]]
    out = _common.write_results(
        "eval_cpu", {"modes": results}, args.out or _common.default_out("eval-cpu", args.quick)
    )
    print(f"wrote {out}")
    for error in errors:
        print("ERROR:", error)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
