"""A scripted OpenAI-compatible judge on 127.0.0.1 for the decorator/worker tests.

Only the judge's replies are fake: faithtrace reaches it through litellm and parses the replies on its real
path. By default it answers from the prompt itself: one claim per sentence of ``<answer>``; a verdict of
``yes`` when the claim's words all appear in ``<documents>``, else ``idk`` (or ``no`` when the claim contains
"never"); a fixed reason. It can be told to fail with an HTTP status, hang, or return garbage.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from _loopback import serve_in_background
from faithtrace import JudgeSettings

MODEL = "openai/fake-judge"
REASON_TEXT = "Some statements in the answer are not backed by the documents."
# A passage, a question and two answers this judge tells apart: the failing one's second claim says "never"
# ("no"); the passing one is a passage sentence word for word (proven in code, no judge request).
WARRANTY_CONTEXTS = [
    "Every Voltaro frame has a 5-year warranty. "
    "Batteries are covered for 2 years or 500 charge cycles, whichever comes first.",
]
WARRANTY_QUESTION = "How long is the warranty?"
FAILING_ANSWER = "Every Voltaro frame has a 5-year warranty. Batteries are never covered by the warranty."
PASSING_ANSWER = "Every Voltaro frame has a 5-year warranty."


def _tagged(text: str, tag: str) -> str:
    m = re.search(rf"<{tag}(?:\s[^>]*)?>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return m.group(1).strip() if m else ""


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def step_of(body: dict[str, Any]) -> str:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return str(fmt["json_schema"]["name"])
    if body.get("tools"):
        return str(body["tools"][0]["function"]["name"])
    user = next(m for m in body["messages"] if m["role"] == "user")["content"]
    m = re.search(r'Reply as JSON: \{"(\w+)"', user)
    return m.group(1) if m else "unknown"


def default_reply(step: str, body: dict[str, Any]) -> str:
    user = next(m for m in body["messages"] if m["role"] == "user")["content"]
    if step == "claims":
        answer = _tagged(user, "answer")
        sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", answer) if s.strip()]
        return json.dumps({"claims": sentences})
    if step == "verdicts":
        documents = _words(_tagged(user, "documents"))
        claims = re.findall(r"^\d+\. (.*)$", _tagged(user, "claims"), re.MULTILINE)
        verdicts = []
        for i, claim in enumerate(claims):
            verdict = "yes" if _words(claim) <= documents else "idk"
            if "never" in claim.lower():
                verdict = "no"
            verdicts.append({"verdict": verdict, "claim": i + 1, "reason": f"checked claim {i + 1}"})
        return json.dumps({"verdicts": verdicts})
    if step == "reason":
        return json.dumps({"reason": REASON_TEXT})
    if step == "truths":
        return json.dumps({"truths": [_tagged(user, "document")]})
    return "{}"


class FakeJudge:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.tokens = 0  # usage reported over all replies
        self.largest = 0  # ... and the most one reply reported
        self.mode = "ok"  # ok | status | hang | garbage
        self.status = 500
        self.delay_s = 0.0  # how long each reply takes: a judge slower than the requests it scores
        self.failing = 0  # the next requests answered with `status` before the mode applies again
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.base_url = ""

    # --- scripting -----------------------------------------------------------------------------------------
    def fail(self, status: int) -> None:
        self.mode, self.status = "status", status

    def fail_next(self, count: int, status: int = 500) -> None:
        """Answer the next ``count`` requests with ``status``, then as before (a judge that recovers)."""
        with self.lock:
            self.failing, self.status = count, status

    def hang(self) -> None:
        self.mode = "hang"

    def garbage(self) -> None:
        self.mode = "garbage"

    def settings(self, **overrides: Any) -> JudgeSettings:
        values: dict[str, Any] = {
            "model": MODEL,
            "api_base": self.base_url + "/v1",
            "api_key": "x",
            "max_retries": 0,
            "max_repairs": 0,
            "timeout_s": 10.0,
        }
        values.update(overrides)
        return JudgeSettings(**values)

    def steps(self) -> list[str]:
        with self.lock:
            return [step_of(body) for body in self.requests]

    # --- serving -------------------------------------------------------------------------------------------
    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        with self.lock:
            self.requests.append(body)
            n = len(self.requests)
            failing, self.failing = self.failing > 0, max(0, self.failing - 1)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.mode == "status" or failing:
            return self.status, {"error": {"message": "scripted failure", "type": "server_error"}}
        if self.mode == "hang":
            self.release.wait(30)
            if self.mode == "hang":
                return 500, {"error": {"message": "released"}}
            # A test that switched the mode before releasing wants the held request answered that way.
        step = step_of(body)
        content = "this is not JSON at all ]]" if self.mode == "garbage" else default_reply(step, body)
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body["messages"])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if body.get("tools"):
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"call_{n}", "type": "function", "function": {"name": step, "arguments": content}}
                ],
            }
        usage = prompt_chars // 4 + len(content) // 4 + 1
        with self.lock:
            self.tokens += usage
            self.largest = max(self.largest, usage)
        return 200, {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-judge"),  # litellm prices the reply by this name
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": prompt_chars // 4,
                "completion_tokens": len(content) // 4 + 1,
                "total_tokens": usage,
            },
        }


def _handler(fake: FakeJudge) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            status, payload = fake.reply(body)
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up (timeout tests)
                self.wfile.write(data)

    return Handler


@contextlib.contextmanager
def running_fake_judge() -> Iterator[FakeJudge]:
    """A fake judge served on 127.0.0.1 for the duration of the block (the docs' snippets use it too)."""
    fake = FakeJudge()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.base_url = f"http://127.0.0.1:{server.server_port}"
    thread = serve_in_background(server, "fake-judge")
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def fake_judge() -> Iterator[FakeJudge]:
    with running_fake_judge() as fake:
        yield fake
