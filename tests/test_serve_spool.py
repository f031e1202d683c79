# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""`faithtrace serve --spool`: the parts of a trace a replica acknowledged before scoring it outlive a
`kill -9`, on a real replica process, a real OTLP/gRPC sink and the scripted judge. (Through the real
Collector and its replay receiver: tests/test_fleet_openinference.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from _fake_judge import FakeJudge, fake_judge  # noqa: F401
from _serve_fixtures import (  # noqa: F401 - sink is a fixture
    OI_ANSWER,
    OiSpan,
    Sink,
    oi_request,
    oi_retriever,
    oi_root,
    otlp_export,
    run_serve,
    scored,
    sink,
)

# Real `faithtrace serve` processes, killed and restarted on their spool.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _files(spool: Path) -> set[str]:
    return {p.name for p in spool.iterdir()} if spool.exists() else set()


def _scored(sink: Sink) -> dict[int, int]:
    """Trace id -> the span each evaluation scored (the span it links to)."""
    return dict(scored(s) for _, s in sink.evaluations())


@pytest.mark.parametrize("spooled", [True, False], ids=["spool", "no spool"])
def test_parts_acknowledged_before_the_score_outlive_a_kill9(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, spooled: bool
) -> None:
    """Trace 21's root comes first and is answered at once (most such roots are chat traces'); trace 22's
    retriever is answered after --hold without its root. The replica is SIGKILLed, then started again on the
    same spool; the parts still missing come. With the spool both traces are scored, against their roots;
    without it (the control) the acknowledged parts died with the process and neither is."""
    spool = tmp_path / "spool"
    args = ("--settle", "60", "--hold", "0.2", *(("--spool", str(spool)) if spooled else ()))
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        channel, export = otlp_export(serve.grpc_port)
        export(oi_request(oi_root(21)), timeout=10)
        export(oi_request(oi_retriever(22)), timeout=10)
        channel.close()
        stats = serve.stats()
        assert (stats["spool_kept"], stats["spool_traces"]) == ((2, 2) if spooled else (0, 0)), stats
        # Levels are gauges on /metrics: a counter's rate() would turn a spool emptying into a reset.
        metrics = serve.metrics()
        for name, value in (("spool_traces", stats["spool_traces"]), ("held_traces", stats["held_traces"])):
            assert f"# TYPE faithtrace_serve_{name} gauge\nfaithtrace_serve_{name} {value}\n" in metrics
        assert f"faithtrace_serve_spool_bytes {stats['spool_bytes']}\n" in metrics
        serve.proc.kill()  # SIGKILL: no drain, nothing flushed
        serve.proc.wait(10)
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        if spooled:
            assert "2 spooled traces found" in serve.log.read_text()
        channel, export = otlp_export(serve.grpc_port)
        # Answered after the scores when the rest of the trace is here, else after --hold.
        export(oi_request(oi_retriever(21)), timeout=30)
        export(oi_request(oi_root(22)), timeout=30)
        channel.close()
        if spooled:
            assert _scored(sink) == {21: 1, 22: 1}
            stats = serve.stats()
            assert (stats["spool_refed"], stats["scored"], stats["incomplete"]) == (2, 2, 0), stats
            # Both marked done, and the previous process's segment deleted.
            assert serve.stats()["spool_traces"] == 0
            assert len(_files(spool)) == 1
        else:
            time.sleep(1.0)
            assert _scored(sink) == {}
            # Trace 21's retriever waits for a root that is gone; 22's root waits, as a chat trace's would.
            assert serve.stats()["held_traces"] == 1


def test_a_graceful_stop_leaves_held_traces_in_the_spool_not_incomplete(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    """Trace 61's retriever waits for its root when the replica is stopped (SIGTERM). Without a spool it would
    be counted incomplete and lost; with one it stays there, and the next start scores it once the root
    comes."""
    spool = tmp_path / "spool"
    args = ("--settle", "60", "--hold", "0.2", "--spool", str(spool))
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        channel, export = otlp_export(serve.grpc_port)
        export(oi_request(oi_retriever(61)), timeout=10)
        channel.close()
        assert serve.stop() == 0
        stopped = json.loads(serve.log.read_text().split("faithtrace serve: stopped ", 1)[1].splitlines()[0])
        assert (stopped["spool_left"], stopped["incomplete"], stopped["spool_traces"]) == (1, 0, 1), stopped
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        channel, export = otlp_export(serve.grpc_port)
        export(oi_request(oi_root(61)), timeout=30)
        channel.close()
        assert _scored(sink) == {61: 1}
        assert serve.stats()["spool_traces"] == 0


def test_chat_roots_leave_the_spool_when_dropped_and_a_full_spool_is_counted(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    """Roots without a retriever are kept (their retriever may still come) and marked done when the replica
    lets them go as not RAG: here its pool for them holds 3, so 7 of 10 go at once. A spool past
    --max-spool-bytes keeps nothing more and counts what it did not keep."""
    spool = tmp_path / "spool"
    bound = 3000
    args = ("--settle", "60", "--max-traces", "3", "--spool", str(spool), "--max-spool-bytes", str(bound))
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        channel, export = otlp_export(serve.grpc_port)
        for trace_id in range(100, 110):
            export(oi_request(oi_root(trace_id, "Hello there.")), timeout=10)
        deadline = time.monotonic() + 10
        while serve.stats()["spool_traces"] > 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        stats = serve.stats()
        assert stats["spool_traces"] == 3, stats
        assert (stats["spool_kept"], stats["dropped_not_rag"], stats["spool_full"]) == (10, 7, 0), stats
        # Each root's record is about 200 bytes, a done mark 33: 3000 bytes hold some 14 roots, not 40 more.
        for trace_id in range(200, 240):
            export(oi_request(oi_root(trace_id, "Hello there.")), timeout=10)
        channel.close()
        stats = serve.stats()
        assert stats["spool_full"] > 0, stats
        assert stats["spool_bytes"] <= bound, stats
        assert stats["spool_kept"] + stats["spool_full"] == 50


def test_spooled_parts_go_to_the_replay_endpoint_when_one_is_set(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    """Started on a spool with --replay-endpoint, a replica sends the spooled parts there (the Collector's
    replay receiver routes each trace to the replica that owns it now) and deletes them once taken. Here the
    endpoint is the sink: it must receive trace 31's root span as it was sent."""
    spool = tmp_path / "spool"
    args = ("--settle", "60", "--spool", str(spool))
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        channel, export = otlp_export(serve.grpc_port)
        export(oi_request(oi_root(31)), timeout=10)
        channel.close()
        serve.proc.kill()
        serve.proc.wait(10)
    replay = ("--replay-endpoint", f"http://127.0.0.1:{sink.port}")
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args, *replay) as serve:
        deadline = time.monotonic() + 20
        while serve.stats()["spool_traces"] and time.monotonic() < deadline:
            time.sleep(0.1)
        replayed = [(r, s) for r, s in sink.spans if s.name == "query"]
        assert [(r["service.name"], int.from_bytes(s.trace_id, "big")) for r, s in replayed] == [
            ("oi-app", 31)
        ]
        attrs = {kv.key: kv.value.string_value for kv in replayed[0][1].attributes}
        assert attrs["output.value"] == OI_ANSWER
        stats = serve.stats()
        assert (stats["spool_replayed"], stats["spool_refed"], stats["spool_traces"]) == (1, 0, 0), stats


def _request(*spans: OiSpan) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(oi_request(*spans))


def _span_ids(request: ExportTraceServiceRequest) -> list[tuple[int, int]]:
    return [
        (int.from_bytes(s.trace_id, "big"), int.from_bytes(s.span_id, "big"))
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]


def test_the_spool_log_survives_a_cut_record_and_a_replay_that_died(tmp_path: Path) -> None:
    """A record cut short (the process died writing it) ends the log without losing the ones before; parts
    taken for a replay when the process died are still there at the next start, and a replay's done mark
    leaves the parts kept while it was under way."""
    from faithtrace.serve.spool import Spool

    spool = Spool(tmp_path, max_bytes=1 << 20)
    # One request of two traces: each trace gets its own spans only, with their resource.
    assert spool.keep_parts(_request(oi_root(5), oi_retriever(6), oi_root(6)), {5, 6}) == (2, 0)
    assert _span_ids(spool.load(6)) == [(6, 2), (6, 1)]
    assert spool.load(5).resource_spans[0].resource.attributes[0].value.string_value == "oi-app"
    spool.keep_parts(_request(oi_retriever(5)), {5})
    (segment,) = tmp_path.iterdir()
    whole = segment.read_bytes()
    segment.write_bytes(whole[:-3])  # the last record, trace 5's retriever, cut short
    assert _span_ids(Spool(tmp_path, 1 << 20).load(5)) == [(5, 1)]

    spool = Spool(tmp_path, 1 << 20)
    spool.keep_parts(_request(oi_retriever(5)), {5})
    taken = spool.take(5)
    assert taken is not None
    assert _span_ids(taken[0]) == [(5, 1), (5, 2)]
    spool.keep_parts(_request(oi_root(5)), {5})  # kept while the replay was under way
    # The process dies here, the replay unanswered: the next start has every part.
    again = Spool(tmp_path, 1 << 20)
    assert sorted(_span_ids(again.load(5))) == [(5, 1), (5, 1), (5, 2)]
    assert len(list(tmp_path.iterdir())) == 1  # the old segments, copied forward, are gone
    # A replay answered: only the parts it took are done.
    taken = again.take(5)
    assert taken is not None
    again.keep_parts(_request(oi_retriever(5)), {5})
    again.done(5, taken[1])
    assert _span_ids(again.load(5)) == [(5, 2)]
    assert _span_ids(Spool(tmp_path, 1 << 20).load(5)) == [(5, 2)]


def test_one_long_held_trace_does_not_pin_the_log(tmp_path: Path) -> None:
    """Trace 1 stays live while 2,000 others come and go (chat roots dropped as not RAG): the segments stay
    few (the oldest one's live parts are copied forward), the bound holds, a restart finds trace 1 alone."""
    from faithtrace.serve.spool import Spool

    spool = Spool(tmp_path, max_bytes=64 << 10)
    spool.keep_parts(_request(oi_retriever(1)), {1})
    for trace_id in range(100, 2100):
        assert spool.keep_parts(_request(oi_root(trace_id, "Hello there.")), {trace_id}) == (1, 0)
        spool.sweep(lambda t: t == 1)
        assert spool.bytes <= 64 << 10
    assert len(list(tmp_path.iterdir())) <= 6
    assert spool.traces() == [1]
    assert spool.bytes == sum(p.stat().st_size for p in tmp_path.iterdir())
    again = Spool(tmp_path, 64 << 10)
    assert again.traces() == [1]
    assert _span_ids(again.load(1)) == [(1, 2)]


def test_live_data_larger_than_the_kept_segments_is_not_copied_round(tmp_path: Path) -> None:
    """Every trace stays live: no segment is worth compacting, each sweep ends at once, and the byte bound
    (not compaction) stops the spool, counting what it refused."""
    from faithtrace.serve.spool import Spool

    spool = Spool(tmp_path, max_bytes=16 << 10)
    kept = full = 0
    for trace_id in range(1, 400):
        k, f = spool.keep_parts(_request(oi_retriever(trace_id)), {trace_id})
        kept, full = kept + k, full + f
        spool.sweep(lambda _t: True)
    assert full > 0
    assert kept == len(spool)
    assert spool.bytes <= 16 << 10
    assert len(list(tmp_path.iterdir())) > 4  # live segments stay, however many
