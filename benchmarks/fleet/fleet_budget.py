"""One judge budget for the fleet (`faithtrace serve --redis`): what the replicas together spend against it,
steady and while replicas come and go, and what the budget itself costs an evaluation.

Every figure comes from real processes on 127.0.0.1: a Redis server (Debian's redis-server), the judge
stand-in (benchmarks/_shared/fakejudge.py), which reports usage with each reply and logs each request's
arrival and tokens, and `faithtrace serve` replicas that export their results to an OTLP sink in this
process. A load generator posts one remote RAG span per request (OTLP/HTTP), round robin over the live
replicas, faster than the budget allows.

1. steady: 4 replicas share B tokens per window (`--budget-window`, the hourly budget scaled to it) for three
   windows. The judge's log gives the most tokens it saw in any window (sliding, to the request); the target
   is B + one evaluation's worth per replica.
2. churn: the same, starting with 2 replicas; 2 join after half a window, one is killed -9 after one window,
   one stopped (SIGTERM) after 1.5, one joins after 2.
3. cost: three replicas side by side, without a store, with `--redis` alone (the record of scored traces)
   and with `--redis` and a budget that never binds; rounds of evaluations sent to each in turn: the
   replica's and Redis's CPU per evaluation, the request's latency, and the time each evaluation waited on
   the store (`store_ms_total` / evaluations, from /stats).

    python benchmarks/fleet/fleet_budget.py --quick     # windows of 20 s, ~5 minutes
    python benchmarks/fleet/fleet_budget.py             # windows of 60 s, ~12 minutes
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks.*`
sys.path.insert(0, str(ROOT / "tests"))  # the fixtures the tests use

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from _fleet_fixtures import Fleet, http_ok, serve_available, wait_until  # noqa: E402
from _redis_fixtures import RedisServer, redis_server  # noqa: E402
from benchmarks._shared import common as _common  # noqa: E402
from benchmarks._shared.common import fake_judge  # noqa: E402
from benchmarks.fleet.fleet import _cpu_seconds  # noqa: E402

DOCS = ["The Eiffel Tower is 330 metres tall.", "It was completed in 1889 for the World's Fair in Paris."]
ANSWER = "The tower rises 330 metres. Builders finished it in 1889. Paris is its home."


def rag_request(trace_id: int) -> bytes:
    """One span as the decorator records it with scoring="remote": everything the scorer needs."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "budget-app"
    span = rs.scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = trace_id.to_bytes(16, "big"), (1).to_bytes(8, "big"), "answer"
    attrs: dict[str, str | bool] = {
        "faithtrace.scoring.remote": True,
        "faithtrace.function": "answer",
        "input.value": f"Question {trace_id}: how tall is the Eiffel Tower?",
        "output.value": ANSWER,
    }
    attrs.update({f"retrieval.documents.{i}.document.content": d for i, d in enumerate(DOCS)})
    for key, value in attrs.items():
        a = span.attributes.add()
        a.key = key
        if isinstance(value, bool):
            a.value.bool_value = value
        else:
            a.value.string_value = value
    return req.SerializeToString()


@dataclass
class BudgetFleet(Fleet):
    """Replicas exporting to the sink in this process, no Collector."""

    sink_port: int = 0

    def scorer_env(self) -> dict[str, str]:
        env = super().scorer_env()
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{self.sink_port}"
        env["OTEL_METRIC_EXPORT_INTERVAL"] = "60000"
        return env


@contextmanager
def sink() -> Iterator[int]:
    """An OTLP/gRPC trace and metric sink (it takes everything and keeps nothing); yields its port."""
    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(0)


@contextmanager
def budget_fleet(judge_latency_s: float) -> Iterator[BudgetFleet]:
    """A judge stand-in, the sink and no replica yet; every process started is stopped on the way out."""
    with (
        tempfile.TemporaryDirectory(prefix="budget-bench-") as tmp,
        fake_judge(judge_latency_s, max_seconds=3600) as judge_url,
        sink() as sink_port,
    ):
        group = BudgetFleet(Path(tmp), "", judge_url=judge_url, spool=False, sink_port=sink_port)
        try:
            yield group
        finally:
            group.stop_all()


def post(http_port: int, trace_id: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    req = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v1/traces",
        rag_request(trace_id),
        {"content-type": "application/x-protobuf"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status = int(r.status)
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
    except OSError:
        status = 0  # the replica was killed with the request in flight
    return status, time.perf_counter() - t0


def stats(http_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/stats", timeout=5) as r:
        return dict(json.loads(r.read()))


def judge_get(group: Fleet, path: str) -> Any:
    with urllib.request.urlopen(group.judge_url.removesuffix("/v1") + path, timeout=30) as r:
        return json.loads(r.read())


def most_in_window(usage: list[tuple[float, int]], window_s: float) -> float:
    """The most tokens the judge saw in any ``window_s`` (sliding over the requests' arrival times)."""
    usage = sorted(usage)
    best = total = 0.0
    start = 0
    for t, tokens in usage:
        total += tokens
        while usage[start][0] <= t - window_s:
            total -= usage[start][1]
            start += 1
        best = max(best, total)
    return best


def warm_up(group: Fleet) -> None:
    """One evaluation per replica that has not made one yet: a replica's first evaluations run its
    pipeline's first-time work (seconds here) between their reservation and their judge call, and the judge
    then sees them late, in a window after the one they were charged to. In an hour's window that is noise;
    in these windows of seconds it would be most of what is measured."""
    for proc, _, http in group.scorers:
        if proc.alive and stats(http)["rag_items"] == 0:
            post(http, time.monotonic_ns() & ((1 << 63) - 1))


def _per_second(usage: list[tuple[float, int]], started: float) -> list[int]:
    counts: dict[int, int] = {}
    for t, _ in usage:
        counts[int(t - started)] = counts.get(int(t - started), 0) + 1
    return [counts.get(i, 0) for i in range(max(counts, default=-1) + 1)]


class Load:
    """Posts RAG spans at ``rate`` per second, round robin over the live replicas, until stopped."""

    def __init__(self, group: Fleet, rate: float, first_id: int) -> None:
        self.group = group
        self.rate = rate
        self.ids = itertools.count(first_id)
        self.stop = threading.Event()
        self.statuses: dict[int, int] = {}
        self.ready = [h for p, _, h in group.scorers if p.alive]  # the replicas that take load
        self.pool = concurrent.futures.ThreadPoolExecutor(32)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        for n in itertools.count():
            if self.stop.is_set():
                return
            alive = {h for p, _, h in self.group.scorers if p.alive}
            live = [h for h in self.ready if h in alive]
            if live:
                fut = self.pool.submit(post, live[n % len(live)], next(self.ids))
                fut.add_done_callback(self._count)
            time.sleep(max(0.0, t0 + (n + 1) / self.rate - time.monotonic()))

    def _count(self, fut: concurrent.futures.Future[tuple[int, float]]) -> None:
        status = fut.result()[0]
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.pool.shutdown(wait=True)


def budget_run(redis: RedisServer, args: argparse.Namespace, churn: bool, eval_tokens: int) -> dict[str, Any]:
    window = args.window
    budget = args.budget_evals * eval_tokens
    flags = (
        "--max-tokens-per-hour", str(int(budget * 3600 // window)),
        "--budget-window", str(window),
        "--redis", redis.url,
        "--fleet", f"bench-{time.monotonic_ns()}",
    )  # fmt: skip
    with budget_fleet(args.latency) as group:
        for _ in range(2 if churn else 4):
            group.add_scorer(args.concurrency, flags)
        group.wait_scorers_ready()
        warm_up(group)
        started = time.time()
        events: list[str] = []

        def join(n: int) -> None:
            """``n`` replicas more, taking load once ready and warmed up (the load goes to the others)."""
            for _ in range(n):
                proc, _, http = group.add_scorer(args.concurrency, flags)
                wait_until("/readyz OK", lambda h=http: http_ok(f"http://127.0.0.1:{h}/readyz"), proc, 120)
            warm_up(group)
            load.ready = [h for p, _, h in group.scorers if p.alive]

        with Load(group, args.rate, 1 << 40) as load:
            if churn:
                time.sleep(window / 2)
                join(2)
                events.append(f"{time.time() - started:.0f} s: 2 replicas joined (4)")
                time.sleep(window / 2)
                group.scorers[1][0].kill9()
                events.append(f"{time.time() - started:.0f} s: one killed -9 (3)")
                time.sleep(window / 2)
                group.scorers[2][0].stop(timeout=30)
                events.append(f"{time.time() - started:.0f} s: one stopped (2)")
                time.sleep(window / 2)
                join(1)
                events.append(f"{time.time() - started:.0f} s: one joined (3)")
                time.sleep(window)
            else:
                time.sleep(3 * window)
        time.sleep(2.0)  # the last evaluations finish
        usage = [(t, n) for t, n in judge_get(group, "/usage") if t >= started]
        live = [stats(h) for p, _, h in group.scorers if p.alive]
        largest = max((n for _, n in usage), default=0)
        most = most_in_window(usage, window)
        replicas = len(group.scorers)
        return {
            "run": "churn" if churn else "steady",
            "window_s": window,
            "budget_tokens": budget,
            "replicas_ever": replicas,
            "offered_per_s": args.rate,
            "judge_requests": len(usage),
            "tokens_total": sum(n for _, n in usage),
            "most_tokens_in_a_window": round(most),
            "largest_evaluation_tokens": largest,
            # The target: B + one evaluation's worth per replica that ran.
            "target_tokens": budget + replicas * largest,
            "meets_target": most <= budget + replicas * largest,
            "over_budget_evaluations": round(max(0.0, most - budget) / max(1, largest), 2),
            "skipped_live_replicas": sum(s["budget_skipped"] for s in live),
            # A store that did not answer in time (a loaded machine) leaves replicas on their shares.
            "store_errors_live_replicas": sum(s["store_errors"] for s in live),
            "granted_from_shares_live_replicas": sum(s["budget_granted_local"] for s in live),
            "granted_live_replicas": sum(s["budget_granted"] for s in live),
            "answers": load.statuses,
            # The judge's requests per second of the run: how the spend is spread over the windows.
            "judge_requests_per_s": _per_second(usage, started),
            "events": events,
        }


def cost_run(redis: RedisServer, args: argparse.Namespace) -> dict[str, Any]:
    """Rounds of evaluations to each of three replicas in turn: ``args.cost_evals`` eight at a time (CPU per
    evaluation, the replica's and Redis's), then ``args.cost_latency_evals`` one at a time (latency, and the
    time an evaluation waited on the store, on a replica with nothing else to do)."""
    kinds = {
        "none": (),
        "record": ("--redis", redis.url, "--fleet", "cost-record"),
        "record+budget": (
            *("--redis", redis.url, "--fleet", "cost-budget"),
            *("--max-tokens-per-hour", str(10**12), "--max-judge-requests-per-minute", str(10**9)),
        ),
    }
    assert redis.popen is not None
    with budget_fleet(0.01) as group:
        for flags in kinds.values():
            group.add_scorer(args.concurrency, flags)
        group.wait_scorers_ready()
        warm_up(group)
        per: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        ids = itertools.count(1 << 41)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for _ in range(args.cost_rounds):
                for (kind, _), (proc, _, http) in zip(kinds.items(), group.scorers, strict=True):
                    assert proc.popen is not None
                    before = stats(http)
                    cpu, redis_cpu = _cpu_seconds(proc.popen.pid), _cpu_seconds(redis.popen.pid)
                    batch = [(http, next(ids)) for _ in range(args.cost_evals)]
                    done = list(pool.map(lambda job: post(*job), batch))
                    after = stats(http)
                    scored = after["scored"] - before["scored"]
                    assert scored == args.cost_evals, (kind, scored, [s for s, _ in done if s != 200][:3])
                    row = {
                        "replica_cpu_us": 1e6 * (_cpu_seconds(proc.popen.pid) - cpu) / scored,
                        "redis_cpu_us": 1e6 * (_cpu_seconds(redis.popen.pid) - redis_cpu) / scored,
                    }
                    before = after
                    alone = [post(http, next(ids))[1] for _ in range(args.cost_latency_evals)]
                    after = stats(http)
                    latencies = sorted(alone)
                    row.update(
                        p50_ms=1000 * _common.percentile(latencies, 50),
                        p99_ms=1000 * _common.percentile(latencies, 99),
                        store_ms=(after.get("store_ms_total", 0) - before.get("store_ms_total", 0))
                        / len(alone),
                    )
                    per[kind].append(row)
        out: dict[str, Any] = {
            "evaluations_per_round": args.cost_evals,
            "evaluations_one_at_a_time_per_round": args.cost_latency_evals,
            "rounds": args.cost_rounds,
        }
        for kind, rows in per.items():
            out[kind] = {k: round(_common.median([r[k] for r in rows]), 3) for k in rows[0]}
        for kind in ("record", "record+budget"):
            out[f"added_by_{kind}"] = {
                k: round(out[kind][k] - out["none"][k], 3) for k in ("replica_cpu_us", "p50_ms", "p99_ms")
            }
        return out


def calibrate() -> int:
    """Tokens the judge reports for one evaluation of the load's spans."""
    with budget_fleet(0.01) as group:
        _, _, http = group.add_scorer(1)
        group.wait_scorers_ready()
        for i in range(3):
            assert post(http, 7 + i)[0] == 200
        usage = judge_get(group, "/usage")
        return max(n for _, n in usage)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="windows of 20 s, fewer cost rounds")
    parser.add_argument("--phases", default="steady,churn,cost")
    parser.add_argument("--window", type=float, help="the budget's window in seconds (60; quick 20)")
    parser.add_argument("--budget-evals", type=int, default=60, help="the budget, in evaluations per window")
    parser.add_argument("--rate", type=float, help="RAG spans offered per second (4 x the budget's rate)")
    parser.add_argument("--latency", type=float, default=0.05, help="judge latency per request, seconds")
    parser.add_argument("--concurrency", type=int, default=4, help="`faithtrace serve --concurrency`")
    parser.add_argument("--cost-evals", type=int, default=300, help="evaluations per replica per cost round")
    parser.add_argument("--cost-rounds", type=int, help="cost rounds (5; quick 2)")
    parser.add_argument(
        "--cost-latency-evals", type=int, default=60, help="evaluations one at a time per replica per round"
    )
    parser.add_argument("--out", help="results JSON (default benchmarks/results/fleet-budget[-quick].json)")
    args = parser.parse_args()
    reason = serve_available()
    if reason is not None:
        sys.exit(f"fleet_budget.py: {reason}")
    args.window = args.window or (20.0 if args.quick else 60.0)
    args.rate = args.rate or round(4 * args.budget_evals / args.window, 2)
    args.cost_rounds = args.cost_rounds or (2 if args.quick else 5)
    phases = args.phases.split(",")
    results: dict[str, Any] = {"judge_latency_s": args.latency, "concurrency": args.concurrency}
    with tempfile.TemporaryDirectory(prefix="budget-redis-") as tmp, redis_server(Path(tmp)) as redis:
        if "steady" in phases or "churn" in phases:
            eval_tokens = calibrate()
            results["evaluation_tokens"] = eval_tokens
            runs = [budget_run(redis, args, p == "churn", eval_tokens) for p in phases if p != "cost"]
            results["budget"] = runs
            print(
                f"\nOne budget of {args.budget_evals} evaluations ({args.budget_evals * eval_tokens} tokens) "
                f"per {args.window:g} s window, {args.rate} RAG spans/s offered, judge "
                f"{args.latency * 1000:.0f} ms"
            )
            keys = [
                "run", "replicas_ever", "budget_tokens", "most_tokens_in_a_window", "target_tokens",
                "meets_target", "over_budget_evaluations", "largest_evaluation_tokens", "judge_requests",
            ]  # fmt: skip
            print(_common.table(keys, [[r[k] for k in keys] for r in runs]))
            for r in runs:
                if r["events"]:
                    print(f"{r['run']}: " + "; ".join(r["events"]))
        if "cost" in phases:
            cost = cost_run(redis, args)
            results["cost"] = cost
            print(
                f"\nThe budget's own cost, medians of {args.cost_rounds} rounds: CPU over {args.cost_evals} "
                f"evaluations 8 at a time, latency over {args.cost_latency_evals} one at a time (judge 10 ms)"
            )
            keys = ["replica_cpu_us", "redis_cpu_us", "store_ms", "p50_ms", "p99_ms"]
            rows = [[k, *(cost[k][x] for x in keys)] for k in ("none", "record", "record+budget")]
            print(_common.table(["replica", *keys], rows))
    results["load_average"] = os.getloadavg()
    print(f"\nload average: {results['load_average']}")
    out = args.out or _common.default_out("fleet-budget", args.quick)
    print(f"results: {_common.write_results('fleet_budget', results, out)}")


if __name__ == "__main__":
    main()
