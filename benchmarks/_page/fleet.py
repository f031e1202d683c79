"""The page's fleet part: scaling on both paths, the ceiling, delivery through faults, costs (fleet.py,
fleet_kafka.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from benchmarks._page import plots
from benchmarks._page.results import Commands, Figures, Headline, Run, fmt, latest, of_kind

LB = "load-balancing"
KAFKA = "Kafka"
# The faults the headline reports, per path (the scenario names the scripts write).
LB_FAULTS = {
    "replica kill -9 + restart": "replica kill -9",
    "replica kill -9 + restart, --redis": "replica kill -9 with --redis",
    "Collector SIGKILL": "Collector SIGKILL",
    "Collector restart": "Collector restart",
    "2 Collectors, rolling restart": "rolling restart of 2 Collectors",
}
KAFKA_SCENARIOS = {
    "none": "no fault",
    "saturated": "saturated replicas",
    "kill": "replica kill -9",
    "kill, --redis": "replica kill -9 with --redis",
    "broker": "broker restart",
    "collector": "Collector SIGKILL",
    "collector-restart": "Collector restart",
}
KIT_CONFIG = "fleet.yaml"
# The load-balancing path's scenarios in the faults table's order: no fault, then each fault.
LB_ORDER = [
    "normal",
    "root 3 s late",
    "saturated",
    "non-RAG flood x10",
    "replica kill -9 + restart",
    "replica kill -9 + restart, --redis",
    "replica kill -9 + restart, no spool",
    "Collector SIGKILL",
    "Collector restart",
    "2 Collectors, rolling restart",
    "2 Collectors, rolling restart, decorated app",
    "2 Collectors, rolling restart, OTLP/HTTP app",
]


def _scaling(runs: list[Run]) -> dict[Any, tuple[Run, tuple[str, ...]]]:
    """(path, judge ms, concurrency) -> the latest run measuring it, and the keys down to its rows."""

    def items() -> Iterator[tuple[Any, Run, tuple[str, ...]]]:
        for run in of_kind(runs, "fleet"):
            if run.doc.get("scaling"):
                yield (
                    (LB, round(run.doc["judge_latency_s"] * 1000), run.doc["concurrency"]),
                    run,
                    ("scaling",),
                )
        for run in of_kind(runs, "fleet_kafka"):
            for key, ms in (("scaling_300ms", 300), ("scaling_10ms", 10)):
                if (run.doc.get(key) or {}).get("rows"):
                    yield (KAFKA, ms, run.doc["concurrency"]), run, (key, "rows")

    return latest(items())


def _faults(runs: list[Run]) -> dict[Any, tuple[Run, tuple[str | int, ...]]]:
    """(path, scenario, config, app judge ms) -> the latest run of that setting, and the keys to its row."""

    def items() -> Iterator[tuple[Any, Run, tuple[str | int, ...]]]:
        for run in of_kind(runs, "fleet_openinference"):
            # A file without the phase's own judge latency ran the phase's default judge, 10 ms.
            ms = round(run.doc.get("openinference_judge_latency_s", 0.01) * 1000)
            for i, r in enumerate(run.doc["openinference"]):
                yield (LB, _stored(r), r["config"], ms), run, ("openinference", i)
        for run in of_kind(runs, "fleet_kafka"):
            for i, r in enumerate(run.doc.get("scenarios") or []):
                yield (KAFKA, _stored(r), "fleet-kafka.yaml", None), run, ("scenarios", i)

    return latest(items())


def _stored(row: dict[str, Any]) -> str:
    """A scenario's name, marked when its replicas shared a Redis (`--redis`: the record of scored traces)."""
    return f"{row['scenario']}, --redis" if row.get("store") == "redis" else str(row["scenario"])


def headlines(runs: list[Run]) -> list[Headline]:
    out = []
    for (path, ms, _), (run, keys) in _scaling(runs).items():
        if ms != 300:
            continue
        f = Figures()
        rows = run.doc
        for k in keys:
            rows = rows[k]
        answer = ", ".join(
            f"{f(run, *keys, i, 'replicas')} → {f(run, *keys, i, 'steady_per_s')}" for i in range(len(rows))
        )
        question = f"Evaluations/s against replicas, {path} path (judge 300 ms)"
        out.append(
            Headline(question, f"{answer} (replicas → evaluations/s)", tuple(f.cited), "fleet-scaling")
        )
    ceiling = [
        (run, i, j)
        for run in of_kind(runs, "fleet_ceiling")
        for i, c in enumerate(run.doc["ceiling"]["runs"])
        for j, _ in enumerate(c["rows"])
    ]
    if ceiling:
        run, i, j = max(
            ceiling, key=lambda x: x[0].doc["ceiling"]["runs"][x[1]]["rows"][x[2]]["steady_per_s"]
        )
        f = Figures()
        at: tuple[str | int, ...] = ("ceiling", "runs", i)
        answer = (
            f"{f(run, *at, 'rows', j, 'steady_per_s', digits=1)} evaluations/s with "
            f"{f(run, *at, 'rows', j, 'replicas')} replicas and a "
            f"{f(run, *at, 'judge_latency_s', digits=1)} s "
            f"judge, the 2-core machine's CPU at {f(run, *at, 'rows', j, 'machine_cpu_pct', digits=0)} %"
        )
        out.append(Headline("Most evaluations/s one machine held", answer, tuple(f.cited), "fleet-ceiling"))
    faults = _faults(runs)
    for path, names in ((LB, LB_FAULTS), (KAFKA, KAFKA_SCENARIOS)):
        f = Figures()
        parts = []
        for scenario, label in names.items():
            found = [
                (run, row)
                for (p, s, config, _), (run, row) in faults.items()
                if p == path and s == scenario and (path == KAFKA or config == KIT_CONFIG)
            ]
            if not found or scenario in ("none", "saturated"):
                continue
            run, row = max(found, key=lambda rk: (rk[0].date, rk[0].path.name))
            lost, wrong = ("lost", "wrong") if path == LB else ("missing", "wrong_span_or_answer")
            parts.append(
                f"{label}: {f(run, *row, lost)} lost, {f(run, *row, wrong)} wrong, "
                f"{f(run, *row, 'duplicates')} duplicates of {f(run, *row, 'rag_traces')}"
            )
        if parts:
            question = f"Faults survived, {path} path"
            out.append(Headline(question, "; ".join(parts), tuple(f.cited), "fleet-faults"))
    return out


def sections(runs: list[Run], images: dict[str, str]) -> list[tuple[str, list[Run]]]:
    out = []
    scaling = _scaling(runs)
    if scaling:
        out.append(_scaling_section(scaling, images))
    ceilings = of_kind(runs, "fleet_ceiling")
    if ceilings:
        out.append(_ceiling(ceilings))
    faults = _faults(runs)
    if faults:
        out.append(_faults_section(faults))
    costs = [run for run in of_kind(runs, "fleet") if run.doc.get("spool_cost")]
    if costs:
        out.append(_spool_cost(max(costs, key=lambda r: r.date)))
    budgets = [run for run in of_kind(runs, "fleet_budget") if run.doc.get("budget") or run.doc.get("cost")]
    if budgets:
        out.append(_budget(max(budgets, key=lambda r: r.date)))
    return out


def _rows(run: Run, keys: tuple[str | int, ...]) -> list[dict[str, Any]]:
    doc: Any = run.doc
    for k in keys:
        doc = doc[k]
    return list(doc)


def _scaling_section(
    scaling: dict[Any, tuple[Run, tuple[str, ...]]], images: dict[str, str]
) -> tuple[str, list[Run]]:
    cmds = Commands()
    lines = [
        "### Evaluations per second against replicas {#fleet-scaling}\n",
        "`faithtrace serve` replicas behind the real Collector, on the load-balancing path (spans routed by "
        "trace ID) and the Kafka path (one consumer group), with the judge stand-in answering in a fixed "
        "time; the steady-state rate is read from the trace backend's own timestamps. With a 300 ms judge "
        "the replicas wait on the judge, and the rate should grow with them; with a 10 ms judge the 2-core "
        "machine's CPU is the limit.\n",
        "| path | judge ms | concurrency per replica | replicas | RAG traces | scored | duplicates "
        "| whole run ev/s | steady ev/s | run |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    panels: dict[int, list[plots.Series]] = {}
    for (path, ms, concurrency), (run, keys) in sorted(scaling.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        rows = _rows(run, keys)
        for r in rows:
            whole = r.get("whole_run_per_s", r.get("evaluations_per_s"))
            lines.append(
                f"| {path} | {ms} | {concurrency} | {r['replicas']} | {r.get('rag_traces', '–')} | "
                f"{r['scored']} | "
                f"{r['duplicates']} | {fmt(whole)} | {fmt(r['steady_per_s'])} | {cmds.ref(run)} |"
            )
        panels.setdefault(ms, []).append((f"{path} path", [(r["replicas"], r["steady_per_s"]) for r in rows]))
    images["fleet-scaling.svg"] = plots.scaling([(f"judge {ms} ms", series) for ms, series in panels.items()])
    lines += [
        "",
        "![Evaluations/s against replicas](images/benchmarks/fleet-scaling.svg)",
        "",
        cmds.markdown(),
    ]
    return "\n".join(lines), cmds.runs


def _ceiling(runs: list[Run]) -> tuple[str, list[Run]]:
    cmds = Commands()
    kept = latest(
        ((c["judge_latency_s"], r["replicas"], r.get("num_consumers", 32)), run, r)
        for run in sorted(runs, key=lambda r: r.date)
        for c in run.doc["ceiling"]["runs"]
        for r in c["rows"]
    )
    lines = [
        "### Ceiling of the load-balancing path {#fleet-ceiling}\n",
        "The steady rate with a slow judge (seconds per request) and replicas that take hundreds of "
        "evaluations at once, so that neither the judge nor the replicas' concurrency limits it: what the "
        "machine's CPU and the Collector's exporter allow. CPU in cores of the 2-core machine; in flight: "
        "the "
        "evaluations the replicas held, summed; consumers: the Collector queue's senders.\n",
        "| judge s | replicas | consumers | steady ev/s | in flight | machine CPU % | replicas' CPU | "
        "Collector CPU | missing | duplicates | run |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (judge_s, replicas, consumers), (run, r) in sorted(kept.items(), key=lambda kv: kv[0]):
        lines.append(
            f"| {fmt(judge_s, 1)} | {replicas} | {consumers} | {fmt(r['steady_per_s'], 1)} | "
            f"{fmt(r.get('in_flight_mean'), 0)} | {fmt(r.get('machine_cpu_pct'), 0)} | "
            f"{fmt(r.get('replicas_cores'))} | "
            f"{fmt(r.get('collector_cores'))} | {r['missing']} | {r['duplicates']} | {cmds.ref(run)} |"
        )
    lines += ["", cmds.markdown()]
    return "\n".join(lines), cmds.runs


def _faults_section(faults: dict[Any, tuple[Run, tuple[str | int, ...]]]) -> tuple[str, list[Run]]:
    cmds = Commands()
    lines = [
        "### Delivery through faults {#fleet-faults}\n",
        "Real LlamaIndex and LangChain apps traced by OpenInference alone (load-balancing path) and the "
        "decorated app with the LlamaIndex app (Kafka path), through the Collector to `faithtrace serve`, "
        "while "
        "a fault strikes mid-run. Lost: RAG traces never scored; wrong: scored against another trace's "
        "span or "
        "text; duplicates: evaluations beyond one per trace. Config: the Collector's configuration "
        "(`fleet.yaml`, the kit's, or with the groupbytrace processor added). Judge: the stand-in's latency "
        "the apps' traces were scored with. Spooled / sent back: parts a replica kept on disk for a trace "
        "whose root had not come, and how many it sent back after a restart (– where the run predates the "
        "spool). Outage: how long the faulted process was gone (on the Kafka path, the Collector's stop).\n",
        "| path | scenario | config | judge ms | RAG traces | lost | wrong | duplicates | spooled / sent "
        "back "
        "| outage s | run |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def rank(item: tuple[Any, Any]) -> tuple[Any, ...]:
        path, scenario, config, ms = item[0]
        order = LB_ORDER if path == LB else list(KAFKA_SCENARIOS)
        at = order.index(scenario) if scenario in order else len(order)
        return (path != LB, at, scenario, config != KIT_CONFIG, config, -(ms or 0))

    for (path, scenario, config, ms), (run, keys) in sorted(faults.items(), key=rank):
        r = _rows(run, keys[:-1])[int(keys[-1])]
        if path == LB:
            spool = "–" if r.get("spool_kept") is None else f"{r['spool_kept']} / {r['spool_replayed']}"
            outage = fmt(r.get("outage_s"), 1)
            lost, wrong = r["lost"], r["wrong"]
        else:
            scenario = KAFKA_SCENARIOS.get(scenario, scenario)
            spool, outage = "–", fmt(r.get("collector_stop_s"), 1)
            lost, wrong = r["missing"], r["wrong_span_or_answer"]
        lines.append(
            f"| {path} | {scenario} | {config} | {fmt(ms)} | {r['rag_traces']} | {lost} | {wrong} | "
            f"{r['duplicates']} | {spool} | {outage} | {cmds.ref(run)} |"
        )
    lines += ["", cmds.markdown()]
    return "\n".join(lines), cmds.runs


def _spool_cost(run: Run) -> tuple[str, list[Run]]:
    spool = run.doc["spool_cost"]
    cmds = Commands()
    cmds.ref(run)
    lines = [
        "### Cost of the spool {#fleet-spool}\n",
        f"One replica's CPU per chat trace (a root without a retriever, {spool['roots_per_request']} to a "
        f"request, {spool['chat_traces']:,} traces): with `--spool`, each such part is appended to the "
        "on-disk "
        f"log before the answer; {fmt(spool['added_us_per_chat_trace'], 1)} µs added per chat trace.\n",
        "| replica | CPU µs per chat trace | parts spooled | traces left in the spool after the drop |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, name in (("no_spool", "without --spool"), ("spool", "with --spool")):
        r = spool[key]
        lines.append(
            f"| {name} | {fmt(r['cpu_us_per_chat_trace'], 1)} | {r['spool_kept']:,} | "
            f"{r['spool_traces_after']} |"
        )
    lines += ["", cmds.markdown()]
    return "\n".join(lines), cmds.runs


def _budget(run: Run) -> tuple[str, list[Run]]:
    """One judge budget for the fleet (fleet_budget.py): the judge's own count against it, and its cost."""
    cmds = Commands()
    ref = cmds.ref(run)
    lines = [
        "### One judge budget for the fleet {#fleet-budget}\n",
        "`faithtrace serve --redis` replicas sharing one budget of tokens per window, offered four times the "
        "load it allows. Most in a window: the most tokens the judge stand-in itself counted in any window "
        "(sliding, to the request); the target is the budget plus one evaluation's worth per replica that "
        "ran. Churn: replicas joining, killed -9 and stopped mid-run.\n",
        "| run | replicas | window s | budget tokens | most in a window | target | within | run |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in run.doc.get("budget") or []:
        lines.append(
            f"| {r['run']} | {r['replicas_ever']} | {fmt(r['window_s'], 0)} | {fmt(r['budget_tokens'])} | "
            f"{fmt(r['most_tokens_in_a_window'])} | {fmt(r['target_tokens'])} | {fmt(r['meets_target'])} | "
            f"{ref} |"
        )
    cost = run.doc.get("cost")
    if cost:
        lines += [
            "",
            "What the record of scored traces and the budget cost an evaluation (medians of rounds to three "
            "replicas side by side; latency with one evaluation at a time, judge 10 ms; store: the time "
            "an evaluation waited on Redis):\n",
            "| replica | CPU µs per evaluation | Redis CPU µs | store ms | p50 ms | p99 ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for key, name in (
            ("none", "alone"),
            ("record", "--redis"),
            ("record+budget", "--redis and a budget"),
        ):
            c = cost[key]
            lines.append(
                f"| {name} | {fmt(c['replica_cpu_us'], 0)} | {fmt(c['redis_cpu_us'], 0)} | "
                f"{fmt(c['store_ms'], 2)} | {fmt(c['p50_ms'], 1)} | {fmt(c['p99_ms'], 1)} |"
            )
    lines += ["", cmds.markdown()]
    return "\n".join(lines), cmds.runs
