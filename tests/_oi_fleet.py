"""OpenInference apps (tests/_oi_fleet_app.py: LlamaIndex, LangChain) through a fleet, and the check that
every RAG trace was scored exactly once, against its own root span and its own answer.

Shared by tests/test_fleet_openinference.py (a few traces per scenario) and benchmarks/fleet/fleet.py
(``--phases openinference``: 500 and more per scenario).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _fleet_fixtures import Fleet, Proc, kit_collector_stop, rag_of, read_spans
from faithtrace._telemetry import names

APP = Path(__file__).resolve().parent / "_oi_fleet_app.py"


def start_oi_app(
    group: Fleet,
    framework: str,
    count: int,
    *,
    non_rag: int = 0,
    late_root_s: float = 0.0,
    interval_s: float = 0.0,
    export_timeout_s: float | None = None,
    protocol: str = "grpc",
) -> Proc:
    """``export_timeout_s``: the app's OTEL_EXPORTER_OTLP_TIMEOUT, how long its SDK waits on one batch while
    no Collector answers (a Collector restarted gracefully is away for a while). ``protocol``: the app
    exports OTLP/gRPC or OTLP/HTTP (protobuf)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAITHTRACE_"))}
    port = group.app_http_port if protocol == "http" else group.app_port
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    if export_timeout_s is not None:
        # Seconds: the Python SDK reads it so (the specification says milliseconds).
        env["OTEL_EXPORTER_OTLP_TIMEOUT"] = str(export_timeout_s)
    env["PYTHONPATH"] = os.pathsep.join([str(APP.parent), env.get("PYTHONPATH", "")])
    argv = [sys.executable, str(APP), framework, str(count), "--non-rag", str(non_rag)]
    argv += ["--late-root", str(late_root_s), "--interval", str(interval_s), "--protocol", protocol]
    index = sum(1 for p in group.procs if p.name.startswith("oi-app"))
    app = Proc(f"oi-app-{index}", argv, group.workdir / f"oi-app-{index}.log", env=env)
    group.procs.append(app)
    return app.start()


def oi_expected(app: Proc) -> dict[str, tuple[str, str]]:
    """Trace ID -> (root span ID, the answer the app returned), for every RAG query the app made."""
    out: dict[str, tuple[str, str]] = {}
    for line in app.log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            out[record["trace_id"]] = (record["root"], record["answer"])
    return out


@dataclass
class OiRun:
    expected: dict[str, tuple[str, str]]
    # trace ID -> (the span each evaluation belongs to, the answer it judged), for every evaluation span
    evaluations: dict[str, list[tuple[str, str]]]
    # (trace ID, span ID) of every span in the sink: the app's spans the Collector accepted and passed on
    seen: frozenset[tuple[str, str]] = frozenset()

    @property
    def root_not_in_sink(self) -> list[str]:
        """RAG traces whose root span never reached the sink: the app's SDK gave up on its batch while no
        Collector listened, or the Collector lost the spans before its persistent queue (the groupbytrace
        overlay holds them in memory for 2 s)."""
        return [t for t, (root, _) in self.expected.items() if (t, root) not in self.seen]

    @property
    def lost_accepted(self) -> list[str]:
        """Lost RAG traces whose root span reached the sink (the Collector queued it)."""
        gone = set(self.root_not_in_sink)
        return [t for t in self.lost if t not in gone]

    @property
    def lost(self) -> list[str]:
        return [t for t in self.expected if not self.evaluations.get(t)]

    @property
    def wrong(self) -> list[tuple[str, tuple[str, str], list[tuple[str, str]]]]:
        """RAG traces with an evaluation of another span or another text than their root's answer."""
        out = []
        for trace_id, want in self.expected.items():
            got = self.evaluations.get(trace_id, [])
            if any(e != want for e in got):
                out.append((trace_id, want, got))
        return out

    @property
    def duplicates(self) -> int:
        return sum(max(0, len(self.evaluations.get(t, [])) - 1) for t in self.expected)

    @property
    def not_rag_scored(self) -> int:
        """Evaluations in traces the app did not report as RAG (its chat traces): must be 0."""
        return sum(len(v) for t, v in self.evaluations.items() if t not in self.expected)

    def summary(self) -> dict[str, Any]:
        return {
            "rag_traces": len(self.expected),
            "lost": len(self.lost),
            "wrong": len(self.wrong),
            "duplicates": self.duplicates,
            "non_rag_scored": self.not_rag_scored,
            "root_not_in_sink": len(self.root_not_in_sink),
            "lost_accepted": len(self.lost_accepted),
        }


def evaluation_count(group: Fleet) -> int:
    """Evaluation spans in the sink so far."""
    return sum(len(v) for v in _read(group.traces_file)[0].values())


def _read(path: Path) -> tuple[dict[str, list[tuple[str, str]]], frozenset[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    spans = read_spans(path)
    for span in spans:
        if span.get("name") == names.EVALUATION_SPAN:
            judged = str(span["attributes"].get(names.INPUT_VALUE, ""))
            trace_id, span_id = rag_of(span)
            out.setdefault(trace_id, []).append((span_id, judged))
    return out, frozenset((s["traceId"], s["spanId"]) for s in spans)


def collect_oi(
    group: Fleet, expected: dict[str, tuple[str, str]], timeout: float = 240.0, accepted_only: bool = False
) -> OiRun:
    """Wait until every expected trace (with ``accepted_only``, every one whose root reached the sink: call
    it once the apps are done) has an evaluation in the sink, or the timeout; then a moment more so
    that late duplicates and wrong extra evaluations are counted too."""
    deadline = time.monotonic() + timeout
    while True:
        run = OiRun(expected, *_read(group.traces_file))
        waiting = run.lost_accepted if accepted_only else run.lost
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    time.sleep(3.0)
    return OiRun(expected, *_read(group.traces_file))


FAULTS = ("kill9", "collector-sigkill", "collector-restart", "collector-rolling-restart")


def inject(
    group: Fleet, fault: str, outage_s: float = 3.0, grace_s: float = 60.0, pre_stop_s: float | None = None
) -> dict[str, Any]:
    """One fault, mid-run; returns how long the faulted process(es) were away (``outage_s``), how long each
    graceful stop took (``stop_s``) and whether one had to be ended by SIGKILL (``stop_forced``).

    - ``kill9``: replica 1 SIGKILLed and, ``outage_s`` later, started again on its ports (what its
      orchestrator does; with the static resolver the Collector keeps the parts for it and retries);
    - ``collector-sigkill``: the fleet Collector SIGKILLed and started again at once (it resumes from its
      persistent queue);
    - ``collector-restart``: the fleet Collector sent SIGTERM and given ``grace_s`` to stop, then SIGKILLed,
      as Kubernetes does after the kit's terminationGracePeriodSeconds (60); then started again;
    - ``collector-rolling-restart``: the kit's two Collectors behind the Service (``Fleet(collectors=2)``),
      each in turn stopped as the kit's pods are (out of the Service, its preStop wait, SIGTERM, SIGKILL at
      the end of the grace: ``kit_collector_stop``, or a preStop of ``pre_stop_s``) and started again on its
      queue, the next one only once the restarted one is ready (a StatefulSet's rolling update).
    """
    started = time.monotonic()
    forced = False
    stop_s: list[float] = []
    if fault == "kill9":
        group.scorers[1][0].kill9()
        time.sleep(outage_s)  # the Collector's parts for it fail and wait in the persistent queue meanwhile
        group.restart_scorer(1)
    elif fault == "collector-sigkill":
        collector = group.collector
        assert collector is not None
        collector.kill9()
        group.start_collector()
    elif fault in ("collector-restart", "collector-rolling-restart"):
        rolling = fault == "collector-rolling-restart"
        if rolling and group.collectors < 2:
            raise ValueError("a rolling restart needs a fleet of several Collectors (collectors=2)")
        pre_stop, grace = kit_collector_stop() if rolling else (0.0, grace_s)
        pre_stop = pre_stop if pre_stop_s is None else pre_stop_s
        for index in range(group.collectors if rolling else 1):
            took, killed = group.stop_collector(index, grace, pre_stop)
            stop_s.append(round(took, 1))
            forced = forced or killed
            group.start_collector(index)
    else:
        raise ValueError(f"unknown fault {fault!r} (one of {', '.join(FAULTS)})")
    return {"outage_s": round(time.monotonic() - started, 1), "stop_forced": forced, "stop_s": stop_s}
