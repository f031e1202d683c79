"""Helpers for the collector/ tests: PromQL name extraction, a scripted judge, real Prometheus/Alertmanager.

Everything listens on 127.0.0.1. Servers are context managers (the test modules wrap them in fixtures), so
leaving the block stops them, also when the test failed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from _loopback import serve_in_background
from faithtrace import JudgeSettings
from faithtrace._telemetry import names

REPO = Path(__file__).resolve().parents[1]
COLLECTOR = REPO / "collector"
RULES_FILE = COLLECTOR / "prometheus" / "rules" / "faithtrace-alerts.yml"
RULE_TESTS_FILE = COLLECTOR / "prometheus" / "tests" / "faithtrace-alerts.test.yml"
PROMETHEUS_CONFIG = COLLECTOR / "prometheus" / "prometheus.yml"
ALERTMANAGER_CONFIG = COLLECTOR / "alertmanager" / "alertmanager.yml"
OTELCOL_CONFIG = COLLECTOR / "otelcol" / "config.yaml"
COMPOSE_FILE = COLLECTOR / "docker-compose.yaml"
GRAFANA = COLLECTOR / "grafana"


# --- names -------------------------------------------------------------------------------------------------
def prom_name(otel_name: str) -> str:
    """How Prometheus exporters spell an OTel metric or attribute name (before unit/type suffixes)."""
    return re.sub(r"[^A-Za-z0-9_:]", "_", otel_name)


def metric_constants() -> dict[str, str]:
    return {k: v for k, v in vars(names).items() if k.startswith("METRIC_") and isinstance(v, str)}


def names_constant_for(sample_name: str) -> str | None:
    """The names.py METRIC_* constant a Prometheus sample name comes from, allowing unit and type suffixes."""
    for const, otel_name in metric_constants().items():
        base = prom_name(otel_name)
        if sample_name == base or re.fullmatch(
            re.escape(base) + r"(?:_[A-Za-z]+)?(?:_total|_bucket|_sum|_count|_created)?", sample_name
        ):
            return const
    return None


# Labels every scraped series can have besides the instrument's attributes.
SCRAPE_LABELS = frozenset({"job", "instance"})

_AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk"}
    | {"quantile"}
)
_KEYWORDS = frozenset(
    ["by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool"]
)
_GROUPING = r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"


@dataclass(frozen=True)
class PromqlRefs:
    metrics: frozenset[str]
    # (metric, label) for every label matcher written inside metric{...}
    selector_labels: frozenset[tuple[str, str]]
    # labels in by/without/on/ignoring/group_* clauses
    grouping_labels: frozenset[str]


def promql_refs(expr: str) -> PromqlRefs:
    """The metric names and label names a PromQL expression (or Grafana query) refers to.

    A small lexer is enough here: our expressions use no metric names inside strings, and string literals,
    ranges and Grafana variables are removed before identifiers are collected.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    selector_labels: set[tuple[str, str]] = set()
    for metric, body in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}", text):
        for label in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", body):
            selector_labels.add((metric or "", label))
    text = re.sub(r"\{[^}]*\}", " ", text)
    grouping = {
        label.strip() for body in re.findall(_GROUPING, text) for label in body.split(",") if label.strip()
    }
    text = re.sub(_GROUPING, " ", text)
    metrics = set()
    for match in re.finditer(r"(?<![\w$.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        word, is_call = match.group(1), match.group(2)
        if is_call or word in _KEYWORDS or word in _AGGREGATIONS:
            continue
        metrics.add(word)
    return PromqlRefs(frozenset(metrics), frozenset(selector_labels), frozenset(grouping))


def label_values_refs(query: str) -> PromqlRefs:
    """Grafana's ``label_values(metric{...}, label)`` template query."""
    match = re.fullmatch(r"\s*label_values\(\s*(?:(?P<expr>.+),)?\s*(?P<label>\w+)\s*\)\s*", query)
    assert match, f"not a label_values() query: {query!r}"
    refs = promql_refs(match["expr"] or "")
    metric = next(iter(refs.metrics), "")
    return PromqlRefs(refs.metrics, refs.selector_labels | {(metric, match["label"])}, refs.grouping_labels)


def parse_exposition(text: str) -> dict[str, set[str]]:
    """Sample name -> label names seen on it, from a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    served: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            served.setdefault(sample.name, set()).update(sample.labels)
    return served


# --- a scripted OpenAI-compatible judge --------------------------------------------------------------------
CONTEXTS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, completed in 1889 for the World's Fair.",
    "The tower is about 330 metres tall.",
]
# Worded from the contexts, as a grounded answer is: faithtrace's lexical check turns a "yes" for a claim
# whose words the documents lack into "idk", which would move these scores.
FAITHFUL_CLAIMS = [
    "The Eiffel Tower is in Paris.",
    "It was completed in 1889.",
    "It is about 330 metres tall.",
    "It was completed for the 1889 World's Fair.",
]
# One fact changed: 3 of 4 claims supported, score 0.75 (above the default 0.7 threshold, yet a 25% drop;
# labelled fail for its contradicted claim).
DRIFTED_CLAIMS = [*FAITHFUL_CLAIMS[:2], "It is about 500 metres tall.", FAITHFUL_CLAIMS[3]]
# Nothing supported: score 0, labelled fail.
WRONG_CLAIMS = [
    "The Eiffel Tower stands in Rome.",
    "It was completed in 1925.",
    "It is about 500 metres tall.",
    "It was built for the 1925 Expo.",
]
FAITHFUL_ANSWER, DRIFTED_ANSWER, WRONG_ANSWER = (
    " ".join(c) for c in (FAITHFUL_CLAIMS, DRIFTED_CLAIMS, WRONG_CLAIMS)
)


@dataclass
class ScriptedJudge:
    """An OpenAI-compatible judge whose replies are scripted per answer.

    Only the replies are fake: requests arrive through litellm and replies go back through faithtrace's
    real parsing and validation. The claims step returns the claims of whichever known answer the prompt
    contains; the verdicts step says "yes" to the claims in FAITHFUL_CLAIMS and "no" to the others, in the
    order the claims appear in the prompt.
    """

    url: str = ""
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def settings(self) -> JudgeSettings:
        # A model litellm knows the price of, so the judge-cost counter is exercised too.
        return JudgeSettings(
            model="openai/gpt-4o-mini",
            api_base=self.url,
            api_key="sk-test-not-a-key",
            structured_output="json_schema",
            max_retries=0,
            timeout_s=10.0,
        )

    def reply(self, body: dict[str, Any]) -> dict[str, Any] | None:
        spec = (body.get("response_format") or {}).get("json_schema") or {}
        step = spec.get("name")
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        with self.lock:
            self.requests += 1
        if step == "claims":
            for answer, claims in (
                (WRONG_ANSWER, WRONG_CLAIMS),
                (DRIFTED_ANSWER, DRIFTED_CLAIMS),
                (FAITHFUL_ANSWER, FAITHFUL_CLAIMS),
            ):
                if answer in prompt:
                    return {"claims": claims}
            return None
        if step == "verdicts":
            known = set(FAITHFUL_CLAIMS + DRIFTED_CLAIMS + WRONG_CLAIMS)
            claims = sorted((c for c in known if c in prompt), key=prompt.index)
            return {
                "verdicts": [
                    {
                        "verdict": "yes" if claim in FAITHFUL_CLAIMS else "no",
                        "claim": i + 1,
                        "reason": "scripted",
                    }
                    for i, claim in enumerate(claims)
                ]
            }
        if step == "reason":
            return {"reason": "Some statements are not supported by the retrieved documents."}
        if step == "truths":
            return {"truths": CONTEXTS}
        return None


# --- the app under test, in its own process -----------------------------------------------------------
# OpenTelemetry's global meter provider can be set once per process and configure(prometheus=...) sets it, so
# the decorated app runs in a child process, as it would in production, and the test process stays clean.
APP_SCRIPT = """
import json, pathlib, sys, time, urllib.request
import faithtrace
from faithtrace import JudgeSettings, SamplingOptions, ScoringOptions, trace_faithfulness

cfg = json.loads(sys.argv[1])
faithtrace.configure(
    judge=JudgeSettings(**cfg["judge"]),
    prometheus=cfg["port"],
    service_name=cfg["service"],
    sampling=SamplingOptions(ratio=1.0),
    scoring=ScoringOptions(threshold=cfg["threshold"]),
)
answer_file = pathlib.Path(cfg["answer_file"])

@trace_faithfulness(name=cfg["function"])
def answer(question: str, contexts: list[str]) -> str:
    return answer_file.read_text()

if cfg["mode"] == "batch":
    # Each answer `rounds` times, then print what /metrics serves.
    for text in cfg["answers"]:
        answer_file.write_text(text)
        for i in range(cfg["rounds"]):
            answer(f"question {i}", cfg["contexts"])
    assert faithtrace.flush(60)
    url = "http://127.0.0.1:%d/metrics" % cfg["port"]
    print(urllib.request.urlopen(url, timeout=10).read().decode())
    faithtrace.shutdown(5)
else:
    # Serve forever at a steady rate; whatever the answer file says is the app's current answer.
    while True:
        answer(f"question {time.monotonic():.3f}: how tall is the tower?", cfg["contexts"])
        time.sleep(1 / cfg["rate"])
"""


def app_argv(judge: ScriptedJudge, **cfg: Any) -> list[str]:
    settings = judge.settings()
    judge_cfg = {
        "model": settings.model,
        "api_base": settings.api_base,
        "api_key": "sk-test-not-a-key",
        "structured_output": settings.structured_output,
        "max_retries": settings.max_retries,
        "timeout_s": settings.timeout_s,
    }
    config = {"judge": judge_cfg, "contexts": CONTEXTS, "threshold": 0.7, **cfg}
    return [sys.executable, "-c", APP_SCRIPT, json.dumps(config)]


def _judge_handler(judge: ScriptedJudge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            content = judge.reply(body) if self.path.rstrip("/").endswith("/chat/completions") else None
            if content is None:
                status, payload = 400, {"error": {"message": "unexpected request", "type": "invalid_request"}}
            else:
                status = 200
                payload = {
                    "id": f"chatcmpl-scripted-{judge.requests}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": str(body.get("model", "gpt-4o-mini")),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": json.dumps(content)},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 180, "completion_tokens": 40, "total_tokens": 220},
                }
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


@contextmanager
def serve_scripted_judge() -> Iterator[ScriptedJudge]:
    judge = ScriptedJudge()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _judge_handler(judge))
    server.daemon_threads = True
    judge.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = serve_in_background(server, "scripted-judge")
    try:
        yield judge
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --- Debian's Prometheus / Alertmanager, ports ----------------------------------------------------------
def backend_binary(name: str) -> str:
    """Path of a Debian-packaged binary; skip if absent (fail when FAITHTRACE_REQUIRE_BACKENDS=1)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} missing (apt-get install prometheus prometheus-alertmanager, or `make backends`)"
        if os.environ.get("FAITHTRACE_REQUIRE_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path
