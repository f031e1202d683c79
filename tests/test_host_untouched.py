# ruff: noqa: F811  (fixtures are imported into this module by name)
"""The host process after faithtrace's first evaluation is the host process before it.

Each case is a fresh interpreter playing a host app: it logs at INFO through ``httpx`` (a real request over a
real transport) and through ``uvicorn``'s access logger (a line with a session token in it, as uvicorn logs a
query string), then decorates an answer function, configures faithtrace with a judge reached through litellm's
real client (only the judge's replies are scripted, on loopback), serves one request, and logs the same lines
again. What the host printed, its loggers, ``warnings`` filters, exit handlers, environment and process-wide
settings (recursion limit, switch interval, int digits limit, excepthooks, signal handlers, socket timeout,
event loop policy, the collector, stdout / stderr) are compared; so are the ``random`` module's state (an
app's seeded sequence) and litellm's module settings.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from _fake_judge import fake_judge  # noqa: F401  (fixture)
from _loopback import serve_in_background

# Each test runs a host app in a fresh interpreter, to see what faithtrace leaves behind at exit.
pytestmark = pytest.mark.slow

SRC = str(Path(__file__).resolve().parent.parent / "src")
TESTS = str(Path(__file__).resolve().parent)


def _run(code: str, env_extra: dict[str, str] | None = None) -> dict[str, Any]:
    # A clean environment: the suite's own conftest sets variables (LITELLM_*, PYTEST_*) that hide changes.
    ours = ("FAITHTRACE_", "LITELLM_", "PYTEST_", "OTEL_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    env.pop("TIKTOKEN_CACHE_DIR", None)
    env.update(env_extra or {}, PYTHONPATH=os.pathsep.join([SRC, TESTS]))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    result["stdout"] = proc.stdout
    return result


def _judge_env(fake: Any) -> dict[str, str]:
    return {
        "FAITHTRACE_JUDGE_MODEL": "openai/fake-judge",
        "FAITHTRACE_JUDGE_API_BASE": fake.base_url + "/v1",
        "FAITHTRACE_JUDGE_API_KEY": "x",
        "FAITHTRACE_JUDGE_MAX_RETRIES": "0",
    }


_HOST = """
    import atexit, io, json, logging, os, sys, warnings
    import httpx

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    access = logging.getLogger("uvicorn.access")
    logging.getLogger("uvicorn.error")
    client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, text="hi")))

    def host_logs():
        stream.seek(0)
        stream.truncate()
        client.get("http://service.internal/items?page=2")
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET",
                    "/cart?session=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "1.1", 200)
        logging.getLogger("asyncio").info("host loop note")
        return stream.getvalue().splitlines()

    def state():
        loggers = {}
        for name, logger in sorted(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger):
                handlers = [repr(h) for h in logger.handlers]
                filters = [type(f).__qualname__ for f in logger.filters]
                loggers[name] = [logger.level, handlers, filters, logger.propagate, logger.disabled]
        root = logging.getLogger()
        return {
            "loggers": loggers,
            "root": [root.level, [repr(h) for h in root.handlers], len(root.filters)],
            "warnings": [repr(f) for f in warnings.filters],
            "exit_handlers": atexit._ncallbacks(),
            "environ": dict(os.environ),
            "process": process(),
        }

    def process():
        # The rest of what a library could set process-wide, by value or by identity.
        import asyncio, gc, signal, socket, threading
        return [
            sys.getrecursionlimit(), sys.getswitchinterval(), sys.get_int_max_str_digits(),
            repr(sys.excepthook), repr(threading.excepthook), repr(sys.unraisablehook),
            [repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)],
            socket.getdefaulttimeout(), type(asyncio.get_event_loop_policy()).__name__, gc.get_threshold(),
            gc.isenabled(), repr(sys.stdout), repr(sys.stderr),
        ]

    def changes(before, after):
        found = []
        for key in ("root", "warnings", "exit_handlers", "environ", "process"):
            if before[key] != after[key]:
                found.append([key, before[key], after[key]])
        for name in sorted(set(before["loggers"]) | set(after["loggers"])):
            old, new = before["loggers"].get(name), after["loggers"].get(name)
            if old is None:
                # A logger the evaluation created is a library's own; it must not filter, drop or print
                # records by itself (a NullHandler is the libraries' convention and changes nothing).
                level, handlers, filters, propagate, disabled = new
                if level or filters or disabled or [h for h in handlers if "NullHandler" not in h]:
                    found.append(["new logger " + name, None, new])
            elif old != new:
                found.append(["logger " + name, old, new])
        return found
"""


def test_the_first_evaluation_leaves_logging_warnings_exit_handlers_and_environment_alone(
    fake_judge: Any,
) -> None:
    result = _run(
        _HOST
        + """
    import faithtrace
    faithtrace.configure()  # judge from FAITHTRACE_JUDGE_*: the first evaluation imports litellm

    @faithtrace.trace_faithfulness
    def answer(question, contexts):
        return "Blue is the sky."  # reworded: the judge decides it

    lines_before, state_before = host_logs(), state()
    answer("What colour is the sky?", ["The sky is blue."])
    assert faithtrace.flush(300)
    import litellm  # loaded by the evaluation, not by the host
    lines_after, state_after = host_logs(), state()
    print(json.dumps({"before": lines_before, "after": lines_after,
                      "changes": changes(state_before, state_after)}))
    """,
        _judge_env(fake_judge),
    )
    assert len(result["before"]) == 3
    assert any("HTTP Request: GET http://service.internal/items?page=2" in line for line in result["before"])
    assert any("session=eyJhbGciOiJIUzI1NiJ9" in line for line in result["before"])
    assert result["after"] == result["before"]
    assert result["changes"] == []
    assert len(fake_judge.requests) >= 1  # the judge was really asked, through litellm


def test_litellm_exit_handlers_still_run_at_exit_after_faithtraces_own(fake_judge: Any) -> None:
    """The handlers litellm registers at import are taken off the host's list, not lost: faithtrace's exit
    flush runs them after its own shutdown."""
    result = _run(
        """
    import atexit, json
    import faithtrace
    from faithtrace._common import host_state as _host_state
    faithtrace.evaluate("Sky?", ["The sky is blue."], "Blue is the sky.")
    deferred = [f"{f.__module__}.{f.__qualname__}" for f, _a, _k in _host_state._deferred_exit]
    print(json.dumps({"deferred": deferred}))
    """,
        _judge_env(fake_judge),
    )
    assert any(name.startswith("litellm.") for name in result["deferred"])


# --- configuration from the environment alone (no configure() call) ---------------------------------------
class _OTLPReceiver(BaseHTTPRequestHandler):
    spans: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)  # the real OTLP protobuf, decoded
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(span.name for span in scope_spans.spans)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, list[str]]]:
    spans: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_OTLPReceiver,), {"spans": spans}))
    serve_in_background(server)
    try:
        yield f"http://127.0.0.1:{server.server_port}", spans
    finally:
        server.shutdown()
        server.server_close()


_DECORATED_APP = """
    import json
    import faithtrace

    @faithtrace.trace_faithfulness(name="bot")
    def answer(question, contexts):
        return "The capital of France is Paris."

    answer("q", ["Paris is the capital of France."])
    answer("q", ["Paris is the capital of France."])
    assert faithtrace.flush(300)
"""


def test_otlp_variables_alone_export_without_configure(fake_judge: Any, otlp_receiver: Any) -> None:
    endpoint, spans = otlp_receiver
    _run(
        _DECORATED_APP
        + """
    faithtrace.shutdown()
    print(json.dumps({}))
    """,
        {
            **_judge_env(fake_judge),
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": "env-only",
        },
    )
    assert spans.count("bot") == 2
    assert spans.count("evaluate faithfulness") == 2


def test_prometheus_variable_alone_serves_metrics_without_configure(fake_judge: Any) -> None:
    result = _run(
        _DECORATED_APP
        + """
    import urllib.request
    from faithtrace._telemetry.setup import prometheus_address
    host, port = prometheus_address()
    body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    faithtrace.shutdown()
    print(json.dumps({"metrics": body}))
    """,
        {**_judge_env(fake_judge), "FAITHTRACE_PROMETHEUS_PORT": "0"},
    )
    scored = 'faithtrace_evaluations_total{faithtrace_function="bot",faithtrace_outcome="scored"'
    assert scored in result["metrics"]


# --- process-wide state an app owns: the random module's sequence, litellm's settings ---------------------
_RANDOM_SPY = """
    import random, sys
    DRAWS = []  # the module of each caller that draws from the random module

    def _spy(name):
        original = getattr(random, name)

        def draw(*args, **kwargs):
            DRAWS.append(sys._getframe(1).f_globals.get("__name__"))
            return original(*args, **kwargs)

        setattr(random, name, draw)

    for _name in ("random", "getrandbits", "uniform", "randint", "randrange", "choice", "choices",
                  "shuffle", "sample", "gauss", "randbytes"):
        _spy(_name)
"""


@pytest.mark.parametrize("provider", ["app", "faithtrace"])
def test_the_first_evaluation_draws_nothing_from_the_global_random(
    fake_judge: Any, otlp_receiver: Any, provider: str
) -> None:
    """An app that seeds ``random`` gets the same sequence with faithtrace: sampling below ratio 1 draws for
    every new trace, a retried judge request draws its backoff jitter, litellm's import pulls in a library
    that draws, and every span faithtrace starts needs ids. With the app's own provider (the SDK's default
    ids come from ``random``) the state after the first evaluation is the state before it. With the provider
    faithtrace sets up from the OTLP variables, its ids are its own too: the only draws left are the OTLP
    exporter's retry jitter, OpenTelemetry's own (docs/instrumenting.md), as in any app exporting OTLP."""
    fake_judge.fail_next(1)  # the first judge request fails: its retry waits a jittered backoff
    endpoint, spans = otlp_receiver
    own = provider == "faithtrace"
    result = _run(
        _RANDOM_SPY
        + """
    import json
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    if not OWN:
        app = TracerProvider()  # the SDK's default ids, drawn from the random module
        app.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(app)
    else:
        import litellm  # the app variant covers its import; this one counts the exporters' draws
    random.seed(20240601)
    state = random.getstate()
    DRAWS.clear()
    import faithtrace
    faithtrace.configure(sampling=faithtrace.SamplingOptions(ratio=0.5))

    @faithtrace.trace_faithfulness(name="bot")
    def answer(question, contexts):
        return "Blue is the sky."  # reworded: the judge decides it

    for _ in range(6):
        answer("What colour is the sky?", ["The sky is blue."])
    assert faithtrace.flush(300)
    same = random.getstate() == state
    draws = sorted(set(DRAWS))
    finished = exporter.get_finished_spans()
    names = [s.name for s in finished]
    attempts = [s.attributes.get("faithtrace.judge.attempt") for s in finished]
    faithtrace.shutdown()
    print(json.dumps({"same": same, "draws": draws, "names": names, "attempts": attempts}))
    """.replace("OWN", str(own)),
        {
            **_judge_env(fake_judge),
            "FAITHTRACE_JUDGE_MAX_RETRIES": "2",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            **({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint} if own else {}),
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        },
    )
    if own:
        assert set(result["draws"]) <= {"opentelemetry.exporter.otlp.common.http"}, result["draws"]
        assert "evaluate faithfulness" in spans  # spans were made (their ids drawn) and exported
    else:
        # rich draws at litellm's import, inside the window whose changes faithtrace undoes: the state is
        # the same. Nothing of faithtrace's draws, nor the SDK for the spans it starts.
        assert set(result["draws"]) <= {"rich.style"}, result["draws"]
        assert result["same"]
        assert "evaluate faithfulness" in result["names"]  # spans were made: their ids drawn
        assert 2 in result["attempts"]  # the retry happened, after its jittered backoff
    assert len(fake_judge.requests) >= 2


def test_no_module_draws_from_the_random_modules_own_generator() -> None:
    """The test above runs the paths that draw; this one keeps a new draw from the shared generator out of
    every module, run or not: faithtrace's own draws go through a ``random.Random`` of its own."""
    offenders = []
    for path in sorted((Path(SRC) / "faithtrace").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            shared = (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "random"
                and node.attr not in ("Random", "getstate", "setstate")  # the import window restores it
            )
            imported = isinstance(node, ast.ImportFrom) and node.module == "random"
            if shared or imported:
                offenders.append(f"{path.relative_to(SRC)}:{getattr(node, 'lineno', 0)}")
    assert offenders == []


_LITELLM_SETTINGS = """
    import litellm

    # litellm's own lazily filled caches, not settings: they change on its first use, whoever makes it.
    CACHES = {"provider_list"}

    def settings():
        found = {}
        for name, value in sorted(vars(litellm).items()):
            if name.startswith("_") or name in CACHES:
                continue
            if isinstance(value, (bool, int, float, str, type(None))) or "callback" in name:
                found[name] = repr(value)
        return found
"""


@pytest.mark.parametrize("suppress", [False, True])
def test_the_first_evaluation_writes_no_litellm_setting(fake_judge: Any, suppress: bool) -> None:
    """litellm's module settings are the app's. The judge's failing request is where litellm prints its
    "Give Feedback / Get Help" banner unless ``suppress_debug_info`` is set: that stays the app's choice."""
    fake_judge.fail_next(1)
    result = _run(
        _LITELLM_SETTINGS
        + f"""
    import json
    litellm.suppress_debug_info = {suppress}
    litellm.callbacks = []
    before = settings()
    import faithtrace
    faithtrace.configure()

    @faithtrace.trace_faithfulness
    def answer(question, contexts):
        return "Blue is the sky."

    answer("What colour is the sky?", ["The sky is blue."])
    assert faithtrace.flush(300)
    after = settings()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    print(json.dumps({{"changed": {{k: [before.get(k), after.get(k)] for k in changed}},
                      "suppress": litellm.suppress_debug_info}}))
    """,
        {
            **_judge_env(fake_judge),
            "FAITHTRACE_JUDGE_MAX_RETRIES": "1",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # the host's own import of litellm stays offline
        },
    )
    assert result["changed"] == {}
    assert result["suppress"] is suppress
    assert ("Give Feedback / Get Help" in result["stdout"]) is not suppress  # litellm obeys the app's setting
    assert len(fake_judge.requests) >= 2  # the failed request and its retry


def test_judge_requests_log_on_httpx_from_faithtraces_thread_and_a_host_filter_drops_them(
    fake_judge: Any,
) -> None:
    """The judge's HTTP requests are real requests of the app's process, and ``httpx`` logs each one at
    INFO to a host that logs at INFO. faithtrace leaves the ``httpx`` logger alone (it is the app's); the
    lines come from faithtrace's own thread, so the filter docs/instrumenting.md gives drops exactly them."""
    result = _run(
        """
    import io, json, logging
    import httpx
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(threadName)s|%(name)s|%(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    host = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200)))
    import faithtrace
    faithtrace.configure()

    @faithtrace.trace_faithfulness
    def answer(question, contexts):
        return "Blue is the sky."

    def requests_logged():
        return [line for line in stream.getvalue().splitlines() if "|httpx|HTTP Request" in line]

    answer("What colour is the sky?", ["The sky is blue."])
    assert faithtrace.flush(300)
    unfiltered = requests_logged()
    stream.seek(0)
    stream.truncate()
    handler.addFilter(lambda record: not record.threadName.startswith("faithtrace"))  # the documented one
    answer("What colour is the sky?", ["The sky is blue."])
    host.get("http://service.internal/items")
    assert faithtrace.flush(300)
    print(json.dumps({"unfiltered": unfiltered, "filtered": requests_logged(),
                      "httpx_level": logging.getLogger("httpx").level}))
    """,
        _judge_env(fake_judge),
    )
    judge_lines = [line for line in result["unfiltered"] if "/chat/completions" in line]
    assert judge_lines, result["unfiltered"]
    assert all(line.startswith("faithtrace-") for line in judge_lines), judge_lines
    assert [line.split("|")[0] for line in result["filtered"]] == ["MainThread"]  # the host's own request
    assert result["httpx_level"] == 0  # the app's logger, untouched
