"""The page's request-path part: what faithtrace costs the app (overhead.py, throughput.py, eval_cpu.py) and
what its calls see when the judge, the exporters or the app's own tracing fail (faults.py)."""

from __future__ import annotations

from typing import Any

from benchmarks._page import plots
from benchmarks._page.results import (
    Commands,
    Figures,
    Headline,
    Run,
    fmt,
    index_of,
    newest,
    of_kind,
    table_section,
)
from benchmarks._shared import common

PEERS = {
    "openinference @tracer.chain": "OpenInference",
    "logfire @instrument": "Logfire",
    "langfuse @observe": "Langfuse",
}


def headlines(runs: list[Run]) -> list[Headline]:
    out: list[Headline] = []
    over = newest(of_kind(runs, "overhead"))
    if over is not None:
        rows = over.doc["results"]
        floor, sampled_in = (
            index_of(rows, "variant", "otel span (floor)"),
            index_of(rows, "variant", "faithtrace sampled in"),
        )
        if floor is not None and sampled_in is not None:
            f = Figures()
            answer = (
                f"{f(over, 'results', sampled_in, 'ratio_to_otel_floor')} × a bare OpenTelemetry span "
                f"(p50 {f(over, 'results', sampled_in, 'ns_per_call_median', digits=0)} ns against "
                f"{f(over, 'results', floor, 'ns_per_call_median', digits=0)} ns per call)"
            )
            out.append(
                Headline("Decorator's cost per request, sampled in", answer, tuple(f.cited), "overhead")
            )
        sampled_out = index_of(rows, "variant", "faithtrace sampled out")
        if sampled_out is not None:
            f = Figures()
            answer = f"{f(over, 'results', sampled_out, 'ns_over_bare', digits=0)} ns over the bare function"
            out.append(
                Headline("Decorator's cost per request, sampled out", answer, tuple(f.cited), "overhead")
            )
        f = Figures()
        peers = [
            f"{name} {f(over, 'results', i, 'ratio_to_otel_floor')} ×"
            for variant, name in PEERS.items()
            if (i := index_of(rows, "variant", variant)) is not None and rows[i].get("ratio_to_otel_floor")
        ]
        if peers:
            answer = ", ".join(peers) + " a bare OpenTelemetry span (p50 per call)"
            out.append(Headline("The peers' decorators per request", answer, tuple(f.cited), "overhead"))
    thr = newest(of_kind(runs, "throughput"))
    side = (thr.doc["overload"].get("host_latency_interleaved") or {}).get("conditions") if thr else None
    if thr is not None and side:
        f = Figures()
        keys = ("overload", "host_latency_interleaved", "conditions")
        answer = (
            f"p99 {f(thr, *keys, 'faithtrace, sampled in', 'p99_ms')} ms decorated, "
            f"{f(thr, *keys, 'OTel span by hand (floor)', 'p99_ms')} ms in a hand-written OTel span, "
            f"{f(thr, *keys, 'undecorated', 'p99_ms')} ms undecorated"
        )
        out.append(
            Headline(
                "The app's latency while the scoring worker is saturated",
                answer,
                tuple(f.cited),
                "throughput",
            )
        )
    cpu = newest(of_kind(runs, "eval_cpu"))
    if cpu is not None:
        modes = cpu.doc["modes"]
        local, remote = index_of(modes, "mode", "in-process"), index_of(modes, "mode", "remote")
        if local is not None and remote is not None:
            f = Figures()
            answer = (
                f"{f(cpu, 'modes', local, 'cpu_ms_per_call_median', digits=3)} ms per call scored in the "
                "app, "
                f'{f(cpu, "modes", remote, "cpu_ms_per_call_median", digits=3)} ms with scoring="remote"'
            )
            out.append(Headline("The app's CPU per scored call", answer, tuple(f.cited), "eval-cpu"))
    faults = newest(of_kind(runs, "faults"))
    if faults is not None:
        f = Figures()
        answer = (
            f"{f(faults, 'summary', 'host_exceptions', digits=0)} exceptions and "
            f"{f(faults, 'summary', 'results_changed', digits=0)} changed results in the app's calls over "
            f"{f(faults, 'summary', 'judge_and_exporter_faults', digits=0)} judge and exporter faults and "
            "its own span processors raising; `shutdown(5)` took at most "
            f"{f(faults, 'summary', 'max_shutdown_s')} s"
        )
        out.append(
            Headline("The app's calls when the judge or the exporters fail", answer, tuple(f.cited), "faults")
        )
    return out


def sections(runs: list[Run], images: dict[str, str]) -> list[tuple[str, list[Run]]]:
    """(markdown, runs shown) per section; ``images`` receives the plots by file name."""
    out = []
    over = newest(of_kind(runs, "overhead"))
    if over is not None:
        images["overhead.svg"] = plots.overhead(over.doc["results"])
        out.append((_overhead(over), [over]))
    thr = newest(of_kind(runs, "throughput"))
    if thr is not None:
        out.append((_throughput(thr), [thr]))
    cpu = newest(of_kind(runs, "eval_cpu"))
    if cpu is not None:
        out.append((_eval_cpu(cpu), [cpu]))
    faults = newest(of_kind(runs, "faults"))
    if faults is not None:
        out.append((_faults(faults), [faults]))
    return out


def _overhead(run: Run) -> str:
    doc = run.doc
    cmds = Commands()
    cmds.ref(run)
    lines = [
        "### Decorator cost per call {#overhead}\n",
        "A tiny RAG function wrapped by each variant, timed call by call on the calling thread (p50, p99), "
        "and "
        "the process's CPU per call including what a variant defers to a background thread. The bare "
        "OpenTelemetry span is the floor any tracing pays; the judge is parked, so scoring costs nothing "
        "here. "
        f"{doc['calls_per_round']:,} calls per round after {doc.get('lead_in_calls', 0):,} untimed, "
        f"{doc['rounds']} rounds; medians over the rounds.\n",
        "| variant | p50 ns/call | × OTel span | ns over bare | p99 ns | CPU ns/call | CPU × OTel span |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in doc["results"]:
        if r.get("ns_per_call_median") is None:
            lines.append(f"| {r['variant']} | {r['note']} | | | | | |")
            continue
        lines.append(
            f"| {r['variant']} | {fmt(r['ns_per_call_median'], 0)} | {fmt(r['ratio_to_otel_floor'])} | "
            f"{fmt(r['ns_over_bare'], 0)} | {fmt(r.get('ns_p99'), 0)} | {fmt(r.get('cpu_ns_per_call'), 0)} | "
            f"{fmt(r.get('cpu_ratio_to_otel_floor'))} |"
        )
    lines.append("")
    for name, t in doc.get("targets", {}).items():
        spread = t.get("per_round_quartiles")
        iqr = f" (per-round quartiles {fmt(spread[0])}–{fmt(spread[1])})" if spread else ""
        lines.append(
            f"- {name}: {fmt(t['value'])}{iqr}, target {t['target']}: **{'met' if t['met'] else 'missed'}**"
        )
    lines += [
        "",
        "![Nanoseconds per call for each variant](images/benchmarks/overhead.svg)",
        "",
        cmds.markdown(),
    ]
    return "\n".join(lines)


def _throughput(run: Run) -> str:
    doc, o = run.doc, run.doc["overload"]
    cmds = Commands()
    cmds.ref(run)
    lines = [
        "### The app's latency beside a saturated worker {#throughput}\n",
        f"The scoring worker's evaluations/s against its concurrency (judge stand-in answering in "
        f"{doc['judge_latency_s'] * 1000:.0f} ms), then an app handling {o['host_rate_per_s']:.0f} "
        "requests/s "
        f"of ~1 ms pure-Python work while the worker is saturated for {o['overload_seconds']:.0f} s "
        f"(queue {o['queue_size']}, concurrency {o['concurrency']}): the three ways of serving a request "
        "side "
        "by side, in alternating windows.\n",
    ]
    inter = o.get("host_latency_interleaved")
    if inter:
        lines += _latency_rows("request served", inter["conditions"])
    lines += [
        "",
        "| worker concurrency | evaluations | seconds | evaluations/s | judge calls/evaluation |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in doc["sweep"]:
        lines.append(
            f"| {r['concurrency']} | {r['evaluations']}/{r['jobs']} | {fmt(r['seconds'], 1)} | "
            f"{fmt(r['evals_per_s'])} | {fmt(r['judge_calls_per_eval'])} |"
        )
    lines.append(
        f"\nDuring the overload: {o['evaluations_during_overload']:,} evaluated, "
        f"{o['dropped_during_overload']:,} dropped (queue full, never blocking the app), RSS "
        f"{fmt(o['rss_mb_first'], 1)} → {fmt(o['rss_mb_last'], 1)} MiB (peak {fmt(o['peak_rss_mb'], 1)} MiB)."
    )
    gcs = o.get("gc_during_overload")
    if gcs:
        lines.append(f"Garbage collector pauses (every thread waits for one): {common.gc_pauses_text(gcs)}.")
    lines += ["", cmds.markdown()]
    return "\n".join(lines)


def _latency_rows(first: str, summaries: dict[str, dict[str, Any]]) -> list[str]:
    rows = [f"| {first} | calls | p50 ms | p99 ms | max ms |", "| --- | ---: | ---: | ---: | ---: |"]
    for k, v in summaries.items():
        rows.append(
            f"| {k} | {v['calls']:,} | {fmt(v['p50_ms'])} | {fmt(v['p99_ms'])} | {fmt(v['max_ms'])} |"
        )
    return rows


def _eval_cpu(run: Run) -> str:
    header = ["scoring", "CPU ms/call (median)", "min", "max", "judge calls/call", "evaluations", "RAG spans"]
    rows = [
        [
            m["mode"],
            fmt(m["cpu_ms_per_call_median"], 3),
            fmt(m["cpu_ms_per_call_min"], 3),
            fmt(m["cpu_ms_per_call_max"], 3),
            fmt(m["judge_calls_per_call"]),
            f"{m['spans']['evaluations']:,}",
            f"{m['spans']['rag_spans']:,}",
        ]
        for m in run.doc["modes"]
    ]
    intro = (
        "The app's process CPU (all threads) per decorated call that does no work, scored in the app or "
        'handed to the fleet with `scoring="remote"`; the judge stand-in runs in its own process.'
    )
    return table_section(run, "### The app's CPU per scored call {#eval-cpu}", intro, header, rows)


def _faults(run: Run) -> str:
    header = [
        "fault", "exceptions in the app's calls", "results changed", "p50 µs", "p99 µs", "`shutdown(5)` s",
        "evaluations dropped", "spans unfinished", "telemetry flushed",
    ]  # fmt: skip
    rows = []
    for r in run.doc["results"]:
        if "error" in r:
            rows.append([r["fault"], f"did not report: {r['error'][:80]}", *[""] * 7])
            continue
        keys = ("host_exceptions", "results_changed", "p50_us", "p99_us", "shutdown_s", "dropped")
        keys += ("unfinished_spans", "telemetry_flushed")
        digits = {"p50_us": 0, "p99_us": 0}
        rows.append([r["fault"], *(fmt(r[k], digits.get(k, 2)) for k in keys)])
    intro = (
        f"Each fault in an app process of its own: {run.doc['calls_per_fault']:,} decorated calls, each "
        "result compared with the function's own by identity, then `faithtrace.shutdown(5)` and what its "
        "report says it lost."
    )
    return table_section(run, "### The app's calls under faults {#faults}", intro, header, rows)
