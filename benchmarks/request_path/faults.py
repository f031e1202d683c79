"""The host's calls under faults: what the app sees when the judge, the exporters or its own tracing fail.

Each fault runs in a fresh process playing a host app: a decorated answer function (sync) called ``--calls``
times in a row, each result compared with the function's own return value by identity, then
``faithtrace.shutdown(5)``. Reported per fault: the exceptions the host's calls raised, the results that were
not the function's own, the decorated call's p50 / p99 latency, and how long ``shutdown(5)`` took with what
its ``ShutdownReport`` says it lost.

The fifteen judge and exporter faults: the judge's port refused, its connection reset, a judge that hangs,
one that answers after 3 s, HTTP 400 / 401 / 429 / 500 / 503, a reply that is not JSON; the OTLP endpoint
refused, hanging, answering 500 or 413, and a Prometheus port already taken. Then the app's own tracing: a
span processor of the app's raising in ``on_start``, and one raising in ``on_end``. The judge stand-ins and
the OTLP receiver run on 127.0.0.1 in this process (the healthy judge in a process of its own); nothing
leaves the machine. Run against another checkout's code with ``PYTHONPATH=<checkout>/src``: the fault
processes import faithtrace from there (its public API only).

    python benchmarks/request_path/faults.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `benchmarks.*`

from benchmarks._shared import common as _common

JUDGE_FAULTS = (
    "judge_refused", "judge_reset", "judge_hang", "judge_slow", "judge_400", "judge_401", "judge_429",
    "judge_500", "judge_503", "judge_not_json",
)  # fmt: skip
EXPORTER_FAULTS = ("otlp_refused", "otlp_hang", "otlp_500", "otlp_413", "prometheus_taken")
APP_FAULTS = ("app_processor_on_start", "app_processor_on_end")
FAULTS = ("none", *JUDGE_FAULTS, *EXPORTER_FAULTS, *APP_FAULTS)
# A host process takes seconds (imports, its calls, shutdown(5)): one not gone after this long hangs.
HOST_TIMEOUT_S = 120.0


# --- loopback stand-ins -------------------------------------------------------------------------------------
class _Faulty(BaseHTTPRequestHandler):
    """A judge or an OTLP receiver that fails as told: ``mode`` is a status code, hang, reset or not_json."""

    mode = "200"
    release = threading.Event()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.mode == "hang":
            self.release.wait(120)
            return
        if self.mode == "reset":
            # Linger on, timeout 0: close() sends a TCP reset instead of a clean end.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            return
        if self.mode == "not_json":
            body = json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "fake-judge",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "no ]]"}}],
                }
            ).encode()
            status = 200
        else:
            status = int(self.mode)
            body = b"" if status == 200 else b'{"error": {"message": "scripted fault"}}'
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)


@contextlib.contextmanager
def _serving(mode: str) -> Iterator[str]:
    handler = type("Handler", (_Faulty,), {"mode": mode, "release": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # shutdown() returns when serve_forever next polls: every 0.05 s, not its default 0.5 s.
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()


def _refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@contextlib.contextmanager
def _environment(fault: str, judge_url: str) -> Iterator[dict[str, str]]:
    """The host's environment for one fault: the judge and the OTLP endpoint it is given."""
    with contextlib.ExitStack() as stack:
        judge, otlp = judge_url, stack.enter_context(_serving("200"))
        if fault.startswith("judge_"):
            kind = fault.removeprefix("judge_")
            if kind == "refused":
                judge = _refused_url() + "/v1"
            elif kind == "slow":
                judge = stack.enter_context(_common.fake_judge(3.0, max_seconds=600))
            else:
                judge = stack.enter_context(_serving(kind)) + "/v1"
        elif fault.startswith("otlp_"):
            kind = fault.removeprefix("otlp_")
            otlp = _refused_url() if kind == "refused" else stack.enter_context(_serving(kind))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAITHTRACE_", "OTEL_", "PYTEST_"))}
        env.update(
            FAITHTRACE_JUDGE_MODEL="openai/fake-judge",
            FAITHTRACE_JUDGE_API_BASE=judge,
            FAITHTRACE_JUDGE_API_KEY="x",
            OTEL_EXPORTER_OTLP_ENDPOINT=otlp,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_SERVICE_NAME="faults",
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        if fault == "prometheus_taken":
            taken = stack.enter_context(socket.socket())
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            env.update(FAITHTRACE_PROMETHEUS_PORT=str(taken.getsockname()[1]))
        yield env


# --- the host app, in a process of its own ------------------------------------------------------------------
def host(fault: str, calls: int) -> dict[str, Any]:
    """Play the host app for one fault; what it saw."""
    import faithtrace

    if fault.startswith("app_processor_"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

        hook = fault.removeprefix("app_processor_")

        class Broken(SpanProcessor):
            def on_start(self, span: Any, parent_context: Any = None) -> None:
                if hook == "on_start":
                    raise RuntimeError("the app's processor")

            def on_end(self, span: Any) -> None:
                if hook == "on_end":
                    raise RuntimeError("the app's processor")

        provider = TracerProvider()
        provider.add_span_processor(Broken())
        trace.set_tracer_provider(provider)

    answer_text = "The capital of France is Paris."

    @faithtrace.trace_faithfulness(name="rag")
    def answer(question: str, contexts: list[str]) -> str:
        return answer_text

    exceptions: dict[str, int] = {}
    changed = 0
    latencies: list[float] = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        try:
            got = answer("What is the capital of France?", ["Paris is the capital of France."])
        except BaseException as exc:  # what the host would see: counted by type
            exceptions[type(exc).__name__] = exceptions.get(type(exc).__name__, 0) + 1
        else:
            changed += got is not answer_text
        latencies.append((time.perf_counter_ns() - started) / 1000)
        time.sleep(0.002)  # a request stream, not a tight loop: evaluations are in flight when it stops
    started_s = time.monotonic()
    report = faithtrace.shutdown(5)
    return {
        "fault": fault,
        "calls": calls,
        "host_exceptions": sum(exceptions.values()),
        "exception_types": exceptions,
        "results_changed": changed,
        "p50_us": _common.percentile(latencies, 50),
        "p99_us": _common.percentile(latencies, 99),
        "shutdown_s": time.monotonic() - started_s,
        "dropped": report.dropped,
        "unfinished_spans": report.unfinished_spans,
        "telemetry_flushed": report.telemetry_flushed,
    }


def run_bounded(argv: list[str], env: dict[str, str] | None, timeout_s: float) -> tuple[int | None, str, str]:
    """Run a process (in a session of its own) for at most ``timeout_s``: its exit status (None: it had not
    exited and was killed), stdout and stderr. A process still running then is asked for its threads' stacks
    (SIGUSR1: ``--host`` registers faulthandler on it), which end up in its stderr, and killed with its
    children; no wait here is unbounded, even on a child that holds the pipes open."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGUSR1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=2)  # the stacks (communicate keeps what it read for the next call)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # something outside the session holds the pipes: leave them
        out, err = "", "(no output: the pipes stayed open)"
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    return None, out, err


def run_fault(fault: str, calls: int, judge_url: str, timeout_s: float = HOST_TIMEOUT_S) -> dict[str, Any]:
    with _environment(fault, judge_url) as env:
        started = time.monotonic()
        code, out, err = run_bounded(
            [sys.executable, __file__, "--host", fault, "--calls", str(calls)], env, timeout_s
        )
        exited_s = time.monotonic() - started
    lines = out.strip().splitlines()
    if code is None:
        reported = f"; it had reported {lines[-1]}" if lines else ""
        return {
            "fault": fault,
            "error": f"the host process had not exited {timeout_s:g} s after its start{reported}; "
            f"its threads then:\n{err[-12000:]}",
        }
    if code != 0 or not lines:
        return {"fault": fault, "error": f"exit {code}: {err[-500:]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    result["process_s"] = exited_s  # start to exit: imports, the calls, shutdown and the exit hooks
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 calls per fault instead of 500")
    parser.add_argument("--calls", type=int, help="decorated calls per fault")
    parser.add_argument("--faults", help=f"comma-separated subset of: {', '.join(FAULTS)}")
    parser.add_argument("--out", help="JSON output (default results/faults.json, --quick: faults-quick.json)")
    parser.add_argument(
        "--host-timeout",
        type=float,
        default=HOST_TIMEOUT_S,
        help=f"seconds a fault's host process may run before it counts as hung (default {HOST_TIMEOUT_S:g})",
    )
    parser.add_argument("--host", help=argparse.SUPPRESS)  # the host app's process, run by this script
    args = parser.parse_args(argv)
    calls = args.calls or (100 if args.quick else 500)
    if args.host:
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # run_bounded asks a hung host for its stacks
        print(json.dumps(host(args.host, calls)), flush=True)
        return 0
    faults = args.faults.split(",") if args.faults else list(FAULTS)
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        parser.error(f"unknown faults: {', '.join(unknown)}")
    rows = []
    with _common.fake_judge(0.05, max_seconds=3600) as judge_url:
        for fault in faults:
            rows.append(run_fault(fault, calls, judge_url, args.host_timeout))
            row = rows[-1]
            print(f"{fault}: FAILED: {row['error']}" if "error" in row else f"{fault}: {row}", flush=True)
    headers = [
        "fault", "host exceptions", "results changed", "p50 µs", "p99 µs", "shutdown(5) s", "dropped",
        "spans unfinished", "flushed",
    ]  # fmt: skip
    print(f"\n{calls} decorated calls per fault, then faithtrace.shutdown(5)\n")
    print(
        _common.table(
            headers,
            [
                [
                    r["fault"],
                    r.get("host_exceptions", r.get("error")),
                    r.get("results_changed"),
                    r.get("p50_us"),
                    r.get("p99_us"),
                    r.get("shutdown_s"),
                    r.get("dropped"),
                    r.get("unfinished_spans"),
                    r.get("telemetry_flushed"),
                ]
                for r in rows
            ],
        )
    )
    matrix = [r for r in rows if r["fault"] in JUDGE_FAULTS + EXPORTER_FAULTS]
    summary = {
        "judge_and_exporter_faults": len(matrix),
        "host_exceptions": sum(r.get("host_exceptions", 0) for r in rows),
        "results_changed": sum(r.get("results_changed", 0) for r in rows),
        "max_shutdown_s": max((r.get("shutdown_s", 0.0) for r in rows), default=0.0),
        "errors": [r["fault"] for r in rows if "error" in r],
    }
    print(
        f"\n{summary['host_exceptions']} host exceptions and {summary['results_changed']} changed results"
        f" over {len(rows)} faults ({summary['judge_and_exporter_faults']} of the judge and exporters);"
        f" longest shutdown(5): {summary['max_shutdown_s']:.2f} s"
    )
    data = {"calls_per_fault": calls, "results": rows, "summary": summary}
    path = _common.write_results("faults", data, args.out or _common.default_out("faults", args.quick))
    print(f"\nwrote {path}")
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
