"""Parts of traces a replica acknowledged before it scored them, kept on disk until their trace is scored.

The receiver answers some requests before their trace is scored (receiver.py): a root that comes before any
retriever of its trace (most such roots are chat traces'), a part still missing its root after ``--hold``,
an LLM span that came alone. The Collector then lets go of those spans. A replica killed before the score
lost them, and with them the trace (docs/fleet.md: 3 to 7 of 500 LlamaIndex traces per ``kill -9``).

With ``--spool DIR`` each such part is written to disk before the answer, and marked done once the trace's
results are exported or the trace left the replica without an evaluation (not RAG, incomplete). A replica
that starts on a spool sends the parts not done on (``Receiver.replay``).

The spool is a log: segment files ``DIR/<n>.seg`` of records appended on one open descriptor (a file per
trace cost 50 µs of CPU per chat trace, most of it creating and deleting files). A record is a part (a
trace's spans of one request, an OTLP ``ExportTraceServiceRequest``) or a done mark (the trace's parts up to
a position are done with). A segment is deleted once none of its parts is live, oldest first, so that a
done mark is never deleted before the parts it covers; the oldest segment's live parts are copied forward
when more than ``_SEGMENTS`` segments are on disk and it is at most half live, so one long-held trace does not
pin the rest. A start
reads the log, copies the live parts into a new segment and deletes the old ones. Writes are not fsynced:
they outlive the process (``kill -9``, an OOM kill, a container restart keeps the pod's emptyDir), not the
node. A record cut short (the process died writing it) ends its segment.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

# payload length, kind, trace id; a done mark's position (segment, offset) of the last part it covers
_HEADER = struct.Struct(">IB16sIQ")
_PART, _DONE = 1, 2
_SEGMENTS = 4  # segments on disk before the oldest one's live parts are copied forward
_SUFFIX = ".seg"

Position = tuple[int, int]  # (segment, offset of the record)
Part = tuple[int, int, int]  # (segment, offset of the record, payload length)


def by_trace(request: ExportTraceServiceRequest, trace_ids: set[int]) -> dict[int, ExportTraceServiceRequest]:
    """The spans of ``request`` in ``trace_ids``: one request per trace, resources and scopes kept."""
    out: dict[int, ExportTraceServiceRequest] = {}
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                trace_id = int.from_bytes(span.trace_id, "big")
                if trace_id not in trace_ids:
                    continue
                part = out.get(trace_id)
                if part is None:
                    part = out[trace_id] = ExportTraceServiceRequest()
                # Consecutive spans of one resource and scope share their copies.
                if not part.resource_spans or part.resource_spans[-1].resource != rs.resource:
                    target = part.resource_spans.add()
                    target.resource.CopyFrom(rs.resource)
                    target.schema_url = rs.schema_url
                target = part.resource_spans[-1]
                if not target.scope_spans or target.scope_spans[-1].scope != ss.scope:
                    scope = target.scope_spans.add()
                    scope.scope.CopyFrom(ss.scope)
                    scope.schema_url = ss.schema_url
                target.scope_spans[-1].spans.append(span)
    return out


class Spool:
    """One directory of segments; ``max_bytes`` bounds them (past it a part is not kept, and the caller
    counts it)."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.segment_bytes = min(16 << 20, max(1 << 10, max_bytes // (2 * _SEGMENTS)))
        directory.mkdir(parents=True, exist_ok=True)
        self._parts: dict[int, list[Part]] = {}  # trace id -> its live parts, in log order
        self._live: dict[int, int] = {}  # segment -> live parts in it
        self._sizes: dict[int, int] = {}  # segment -> bytes on disk, oldest first
        self._taken: set[int] = set()  # traces being sent elsewhere (``take``)
        self.bytes = 0
        old = sorted(n for n in (_segment_no(p.name) for p in directory.iterdir()) if n is not None)
        self._active = (old[-1] + 1) if old else 0
        self._fd = self._open(self._active)
        if old:
            self._recover(old)

    # --- writing -------------------------------------------------------------------------------------------
    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:010d}{_SUFFIX}"

    def _open(self, segment: int) -> int:
        fd = os.open(self._path(segment), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._sizes[segment] = 0
        self._live[segment] = 0
        return fd

    def _append(self, kind: int, trace_id: int, payload: bytes, mark: Position = (0, 0)) -> Position:
        record = _HEADER.pack(len(payload), kind, trace_id.to_bytes(16, "big"), *mark) + payload
        os.write(self._fd, record)
        at = (self._active, self._sizes[self._active])
        self._sizes[self._active] += len(record)
        self.bytes += len(record)
        if self._sizes[self._active] >= self.segment_bytes:
            os.close(self._fd)
            self._active += 1
            self._fd = self._open(self._active)
        return at

    def keep(self, trace_id: int, part: ExportTraceServiceRequest) -> bool:
        """Append ``part`` for the trace; False (nothing written) when the spool is full."""
        payload = part.SerializeToString()
        size = _HEADER.size + len(payload)
        if self.bytes + size > self.max_bytes:
            self._compact(force=True)
            if self.bytes + size > self.max_bytes:
                return False
        segment, offset = self._append(_PART, trace_id, payload)
        self._parts.setdefault(trace_id, []).append((segment, offset, len(payload)))
        self._live[segment] += 1
        return True

    def keep_parts(self, request: ExportTraceServiceRequest, trace_ids: set[int]) -> tuple[int, int]:
        """Keep the request's spans of ``trace_ids``; returns (parts kept, parts not kept: full or disk
        error)."""
        kept = full = 0
        for trace_id, part in by_trace(request, trace_ids).items():
            try:
                ok = self.keep(trace_id, part)
            except OSError:
                ok = False
            kept += ok
            full += not ok
        return kept, full

    def drop(self, trace_id: int) -> None:
        """The trace is done with: every part kept for it so far."""
        parts = self._parts.get(trace_id)
        if parts:
            self._done(trace_id, parts[-1][:2])

    def _done(self, trace_id: int, mark: Position) -> None:
        parts = self._parts.get(trace_id, [])
        covered = [p for p in parts if p[:2] <= mark]
        if not covered:
            return
        with contextlib.suppress(OSError):  # unwritten, the parts are sent again at the next start
            self._append(_DONE, trace_id, b"", mark)
        rest = [p for p in parts if p[:2] > mark]
        if rest:
            self._parts[trace_id] = rest
        else:
            del self._parts[trace_id]
        for segment, _, _ in covered:
            self._live[segment] -= 1
        self._collect()

    def _collect(self) -> None:
        """Delete segments without live parts, oldest first: a done mark goes only after what it covers."""
        for segment in list(self._sizes):
            if segment == self._active or self._live[segment]:
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(segment))
            self.bytes -= self._sizes.pop(segment)
            del self._live[segment]

    def _compact(self, force: bool = False) -> None:
        """Copy the oldest segments' live parts to the end of the log and delete them: those beyond
        ``_SEGMENTS`` on disk, or (``force``: the spool is full) the oldest one. Only segments at most half
        live, and only those on disk when it began: live data larger than the segments kept would otherwise
        be copied round for ever (the byte bound holds it instead). Not while a trace is taken (its done mark
        points at the positions it was given)."""
        if self._taken:
            return
        excess = max(1 if force else 0, len(self._sizes) - _SEGMENTS)
        for oldest in list(self._sizes)[:excess]:
            if oldest == self._active or oldest not in self._sizes:
                break
            there = {t: [p for p in parts if p[0] == oldest] for t, parts in self._parts.items()}
            there = {t: parts for t, parts in there.items() if parts}
            live_bytes = sum(_HEADER.size + length for parts in there.values() for _, _, length in parts)
            if 2 * live_bytes > self._sizes[oldest]:
                break
            with open(self._path(oldest), "rb") as source:
                for trace_id, parts in there.items():
                    moved = []
                    for _, offset, length in parts:
                        source.seek(offset + _HEADER.size)
                        new_segment, new_offset = self._append(_PART, trace_id, source.read(length))
                        self._live[new_segment] += 1
                        moved.append((new_segment, new_offset, length))
                    self._parts[trace_id] = [p for p in self._parts[trace_id] if p[0] != oldest] + moved
            self._live[oldest] = 0
            self._collect()

    # --- reading -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._parts)

    def __contains__(self, trace_id: int) -> bool:
        return trace_id in self._parts

    def traces(self) -> list[int]:
        return list(self._parts)

    def load(self, trace_id: int) -> ExportTraceServiceRequest:
        """Every live part of the trace, in one request."""
        merged = ExportTraceServiceRequest()
        for segment, offset, length in self._parts.get(trace_id, []):
            with open(self._path(segment), "rb") as source:
                source.seek(offset + _HEADER.size)
                part = ExportTraceServiceRequest()
                part.ParseFromString(source.read(length))
            merged.resource_spans.extend(part.resource_spans)
        return merged

    def sweep(self, needed: Callable[[int], bool]) -> None:
        """Mark done the traces no longer ``needed`` (they left the replica without an evaluation), and keep
        the segments on disk few."""
        for trace_id in self.traces():
            if trace_id not in self._taken and not needed(trace_id):
                self.drop(trace_id)
        self._compact()

    # --- sending elsewhere (replay.py) ---------------------------------------------------------------------
    def take(self, trace_id: int) -> tuple[ExportTraceServiceRequest, Position] | None:
        """The trace's parts, to send elsewhere; ``done`` marks them done once sent (parts kept meanwhile
        stay), ``give_back`` leaves them in the spool."""
        parts = self._parts.get(trace_id)
        if not parts or trace_id in self._taken:
            return None
        self._taken.add(trace_id)
        return self.load(trace_id), parts[-1][:2]

    def done(self, trace_id: int, mark: Position) -> None:
        self._taken.discard(trace_id)
        self._done(trace_id, mark)

    def give_back(self, trace_id: int) -> None:
        self._taken.discard(trace_id)

    # --- start ---------------------------------------------------------------------------------------------
    def _recover(self, segments: list[int]) -> None:
        """Read the log a previous process left; copy its live parts into the new segment, then delete it."""
        live: dict[int, list[Part]] = {}
        contents = {segment: _read_bytes(self._path(segment)) for segment in segments}
        for segment, data in contents.items():
            at = 0
            while at + _HEADER.size <= len(data):
                length, kind, raw_id, mark_segment, mark_offset = _HEADER.unpack_from(data, at)
                if at + _HEADER.size + length > len(data):
                    break  # cut short: the process died writing it
                trace_id = int.from_bytes(raw_id, "big")
                if kind == _PART:
                    live.setdefault(trace_id, []).append((segment, at, length))
                elif kind == _DONE and trace_id in live:
                    rest = [p for p in live[trace_id] if p[:2] > (mark_segment, mark_offset)]
                    if rest:
                        live[trace_id] = rest
                    else:
                        del live[trace_id]
                at += _HEADER.size + length
        for trace_id, parts in live.items():
            for segment, offset, length in parts:
                payload = contents[segment][offset + _HEADER.size : offset + _HEADER.size + length]
                new_segment, new_offset = self._append(_PART, trace_id, payload)
                self._parts.setdefault(trace_id, []).append((new_segment, new_offset, length))
                self._live[new_segment] += 1
        for segment in segments:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(segment))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _segment_no(name: str) -> int | None:
    if not name.endswith(_SUFFIX):
        return None
    try:
        return int(name.removesuffix(_SUFFIX))
    except ValueError:
        return None
