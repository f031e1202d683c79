"""The scoring fleet behind the real Collector: scaling, receiver cost, added latency, held-trace memory,
OpenInference assembly, duplicates.

Every figure comes from real processes on 127.0.0.1: the Collector that collector/build.sh builds, running
collector/otelcol/fleet.yaml (load balancing by trace ID, persistent queue), `faithtrace serve` replicas,
the fixed-latency judge stand-in (benchmarks/_shared/fakejudge.py) and apps: a decorated one with
`configure(scoring="remote")`, and LlamaIndex / LangChain apps traced by OpenInference alone.
Seven measurements (``--phases``):

1. scaling: evaluations/s with N replicas (``--replicas 1,2,4``, target N replicas >= 0.8 x N x one), from
   the sink's own timestamps: RAG traces / (last evaluation's end - first RAG span's start);
2. cost: plain (non-RAG) spans sent straight to one replica over OTLP/gRPC: its CPU µs per span (/proc);
3. latency: RAG span end -> evaluation start, app -> Collector -> replica against app -> replica directly,
   with a fast judge and calls far enough apart that the direct baseline never queues;
4. kill: one replica SIGKILLed mid-run and started again; traces missing and evaluations beyond one;
5. memory: one replica's RSS per RAG trace held for its root, and per chat trace (no retriever);
6. openinference: >= 500 LlamaIndex + LangChain traces per scenario (normal, roots 3 s late, saturated
   replicas, a flood of chat traces; and, LlamaIndex alone, a replica kill -9d and restarted, the Collector
   SIGKILLed, the Collector restarted): lost, scored against the wrong span or text, duplicates;
7. ceiling: the load-balancing path's steady-state rate with a slow judge (1 s, 2 s) and replicas that take
   hundreds of evaluations at once, for 1, 2, 4, 8 replicas, with the CPU the machine and the fleet used
   and what the replicas and the Collector's queue held meanwhile: whether CPU or the exporter limits it.

    python benchmarks/fleet/fleet.py --quick        # shorter runs
    python benchmarks/fleet/fleet.py --phases cost,memory   # no Collector needed

On a shared 2-core machine the apps, the Collector, the judge and every replica compete for the same cores:
read the ratios, and the load average printed with the results.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks.*`
sys.path.insert(0, str(ROOT / "tests"))  # the fleet fixtures the tests use

from _fleet_fixtures import (  # noqa: E402
    APP_ANSWER,
    EVALUATION_SPAN,
    GROUPBYTRACE_OVERLAY,
    Fleet,
    Proc,
    app_calls,
    app_traces,
    collect,
    fleet,
    otelcol_binary,
    rag_of,
    read_spans,
    serve_available,
    start_app,
    wait_app_done,
    wait_until,
)
from benchmarks._shared import common as _common  # noqa: E402


def _ns(value: Any) -> int:
    return int(value)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _start(
    group: Fleet, replicas: int, concurrency: int, extra: tuple[str, ...] = (), collector: bool = True
) -> None:
    for _ in range(replicas):
        group.add_scorer(concurrency=concurrency, extra=extra)
    group.wait_scorers_ready()
    if collector:
        group.start_collector()


def scaling(otelcol: str, replicas: int, traces: int, latency: float, concurrency: int) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp,
        fleet(Path(tmp), otelcol, latency) as group,
    ):
        _start(group, replicas, concurrency)
        app = start_app(group, count=traces, interval=0.0)
        wait_app_done(app, timeout=600)
        run = collect(group, app_traces(app), timeout=900)
        rag = {t: s for t, s in run.expected.items()}
        starts = [
            _ns(s["startTimeUnixNano"]) for s in run.spans if (s["traceId"], s["spanId"]) in rag.items()
        ]
        ends = [_ns(s["endTimeUnixNano"]) for s in run.spans if s["name"] == EVALUATION_SPAN]
        seconds = (max(ends) - min(starts)) / 1e9 if starts and ends else float("nan")
        scored = len(run.expected) - len(run.missing)
        judge_requests = group.judge_requests()
        return {
            "replicas": replicas,
            "rag_traces": len(run.expected),
            "scored": scored,
            "duplicates": run.duplicates,
            "seconds": round(seconds, 2),
            "evaluations_per_s": round(scored / seconds, 2) if seconds else None,
            "steady_per_s": _steady_rate(ends),
            # What --concurrency and the judge's latency allow: N x concurrency / (latency x judge requests
            # per evaluation).
            "judge_bound_per_s": round(replicas * concurrency * scored / (latency * judge_requests), 2)
            if judge_requests
            else None,
            "judge_requests": judge_requests,
        }


def _steady_rate(ends: list[int]) -> float | None:
    """Evaluations/s between the 10th and the 90th percentile of their end times: the rate once the burst
    has reached the replicas and before the last one runs dry (the whole-run rate includes both)."""
    if len(ends) < 20:
        return None
    ordered = sorted(ends)
    lo, hi = ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10]
    count = sum(1 for e in ordered if lo < e <= hi)
    return round(count / ((hi - lo) / 1e9), 2) if hi > lo else None


def receiver_cost(otelcol: str, spans: int) -> dict[str, Any]:
    """Plain spans straight into one replica; its CPU seconds per span."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp, fleet(Path(tmp), otelcol) as group:
        _start(group, 1, 4, collector=False)  # spans go straight to the replica
        proc, grpc_port, _ = group.scorers[0]
        assert proc.popen is not None
        provider = TracerProvider(resource=Resource.create({"service.name": "fleet-bench-plain"}))
        exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True)
        provider.add_span_processor(
            BatchSpanProcessor(
                exporter, max_queue_size=spans + 1, max_export_batch_size=512, schedule_delay_millis=50
            )
        )
        tracer = provider.get_tracer("fleet-bench")
        time.sleep(1.0)
        before = _cpu_seconds(proc.popen.pid)
        wall = time.perf_counter()
        for i in range(spans):
            with (
                tracer.start_as_current_span("GET /items", attributes={"http.route": "/items", "i": i}),
                tracer.start_as_current_span("SELECT items"),
            ):
                pass
        provider.force_flush(120_000)
        wall = time.perf_counter() - wall
        time.sleep(0.5)
        cpu = _cpu_seconds(proc.popen.pid) - before
        provider.shutdown()
        sent = spans * 2
        return {
            "spans": sent,
            "replica_cpu_s": round(cpu, 3),
            "spans_per_core_s": round(sent / cpu) if cpu > 0 else None,
            "cpu_us_per_span": round(cpu / sent * 1e6, 2) if sent else None,
            "wall_s": round(wall, 2),
            "judge_requests": group.judge_requests(),
        }


def _delays_ms(
    run_spans: list[dict[str, Any]], calls: dict[str, tuple[str, int]], skip_first: int = 0
) -> list[float]:
    """Call return -> evaluation start per call, in call order, without the first ``skip_first`` calls (a
    replica's first request from an app sets up that app's exporters: a one-time cost, not latency)."""
    # The app prints when each call returned (its RAG span's end): the RAG span itself reaches the sink only
    # through the Collector, not on the direct path.
    delays = []
    for span in run_spans:
        if span["name"] != EVALUATION_SPAN:
            continue
        call = calls.get(rag_of(span)[0])
        if call and call[1]:
            delays.append((call[1], (_ns(span["startTimeUnixNano"]) - call[1]) / 1e6))
    return [delay for _, delay in sorted(delays)[skip_first:]]


def latency(otelcol: str, traces: int, judge_latency: float, interval: float) -> dict[str, Any]:
    """RAG call return -> evaluation start, through the Collector and straight to a replica.

    The direct path is the baseline, so it must not queue: the app's SDK exports one batch at a time and a
    replica answers a batch only once it is scored, so a batch exported while the previous one is being
    scored waits for it. With a 300 ms judge and 5 traces/s that wait made the direct path the slower one
    and the "added" latency negative (p50 -216 ms). Here the judge is fast and the app slow enough that
    every batch is scored before the next is sent (checked: the direct p99 stays under ``interval``); what
    remains of the difference is the Collector path's own cost (receive, persistent queue with fsync, load
    balancer, and groupbytrace's wait where it is configured)."""
    out: dict[str, Any] = {"judge_latency_s": judge_latency, "interval_s": interval}
    with (
        tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp,
        fleet(Path(tmp), otelcol, judge_latency) as group,
    ):
        _start(group, 1, 16)
        _, grpc_port, _ = group.scorers[0]
        for path, endpoint in (("direct", grpc_port), ("collector", group.ports.app_grpc)):
            app = start_app(group, count=traces, interval=interval, endpoint_port=endpoint)
            wait_app_done(app, timeout=600)
            run = collect(group, app_traces(app), timeout=300)
            delays = _delays_ms(run.spans, app_calls(app), skip_first=3)
            out[path] = {
                "traces": len(delays),  # measured: all but the first 3
                "p50_ms": round(_common.percentile(delays, 50), 1),
                "p99_ms": round(_common.percentile(delays, 99), 1),
            }
    out["added_p50_ms"] = round(out["collector"]["p50_ms"] - out["direct"]["p50_ms"], 1)
    out["added_p99_ms"] = round(out["collector"]["p99_ms"] - out["direct"]["p99_ms"], 1)
    out["direct_queued"] = out["direct"]["p99_ms"] > interval * 1000
    return out


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _oi_part(first: int, count: int, with_root: bool, retriever: bool) -> bytes:
    """One OTLP request of ``count`` LlamaIndex-shaped traces (a retriever, a synthesizer, a text splitter,
    an LLM span; the root only ``with_root``), or of chat traces (``retriever`` False: a CHAIN root)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    docs = ["The Eiffel Tower is 330 metres tall.", "It was completed in 1889 for the World's Fair in Paris."]
    answer = "The tower rises 330 metres. Builders finished it in 1889. It stands in Paris."
    req = ExportTraceServiceRequest()
    scope = req.resource_spans.add().scope_spans.add()

    def span(trace: int, sid: int, parent: int, name: str, attrs: dict[str, str]) -> None:
        s = scope.spans.add()
        s.trace_id, s.span_id, s.name = trace.to_bytes(16, "big"), sid.to_bytes(8, "big"), name
        if parent:
            s.parent_span_id = parent.to_bytes(8, "big")
        for key, value in attrs.items():
            a = s.attributes.add()
            a.key, a.value.string_value = key, value

    for trace in range(first, first + count):
        if not retriever:
            span(
                trace,
                1,
                0,
                "chat",
                {
                    "openinference.span.kind": "CHAIN",
                    "input.value": "Hello?",
                    "output.value": f"Hello, visitor {trace}.",
                },
            )
            continue
        span(
            trace,
            2,
            1,
            "retrieve",
            {
                "openinference.span.kind": "RETRIEVER",
                **{f"retrieval.documents.{i}.document.content": d for i, d in enumerate(docs)},
            },
        )
        span(
            trace,
            4,
            3,
            "TokenTextSplitter.split_text",
            {"openinference.span.kind": "CHAIN", "input.value": docs[0], "output.value": docs[0]},
        )
        span(
            trace,
            5,
            3,
            "llm",
            {
                "openinference.span.kind": "LLM",
                "input.value": "Context: " + " ".join(docs),
                "output.value": answer,
            },
        )
        span(
            trace,
            3,
            1,
            "synthesize",
            {"openinference.span.kind": "CHAIN", "input.value": "How tall?", "output.value": answer},
        )
        if with_root:
            span(
                trace,
                1,
                0,
                "query",
                {"openinference.span.kind": "CHAIN", "input.value": "How tall?", "output.value": answer},
            )
    return bytes(req.SerializeToString())


def held_memory(otelcol: str, traces: int) -> dict[str, Any]:
    """One replica's RSS growth per RAG trace held for its root, and with as many chat traces (no
    retriever: their own bounded pool) sent after. No judge call is made: nothing resolves."""
    import grpc

    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp, fleet(Path(tmp), otelcol) as group:
        extra = ("--settle", "3600", "--hold", "0", "--max-traces", str(2 * traces))
        _start(group, 1, 4, extra=extra, collector=False)
        proc, grpc_port, http_port = group.scorers[0]
        assert proc.popen is not None
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        export(_oi_part(10**9, 100, with_root=True, retriever=False), timeout=60)  # warm the code paths
        time.sleep(3.0)  # past the chat traces' grace
        before = _rss_bytes(proc.popen.pid)
        for first in range(1, traces + 1, 500):
            export(_oi_part(first, min(500, traces + 1 - first), with_root=False, retriever=True), timeout=60)
        held = _rss_bytes(proc.popen.pid)
        for first in range(10**6, 10**6 + traces, 500):
            export(
                _oi_part(first, min(500, 10**6 + traces - first), with_root=True, retriever=False), timeout=60
            )
        chats = _rss_bytes(proc.popen.pid)
        channel.close()
        stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/stats", timeout=5).read())
        return {
            "rag_traces_held": stats["held_traces"],
            "bytes_per_held_trace": round((held - before) / traces),
            "chat_traces": traces,
            "chat_traces_dropped": stats["dropped_not_rag"],
            "bytes_per_chat_trace": round((chats - held) / traces),
            "rss_mb": [round(v / 2**20, 1) for v in (before, held, chats)],
        }


def spool_cost(otelcol: str, traces: int) -> dict[str, Any]:
    """What --spool costs where it costs most: chat traces' roots, each answered before any retriever of its
    trace came, so each written to the spool (and deleted when dropped as not RAG). One replica's CPU per
    chat trace, 32 roots to a request (the load balancer's parts), with the spool and without."""
    import grpc

    out: dict[str, Any] = {"chat_traces": traces, "roots_per_request": 32}
    for spooled in (False, True):
        with (
            tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp,
            fleet(Path(tmp), otelcol, spool=spooled) as group,
        ):
            # 2 s before a rooted trace without a retriever is let go (their pool holds 10,000 anyway).
            _start(group, 1, 4, extra=("--settle", "2"), collector=False)
            proc, grpc_port, http_port = group.scorers[0]
            assert proc.popen is not None
            channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            export(_oi_part(10**9, 32, with_root=True, retriever=False), timeout=60)  # warm the code paths
            time.sleep(3.0)
            before = _cpu_seconds(proc.popen.pid)
            wall = time.perf_counter()
            for first in range(1, traces + 1, 32):
                part = _oi_part(first, min(32, traces + 1 - first), with_root=True, retriever=False)
                export(part, timeout=60)
            wall = time.perf_counter() - wall
            time.sleep(4.0)  # every chat trace let go, and marked done in the spool
            cpu = _cpu_seconds(proc.popen.pid) - before
            channel.close()
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/stats", timeout=5) as response:
                stats = json.loads(response.read())
            key = "spool" if spooled else "no_spool"
            out[key] = {
                "cpu_us_per_chat_trace": round(cpu / traces * 1e6, 1),
                "wall_s": round(wall, 2),
                "spool_kept": stats["spool_kept"],
                "spool_traces_after": stats["spool_traces"],
                "dropped_not_rag": stats["dropped_not_rag"],
            }
    out["added_us_per_chat_trace"] = round(
        out["spool"]["cpu_us_per_chat_trace"] - out["no_spool"]["cpu_us_per_chat_trace"], 1
    )
    return out


# key -> (label, --concurrency, extra serve flags, app arguments, fault injected mid-run or "")
OI_SCENARIOS: dict[str, tuple[str, int, tuple[str, ...], dict[str, Any], str]] = {
    "normal": ("normal", 16, (), {}, ""),
    "late": ("root 3 s late", 16, (), {"late_root_s": 3.0}, ""),
    "saturated": ("saturated", 1, ("--max-pending", "2"), {}, ""),
    "flood": ("non-RAG flood x10", 16, (), {"non_rag": 10}, ""),
    "kill9": ("replica kill -9 + restart", 16, (), {}, "kill9"),
    # The replicas without --spool (the kit runs them with it): acknowledged parts live in memory only.
    "kill9-no-spool": ("replica kill -9 + restart, no spool", 16, (), {}, "kill9"),
    # A longer hold than the default 0.5 s: parts without their root wait for it (and then the score).
    "kill9-hold30": ("replica kill -9 + restart, --hold 30", 16, ("--hold", "30"), {}, "kill9"),
    "collector-sigkill": ("Collector SIGKILL", 16, (), {}, "collector-sigkill"),
    "collector-restart": ("Collector restart", 16, (), {}, "collector-restart"),
    # The kit's two Collectors behind a Service (tests/_service_proxy.py), restarted one after the other.
    "collector-rolling-restart": ("2 Collectors, rolling restart", 16, (), {}, "collector-rolling-restart"),
    # The same with the LlamaIndex app exporting OTLP/HTTP: max_connection_age is a gRPC setting, so its
    # keep-alive connection stays with a Collector that is being stopped until that one closes it.
    "collector-rolling-restart-http": (
        "2 Collectors, rolling restart, OTLP/HTTP app",
        16,
        (),
        {"protocol": "http"},
        "collector-rolling-restart",
    ),
    # The same with the decorated app (remote scoring) instead of LlamaIndex.
    "collector-rolling-restart-decorated": (
        "2 Collectors, rolling restart, decorated app",
        16,
        (),
        {"decorated": True},
        "collector-rolling-restart",
    ),
}


def openinference(
    otelcol: str,
    traces: int,
    judge_latency: float,
    which: list[str],
    configs_wanted: set[str],
    redis_url: str | None = None,
) -> list[dict[str, Any]]:
    """LlamaIndex and LangChain apps (OpenInference, no faithtrace) -> Collector -> 2 replicas: every RAG
    trace scored once, against its root span and its own answer, in each scenario.

    The fault scenarios run the LlamaIndex app alone (``traces`` queries, one every 50 ms) and inject their
    fault once a quarter of the evaluations are in the sink (_oi_fleet.inject). Its SDK waits up to 60 s on
    a batch, so that a Collector away for a restart does not make it drop spans. Lost traces whose root
    never reached the sink (``root_not_in_sink``: the app gave up on them, or the Collector lost them before
    its persistent queue) are counted apart from those lost after it (``lost_accepted``)."""
    from _oi_fleet import collect_oi, evaluation_count, inject, oi_expected, start_oi_app

    rows = []
    configs = [("fleet.yaml", []), ("+ groupbytrace", [GROUPBYTRACE_OVERLAY])]
    configs = [c for c, key in zip(configs, ("plain", "grouped"), strict=True) if key in configs_wanted]
    for key, (config, overlays) in itertools.product(which, configs):
        label, concurrency, extra, app_args, fault = OI_SCENARIOS[key]
        collectors = 2 if fault == "collector-rolling-restart" else 1
        with (
            tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp,
            fleet(
                Path(tmp), otelcol, judge_latency, collectors=collectors, spool=not key.endswith("no-spool")
            ) as group,
        ):
            group.overlays.extend(overlays)
            group.redis_url = redis_url
            _start(group, 2, concurrency, extra=extra)
            started = time.monotonic()
            decorated = bool(app_args.get("decorated"))
            if fault:
                # One query every 50 ms: the app is still sending when the fault comes.
                if decorated:
                    app = start_app(group, count=traces, interval=0.05, export_timeout_s=60)
                else:
                    protocol = app_args.get("protocol", "grpc")
                    app = start_oi_app(
                        group, "llama", traces, interval_s=0.05, export_timeout_s=60, protocol=protocol
                    )
                apps = [app]
                assert group.collector is not None
                wait_until(
                    "a quarter of the evaluations in the sink",
                    lambda: evaluation_count(group) >= traces // 4,
                    group.collector,
                    1200.0,
                )
                at_fault = evaluation_count(group)
                app_running = apps[0].alive  # still sending: the fault hit traces on their way in too
                faulted = inject(group, fault)
            else:
                apps = [start_oi_app(group, fw, traces // 2, **app_args) for fw in ("llama", "langchain")]
            for app in apps:
                wait_app_done(app, timeout=1200)
            if decorated:  # each evaluation a child of the app's RAG span, judging its one answer
                expected = {t: (span, APP_ANSWER) for t, span in app_traces(apps[0]).items()}
            else:
                expected = {t: v for app in apps for t, v in oi_expected(app).items()}
            run = collect_oi(group, expected, timeout=240, accepted_only=bool(fault))
            stats = [
                json.loads(urllib.request.urlopen(f"http://127.0.0.1:{h}/stats", timeout=5).read())
                for _, _, h in group.scorers
            ]
            rows.append(
                {
                    "scenario": label,
                    "config": config,
                    "store": "redis" if redis_url else "none",
                    **run.summary(),
                    # One judge request per evaluation here: those beyond one per trace were judged again,
                    # whether their results reached the sink twice or not (in flight in the killed replica).
                    "judge_requests_beyond_one_per_trace": group.judge_requests() - len(expected),
                    "scored_elsewhere": sum(s.get("scored_elsewhere", 0) for s in stats),
                    "seconds": round(time.monotonic() - started, 1),
                    # A restarted replica's /stats count from its restart only.
                    "incomplete": sum(s["incomplete"] for s in stats),
                    "refused": sum(s["rejected_saturated"] + s["rejected_held"] for s in stats),
                    "dropped_not_rag": sum(s["dropped_not_rag"] for s in stats),
                    # Parts acknowledged before their trace's score, written to the spool; sent back through
                    # the Collector by the restarted replica.
                    "spool_kept": sum(s["spool_kept"] for s in stats),
                    "spool_replayed": sum(s["spool_replayed"] for s in stats),
                    "evaluated_at_fault": at_fault if fault else None,
                    "outage_s": faulted["outage_s"] if fault else None,
                    "stop_forced": faulted["stop_forced"] if fault else None,
                    "stop_s": faulted["stop_s"] if fault else None,  # each graceful stop's duration
                    "collectors": collectors,
                    "app_running_at_fault": app_running if fault else None,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def kill_duplicates(
    otelcol: str, traces: int, latency_s: float, redis_url: str | None = None
) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp,
        fleet(Path(tmp), otelcol, latency_s) as group,
    ):
        group.redis_url = redis_url
        _start(group, 3, 8)
        app = start_app(group, count=traces, interval=0.02)
        threshold = max(10, traces // 3)
        wait_until("results arriving", lambda: len(read_spans(group.traces_file)) > threshold, app, 300.0)
        victim, _, _ = group.scorers[1]
        victim.kill9()
        time.sleep(3.0)
        group.restart_scorer(1)
        wait_app_done(app, timeout=600)
        run = collect(group, app_traces(app), timeout=600)
        return {
            "store": "redis" if redis_url else "none",
            "rag_traces": len(run.expected),
            "missing": len(run.missing),
            "duplicates": run.duplicates,
            "judge_requests_beyond_one_per_trace": group.judge_requests() - len(run.expected),
        }


@contextlib.contextmanager
def _store(kind: str) -> Iterator[str | None]:
    """None for "none"; for "redis", a real Redis server's URL for as long as the block runs."""
    if kind == "none":
        yield None
        return
    from _redis_fixtures import redis_server

    with tempfile.TemporaryDirectory(prefix="redis-") as tmp, redis_server(Path(tmp)) as server:
        yield server.url


def _machine_jiffies() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine since boot, every core (/proc/stat's first line)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(fields) - fields[3] - fields[4], sum(fields)  # idle and iowait are not busy


def _lb_queue_bytes(group: Fleet) -> float:
    """The load balancer's persistent queue, in bytes (its sizer), from the Collector's own metrics."""
    url = f"http://127.0.0.1:{group.ports.telemetry}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return float("nan")
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("otelcol_exporter_queue_size{") and "load_balancing" in line
    )


def _judge_pid() -> int | None:
    """The fake judge: this process's child running fakejudge.py."""
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            parent = stat.read_text().rsplit(")", 1)[1].split()[1]
            if parent == me and b"fakejudge.py" in (stat.parent / "cmdline").read_bytes():
                return int(stat.parent.name)
    return None


def _sample(group: Fleet, out: list[dict[str, Any]], stop: threading.Event) -> None:
    """Every 0.5 s: the machine's CPU and each fleet process's, what each replica holds, the load
    balancer's queue."""
    judge = _judge_pid()

    def cpu(pid: int | None) -> float:
        if pid is not None:
            with contextlib.suppress(OSError, ValueError, IndexError):
                return _cpu_seconds(pid)
        return 0.0

    def pid(proc: Proc | None) -> int | None:
        return proc.popen.pid if proc is not None and proc.popen is not None and proc.alive else None

    while not stop.wait(0.5):
        pending, open_requests = [], 0
        for _, _, http_port in group.scorers:
            try:
                url = f"http://127.0.0.1:{http_port}/stats"
                stats = json.loads(urllib.request.urlopen(url, timeout=2).read())
            except OSError:
                continue
            pending.append(stats["pending"])
            open_requests += stats["requests_open"]
        busy, total = _machine_jiffies()
        out.append(
            {
                "ns": time.time_ns(),
                "busy": busy,
                "total": total,
                "cpu": {
                    "collector": cpu(pid(group.collector)),
                    "sink": cpu(pid(group.sink)),
                    "judge": cpu(judge),
                    "replicas": [cpu(pid(s[0])) for s in group.scorers],
                },
                "pending": pending,
                "requests_open": open_requests,
                "queue_bytes": _lb_queue_bytes(group),
                "load1": os.getloadavg()[0],
            }
        )


def ceiling(
    otelcol: str, replicas: int, traces: int, latency: float, concurrency: int, consumers: int | None = None
) -> dict[str, Any]:
    """The load-balancing path at steady state, with a judge slow enough that the replicas' CPU is not
    what limits it: the decorated app queues ``traces`` RAG traces (and as many plain ones) in the
    Collector as fast as it can, and the rate is taken over the evaluations that ended after the app had
    finished (its CPU is then out of the way), between their 10th and 90th percentile. Sampled meanwhile:
    the machine's CPU (all processes, other jobs' too), the fleet's (Collector and replicas), the
    evaluations each replica had in flight, the load balancer's queue. ``consumers`` overrides fleet.yaml's
    ``num_consumers`` (32) through a config overlay."""
    samples: list[dict[str, Any]] = []
    stop = threading.Event()
    with (
        tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp,
        fleet(Path(tmp), otelcol, latency) as group,
    ):
        if consumers is not None:
            overlay = Path(tmp) / "consumers.yaml"
            queue = {"sending_queue": {"num_consumers": consumers}}
            overlay.write_text(json.dumps({"exporters": {"load_balancing/scorers": queue}}))  # YAML ⊃ JSON
            group.overlays.append(overlay)
        _start(group, replicas, concurrency)
        sampler = threading.Thread(target=_sample, args=(group, samples, stop), daemon=True)
        sampler.start()
        app_start = time.time_ns()
        app = start_app(group, count=traces, interval=0.0)
        try:
            wait_app_done(app, timeout=1200)
            app_done = time.time_ns()
            run = collect(group, app_traces(app), timeout=1800)
        finally:
            stop.set()
            sampler.join(timeout=10)
        scored = [
            json.loads(urllib.request.urlopen(f"http://127.0.0.1:{h}/stats", timeout=5).read())["scored"]
            for _, _, h in group.scorers
        ]
    ends = sorted(_ns(s["endTimeUnixNano"]) for s in run.spans if s["name"] == EVALUATION_SPAN)
    after = [e for e in ends if e >= app_done]
    lo, hi = (after[len(after) // 10], after[(len(after) * 9) // 10]) if len(after) >= 20 else (0, 0)
    steady = sum(1 for e in after if lo < e <= hi)
    window = [x for x in samples if lo <= x["ns"] <= hi]
    row: dict[str, Any] = {
        "replicas": replicas,
        "num_consumers": consumers or 32,
        "rag_traces": len(run.expected),
        "missing": len(run.missing),
        "duplicates": run.duplicates,
        "app_s": round((app_done - app_start) / 1e9, 1),
        "steady_per_s": round(steady / ((hi - lo) / 1e9), 2) if hi > lo else None,
        "window_s": round((hi - lo) / 1e9, 1),
        "whole_run_per_s": round(len(ends) / ((ends[-1] - app_start) / 1e9), 2) if ends else None,
        "judge_bound_per_s": round(replicas * concurrency / latency, 1),
        "scored_per_replica": scored,
    }
    if len(window) >= 2:
        first, last = window[0], window[-1]
        seconds = (last["ns"] - first["ns"]) / 1e9
        row["machine_cpu_pct"] = round(
            100 * (last["busy"] - first["busy"]) / max(1, last["total"] - first["total"]), 1
        )

        def cores(role: str) -> float:
            return round((last["cpu"][role] - first["cpu"][role]) / seconds, 2)

        row["collector_cores"] = cores("collector")
        row["judge_cores"] = cores("judge")
        row["sink_cores"] = cores("sink")
        replica_cores = [
            (b - a) / seconds for a, b in zip(first["cpu"]["replicas"], last["cpu"]["replicas"], strict=True)
        ]
        row["replicas_cores"] = round(sum(replica_cores), 2)
        row["busiest_replica_cores"] = round(max(replica_cores), 2)
        row["in_flight_mean"] = round(sum(sum(x["pending"]) for x in window) / len(window), 1)
        row["in_flight_max_replica"] = max(max(x["pending"], default=0) for x in window)
        row["requests_open_mean"] = round(sum(x["requests_open"] for x in window) / len(window), 1)
        row["queue_mb_min"] = round(min(x["queue_bytes"] for x in window) / 2**20, 2)
        row["load1_mean"] = round(sum(x["load1"] for x in window) / len(window), 1)
    return row


def _ceiling_table(otelcol: str, args: argparse.Namespace, latency: float) -> list[dict[str, Any]]:
    rows = []
    runs = itertools.product(args.ceiling_consumers.split(","), args.ceiling_replicas.split(","))
    for consumers, n in runs:
        rows.append(
            ceiling(otelcol, int(n), args.ceiling_traces, latency, args.ceiling_concurrency, int(consumers))
        )
        print(json.dumps(rows[-1]), flush=True)
    print(
        f"\nLoad-balancing path at steady state: {args.ceiling_traces} RAG traces queued, judge "
        f"{latency * 1000:.0f} ms/request, --concurrency {args.ceiling_concurrency} "
        f"(steady: evaluations ended after the app finished, 10th-90th percentile; CPU in cores)"
    )
    keys = [
        "replicas",
        "num_consumers",
        "steady_per_s",
        "window_s",
        "judge_bound_per_s",
        "in_flight_mean",
        "requests_open_mean",
        "queue_mb_min",
        "machine_cpu_pct",
        "replicas_cores",
        "busiest_replica_cores",
        "collector_cores",
        "judge_cores",
        "load1_mean",
        "missing",
        "duplicates",
    ]
    print(_common.table(keys, [[r.get(k) for k in keys] for r in rows]))
    return rows


def _scaling_table(otelcol: str, args: argparse.Namespace, traces: int) -> list[dict[str, Any]]:
    rows = [
        scaling(otelcol, int(n), traces, args.latency, args.concurrency) for n in args.replicas.split(",")
    ]
    base = rows[0]["evaluations_per_s"] or float("nan")
    # One replica's own figure is the yardstick; the judge-bound column says how close it came to what its
    # --concurrency allows (a baseline held down by something else would flatter the speedups).
    for row in rows:
        row["speedup"] = round((row["evaluations_per_s"] or 0) / base, 2)
        row["target"] = round(0.8 * row["replicas"] / rows[0]["replicas"], 2)
        row["meets_target"] = row["speedup"] >= row["target"]
    print(
        f"\nScaling: {traces} RAG traces, judge {args.latency * 1000:.0f} ms/request, "
        f"--concurrency {args.concurrency}"
    )
    keys = [
        "replicas",
        "evaluations_per_s",
        "speedup",
        "target",
        "steady_per_s",
        "judge_bound_per_s",
        "scored",
        "duplicates",
        "seconds",
    ]
    headers = [
        "replicas",
        "evaluations/s",
        "speedup",
        "target",
        "steady ev/s",
        "judge-bound ev/s",
        "scored",
        "duplicates",
        "seconds",
    ]
    print(_common.table(headers, [[r[k] for k in keys] for r in rows]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer traces (about 3 minutes)")
    parser.add_argument("--replicas", default="1,2,3", help="replica counts for the scaling run")
    parser.add_argument("--latency", type=float, default=0.3, help="judge latency per request, seconds")
    parser.add_argument(
        "--latency-judge", type=float, default=0.01, help="judge latency in the latency phase (0.01 s)"
    )
    parser.add_argument(
        "--latency-interval", type=float, default=0.5, help="seconds between calls in the latency phase"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="`faithtrace serve --concurrency`")
    parser.add_argument("--traces", type=int, help="RAG traces per scaling run (default 60 quick, 960)")
    parser.add_argument("--out", help="results JSON (default benchmarks/results/fleet[-quick].json)")
    parser.add_argument("--oi-traces", type=int, default=500, help="RAG traces per OpenInference scenario")
    parser.add_argument(
        "--oi-scenarios",
        default="normal,late,saturated,flood",
        help=f"OpenInference scenarios to run, of {','.join(OI_SCENARIOS)}",
    )
    parser.add_argument(
        "--oi-configs", default="plain,grouped", help="fleet.yaml alone (plain), with the overlay (grouped)"
    )
    parser.add_argument("--ceiling-replicas", default="1,2,4,8", help="replica counts for the ceiling phase")
    parser.add_argument(
        "--ceiling-latencies", default="1.0,2.0", help="judge latencies (s) of the ceiling phase's runs"
    )
    parser.add_argument(
        "--ceiling-concurrency", type=int, default=256, help="`--concurrency` of each replica, ceiling phase"
    )
    parser.add_argument(
        "--ceiling-consumers",
        default="32",
        help="the load balancer's num_consumers for the ceiling phase (comma list; fleet.yaml has 32)",
    )
    parser.add_argument(
        "--ceiling-traces", type=int, help="RAG traces per ceiling run (default 600 quick, 4000)"
    )
    parser.add_argument(
        "--stores",
        default="none",
        help="the kill and openinference phases with each: none (each replica alone), redis (the replicas "
        "share a Redis: --redis, its record of scored traces checked before judging)",
    )
    parser.add_argument(
        "--phases",
        default="scaling,cost,latency,kill,memory,spool,openinference",
        help="which tables (default: all but ceiling, which takes about 8 minutes)",
    )
    args = parser.parse_args()
    reason = serve_available()
    if reason is not None:
        sys.exit(f"fleet.py: {reason}")
    phases = set(args.phases.split(","))
    # The cost and memory phases talk to one replica directly: they run without a Collector binary.
    needs_collector = bool(phases & {"scaling", "latency", "kill", "openinference", "ceiling"})
    otelcol = (os.environ.get("FAITHTRACE_OTELCOL_BIN") or otelcol_binary()) if needs_collector else ""
    # Trace-ID hashing over 3 replicas splits a few hundred traces unevenly (240 went 98 / 72 / 70) and the
    # busiest replica sets the end time: 960 traces measure the fleet's rate rather than one replica's tail.
    traces = args.traces or (60 if args.quick else 960)

    results: dict[str, Any] = {"judge_latency_s": args.latency, "concurrency": args.concurrency}
    if "scaling" in phases:
        results["scaling"] = _scaling_table(otelcol, args, traces)
    if "cost" in phases:
        cost = receiver_cost(otelcol, 20000 if args.quick else 100000)
        results["receiver_cost"] = cost
        print("\nReceiver cost of non-RAG spans (sent straight to one replica over OTLP/gRPC)")
        headers = ["spans", "replica CPU s", "CPU µs/span", "spans/s per core", "wall s", "judge requests"]
        keys = ["spans", "replica_cpu_s", "cpu_us_per_span", "spans_per_core_s", "wall_s", "judge_requests"]
        print(_common.table(headers, [[cost[k] for k in keys]]))
    if "latency" in phases:
        lat = latency(otelcol, 30 if args.quick else 100, args.latency_judge, args.latency_interval)
        results["latency"] = lat
        print(
            f"\nRAG call return -> evaluation start (one replica, judge {args.latency_judge * 1000:.0f} ms, "
            f"one call every {args.latency_interval} s; app batch delay 200 ms on both paths)"
        )
        rows = [[p, lat[p]["traces"], lat[p]["p50_ms"], lat[p]["p99_ms"]] for p in ("direct", "collector")]
        print(_common.table(["path", "traces", "p50 ms", "p99 ms"], rows))
        print(f"added by the Collector path: p50 {lat['added_p50_ms']} ms, p99 {lat['added_p99_ms']} ms")
        if lat["direct_queued"]:
            print("WARNING: the direct baseline queued (its p99 exceeds the interval): the difference is not")
            print("the Collector's cost; raise --latency-interval or lower --latency-judge")
    if "spool" in phases:
        spool = spool_cost(otelcol, 2000 if args.quick else 20000)
        results["spool_cost"] = spool
        print("\nCost of --spool for chat traces (roots without a retriever, 32 to a request, one replica)")
        rows = [
            [k, spool[k]["cpu_us_per_chat_trace"], spool[k]["spool_kept"], spool[k]["spool_traces_after"]]
            for k in ("no_spool", "spool")
        ]
        print(_common.table(["replica", "CPU µs/chat trace", "parts spooled", "traces left"], rows))
    if "memory" in phases:
        mem = held_memory(otelcol, 2000 if args.quick else 20000)
        results["memory"] = mem
        print("\nMemory of one replica: RAG traces held for their root, then as many chat traces")
        keys = [
            "rag_traces_held",
            "bytes_per_held_trace",
            "chat_traces",
            "chat_traces_dropped",
            "bytes_per_chat_trace",
            "rss_mb",
        ]
        print(_common.table(keys, [[mem[k] for k in keys]]))
    stores = args.stores.split(",")
    if "openinference" in phases:
        oi = []
        for store in stores:
            with _store(store) as url:
                oi += openinference(
                    otelcol,
                    args.oi_traces,
                    args.latency_judge,
                    args.oi_scenarios.split(","),
                    set(args.oi_configs.split(",")),
                    url,
                )
        results["openinference"] = oi
        # This phase's judge: --latency-judge, not --latency (the top-level judge_latency_s).
        results["openinference_judge_latency_s"] = args.latency_judge
        print(
            f"\nOpenInference apps (LlamaIndex + LangChain; the fault scenarios LlamaIndex alone, or the "
            f"decorated app), "
            f"{args.oi_traces} RAG traces per scenario, Collector, 2 replicas, judge "
            f"{args.latency_judge * 1000:.0f} ms"
        )
        keys = [
            "scenario",
            "config",
            "store",
            "rag_traces",
            "lost",
            "wrong",
            "duplicates",
            "judge_requests_beyond_one_per_trace",
            "non_rag_scored",
            "root_not_in_sink",
            "lost_accepted",
            "evaluated_at_fault",
            "outage_s",
            "stop_s",
            "stop_forced",
            "incomplete",
            "refused",
            "dropped_not_rag",
            "seconds",
        ]
        print(_common.table(keys, [[r[k] for k in keys] for r in oi]))
    if "kill" in phases:
        kills = []
        for store in stores:
            with _store(store) as url:
                kills.append(kill_duplicates(otelcol, traces, args.latency, url))
        results["kill"] = kills[0] if len(kills) == 1 else kills
        print("\nOne of 3 replicas SIGKILLed mid-run and restarted (the decorated app)")
        keys = ["store", "rag_traces", "missing", "duplicates", "judge_requests_beyond_one_per_trace"]
        print(_common.table(keys, [[k[key] for key in keys] for k in kills]))

    if "ceiling" in phases:
        args.ceiling_traces = args.ceiling_traces or (600 if args.quick else 4000)
        results["ceiling"] = {
            "concurrency": args.ceiling_concurrency,
            "traces": args.ceiling_traces,
            "runs": [
                {"judge_latency_s": latency, "rows": _ceiling_table(otelcol, args, latency)}
                for latency in (float(x) for x in args.ceiling_latencies.split(","))
            ],
        }
    results["load_average"] = os.getloadavg()
    # A run of the ceiling or the OpenInference phase alone has its own results file (and table in
    # docs/benchmarks.md): it must not overwrite the scaling figures in fleet.json.
    name = {"ceiling": "fleet_ceiling", "openinference": "fleet_openinference"}.get(
        next(iter(phases)) if len(phases) == 1 else "", "fleet"
    )
    out = args.out or _common.default_out(name.replace("_", "-"), args.quick)
    path = _common.write_results(name, results, out)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
