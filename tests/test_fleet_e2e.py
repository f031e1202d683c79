# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""End to end through the real Collector: an app with `configure(scoring="remote")` -> Collector (load
balancing by trace ID, persistent queue, collector/otelcol/fleet.yaml) -> 3 `faithtrace serve` replicas
(judge: the fixed-latency stand-in benchmarks/_shared/fakejudge.py, answering through litellm's real client
path) -> Collector -> a sink Collector (the trace backend) writing a file read back here, and Prometheus
scraping the Collector's Prometheus exporter.

Faults: one replica SIGKILLed mid-run (and started again, as its orchestrator would: with the static resolver
the Collector waits for the host instead of re-routing), and separately the Collector itself restarted or
SIGKILLed mid-run. Each time every RAG trace must come back scored at least once; duplicates are counted and
reported (a replica killed after scoring and before answering makes its batch score twice).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from _fleet_fixtures import (
    APP_SERVICE,
    FUNCTION,
    Fleet,
    Proc,
    Run,
    app_traces,
    collect,
    fleet,
    http_ok,
    otelcol,  # noqa: F401 - a fixture
    read_spans,
    serve_ready,  # noqa: F401 - a fixture
    start_app,
    wait_app_done,
    wait_until,
)
from _ports import free_port
from _prom_fixtures import backend_binary, prom_name
from faithtrace._telemetry import names

pytestmark = [pytest.mark.backend, pytest.mark.slow, pytest.mark.timeout(600)]


@contextmanager
def three_replicas(
    tmp_path: Path, otelcol: str, scorer_export_timeout_s: float | None = None
) -> Iterator[Fleet]:
    with fleet(
        tmp_path, otelcol, judge_latency_s=0.2, scorer_export_timeout_s=scorer_export_timeout_s
    ) as group:
        for _ in range(3):
            group.add_scorer(concurrency=16)
        group.wait_scorers_ready()
        group.start_collector()
        yield group


@pytest.fixture
def running_fleet(tmp_path: Path, otelcol: str, serve_ready: None) -> Iterator[Fleet]:
    with three_replicas(tmp_path, otelcol) as group:
        yield group


# While the Collector stops gracefully it takes no results, and waits for the replicas' answers to the
# requests they hold: a replica answers them UNAVAILABLE once one export has failed for its whole timeout
# (then, for as long again, without trying), and evaluations that end after that window try again. With the
# SDK's 10 s per try the stop took 19 to 28 s on a loaded 2-core machine; 4 s still lets the exporter retry
# twice (after 1 s and 2 s), far longer than a Collector that is up takes to answer.
QUICK_EXPORT_TIMEOUT_S = 4.0


@pytest.fixture
def quick_export_fleet(tmp_path: Path, otelcol: str, serve_ready: None) -> Iterator[Fleet]:
    with three_replicas(tmp_path, otelcol, QUICK_EXPORT_TIMEOUT_S) as group:
        yield group


def report(run: Run, label: str, record_property: Any) -> None:
    line = (
        f"[fleet e2e: {label}] RAG traces {len(run.expected)}, missing {len(run.missing)}, "
        f"duplicate evaluations {run.duplicates}"
    )
    print(line)
    record_property("rag_traces", len(run.expected))
    record_property("duplicates", run.duplicates)
    report_file = os.environ.get("FAITHTRACE_FLEET_REPORT")
    if report_file:
        with Path(report_file).open("a") as out:
            out.write(line + "\n")


def assert_all_scored(run: Run, group: Fleet) -> None:
    assert run.expected, "the app recorded no RAG trace"
    assert not run.missing, (
        f"{len(run.missing)} of {len(run.expected)} RAG traces never came back scored, "
        f"e.g. {run.missing[:3]}\n"
        f"queue size now: {group.collector_metric('otelcol_exporter_queue_size')}\n{group.logs()}"
    )


# --- the happy path -----------------------------------------------------------------------------------------
def test_every_rag_trace_comes_back_scored_through_three_replicas(
    running_fleet: Fleet, tmp_path: Path, record_property: Any
) -> None:
    group = running_fleet
    prometheus = start_prometheus(group, tmp_path)
    app = start_app(group, count=30, interval=0.05)
    wait_app_done(app)
    expected = app_traces(app)
    run = collect(group, expected)
    report(run, "no faults", record_property)
    assert_all_scored(run, group)
    # No fault, no retry: exactly one evaluation per trace.
    assert run.duplicates == 0

    by_id = {(s["traceId"], s["spanId"]): s for s in run.spans}
    evaluations = [s for s in run.spans if s["name"] == names.EVALUATION_SPAN]
    for evaluation in evaluations:
        attributes = evaluation["attributes"]
        assert attributes[names.EVAL_OUTCOME] == "scored"
        assert 0.0 <= attributes[names.GEN_AI_EVALUATION_SCORE_VALUE] <= 1.0
        assert attributes[names.GEN_AI_EVALUATION_SCORE_LABEL] in {names.LABEL_PASS, names.LABEL_FAIL}
        assert attributes[names.FUNCTION] == FUNCTION
        assert any(names.is_claim_event(e["name"]) for e in evaluation["events"])
        # A child of the app's RAG span (same trace) or linked to it.
        parent = (evaluation["traceId"], evaluation.get("parentSpanId", ""))
        linked = {(link["traceId"], link["spanId"]) for link in evaluation.get("links", [])}
        rag_spans = {(t, s) for t, s in expected.items()}
        assert parent in rag_spans or linked & rag_spans, evaluation
    # The evaluations are filed under the app's service name suffixed, apart from the app's own spans.
    assert {s["resource"].get("service.name") for s in evaluations} == {APP_SERVICE + names.OWN_TRACES_SUFFIX}
    # The app's own spans reached the trace backend too, RAG and plain alike, under the app's service name.
    app_spans = [s for s in run.spans if s["resource"].get("service.name") == APP_SERVICE]
    assert {(s["traceId"], s["spanId"]) for s in app_spans} >= set(expected.items())
    assert sum(1 for s in app_spans if s["name"] == "GET /health") == 30
    assert all(by_id.get(key) for key in expected.items())
    # Plain traces were never scored.
    plain_traces = {s["traceId"] for s in app_spans if s["name"] == "GET /health"}
    assert not plain_traces & set(run.per_trace)

    # Prometheus, scraping the Collector: the evaluations are counted under the app's name, not the scorer's.
    series = wait_for_series(
        prometheus, prom_name(names.METRIC_EVALUATIONS) + "_total", min_total=len(expected)
    )
    jobs = {s["metric"].get("job") for s in series}
    assert "faithtrace-scorer" not in jobs, series
    assert any(
        s["metric"].get(prom_name(names.FUNCTION)) == FUNCTION
        and APP_SERVICE in (s["metric"].get("job"), s["metric"].get("service_name"))
        for s in series
    ), series


# --- faults ----------------------------------------------------------------------------------------------
def test_a_replica_killed_mid_run_loses_no_trace(running_fleet: Fleet, record_property: Any) -> None:
    group = running_fleet
    app = start_app(group, count=60, interval=0.05)
    victim, _, _ = group.scorers[1]
    # Kill while the replica is busy: once a third of the traces went out and some results came back.
    wait_until("some results in the sink", lambda: len(read_spans(group.traces_file)) > 20, app, 120.0)
    victim.kill9()
    time.sleep(3.0)  # the Collector's requests to it fail and wait in the persistent queue meanwhile
    group.restart_scorer(1)
    wait_app_done(app)
    run = collect(group, app_traces(app))
    report(run, "replica SIGKILLed", record_property)
    assert_all_scored(run, group)


@pytest.mark.parametrize(
    "how",
    ["sigkill", "restart"],
)
def test_the_collector_restarted_mid_run_loses_no_trace(
    quick_export_fleet: Fleet, record_property: Any, how: str
) -> None:
    """What the receiver accepted (answered OK to the app) is on disk in the persistent queue: a SIGKILLed or
    gracefully restarted Collector resumes from there.

    In this one-Collector set-up the Collector closes its receivers first, so the scorers cannot export the
    results of the requests they hold; they answer UNAVAILABLE (at once after the first export timed out) and
    the stop waits for those answers. While no Collector listens, the app's SDK may give up on a batch after
    its retries (about 30 s at most): that loss is the app's, before any Collector accepted the spans; it is
    reported, and every trace the Collector did accept must be scored. After a SIGKILL the Collector is back
    at once and nothing at all may be missing. The replicas' export timeout is QUICK_EXPORT_TIMEOUT_S."""
    group = quick_export_fleet
    assert group.collector is not None
    app = start_app(group, count=60, interval=0.05, export_timeout_s=60)
    wait_until("some results in the sink", lambda: len(read_spans(group.traces_file)) > 20, app, 120.0)
    stopped = time.monotonic()
    if how == "sigkill":
        group.collector.kill9()
    else:
        group.collector.stop(timeout=120)
    stop_s = time.monotonic() - stopped
    group.start_collector()
    wait_app_done(app)
    run = collect(group, app_traces(app), accepted_only=how == "restart")
    lost_by_app = len(run.expected) - len(run.accepted)
    report(
        run,
        f"Collector {how} (stop took {stop_s:.1f} s, app could not hand over {lost_by_app})",
        record_property,
    )
    assert not run.accepted_missing, (
        f"{len(run.accepted_missing)} RAG traces the Collector accepted were never scored\n{group.logs()}"
    )
    if how == "sigkill":
        assert_all_scored(run, group)


# --- Prometheus ----------------------------------------------------------------------------------------
def start_prometheus(group: Fleet, workdir: Path) -> str:
    binary = backend_binary("prometheus")
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: otel-collector\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{group.ports.prometheus}']}}]\n"
    )
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    proc = Proc("prometheus", argv, workdir / "prometheus.log")
    group.procs.append(proc.start())
    url = f"http://127.0.0.1:{port}"
    wait_until("ready", lambda: http_ok(url + "/-/ready"), proc, 30.0)
    return url


def wait_for_series(url: str, metric: str, min_total: float, timeout: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        query = urllib.parse.urlencode({"query": metric})
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as response:
            series: list[dict[str, Any]] = json.loads(response.read())["data"]["result"]
        if sum(float(s["value"][1]) for s in series) >= min_total:
            return series
        if time.monotonic() > deadline:
            pytest.fail(f"Prometheus never counted {min_total} for {metric}: {series}")
        time.sleep(1.0)
