"""OpenInference apps (tests/_oi_fleet_app.py: LlamaIndex, LangChain) through a fleet, and the check that
every RAG trace was scored exactly once, against its own root span and its own answer.

Shared by tests/test_fleet_openinference.py (a few traces per scenario) and benchmarks/fleet.py
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

from _fleet_fixtures import Fleet, Proc, read_spans
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
) -> Proc:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAITHTRACE_"))}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{group.ports.app_grpc}"
    env["PYTHONPATH"] = os.pathsep.join([str(APP.parent), env.get("PYTHONPATH", "")])
    argv = [sys.executable, str(APP), framework, str(count), "--non-rag", str(non_rag)]
    argv += ["--late-root", str(late_root_s), "--interval", str(interval_s)]
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
        }


def _evaluations(path: Path) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for span in read_spans(path):
        if span.get("name") == names.EVALUATION_SPAN:
            judged = str(span["attributes"].get(names.INPUT_VALUE, ""))
            out.setdefault(span["traceId"], []).append((span.get("parentSpanId", ""), judged))
    return out


def collect_oi(group: Fleet, expected: dict[str, tuple[str, str]], timeout: float = 240.0) -> OiRun:
    """Wait until every expected trace has an evaluation in the sink (or the timeout), then a moment more so
    that late duplicates and wrong extra evaluations are counted too."""
    deadline = time.monotonic() + timeout
    while True:
        run = OiRun(expected, _evaluations(group.traces_file))
        if not run.lost or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    time.sleep(3.0)
    return OiRun(expected, _evaluations(group.traces_file))
