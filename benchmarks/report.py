"""Render the docs' Benchmarks page (docs/benchmarks.md) from results/: the latest run of each benchmark.

python benchmarks/report.py            # after running the benchmarks: rewrite the page
python benchmarks/report.py --check    # exit 1 when the page is out of date (a test runs this)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent / "docs" / "benchmarks.md"


def _f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _head(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    return (
        f"{doc['date']} · {m['cpu']}, {m['cores']} cores, load {m['loadavg_1m']:.1f} · "
        f"Python {m['python']}  \n"
        f"`{doc['command']}`\n"
    )


def overhead(doc: dict[str, Any]) -> str:
    lead = f" after {doc['lead_in_calls']} untimed" if doc.get("lead_in_calls") else ""
    title = f"## overhead ({doc['calls_per_round']} calls{lead} × {doc['rounds']} rounds, median)\n"
    lines = [title, _head(doc)]
    lines.append(
        "| variant | p50 ns/call | × OTel floor | ns over bare | p99 ns | CPU ns/call | CPU × floor |"
    )
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in doc["results"]:
        if r.get("ns_per_call_median") is None:
            lines.append(f"| {r['variant']} | {r['note']} | | | | | |")
        else:
            lines.append(
                f"| {r['variant']} | {_f(r['ns_per_call_median'], 0)} | {_f(r['ratio_to_otel_floor'])} | "
                f"{_f(r['ns_over_bare'], 0)} | {_f(r.get('ns_p99'), 0)} | "
                f"{_f(r.get('cpu_ns_per_call'), 0)} | {_f(r.get('cpu_ratio_to_otel_floor'))} |"
            )
    for name, t in doc.get("targets", {}).items():
        spread = t.get("per_round_quartiles")
        iqr = f" (per-round quartiles {_f(spread[0])}–{_f(spread[1])})" if spread else ""
        lines.append(
            f"\n- {name}: {_f(t['value'])}{iqr}, target {t['target']}: **{'met' if t['met'] else 'missed'}**"
        )
    return "\n".join(lines) + "\n"


def throughput(doc: dict[str, Any]) -> str:
    lines = [f"## throughput (fake judge, {doc['judge_latency_s'] * 1000:.0f} ms per call)\n", _head(doc)]
    lines.append("| concurrency | evaluations | seconds | evals/s | judge calls/eval |")
    lines.append("| ---: | ---: | ---: | ---: | ---: |")
    for r in doc["sweep"]:
        lines.append(
            f"| {r['concurrency']} | {r['evaluations']}/{r['jobs']} | {_f(r['seconds'], 1)} | "
            f"{_f(r['evals_per_s'])} | {_f(r['judge_calls_per_eval'])} |"
        )
    o = doc["overload"]
    lines.append(
        f"\nHost at {o['host_rate_per_s']:.0f} req/s, queue {o['queue_size']}, "
        f"concurrency {o['concurrency']}:\n"
    )
    lines += _latency_rows("condition", o["host_latency"])
    inter = o.get("host_latency_interleaved")
    if inter:
        lines.append(
            f"\nThe same paths side by side, worker saturated: {inter['rounds']} rounds of "
            f"{inter['window_s']:.1f} s windows, alternating:\n"
        )
        lines += _latency_rows("host path", inter["conditions"])
    lines.append(
        f"\nOverload {o['overload_seconds']:.0f} s: {o['evaluations_during_overload']} evaluated, "
        f"{o['dropped_during_overload']} dropped, queue depth max {_f(o['queue_depth_max'], 0)}; RSS "
        f"{_f(o['rss_mb_first'], 1)} → {_f(o['rss_mb_last'], 1)} MiB (max {_f(o['rss_mb_max'], 1)}, "
        f"growth over the second half {_f(o['rss_mb_second_half_growth'], 1)} MiB), "
        f"peak RSS {_f(o['peak_rss_mb'], 1)} MiB."
    )
    if o.get("rss_mb_per_min_second_half") is not None:
        lines.append(
            f"Second-half slopes (least squares): RSS {_f(o['rss_mb_per_min_second_half'], 3)} MiB/min; "
            f"live Python memory blocks {_f(o.get('py_blocks_per_min_second_half'), 0)}/min "
            f"({_f(o.get('py_blocks_first'))} → {_f(o.get('py_blocks_last'))})."
        )
        if o.get("rss_mb_after_trim") is not None:
            lines.append(
                f"After the overload, `malloc_trim(0)` took RSS from {_f(o['rss_mb_before_trim'], 1)} to "
                f"{_f(o['rss_mb_after_trim'], 1)} MiB (first sample {_f(o['rss_mb_first'], 1)} MiB)."
            )
    gcs = o.get("gc_during_overload")
    if gcs:
        lines.append(
            f"Garbage collector pauses during the overload (every thread waits for one): "
            f"{_common.gc_pauses_text(gcs)}."
        )
    if doc.get("faithtrace_api_errors"):
        lines.append(
            f"\nfaithtrace API calls that raised: {len(doc['faithtrace_api_errors'])} (see the JSON)."
        )
    return "\n".join(lines) + "\n"


def _latency_rows(first: str, summaries: dict[str, dict[str, Any]]) -> list[str]:
    rows = [f"| {first} | calls | p50 ms | p99 ms | max ms |", "| --- | ---: | ---: | ---: | ---: |"]
    for k, v in summaries.items():
        rows.append(f"| {k} | {v['calls']} | {_f(v['p50_ms'])} | {_f(v['p99_ms'])} | {_f(v['max_ms'])} |")
    return rows


def accuracy(doc: dict[str, Any]) -> str:
    lines = [f"## accuracy ({doc['subset']}, judge {doc['judge']})\n", _head(doc)]
    lines.append(
        "| system | bal. acc. | AUROC | invalid | calls/eval | in tok/eval | out tok/eval | s/eval |"
    )
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, s in doc["systems"].items():
        lines.append(
            f"| {name} | {_f(s['balanced_accuracy'])} | {_f(s['auroc'])} | {_f(s['invalid_rate'])} | "
            f"{_f(s['llm_calls_per_eval'], 1)} | {_f(s['input_tokens_per_eval'], 0)} | "
            f"{_f(s['output_tokens_per_eval'], 0)} | {_f(s['seconds_per_eval'], 1)} |"
        )
    for k, v in doc.get("notes", {}).items():
        lines.append(f"\n- {k}: {v}")
    lines.append(f"\nRows: {', '.join(doc['row_ids'])}.")
    return "\n".join(lines) + "\n"


def eval_cpu(doc: dict[str, Any]) -> str:
    lines = ["## eval_cpu (the app's CPU per scored call, fake judge)\n", _head(doc)]
    lines.append(
        "| scoring | CPU ms/call (median) | min | max | judge calls/call | evaluations | RAG spans |"
    )
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for m in doc["modes"]:
        lines.append(
            f"| {m['mode']} | {_f(m['cpu_ms_per_call_median'], 3)} | {_f(m['cpu_ms_per_call_min'], 3)} | "
            f"{_f(m['cpu_ms_per_call_max'], 3)} | {_f(m['judge_calls_per_call'])} | "
            f"{m['spans']['evaluations']} | {m['spans']['rag_spans']} |"
        )
    return "\n".join(lines) + "\n"


def fleet(doc: dict[str, Any]) -> str:
    latency_ms = doc["judge_latency_s"] * 1000
    title = (
        f"## fleet (`faithtrace serve` replicas behind the Collector; judge {latency_ms:.0f} ms, "
        f"--concurrency {doc['concurrency']})\n"
    )
    lines = [title, _head(doc)]
    lines.append(
        "| replicas | RAG traces | scored | duplicates | evaluations/s | steady ev/s | judge-bound ev/s "
        "| speedup | target |"
    )
    lines.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in doc.get("scaling", []):
        met = "met" if r["meets_target"] else "missed"
        lines.append(
            f"| {r['replicas']} | {r['rag_traces']} | {r['scored']} | {r['duplicates']} | "
            f"{_f(r['evaluations_per_s'])} | {_f(r['steady_per_s'])} | {_f(r['judge_bound_per_s'])} | "
            f"{_f(r['speedup'])} | {_f(r['target'], 1)} ({met}) |"
        )
    spool = doc.get("spool_cost")
    if spool:
        lines += [
            "",
            f"Cost of `--spool` for chat traces ({spool['chat_traces']} roots without a retriever, "
            f"{spool['roots_per_request']} to a request, one replica): "
            f"{_f(spool['added_us_per_chat_trace'], 1)} µs of CPU added per chat trace.",
            "",
            "| replica | CPU µs per chat trace | parts spooled | traces left in the spool after the drop |",
            "| --- | ---: | ---: | ---: |",
        ]
        for key, name in (("no_spool", "without --spool"), ("spool", "with --spool")):
            r = spool[key]
            lines.append(
                f"| {name} | {_f(r['cpu_us_per_chat_trace'], 1)} | {r['spool_kept']} | "
                f"{r['spool_traces_after']} |"
            )
    return "\n".join(lines) + "\n"


def fleet_openinference(doc: dict[str, Any]) -> str:
    lines = [
        "## fleet_openinference (OpenInference apps through the Collector, 2 `faithtrace serve` replicas)\n",
        _head(doc),
        "| scenario | config | RAG traces | lost | wrong span or text | duplicates | chat traces scored "
        "| root not in sink | lost, root in sink | evaluated at the fault | outage s | graceful stops s "
        "| parts spooled / sent back | seconds |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for r in doc.get("openinference", []):
        # Each graceful stop's time from SIGTERM to exit (runs before stop_s was recorded have none).
        stops = ", ".join(_f(s, 1) for s in r.get("stop_s") or []) or "–"
        lines.append(
            f"| {r['scenario']} | {r['config']} | {r['rag_traces']} | {r['lost']} | {r['wrong']} | "
            f"{r['duplicates']} | {r['non_rag_scored']} | {_f(r.get('root_not_in_sink'))} | "
            f"{_f(r.get('lost_accepted'))} | {_f(r.get('evaluated_at_fault'))} | "
            f"{_f(r.get('outage_s'), 1)}{' (SIGKILL after the grace)' if r.get('stop_forced') else ''} | "
            f"{stops} | {_spooled(r)} | {_f(r['seconds'], 1)} |"
        )
    return "\n".join(lines) + "\n"


def _spooled(r: dict[str, Any]) -> str:
    # Runs before `faithtrace serve --spool` existed have no such figures.
    if r.get("spool_kept") is None:
        return "–"
    return f"{r['spool_kept']} / {r['spool_replayed']}"


def fleet_ceiling(doc: dict[str, Any]) -> str:
    c = doc["ceiling"]
    lines = [
        f"## fleet_ceiling (load-balancing path at steady state; --concurrency {c['concurrency']}, "
        f"{c['traces']} RAG traces per run)\n",
        _head(doc),
        "CPU in cores (the machine has 2); in flight: evaluations the replicas held, summed.\n",
        "| judge ms | replicas | consumers | steady ev/s | window s | judge-bound ev/s | in flight "
        "| requests open | machine CPU % | replicas | busiest replica | Collector | judge | load | missing "
        "| duplicates |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: |",
    ]
    for run in c["runs"]:
        for r in run["rows"]:
            lines.append(
                f"| {run['judge_latency_s'] * 1000:.0f} | {r['replicas']} | {r.get('num_consumers', 32)} | "
                f"{_f(r['steady_per_s'], 1)} | "
                f"{_f(r['window_s'], 1)} | {_f(r['judge_bound_per_s'], 0)} | "
                f"{_f(r.get('in_flight_mean'), 0)} | {_f(r.get('requests_open_mean'), 1)} | "
                f"{_f(r.get('machine_cpu_pct'), 0)} | {_f(r.get('replicas_cores'))} | "
                f"{_f(r.get('busiest_replica_cores'))} | {_f(r.get('collector_cores'))} | "
                f"{_f(r.get('judge_cores'))} | {_f(r.get('load1_mean'), 1)} | {r['missing']} | "
                f"{r['duplicates']} |"
            )
    return "\n".join(lines) + "\n"


def probes(rows: list[dict[str, Any]]) -> str:
    from benchmarks.judgment import (
        probes as probes_script,  # the script's own table, so the page and `--table-only` agree
    )

    return (
        "## probes (embedded judge, 100 hand-written probes, default options)\n\n"
        "`benchmarks/results/probes_rows.jsonl` (per-probe rows; the run's command and machine are in "
        "benchmarks/README.md)\n\n" + probes_script.table(rows) + "\n"
    )


INTRO = """# Benchmarks

<!-- generated by `python benchmarks/report.py` from benchmarks/results/; do not edit -->

The latest run of each benchmark, rendered from the files in `benchmarks/results/` (one per benchmark). How
each is measured, what the targets are, and the reports behind the defaults (with the commands that made
every figure) are in `benchmarks/README.md`; `make bench` runs the quick versions. The machine is a shared
2-core CPU: compare ratios within one run, not absolute times across runs.
"""


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "accuracy": accuracy,
    "overhead": overhead,
    "throughput": throughput,
    "eval_cpu": eval_cpu,
    "fleet": fleet,
    "fleet_openinference": fleet_openinference,
    "fleet_ceiling": fleet_ceiling,
}


# Results whose file is not named after the script that makes them.
SCRIPTS = {
    "fleet_openinference": "fleet.py --phases openinference",
    "fleet_ceiling": "fleet.py --phases ceiling",
}


def _other(doc: dict[str, Any], path: Path) -> str:
    """A result this script has no table for yet: where it is, so that it is never silently left out."""
    title = doc.get("benchmark", path.stem)
    return f"## {title}\n\n{_head(doc)}\nFigures: `benchmarks/results/{path.name}`.\n"


def _results() -> list[tuple[Path, dict[str, Any]]]:
    """Every result file, the benchmarks in RENDERERS' order; a full run hides its --quick one."""
    found = []
    for path in sorted((HERE / "results").glob("*.json")):
        full = path.with_name(path.name.replace("-quick.json", ".json"))
        if path.name.endswith("-quick.json") and full.exists():
            continue
        found.append((path, json.loads(path.read_text(encoding="utf-8"))))
    order = list(RENDERERS)

    def rank(item: tuple[Path, dict[str, Any]]) -> tuple[int, str]:
        kind = item[1].get("benchmark", "")
        return (order.index(kind) if kind in order else len(order), item[0].name)

    return sorted(found, key=rank)


def page() -> str:
    """The whole page, from the result files as they are now."""
    parts = [INTRO]
    results = _results()
    for path, doc in results:
        render = RENDERERS.get(doc.get("benchmark", ""))
        parts.append(render(doc) if render else _other(doc, path))
    seen = {doc.get("benchmark") for _, doc in results}
    for kind in RENDERERS:
        if kind not in seen:
            script = SCRIPTS.get(kind, f"{kind}.py")
            parts.append(f"## {kind}\n\nnot run yet (`python benchmarks/{script}`)\n")
    rows_file = HERE / "results" / "probes_rows.jsonl"
    if rows_file.exists():
        lines = rows_file.read_text(encoding="utf-8").splitlines()
        parts.append(probes([json.loads(line) for line in lines if line.strip()]))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is out of date")
    args = parser.parse_args(argv)
    wanted = page()
    if args.check:
        if PAGE.read_text(encoding="utf-8") != wanted:
            print(f"{PAGE} is out of date: run python benchmarks/report.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    print(f"updated {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
