"""OTLP trace requests in: protobuf and JSON decoding, and the cheap pass that picks out the spans to keep.

For each span only the attribute keys are looked at (a set lookup each); attribute values are decoded only
for spans that carry a watched key, and a resource's attributes only when one of its spans does.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from faithtrace.sources.conventions import Convention, SpanView, role_of


class BadRequest(Exception):
    """The request cannot be decoded (answered 400 / INVALID_ARGUMENT: retrying cannot help)."""


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise BadRequest(f"malformed OTLP protobuf: {exc}") from exc
    return request


_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_to_base64(span: dict[str, Any]) -> None:
    # OTLP/JSON spells trace and span ids in hex, where protobuf's JSON mapping expects base64.
    for key in _ID_FIELDS:
        value = span.get(key)
        if isinstance(value, str) and value:
            try:
                span[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError as exc:
                raise BadRequest(f"{key} is not hex: {value[:40]!r}") from exc
    for link in span.get("links") or []:
        if isinstance(link, dict):
            _hex_ids_to_base64(link)


def parse_json(body: bytes) -> ExportTraceServiceRequest:
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise BadRequest("an OTLP/JSON request is a JSON object")
        for rs in doc.get("resourceSpans") or []:
            for ss in rs.get("scopeSpans") or []:
                for span in ss.get("spans") or []:
                    if isinstance(span, dict):
                        _hex_ids_to_base64(span)
        request = ExportTraceServiceRequest()
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
        return request
    except BadRequest:
        raise
    except (ValueError, TypeError, AttributeError, json_format.ParseError) as exc:
        raise BadRequest(f"malformed OTLP JSON: {exc}") from exc


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "string_value":
        return v.string_value
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "int_value":
        return v.int_value
    if which == "double_value":
        return v.double_value
    if which == "bool_value":
        return v.bool_value
    if which == "bytes_value":
        return v.bytes_value.decode("utf-8", errors="replace")
    return None  # kvlist values carry nothing the sources read


def attributes(kvs: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@dataclass
class Found:
    """The spans of one request that matter, grouped by the resource (app) that sent them."""

    spans: int = 0  # every span in the request
    views: list[tuple[tuple[tuple[str, Any], ...], SpanView]] = field(default_factory=list)
    # (trace id, span id) of roots (and local roots) that are nothing else to the sources
    roots: list[tuple[int, int]] = field(default_factory=list)
    resources: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = field(default_factory=dict)


def _key(attrs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))


# OTLP span flags (trace.proto): the sender says whether the parent is in another process.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


def scan(
    request: ExportTraceServiceRequest, watched: frozenset[str], conventions: tuple[Convention, ...]
) -> Found:
    found = Found()
    for rs in request.resource_spans:
        resource_key: tuple[tuple[str, Any], ...] | None = None
        for ss in rs.scope_spans:
            found.spans += len(ss.spans)
            for span in ss.spans:
                parent = int.from_bytes(span.parent_span_id, "big") if span.parent_span_id else 0
                # A span whose parent is remote is its service's root: the trace's part here ends with it.
                local_root = bool(parent) and span.flags & (_HAS_IS_REMOTE | _IS_REMOTE) == (
                    _HAS_IS_REMOTE | _IS_REMOTE
                )
                role = None
                if any(kv.key in watched for kv in span.attributes):
                    attrs = attributes(span.attributes)
                    role = role_of(attrs, 0 if local_root else parent, conventions)
                if role is None:
                    if not parent or local_root:
                        found.roots.append(
                            (int.from_bytes(span.trace_id, "big"), int.from_bytes(span.span_id, "big"))
                        )
                    continue
                if resource_key is None:
                    resource = attributes(rs.resource.attributes)
                    resource_key = _key(resource)
                    found.resources.setdefault(resource_key, resource)
                view = SpanView(
                    int.from_bytes(span.trace_id, "big"),
                    int.from_bytes(span.span_id, "big"),
                    parent,
                    span.name,
                    role,
                    attrs,
                    span.start_time_unix_nano,
                    span.end_time_unix_nano,
                    local_root,
                )
                found.views.append((resource_key, view))
    return found
