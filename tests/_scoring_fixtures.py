"""A scripted OpenAI-compatible judge on 127.0.0.1: scoring tests exercise litellm and our parsing for real.

Only the judge's *replies* are fake: each request goes through litellm over HTTP, and the reply goes back
through the judge client's parsing, repair, validation and retry path. The server recognises which pipeline
step a request belongs to from the prompt and answers from a per-step script; it records every request.

PYTEST_DONT_REWRITE (test modules import helpers from here before pytest loads it as a plugin).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from _loopback import serve_in_background
from faithtrace import JudgeSettings

# The hand-written probes (benchmarks/data/probes.jsonl): contradictions and faithful paraphrases.
PROBES: list[dict[str, Any]] = [
    json.loads(line)
    for line in (Path(__file__).resolve().parents[1] / "benchmarks/data/probes.jsonl")
    .read_text()
    .splitlines()
    if line.strip()
]

# A reply: the message content (str), or a dict with any of content / finish_reason / status / delay_s /
# usage=(prompt_tokens, completion_tokens) / logprobs, or a callable(request_body) returning either.
Reply = str | dict[str, Any] | Callable[[dict[str, Any]], "str | dict[str, Any]"]

_MARKERS = {
    "truths": "Task: list the facts",
    "claims": "Task: break the answer",
    "verdicts": "Task: for each of the",
    "reason": "faithfulness score is",
}


def step_of(body: dict[str, Any]) -> str:
    first_user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    for step, marker in _MARKERS.items():
        if marker in first_user:
            return step
    return "unknown"


def verdicts_json(*verdicts: str, reasons: bool = True) -> str:
    return json.dumps(
        {
            "verdicts": [
                {"verdict": v, "claim": i + 1, "reason": f"reason {i + 1}" if reasons else ""}
                for i, v in enumerate(verdicts)
            ]
        }
    )


@dataclass
class FakeJudge:
    url: str
    script: dict[str, list[Reply]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, step: str, *replies: Reply) -> FakeJudge:
        """Queue replies for a step; the last one repeats once the queue is down to it."""
        self.script[step] = list(replies)
        return self

    def requests_for(self, step: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if step_of(r) == step]

    def settings(self, **overrides: Any) -> JudgeSettings:
        values: dict[str, Any] = {
            "model": "openai/fake-judge",
            "api_base": self.url,
            "api_key": "sk-test",
            "structured_output": "json_schema",
            "max_retries": 1,
            "max_repairs": 1,
            "timeout_s": 10.0,
        }
        values.update(overrides)
        return JudgeSettings(**values)

    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        step = step_of(body)
        with self.lock:
            self.requests.append(body)
            queue = self.script.get(step)
            if not queue:
                return {"status": 500, "content": f"fake judge: no reply scripted for step {step!r}"}
            reply = queue.pop(0) if len(queue) > 1 else queue[0]
        if callable(reply):
            reply = reply(body)
        return {"content": reply} if isinstance(reply, str) else dict(reply)


def _message(spec: dict[str, Any]) -> dict[str, Any]:
    if "tool_arguments" in spec:  # a forced tool call's reply
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": spec.get("tool_name", "step"), "arguments": spec["tool_arguments"]},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": spec.get("content", "")}


def _handler(fake: FakeJudge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            spec = fake._next(body)
            if spec.get("delay_s"):
                time.sleep(float(spec["delay_s"]))
            status = int(spec.get("status", 200))
            if status != 200:
                payload: dict[str, Any] = {"error": {"message": spec.get("content", "error"), "type": "fake"}}
            else:
                prompt_tokens, completion_tokens = spec.get("usage", (100, 20))
                payload = {
                    "id": f"chatcmpl-fake-{len(fake.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "fake-judge"),
                    "choices": [
                        {
                            "index": 0,
                            "message": _message(spec),
                            "finish_reason": spec.get("finish_reason", "stop"),
                            # OpenAI's shape: {"content": [{"token", "logprob", "top_logprobs": [...]}]}
                            **({"logprobs": spec["logprobs"]} if spec.get("logprobs") else {}),
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                    },
                }
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                pass

    return Handler


@pytest.fixture
def fake_judge() -> Iterator[FakeJudge]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(FakeJudge(url="")))
    fake = FakeJudge(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler(fake)
    server.daemon_threads = True
    thread = serve_in_background(server, "fake-judge")
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
