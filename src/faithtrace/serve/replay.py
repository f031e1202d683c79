"""Spooled trace parts sent back to the Collector (its replay receiver, collector/otelcol/fleet.yaml) over
OTLP/gRPC, so that its load balancer routes each trace to the replica that owns it now."""

from __future__ import annotations

import asyncio
from types import TracebackType
from urllib.parse import urlsplit

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from faithtrace.serve.spool import Spool

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# Retried: the Collector restarting, or its queue full. Anything else (a request it cannot read) is final.
_RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
}


def target(endpoint: str) -> tuple[str, bool]:
    """``http://host:port``, ``https://host:port`` or ``host:port``: the gRPC target and whether TLS is on."""
    if "://" not in endpoint:
        return endpoint, False
    parts = urlsplit(endpoint)
    if not parts.hostname or not parts.port:
        raise ValueError(f"replay endpoint {endpoint!r}: expected scheme://host:port")
    return f"{parts.hostname}:{parts.port}", parts.scheme == "https"


class Replayer:
    def __init__(self, endpoint: str, timeout_s: float = 10.0, max_backoff_s: float = 5.0) -> None:
        address, tls = target(endpoint)
        self._channel = (
            grpc.aio.secure_channel(address, grpc.ssl_channel_credentials())
            if tls
            else grpc.aio.insecure_channel(address)
        )
        self._export = self._channel.unary_unary(
            _EXPORT,
            request_serializer=ExportTraceServiceRequest.SerializeToString,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        self.timeout_s = timeout_s
        self.max_backoff_s = max_backoff_s

    async def __aenter__(self) -> Replayer:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._channel.close()

    async def send(self, request: ExportTraceServiceRequest, attempts: int) -> bool:
        """True once the Collector took ``request``; False after ``attempts`` retryable failures, or one
        that is not."""
        backoff = 0.5
        for attempt in range(attempts):
            try:
                await self._export(request, timeout=self.timeout_s, wait_for_ready=True)
                return True
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in _RETRYABLE or attempt == attempts - 1:
                    return False
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, self.max_backoff_s)
        return False


async def send_spool(spool: Spool, endpoint: str, attempts: int, first: list[int]) -> tuple[int, int]:
    """Every trace in ``spool`` (``first`` ones first) sent to ``endpoint``; its parts are done once the
    Collector took them, and stay in the spool if it did not. Returns (sent, not sent)."""
    sent = failed = 0
    async with Replayer(endpoint) as replayer:
        ahead = [t for t in first if t in spool]
        rest = set(ahead)
        for trace_id in [*ahead, *(t for t in spool.traces() if t not in rest)]:
            taken = spool.take(trace_id)
            if taken is None:
                continue
            request, mark = taken
            if await replayer.send(request, attempts):
                spool.done(trace_id, mark)
                sent += 1
            else:
                spool.give_back(trace_id)
                failed += 1
    return sent, failed
