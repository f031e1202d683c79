"""The Kafka path of the scoring fleet: scaling with 1, 2, 4 replicas, per-component cost, and the delivery
scenarios at full size.

Every figure comes from real processes on 127.0.0.1: a KRaft broker (collector/fetch-kafka.sh), the Collector
that collector/build.sh builds running collector/otelcol/fleet-kafka.yaml (Kafka exporter keyed by trace ID,
persistent queue; results back on its results receiver into a `file` sink), `faithtrace serve --kafka`
replicas in one consumer group, and the fixed-latency judge stand-in (benchmarks/_shared/fakejudge.py).

1. scaling: the decorated app sends T RAG traces through the Collector into the topic first; then each run
   starts N replicas in a fresh consumer group, which reads the whole topic from the start. The rate is
   taken from the sink's timestamps of the evaluations that ended once every replica held a partition,
   between their 10th and 90th percentile (steady state: the group formed, no replica running dry); the
   whole-run rate is printed too. Each replica's,
   the broker's and the Collector's CPU seconds over the run give the cost per evaluation.
2. scenarios: the decorated app and the LlamaIndex app (OpenInference) together, T traces each, through
   no fault, saturated replicas, `kill -9` of a replica, a broker restart, a Collector SIGKILL and a graceful
   Collector restart (SIGTERM, SIGKILL after 60 s): missing, duplicates, how long the Collector took to stop.

    python benchmarks/fleet/fleet_kafka.py --quick        # ~6 min on 2 cores
    python benchmarks/fleet/fleet_kafka.py                # 600 traces per scaling run, 500 per scenario

On a shared 2-core machine the app, the Collector, the broker, the judge and every replica compete for the
same cores: read the ratios, the CPU per evaluation, and the load average printed with the results.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks.*`
sys.path.insert(0, str(ROOT / "tests"))  # the fleet fixtures the tests use

from _fleet_fixtures import (  # noqa: E402
    EVALUATION_SPAN,
    Proc,
    app_traces,
    collect,
    otelcol_binary,
    rag_of,
    read_spans,
    serve_available,
    start_app,
    wait_app_done,
    wait_until,
)
from _kafka_fixtures import Broker, app_answers, kafka_broker, kafka_fleet, start_oi_app  # noqa: E402
from _redis_fixtures import redis_server  # noqa: E402
from benchmarks._shared import common as _common  # noqa: E402
from benchmarks.fleet.fleet import _cpu_seconds, _steady_rate  # noqa: E402


def _cpu(proc: Proc | None) -> float:
    if proc is None or proc.popen is None or not proc.alive:
        return 0.0
    try:
        return _cpu_seconds(proc.popen.pid)
    except OSError:
        return 0.0


def topic_size(broker: Broker, topic: str) -> int:
    """Messages in the topic (sum of the partitions' high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "faithtrace-bench-size"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
        )
    finally:
        consumer.close()


def scaling(
    otelcol: str, broker: Broker, replicas: list[int], traces: int, latency: float, concurrency: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=max(replicas) * 2)
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp,
        kafka_fleet(Path(tmp), otelcol, broker, topic, latency, max_seconds=3600) as group,
    ):
        group.start_collector()
        before = {"collector": _cpu(group.collector), "broker": _cpu(broker.proc)}
        wall = time.monotonic()
        app = start_app(group, count=traces, interval=0.0)
        wait_app_done(app, timeout=900)
        expected = app_traces(app)
        # The app's RAG and plain traces, one message each, all in the topic: what producing them cost.
        wait_until(
            "every trace in the topic",
            lambda: topic_size(broker, topic) >= 2 * traces,
            group.collector or app,
            600,
        )
        produce = {
            "traces_in_topic": topic_size(broker, topic),
            "seconds": round(time.monotonic() - wall, 1),
            "collector_cpu_ms_per_trace": round(
                1000 * (_cpu(group.collector) - before["collector"]) / (2 * traces), 2
            ),
            "broker_cpu_ms_per_trace": round(1000 * (_cpu(broker.proc) - before["broker"]) / (2 * traces), 2),
        }
        print(f"\nproducing (app -> Collector -> topic, RAG and plain traces): {produce}")
        for n in replicas:
            group.group = f"{topic}-{n}"
            first = len(group.scorers)
            for _ in range(n):
                group.add_consumer(concurrency)
            for proc, _, _ in group.scorers[first:]:
                proc.log.write_text("")
            group.wait_scorers_ready()
            cpu_before = {id(p): _cpu(p) for p in (group.collector, broker.proc)}
            wall = time.monotonic()
            sink_before = {(s["traceId"], s["spanId"]) for s in read_spans(group.traces_file)}

            # When every replica first held a partition (ns since the epoch), and the evaluations by then.
            joined: list[int] = []
            joined_cpu: list[float] = []

            def done(n: int = n, joined: list[int] = joined, joined_cpu: list[float] = joined_cpu) -> bool:
                stats = group.consumer_stats()[-n:]
                if not joined and len(stats) == n and all(s["kafka_partitions"] for s in stats):
                    # From here on the replicas' CPU is scoring, not start-up (litellm's import).
                    joined += [time.time_ns(), sum(s["scored"] for s in stats)]
                    joined_cpu.append(sum(_cpu(p) for p, _, _ in group.scorers))
                return sum(s["scored"] + s["incomplete"] for s in stats) >= traces

            wait_until(f"{n} replicas done", done, group.scorers[first][0], 1800)
            wall = time.monotonic() - wall
            stats = group.consumer_stats()[-n:]
            replica_cpu = sum(_cpu(p) for p, _, _ in group.scorers[first:])
            other = {
                "collector": _cpu(group.collector) - cpu_before[id(group.collector)],
                "broker": _cpu(broker.proc) - cpu_before[id(broker.proc)],
            }
            time.sleep(2.0)
            spans = [
                s for s in read_spans(group.traces_file) if (s["traceId"], s["spanId"]) not in sink_before
            ]
            ends = [int(s["endTimeUnixNano"]) for s in spans if s["name"] == EVALUATION_SPAN]
            scored = sum(s["scored"] for s in stats)
            seconds = (max(ends) - min(ends)) / 1e9 if len(ends) > 1 else float("nan")
            rows.append(
                {
                    "replicas": n,
                    "scored": scored,
                    "steady_per_s": _steady_rate([e for e in ends if e >= joined[0]] if joined else ends),
                    "whole_run_per_s": round(len(ends) / seconds, 2) if seconds == seconds else None,
                    "duplicates": sum(s["duplicates"] for s in stats),
                    "retries": sum(s["kafka_retries"] for s in stats),
                    "paused_max": max(s["kafka_paused"] for s in stats),
                    "replica_cpu_ms_per_eval": round(
                        1000 * (replica_cpu - joined_cpu[0]) / max(1, scored - joined[1]), 1
                    )
                    if joined
                    else None,
                    "broker_cpu_ms_per_eval": round(1000 * other["broker"] / max(1, scored), 2),
                    "collector_cpu_ms_per_eval": round(1000 * other["collector"] / max(1, scored), 2),
                    "wall_s": round(wall, 1),
                }
            )
            for proc, _, _ in group.scorers[first:]:
                proc.stop(timeout=30)
            group.scorers.clear()  # the next run starts its own replicas (stop_all still has these)
        assert len(expected) == traces
    base = rows[0]["steady_per_s"] or float("nan")
    for row in rows:
        row["speedup"] = round((row["steady_per_s"] or 0) / base, 2)
        row["target"] = round(0.8 * row["replicas"] / rows[0]["replicas"], 2)
        row["meets_target"] = row["speedup"] >= row["target"]
    return produce, rows


def scenario(
    otelcol: str, broker: Broker, fault: str, traces: int, latency: float, redis_url: str | None = None
) -> dict[str, Any]:
    """One fault with the two apps; ``redis_url``: the replicas share that Redis (``--redis``)."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=4)
    with (
        tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp,
        kafka_fleet(Path(tmp), otelcol, broker, topic, latency, max_seconds=3600) as group,
    ):
        group.redis_url = redis_url
        for _ in range(2):
            # Saturated: each replica judges one evaluation at a time and admits 2; the apps send faster
            # than that, so the backlog waits in the topic (refusals, if any, are retried in place).
            if fault == "saturated":
                group.add_consumer(1, "--max-pending", "2")
            else:
                group.add_consumer(16)
        group.wait_scorers_ready()
        group.start_collector()
        kwargs: dict[str, Any] = {"export_timeout_s": 60} if fault.startswith("collector") else {}
        stop_s: float | None = None
        forced: bool | None = None
        decorated = start_app(group, traces, 0.0, **kwargs)
        llama = start_oi_app(group, "llama", traces, 0.0, **kwargs)
        started = time.monotonic()
        if fault not in ("none", "saturated"):

            def halfway() -> bool:
                spans = read_spans(group.traces_file)
                return sum(1 for s in spans if s["name"] == EVALUATION_SPAN) >= traces // 2

            assert group.collector is not None
            wait_until("evaluations arriving", halfway, group.collector, 900)
            if fault == "kill":
                group.scorers[1][0].kill9()
            elif fault == "broker":
                broker.restart()
            elif fault == "collector":
                assert group.collector is not None
                group.collector.kill9()
                group.start_collector()
            elif fault == "collector-restart":
                # SIGTERM, then SIGKILL after the kit's terminationGracePeriodSeconds (60) if still running.
                took, forced = group.stop_collector(0, grace_s=60.0)
                stop_s = round(took, 1)
                group.start_collector()
        wait_app_done(decorated, timeout=1800)
        wait_app_done(llama, timeout=1800)
        expected = {**app_traces(decorated), **{t: s for t, (s, _) in app_answers(llama).items()}}
        answers = {t: a for t, (_, a) in app_answers(llama).items()}
        run = collect(group, expected, timeout=1800)
        wrong = 0
        for span in run.spans:
            if span["name"] != EVALUATION_SPAN:
                continue
            trace_id, span_id = rag_of(span)
            if span_id != expected.get(trace_id) or (
                trace_id in answers and span["attributes"].get("input.value") != answers[trace_id]
            ):
                wrong += 1
        stats = group.consumer_stats()
        requests = group.judge_requests()
        return {
            "scenario": fault,
            "store": "redis" if redis_url else "none",
            "rag_traces": len(expected),
            "missing": len(run.missing),
            "wrong_span_or_answer": wrong,
            "duplicates": run.duplicates,
            "duplicates_pct": round(100 * run.duplicates / max(1, len(expected)), 2),
            # One judge request per evaluation here: those beyond one per trace were judged again, whether
            # their results reached the sink twice (duplicates) or not (in flight in the killed replica).
            "judge_requests_beyond_one_per_trace": requests - len(expected),
            "scored_elsewhere": sum(s.get("scored_elsewhere", 0) for s in stats),
            "replica_counted_duplicates": sum(s["duplicates"] for s in stats),
            "refused_and_retried": sum(s["kafka_retries"] for s in stats),
            "seconds": round(time.monotonic() - started, 1),
            "collector_stop_s": stop_s,
            "stop_forced": forced,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer traces (about 6 minutes)")
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--latencies", default="0.3,0.01", help="judge latency per request, seconds")
    parser.add_argument("--concurrency", type=int, default=4, help="`faithtrace serve --concurrency`")
    parser.add_argument("--traces", type=int, help="RAG traces per scaling run (default 120 quick, 600)")
    parser.add_argument("--scenario-traces", type=int, help="traces per app per scenario (40 quick, 500)")
    parser.add_argument("--phases", default="scaling,scenarios")
    parser.add_argument(
        "--scenarios",
        default="none,saturated,kill,broker,collector,collector-restart",
        help="faults of the scenarios phase: none, saturated (replicas at --concurrency 1 --max-pending 2), "
        "kill (a replica), broker (restart), collector (SIGKILL), collector-restart (SIGTERM, 60 s grace)",
    )
    parser.add_argument(
        "--stores",
        default="none",
        help="run the scenarios with each: none (each replica alone), redis (the replicas share a Redis: "
        "--redis, its record of scored traces checked before judging)",
    )
    parser.add_argument("--out", help="results JSON (default benchmarks/results/fleet-kafka[-quick].json)")
    args = parser.parse_args()
    reason = serve_available()
    if reason is not None:
        sys.exit(f"fleet_kafka.py: {reason}")
    otelcol = os.environ.get("FAITHTRACE_OTELCOL_BIN") or otelcol_binary()
    traces = args.traces or (120 if args.quick else 600)
    scenario_traces = args.scenario_traces or (40 if args.quick else 500)
    phases = set(args.phases.split(","))
    results: dict[str, Any] = {"concurrency": args.concurrency}
    with tempfile.TemporaryDirectory(prefix="kafka-broker-") as tmp, kafka_broker(Path(tmp)) as broker:
        if "scaling" in phases:
            for latency in (float(x) for x in args.latencies.split(",")):
                replicas = [int(n) for n in args.replicas.split(",")]
                produce, rows = scaling(otelcol, broker, replicas, traces, latency, args.concurrency)
                results[f"scaling_{int(latency * 1000)}ms"] = {"produce": produce, "rows": rows}
                print(
                    f"\nKafka path scaling: {traces} RAG traces in the topic, judge {latency * 1000:.0f} "
                    f"ms/request, --concurrency {args.concurrency} (steady: evaluations ended once every "
                    f"replica held a partition, between their 10th and 90th percentile)"
                )
                keys = [
                    "replicas", "steady_per_s", "speedup", "target", "whole_run_per_s", "scored",
                    "duplicates", "replica_cpu_ms_per_eval", "broker_cpu_ms_per_eval",
                    "collector_cpu_ms_per_eval", "wall_s",
                ]  # fmt: skip
                print(_common.table(keys, [[r[k] for k in keys] for r in rows]))
        if "scenarios" in phases:
            rows = []
            for store in args.stores.split(","):
                with contextlib.ExitStack() as stack:
                    url = None
                    if store == "redis":
                        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="redis-")))
                        url = stack.enter_context(redis_server(workdir)).url
                    rows += [
                        scenario(otelcol, broker, fault, scenario_traces, 0.05, url)
                        for fault in args.scenarios.split(",")
                    ]
            results["scenarios"] = rows
            print(f"\nDelivery: decorated + LlamaIndex apps, {scenario_traces} traces each, 2 replicas")
            keys = list(rows[0])
            print(_common.table(keys, [[r[k] for k in keys] for r in rows]))
    results["load_average"] = os.getloadavg()
    print(f"\nload average: {results['load_average']}")
    out = args.out or _common.default_out("fleet-kafka", args.quick)
    print(f"results: {_common.write_results('fleet_kafka', results, out)}")


if __name__ == "__main__":
    main()
