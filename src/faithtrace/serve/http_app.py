"""The OTLP/HTTP receiver: a minimal ASGI app (served by uvicorn) for ``POST /v1/traces`` in protobuf or
JSON (gzip accepted), plus ``/healthz``, ``/readyz``, ``/stats`` (JSON) and ``/metrics`` (Prometheus text)
for probes and autoscaling.

Status codes follow the OTLP retry rules: 429 with ``Retry-After`` under load, 503 while shutting down or when
results could not be exported (both retryable), 400 for undecodable input and 413 for an oversized body
(permanent).
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from faithtrace.serve.fleet import FLEET_GAUGES
from faithtrace.serve.kafka import KAFKA_GAUGES
from faithtrace.serve.keeper import SPOOL_GAUGES
from faithtrace.serve.limits import Saturated, Unavailable
from faithtrace.serve.otlp import BadRequest, parse_json, parse_protobuf
from faithtrace.serve.receiver import Receiver

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"


class TooLarge(Exception):
    pass


class OtlpHttpApp:
    def __init__(self, scorer: Receiver, max_request_bytes: int) -> None:
        self.scorer = scorer
        self.max_bytes = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; websockets are not served
        path, method = scope["path"], scope["method"]
        if path == "/metrics" and method == "GET":
            await _reply(
                send, 200, "text/plain; version=0.0.4", prometheus_text(self.scorer.stats()).encode()
            )
            return
        if path in ("/healthz", "/readyz", "/stats") and method == "GET":
            if path == "/readyz" and (self.scorer.closing or not self.scorer.warm):
                await _reply(send, 503, _JSON, b'{"ready": false}')
                return
            body = json.dumps(self.scorer.stats() if path == "/stats" else {"ok": True}).encode()
            await _reply(send, 200, _JSON, body)
            return
        if path != "/v1/traces":
            await _reply(send, 404, "text/plain", b"not found")
            return
        if method != "POST":
            await _reply(send, 405, "text/plain", b"POST only", [(b"allow", b"POST")])
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype not in (_PROTOBUF, _JSON):
            await _reply(
                send, 415, "text/plain", b"content-type must be application/x-protobuf or application/json"
            )
            return
        try:
            body = await self._body(receive, headers)
            await self.scorer.export_raw(body, parse_protobuf if ctype == _PROTOBUF else parse_json)
        except TooLarge:
            self.scorer.counters.bad_requests += 1
            await _error(
                send, 413, ctype, code_pb2.INVALID_ARGUMENT, f"request body over {self.max_bytes} bytes"
            )
            return
        except BadRequest as exc:
            self.scorer.counters.bad_requests += 1
            await _error(send, 400, ctype, code_pb2.INVALID_ARGUMENT, str(exc)[:500])
            return
        except Saturated as exc:
            retry = str(max(1, math.ceil(exc.retry_after_s))).encode()
            await _error(send, 429, ctype, code_pb2.RESOURCE_EXHAUSTED, str(exc), [(b"retry-after", retry)])
            return
        except Unavailable as exc:
            await _error(send, 503, ctype, code_pb2.UNAVAILABLE, str(exc), [(b"retry-after", b"1")])
            return
        if ctype == _PROTOBUF:
            await _reply(send, 200, _PROTOBUF, ExportTraceServiceResponse().SerializeToString())
        else:
            await _reply(send, 200, _JSON, b"{}")

    async def _body(self, receive: Receive, headers: dict[str, str]) -> bytes:
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise TooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding in ("gzip", "deflate"):
            # Bounded inflation: a small zip bomb must not take the memory the size cap protects.
            inflater = zlib.decompressobj(zlib.MAX_WBITS | 32 if encoding == "gzip" else zlib.MAX_WBITS)
            try:
                body = inflater.decompress(body, self.max_bytes + 1)
            except zlib.error as exc:
                raise BadRequest(f"bad {encoding} body: {exc}") from exc
            if len(body) > self.max_bytes or inflater.unconsumed_tail:
                raise TooLarge
        elif encoding not in ("", "identity"):
            raise BadRequest(f"unsupported content-encoding {encoding!r}")
        return body


_GAUGES = (
    frozenset({"pending", "held_traces", "requests_open", "waiting", "warm"})
    | KAFKA_GAUGES
    | FLEET_GAUGES
    | SPOOL_GAUGES
)


def prometheus_text(stats: dict[str, int]) -> str:
    """The scorer's own counters in the Prometheus text format (``faithtrace_serve_*``): ``pending`` is the
    autoscaling signal. Hand-written: a dozen unlabelled series need no client library."""
    lines: list[str] = []
    for key, value in stats.items():
        kind = "gauge" if key in _GAUGES else "counter"
        name = f"faithtrace_serve_{key}" + ("" if kind == "gauge" else "_total")
        lines += [f"# TYPE {name} {kind}", f"{name} {value}"]
    return "\n".join(lines) + "\n"


async def _reply(
    send: Send, status: int, ctype: str, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [
        (b"content-type", ctype.encode()),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _error(
    send: Send,
    status: int,
    ctype: str,
    code: int,
    message: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    # OTLP/HTTP error bodies are a google.rpc.Status in the request's encoding.
    if ctype == _PROTOBUF:
        body = status_pb2.Status(code=code, message=message).SerializeToString()
    else:
        body = json.dumps({"code": code, "message": message}).encode()
    await _reply(send, status, ctype, body, extra)
