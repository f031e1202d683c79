"""The OTLP/gRPC receiver (the only protocol the Collector's load-balancing exporter speaks).

Refusals follow the OTLP retry rules: load is RESOURCE_EXHAUSTED with a ``google.rpc.RetryInfo`` in
``grpc-status-details-bin`` (retryable only with it), undecodable input is INVALID_ARGUMENT (permanent), and
shutting down or a failed export is UNAVAILABLE (retryable; never used for load). An oversized message is
refused by gRPC itself (RESOURCE_EXHAUSTED without RetryInfo: permanent, as it should be).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from faithtrace.serve.limits import Saturated, Unavailable
from faithtrace.serve.otlp import BadRequest, parse_protobuf
from faithtrace.serve.receiver import Receiver


def _retry_details(message: str, delay_s: float) -> bytes:
    info = error_details_pb2.RetryInfo(
        retry_delay=duration_pb2.Duration(seconds=int(delay_s), nanos=int((delay_s % 1) * 1e9))
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=message, details=[detail])
    return bytes(status.SerializeToString())


_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_EMPTY_RESPONSE: bytes = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()


class TraceService:
    """``TraceService/Export`` on raw bytes: decoding is ours, so malformed input is INVALID_ARGUMENT."""

    def __init__(self, scorer: Receiver) -> None:
        self.scorer = scorer

    async def export(self, body: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        try:
            await self.scorer.export_raw(body, parse_protobuf)
        except BadRequest as exc:
            self.scorer.counters.bad_requests += 1
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)[:500])
        except Saturated as exc:
            context.set_trailing_metadata(
                (("grpc-status-details-bin", _retry_details(str(exc), exc.retry_after_s)),)
            )
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except Unavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return _EMPTY_RESPONSE


async def start(
    scorer: Receiver, host: str, port: int, max_request_bytes: int
) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_request_bytes)])
    handler = grpc.unary_unary_rpc_method_handler(TraceService(scorer).export)  # bytes in, bytes out
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, {"Export": handler}),))
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    return server, bound
