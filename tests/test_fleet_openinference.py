# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""OpenInference apps through the real Collector and real `faithtrace serve` replicas: a LlamaIndex query
engine and a LangChain retrieval chain (scripted LLMs, mock embeddings, traced by their OpenInference
instrumentations and nothing else) -> collector/otelcol/fleet.yaml -> 2 replicas -> a sink Collector
writing a file.

Every RAG trace must be scored exactly once, against its own root span and its own answer (each query's
answer names its number, so a judged text splitter output or another trace's answer shows), with the roots
sent late, with saturated replicas, among chat traces that must cost nothing, and through a replica
killed with SIGKILL mid-run. The counts are small for
CI; benchmarks/fleet/fleet.py --phases openinference runs the same scenarios over 500 traces each.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from _fleet_fixtures import (  # noqa: F401 - otelcol and serve_ready are fixtures
    GROUPBYTRACE_OVERLAY,
    Fleet,
    fleet,
    otelcol,
    serve_ready,
    wait_app_done,
    wait_until,
)
from _oi_fleet import OiRun, collect_oi, evaluation_count, inject, oi_expected, start_oi_app

pytest.importorskip("llama_index.core")
pytest.importorskip("openinference.instrumentation.langchain")

pytestmark = [pytest.mark.backend, pytest.mark.slow, pytest.mark.timeout(600)]


@contextmanager
def _fleet(
    tmp_path: Path,
    otelcol: str,
    judge_s: float,
    *extra: str,
    concurrency: int = 8,
    grouped: bool = False,
    collectors: int = 1,
    overlays: tuple[Path, ...] = (),
    **kwargs: Any,
) -> Iterator[Fleet]:
    with fleet(tmp_path, otelcol, judge_latency_s=judge_s, collectors=collectors, **kwargs) as group:
        if grouped:
            group.overlays.append(GROUPBYTRACE_OVERLAY)
        group.overlays.extend(overlays)
        for _ in range(2):
            group.add_scorer(concurrency=concurrency, extra=extra)
        group.wait_scorers_ready()
        group.start_collector()
        yield group


def _run(group: Fleet, apps: list[tuple[str, int, dict[str, Any]]]) -> tuple[OiRun, list[dict[str, Any]]]:
    procs = [start_oi_app(group, framework, count, **kw) for framework, count, kw in apps]
    for proc in procs:
        wait_app_done(proc, timeout=300)
    expected = {t: v for proc in procs for t, v in oi_expected(proc).items()}
    run = collect_oi(group, expected, timeout=240)
    stats = []
    for _, _, http_port in group.scorers:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/stats", timeout=5) as response:
            stats.append(json.loads(response.read()))
    return run, stats


def _assert_exact(run: OiRun, stats: list[dict[str, Any]], group: Fleet, count: int) -> None:
    summary = run.summary()
    assert summary["rag_traces"] == count, summary
    assert (summary["lost"], summary["wrong"], summary["duplicates"], summary["non_rag_scored"]) == (
        0,
        0,
        0,
        0,
    ), f"{summary}\nwrong: {run.wrong[:3]}\nlost: {run.lost[:3]}\n{stats}\n{group.logs()}"
    assert sum(s["incomplete"] for s in stats) == 0, stats


@pytest.mark.parametrize("grouped", [False, True], ids=["fleet.yaml", "with groupbytrace"])
def test_llamaindex_and_langchain_traces_are_scored_once_against_their_root(
    tmp_path: Path, otelcol: str, serve_ready: None, grouped: bool
) -> None:
    with _fleet(tmp_path, otelcol, 0.05, grouped=grouped) as group:
        apps = [("llama", 8, {"non_rag": 2}), ("langchain", 8, {"non_rag": 2})]
        run, stats = _run(group, apps)
        _assert_exact(run, stats, group, 16)
        # The chat traces were never scored, held as RAG traces or refused (they wait in their own pool).
        assert sum(s["held_traces"] for s in stats) == 0
        assert sum(s["rejected_saturated"] + s["rejected_held"] for s in stats) == 0


def test_roots_that_come_after_the_old_settle_window_are_waited_for(
    tmp_path: Path, otelcol: str, serve_ready: None
) -> None:
    """Each root span is exported 3 s after the rest of its trace (the old --settle was 2 s): the trace
    waits for it instead of being scored from a text splitter's output or reported lost."""
    with _fleet(tmp_path, otelcol, 0.05) as group:
        run, stats = _run(group, [("llama", 6, {"late_root_s": 3.0}), ("langchain", 6, {"late_root_s": 3.0})])
        _assert_exact(run, stats, group, 12)


def test_saturated_replicas_lose_nothing_and_judge_nothing_wrong(
    tmp_path: Path, otelcol: str, serve_ready: None
) -> None:
    with _fleet(tmp_path, otelcol, 0.2, "--max-pending", "2", "--retry-after", "1", concurrency=1) as group:
        run, stats = _run(group, [("llama", 10, {}), ("langchain", 10, {})])
        _assert_exact(run, stats, group, 20)


@pytest.mark.parametrize("grouped", [False, True], ids=["fleet.yaml", "with groupbytrace"])
def test_a_replica_killed_mid_run_loses_no_llamaindex_trace(
    tmp_path: Path, otelcol: str, serve_ready: None, record_property: Any, grouped: bool
) -> None:
    """One of 2 replicas SIGKILLed while LlamaIndex traces flow, then started again on its ports (as its
    orchestrator would; the static resolver keeps its parts in the Collector's queue meanwhile). Every RAG
    trace is scored, against its own root span and answer. As for the decorated app
    (tests/test_fleet_e2e.py), duplicates are allowed and reported: a replica killed after scoring and before
    answering has its part scored again by its successor.

    With fleet.yaml alone a trace split over requests may have a part acknowledged before its score (a root
    that came first, a retriever's part after --hold): the replicas keep those in their spool, as the kit's
    do, and the restarted one sends them back through the Collector's replay receiver. Without the spool,
    benchmarks/fleet/fleet.py --oi-scenarios kill9 lost 3 to 7 of 500 per run (docs/fleet.md)."""
    count = 50
    with _fleet(tmp_path, otelcol, 0.2, grouped=grouped) as group:
        app = start_oi_app(group, "llama", count, interval_s=0.1)
        # On a fast machine the app may have sent all 50 before groupbytrace (2 s) and the judge let 5
        # through: the kill then still finds traces in the Collector's queue and the replicas, which is what
        # it tests.
        wait_until(
            "some evaluations in the sink",
            lambda: evaluation_count(group) >= 5,
            app,
            180.0,
            proc_may_finish=True,
        )
        at_kill = evaluation_count(group)
        assert at_kill < count, "the app was done before the kill: nothing was in flight"
        inject(group, "kill9")
        wait_app_done(app, timeout=300)
        expected = oi_expected(app)
        run = collect_oi(group, expected, timeout=300)
        summary = run.summary()
        print(f"[fleet OpenInference: replica SIGKILLed after {at_kill} evaluations] {summary}")
        record_property("duplicates", summary["duplicates"])
        assert summary["rag_traces"] == count, summary
        assert (summary["lost"], summary["wrong"], summary["non_rag_scored"]) == (0, 0, 0), (
            f"{summary}\nwrong: {run.wrong[:3]}\nlost: {run.lost[:3]}\n{group.logs()}"
        )


# The kit's connection age and preStop wait, scaled down 5-fold for the test: connections closed after 2 s
# (GOAWAY, 1 s for calls in flight), and a Collector keeps serving for 5 s after it left the Service (the kit:
# 10 s, 5 s and 20 s; tests/test_deploy_kit.py checks that its preStop outlasts both plus groupbytrace).
SHORT_CONNECTIONS = """
receivers:
  otlp:
    protocols:
      grpc:
        keepalive: {server_parameters: {max_connection_age: 2s, max_connection_age_grace: 1s}}
  otlp/results:
    protocols:
      grpc:
        keepalive: {server_parameters: {max_connection_age: 2s, max_connection_age_grace: 1s}}
"""
PRE_STOP_S = 5.0


def test_a_rolling_restart_of_the_kits_two_collectors_loses_no_trace(
    tmp_path: Path, otelcol: str, serve_ready: None, record_property: Any
) -> None:
    """The kit's StatefulSet of two Collectors (groupbytrace overlay, each its own persistent queue) behind
    a Service (tests/_service_proxy.py, routing as kube-proxy does), restarted one after the other while a
    LlamaIndex app sends through the Service: each leaves the Service, serves its open connections through
    its preStop wait while they move to the other, then is sent SIGTERM and started again on its queue.
    Every RAG trace is scored, against its own root span and answer; neither stop needs its SIGKILL."""
    overlay = tmp_path / "short-connections.yaml"
    overlay.write_text(SHORT_CONNECTIONS)
    pre_stop_s = PRE_STOP_S
    with _fleet(
        tmp_path, otelcol, 0.05, grouped=True, collectors=2, overlays=(overlay,), concurrency=16
    ) as group:
        count = 200
        app = start_oi_app(group, "llama", count, interval_s=0.1, export_timeout_s=60)
        wait_until("some evaluations in the sink", lambda: evaluation_count(group) >= 5, app, 180.0)
        at_fault = evaluation_count(group)
        faulted = inject(group, "collector-rolling-restart", pre_stop_s=pre_stop_s)
        still_sending = app.alive
        wait_app_done(app, timeout=300)
        run = collect_oi(group, oi_expected(app), timeout=120)
        summary = run.summary()
        service = group.service_state()
        print(f"[rolling restart after {at_fault} evaluations] {faulted} {summary} {service}")
        record_property("duplicates", summary["duplicates"])
        assert still_sending, "the app was done before both Collectors had restarted: nothing was in flight"
        assert at_fault < count
        assert not faulted["stop_forced"], faulted
        assert all(b["routed"] >= 1 for b in service), service  # both Collectors took connections
        assert summary["rag_traces"] == count, summary
        assert (summary["lost"], summary["wrong"], summary["non_rag_scored"]) == (0, 0, 0), (
            f"{summary}\nwrong: {run.wrong[:3]}\nlost: {run.lost[:3]}\n{group.logs()}"
        )
