# ruff: noqa: F811  (fixtures are imported into this module by name)
"""The Collector kit's tail sampling keeps a failing answer's whole trace, with the real Collector.

faithtrace holds the RAG span until its evaluation is on it, so the span carrying
``gen_ai.evaluation.score.label`` reaches the Collector after the request's other spans, within the hold. The
kit's own ``tail_sampling`` policies (collector/otelcol/config.yaml) decide each trace once its
``decision_wait`` has passed: a failing answer's trace is kept whole (its server span, the RAG span and the
documents' record), a passing one is dropped (the test sets the policy that samples a tenth of the rest to
nothing). The kit's ``transform/drop-event-text`` runs too: it finds the claim events by their names.

The app is real (decorator, worker, litellm, OTel SDK, OTLP/gRPC exporter), the judge's replies come from the
fake judge; the Collector writes what it keeps to a file that the test reads.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

import _fake_judge
import faithtrace
from _fake_judge import FakeJudge, fake_judge  # noqa: F401  (fixture)
from _fleet_fixtures import COLLECTOR, Proc, otelcol_binary, read_spans, tcp_open, wait_until
from _ports import free_port
from _trace_fixtures import clean_env  # noqa: F401  (autouse fixture)
from faithtrace._telemetry import names as n

pytestmark = pytest.mark.backend

SERVICE = "tail-sampled-app"
CONTEXTS, QUESTION = _fake_judge.WARRANTY_CONTEXTS, _fake_judge.WARRANTY_QUESTION
FAILING, PASSING = _fake_judge.FAILING_ANSWER, _fake_judge.PASSING_ANSWER
# The kit waits 60 s for a 30 s hold; here 10 s for 5 s. The hold must outlast the failing answer's scoring:
# its judge requests take the fake judge's 0.5 s each, and at a load of 11 a 3 s hold ran out before the score
# came, so the RAG span went out unscored after its trace's decision.
DECISION_WAIT_S = 10
HOLD_S = 5.0


def kit_pipeline(receiver: int, out: Path) -> dict[str, Any]:
    """The kit's traces pipeline processors as they are, but a short decision_wait and no random sample of
    the passing traces; its exporters replaced by a file."""
    kit = yaml.safe_load((COLLECTOR / "otelcol" / "config.yaml").read_text())
    processors = {k: copy.deepcopy(v) for k, v in kit["processors"].items() if k != "memory_limiter"}
    sampling = processors["tail_sampling"]
    sampling["decision_wait"] = f"{DECISION_WAIT_S}s"
    for policy in sampling["policies"]:
        if policy["type"] == "probabilistic":
            policy["probabilistic"]["sampling_percentage"] = 0
    chain = [p for p in kit["service"]["pipelines"]["traces"]["processors"] if p != "memory_limiter"]
    chain.insert(chain.index("tail_sampling") + 1, "transform/drop-event-text")
    return {
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{receiver}"}}}},
        "processors": processors,
        "exporters": {"file/kept": {"path": str(out), "format": "json", "flush_interval": "100ms"}},
        "service": {
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
            "pipelines": {"traces": {"receivers": ["otlp"], "processors": chain, "exporters": ["file/kept"]}},
        },
    }


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    out = tmp_path / "kept.jsonl"
    config = tmp_path / "otelcol.yaml"
    config.write_text(yaml.safe_dump(kit_pipeline(port, out), sort_keys=False))
    proc = Proc("otelcol", [otelcol_binary(), f"--config={config}"], tmp_path / "otelcol.log").start()
    try:
        wait_until("the OTLP receiver", lambda: tcp_open(port), proc)
        yield f"127.0.0.1:{port}", out
    finally:
        proc.stop()


def test_the_kit_s_tail_sampling_keeps_a_failing_answer_s_whole_trace(
    collector: tuple[str, Path], fake_judge: FakeJudge
) -> None:
    endpoint, out = collector
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True), schedule_delay_millis=200)
    )
    fake_judge.delay_s = 0.5  # the RAG span arrives a moment after the server span, within the hold
    faithtrace.configure(
        tracer_provider=provider,
        judge=fake_judge.settings(),
        worker=faithtrace.WorkerOptions(hold_timeout_s=HOLD_S),
    )
    try:

        @faithtrace.trace_faithfulness(name="support-bot")
        def answer(question: str, contexts: list[str], text: str) -> str:
            return text

        # A first scored call sets the judge up (litellm's import takes seconds, longer than this test's
        # hold): the calls below are scored at the judge's own pace.
        answer(QUESTION, CONTEXTS, PASSING)
        assert faithtrace.flush(timeout=60)
        tracer = provider.get_tracer("web")
        traces = {}
        for text in (FAILING, PASSING):
            with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER) as server:
                answer(QUESTION, CONTEXTS, text)
            traces[text] = f"{server.get_span_context().trace_id:032x}"
        assert provider.force_flush(10_000)  # the server spans are out; the RAG spans wait for their scores
        assert faithtrace.flush(timeout=30)
        assert provider.force_flush(10_000)
    finally:
        faithtrace.shutdown(timeout=10)
        provider.shutdown()

    def kept() -> list[dict[str, Any]]:
        return [s for s in read_spans(out) if s["traceId"] == traces[FAILING]]

    deadline = time.monotonic() + DECISION_WAIT_S + 20
    while len(kept()) < 3:
        assert time.monotonic() < deadline, f"kept: {[s['name'] for s in read_spans(out)]}"
        time.sleep(0.3)
    time.sleep(2.0)  # anything else the sampler would let through has had its chance
    spans = read_spans(out)
    failing = [s for s in spans if s["traceId"] == traces[FAILING]]
    # The failing answer's whole request: the server span, the RAG span (which came later, held for its
    # score) and the documents' record.
    assert sorted(s["name"] for s in failing) == sorted(["POST /ask", "support-bot", n.RETRIEVER_SPAN])
    rag = next(s for s in failing if s["name"] == "support-bot")
    assert rag["attributes"][n.GEN_AI_EVALUATION_SCORE_LABEL] == n.LABEL_FAIL
    server = next(s for s in failing if s["name"] == "POST /ask")
    assert rag["parentSpanId"] == server["spanId"]
    # The passing answer's request is dropped, every span of it.
    assert not [s for s in spans if s["traceId"] == traces[PASSING]]
    # The judge's trace of the failing answer carries the label too, so it is kept as well (the passing
    # answer's claims were proven in code: it has none).
    judge = [s for s in spans if s["resource"].get("service.name") == SERVICE + n.OWN_TRACES_SUFFIX]
    assert {s["name"] for s in judge} >= {n.EVALUATION_SPAN}
    # The kit's scrubbing of event text matched the claim events by their names: the verdicts stay, the texts
    # go.
    claims = [e for e in rag["events"] if n.is_claim_event(e["name"])]
    assert [e["attributes"][n.CLAIM_VERDICT] for e in claims] == ["yes", "no"]
    assert all(n.CLAIM_TEXT not in e["attributes"] for e in claims)
    assert all(n.CLAIM_REASON not in e["attributes"] for e in claims)
