"""The CPU one evaluation costs the host process when faithtrace scores in-process.

Everything faithtrace does for a sampled-in call counts: the request path's capture and hand-off, the span's
end and export, and the background scoring (prompt building, litellm's client, reply parsing, the
evaluation span and metrics). The judge is the stand-in from ``_fakejudge.py`` in its own process, so its
CPU is not counted; the host function itself does no work. Per round: N decorated calls, then
``faithtrace.flush()``; the process's CPU time (user + system, all threads) over the round, divided by N,
minus the same for N calls of the undecorated function. Rounds are repeated and summarised by the median.

    python benchmarks/eval_cpu.py --quick
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import _throughput_setup as setup

QUESTION = "What is the refund window?"


def _answer(question: str, contexts: list[str]) -> str:
    return "Refunds are accepted within 30 days. Store credit is offered after that."


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _round(fn: Any, n: int, flush: Any) -> tuple[float, float]:
    """CPU seconds and wall seconds for ``n`` calls of ``fn`` and the flush that follows them."""
    cpu0, wall0 = _cpu(), time.perf_counter()
    for _ in range(n):
        fn(QUESTION, setup.CONTEXTS)
    flush()
    return _cpu() - cpu0, time.perf_counter() - wall0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CPU per in-process evaluation, in the host process.")
    parser.add_argument("--quick", action="store_true", help="a short run (under a minute)")
    parser.add_argument("--per-round", type=int, default=None, help="evaluations per round (200; quick 50)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (7; quick 3)")
    parser.add_argument("--latency", type=float, default=0.02, help="fake judge seconds per request")
    parser.add_argument("--concurrency", type=int, default=4, help="worker concurrency")
    parser.add_argument("--out", help="JSON output (default results/eval-cpu.json, --quick: -quick)")
    args = parser.parse_args(argv)
    n = args.per_round or (50 if args.quick else 200)
    rounds = args.rounds or (3 if args.quick else 7)

    with (
        _common.fake_judge(args.latency, max_seconds=600) as base,
        setup.Faithtrace(base, args.latency) as ft,
    ):
        ft.configure(concurrency=args.concurrency, queue_size=n * 2, rate=1.0)
        decorated = ft.decorated(_answer)

        def flush() -> None:
            if not ft.flush(120):
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
    if counts["scored"] != expected:  # a benchmark of evaluations that did not happen would prove nothing
        errors.append(f"{counts['scored']} of {expected} evaluations scored ({counts})")

    per_eval_ms = [(s - b) * 1000 for s, b in zip(scored_cpu, bare_cpu, strict=True)]
    summary = {
        "cpu_ms_per_evaluation_median": _common.median(per_eval_ms),
        "cpu_ms_per_evaluation_min": min(per_eval_ms),
        "cpu_ms_per_evaluation_max": max(per_eval_ms),
        "rounds": rounds,
        "evaluations_per_round": n,
        "round_wall_s_median": _common.median(walls),
        "judge_latency_s": args.latency,
        "concurrency": args.concurrency,
        "judge_calls_per_evaluation": counts["judge_calls"] / max(1, counts["evaluations"]),
        "spans": counts,
        "errors": errors,
    }
    print(
        _common.table(
            [
                "mode",
                "CPU ms / evaluation (median)",
                "min",
                "max",
                "rounds x evaluations",
                "judge calls / eval",
            ],
            [
                [
                    "in-process",
                    summary["cpu_ms_per_evaluation_median"],
                    summary["cpu_ms_per_evaluation_min"],
                    summary["cpu_ms_per_evaluation_max"],
                    f"{rounds} x {n}",
                    summary["judge_calls_per_evaluation"],
                ]
            ],
        )
    )
    out = _common.write_results(
        "eval_cpu",
        {"summary": summary, "per_round_ms": per_eval_ms},
        args.out or _common.default_out("eval-cpu", args.quick),
    )
    print(f"wrote {out}")
    for error in errors:
        print("ERROR:", error)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
