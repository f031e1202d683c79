"""OpenInference trace assembly: the documents of a trace's RETRIEVER spans plus the question and answer of
its root (or enclosing CHAIN) span make one answer to score (which span answers: held.py).

Spans of one trace arrive in any order and, over OTLP, in several requests. A trace resolves only once its
root has been seen: a span without a parent, or a service's local root (its parent is remote: OTLP's span
flags, or the SDK's ``is_remote``). In-process, where the span processor sees spans start, it also waits for
the spans it knows are open (a streamed answer is read after its root span ended), at most ``max_open_s``.
A rooted trace that looks whole resolves at once, otherwise after ``grace_s`` without a new span. A RAG
trace whose root has not come ``settle_s`` after its last span is reported incomplete
(``INCOMPLETE_NO_ROOT``), never resolved from what it has: parts arriving late (a Collector's retry, a root
split off into another request) then still find the trace waiting.

Two pools, each with its own bound:
- RAG traces (a retriever seen): at most ``max_traces`` and ``max_bytes``. Callers check ``is_full()``
  first (the receiver answers "retry later"); past that, the oldest is reported incomplete (evicted).
- Traces without a retriever so far, which most traces are: their own smaller bound, the oldest dropped
  when it is full (counted), so a flood of them never takes a RAG trace's room or refuses one. Once its root
  is seen without a retriever, a trace is kept ``not_rag_after_s`` more (``settle_s`` unless set: a load
  balancer that sends a request's parts to their backends one after another can deliver a retriever
  seconds after its root) and then dropped; a retriever that comes after that is reported incomplete, not
  scored against an assembly that lost its spans.
Resolved and dropped trace ids are remembered in bounded windows, so late or re-sent spans are ignored.
Not thread-safe: one owner (the receiver's event loop, or the span processor's lock).
"""

from __future__ import annotations

import collections
import itertools
from typing import Final, NamedTuple

from faithtrace.sources.conventions import OWNED, RETRIEVER, RagItem, SpanView
from faithtrace.sources.held import (
    INCOMPLETE_EVICTED,
    INCOMPLETE_LATE_RETRIEVER,
    INCOMPLETE_NO_ANSWER,
    INCOMPLETE_NO_DOCUMENTS,
    INCOMPLETE_NO_ROOT,
    INCOMPLETE_REASONS,
    SOURCE_OPENINFERENCE,
    HeldTrace,
    item_of,
    whole,
)

__all__ = [
    "INCOMPLETE_EVICTED",
    "INCOMPLETE_LATE_RETRIEVER",
    "INCOMPLETE_NO_ANSWER",
    "INCOMPLETE_NO_DOCUMENTS",
    "INCOMPLETE_NO_ROOT",
    "INCOMPLETE_REASONS",
    "SOURCE_OPENINFERENCE",
    "Assembler",
    "Resolved",
]
_MAX_OPEN: Final = 10_000  # open spans followed per trace


class Resolved(NamedTuple):
    """A trace done with: its item to score, or None and the reason it is incomplete."""

    trace_id: int
    item: RagItem | None
    reason: str = ""


class _Window:
    """Trace ids remembered first-in first-out, at most ``size``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._ids: collections.OrderedDict[int, int] = collections.OrderedDict()

    def __contains__(self, trace_id: int) -> bool:
        return trace_id in self._ids

    def get(self, trace_id: int) -> int | None:
        return self._ids.get(trace_id)

    def add(self, trace_id: int, value: int = 0) -> None:
        self._ids[trace_id] = value
        while len(self._ids) > self.size:
            self._ids.popitem(last=False)

    def pop(self, trace_id: int) -> int | None:
        return self._ids.pop(trace_id, None)


class Assembler:
    def __init__(
        self,
        *,
        settle_s: float,
        max_traces: int,
        max_bytes: int,
        max_documents: int = 100,
        max_chars_per_trace: int = 64_000,
        resolved_window: int = 100_000,
        max_open_s: float = 300.0,
        grace_s: float = 2.0,
        not_rag_after_s: float | None = None,
        max_other_traces: int | None = None,
        max_other_bytes: int | None = None,
    ) -> None:
        self.settle_s = settle_s
        self.max_open_s = max_open_s
        self.grace_s = grace_s
        self.not_rag_after_s = settle_s if not_rag_after_s is None else not_rag_after_s
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.max_other_traces = max_other_traces if max_other_traces is not None else max_traces
        self.max_other_bytes = max_other_bytes if max_other_bytes is not None else max(1, max_bytes // 4)
        self.max_documents = max_documents
        self.max_chars = max_chars_per_trace
        # Least recently extended first: settling and eviction both look at the front only.
        self._rag: collections.OrderedDict[int, HeldTrace] = collections.OrderedDict()
        self._other: collections.OrderedDict[int, HeldTrace] = collections.OrderedDict()  # no root seen yet
        self._rooted: collections.OrderedDict[int, HeldTrace] = (
            collections.OrderedDict()
        )  # root, no retriever
        self._ready: set[int] = set()  # RAG traces whose root was seen
        self._resolved = _Window(resolved_window)  # scored, reported or not ours: later spans ignored
        self._dropped = _Window(resolved_window)  # dropped without a retriever: a late one is reported
        self._roots = _Window(max(1, max_traces))  # roots seen before any span of theirs was kept
        self.bytes = 0  # held by RAG traces
        self.other_bytes = 0
        self.evicted = 0  # RAG traces reported incomplete because their pool was full
        self.dropped = 0  # traces without a retriever dropped (not RAG)
        self.dropped_full = 0  # ... of which early, because their pool was full

    # --- intake --------------------------------------------------------------------------------------------
    def _get(self, trace_id: int) -> HeldTrace | None:
        return self._rag.get(trace_id) or self._other.get(trace_id) or self._rooted.get(trace_id)

    def tracks(self, trace_id: int) -> bool:
        return trace_id in self._rag or trace_id in self._other or trace_id in self._rooted

    def was_resolved(self, trace_id: int) -> bool:
        return trace_id in self._resolved

    def forget(self, trace_id: int) -> None:
        """Its scoring failed: let the spans, when re-sent, assemble the trace again."""
        self._resolved.pop(trace_id)

    def is_full(self, extra_traces: int = 0) -> bool:
        """No room for ``extra_traces`` more RAG traces (traces without a retriever never count here)."""
        return len(self._rag) + extra_traces > self.max_traces or self.bytes >= self.max_bytes

    def full_reason(self) -> str:
        return (
            f"{len(self._rag)} RAG traces held waiting for their root "
            f"(max {self.max_traces}, {self.bytes} of {self.max_bytes} bytes)"
        )

    def has_retriever(self, trace_id: int) -> bool:
        return trace_id in self._rag

    def held(self) -> int:
        """RAG traces held for their root (or, in-process, for their open spans)."""
        return len(self._rag)

    def pending(self) -> int:
        """Every trace held, RAG or not yet known to be."""
        return len(self._rag) + len(self._other) + len(self._rooted)

    def started(self, trace_id: int, span_id: int) -> None:
        """A span of a followed trace has started: the trace waits for it to end."""
        trace = self._get(trace_id)
        if trace is not None and len(trace.open) < _MAX_OPEN:
            trace.open.add(span_id)

    def ended(self, trace_id: int, span_id: int, now: float) -> None:
        """A span of a followed trace that adds nothing to it has ended (the trace may wait for it)."""
        trace = self._get(trace_id)
        if trace is not None:
            trace.open.discard(span_id)
            self._touch(trace_id, trace, now)

    def _touch(self, trace_id: int, trace: HeldTrace, now: float) -> None:
        trace.last_seen = now
        for pool in (self._rag, self._other, self._rooted):
            if trace_id in pool:
                pool.move_to_end(trace_id)

    def add(self, view: SpanView, now: float) -> list[Resolved]:
        """Keep what ``view`` adds to its trace. Returns traces reported early (evicted, late retrievers)."""
        trace_id = view.trace_id
        if trace_id in self._resolved:
            return []
        if trace_id in self._dropped:
            if view.role != RETRIEVER:
                return []
            self._dropped.pop(trace_id)
            self._resolved.add(trace_id)
            return [Resolved(trace_id, None, INCOMPLETE_LATE_RETRIEVER)]
        if view.role == OWNED:
            # faithtrace's decorator scores this trace in the app: not ours, whatever else it holds.
            self._discard(trace_id)
            self._resolved.add(trace_id)
            return []
        trace = self._get(trace_id)
        if trace is None:
            trace = self._other[trace_id] = HeldTrace(now)
            root = self._roots.pop(trace_id)
            if root is not None:
                trace.root_id = root
                self._other.pop(trace_id)
                self._rooted[trace_id] = trace
        if view.role == RETRIEVER and trace_id not in self._rag:
            self._promote(trace_id, trace)
        self._touch(trace_id, trace, now)
        trace.open.discard(view.span_id)
        if view.span_id not in trace.seen:
            trace.seen.add(view.span_id)
            self._keep(trace_id, trace, view)
        if not view.parent_id or view.local_root:
            self.root_seen(trace_id, view.span_id)
        return self._bound(trace_id)

    def _keep(self, trace_id: int, trace: HeldTrace, view: SpanView) -> None:
        added = trace.keep(view, self.max_chars, self.max_documents)
        if trace_id in self._rag:
            self.bytes += added
        else:
            self.other_bytes += added

    def _promote(self, trace_id: int, trace: HeldTrace) -> None:
        """A retriever came: the trace is RAG, and moves to the RAG pool."""
        self._other.pop(trace_id, None)
        self._rooted.pop(trace_id, None)
        self.other_bytes -= trace.size
        self.bytes += trace.size
        self._rag[trace_id] = trace
        if trace.root_id:
            self._ready.add(trace_id)

    def _discard(self, trace_id: int) -> None:
        trace = self._rag.pop(trace_id, None)
        if trace is not None:
            self.bytes -= trace.size
        for pool in (self._other, self._rooted):
            trace = pool.pop(trace_id, None)
            if trace is not None:
                self.other_bytes -= trace.size
        self._ready.discard(trace_id)

    def _bound(self, keep: int) -> list[Resolved]:
        out: list[Resolved] = []
        while len(self._rag) > self.max_traces or (self.bytes > self.max_bytes and len(self._rag) > 1):
            oldest = next(iter(self._rag))
            if oldest == keep:
                break
            self.evicted += 1
            self._discard(oldest)
            self._resolved.add(oldest)
            out.append(Resolved(oldest, None, INCOMPLETE_EVICTED))
        while len(self._other) + len(self._rooted) > self.max_other_traces or (
            self.other_bytes > self.max_other_bytes and len(self._other) + len(self._rooted) > 1
        ):
            # Traces whose root came without a retriever go first: they are the least likely to be RAG.
            victim = next((t for t in itertools.chain(self._rooted, self._other) if t != keep), None)
            if victim is None:
                break
            self.dropped_full += 1
            self._drop(victim)
        return out

    def _drop(self, trace_id: int) -> None:
        self.dropped += 1
        self._discard(trace_id)
        self._dropped.add(trace_id)

    def root_seen(self, trace_id: int, span_id: int) -> None:
        """The trace's root span (or its service's local root) has ended: the trace may resolve now."""
        trace = self._get(trace_id)
        if trace is None:
            if trace_id not in self._resolved and trace_id not in self._dropped:
                self._roots.add(trace_id, span_id)  # its other spans may come in a later request
            return
        trace.open.discard(span_id)
        trace.root_id = trace.root_id or span_id
        if trace_id in self._rag:
            self._ready.add(trace_id)
        elif trace_id in self._other:
            self._other.pop(trace_id)
            self._rooted[trace_id] = trace

    # --- resolution ----------------------------------------------------------------------------------------
    def due(self, now: float, *, everything: bool = False, closing: bool = False) -> list[Resolved]:
        """RAG traces whose root was seen and that wait on no open span; RAG traces without a root for
        ``settle_s`` (reported incomplete); ``everything``: the same without waiting (a flush: traces still
        missing their root keep waiting for it); ``closing``: all of them (shutdown)."""
        out: list[Resolved] = []
        settled = now - self.grace_s
        for trace_id in list(self._ready):
            trace = self._rag[trace_id]
            if closing or (not trace.open and (trace.last_seen <= settled or whole(trace))):
                out.append(self._resolve(trace_id))
        if closing:
            out += [Resolved(t, None, INCOMPLETE_NO_ROOT) for t in list(self._rag) if self._end(t)]
            for trace_id in [*self._other, *self._rooted]:
                self._drop(trace_id)
            return out
        horizon = now - self.settle_s
        patience = now - self.max_open_s
        settled_ids: list[int] = []  # the front only: the pool is ordered by last span
        for trace_id, trace in self._rag.items():
            if trace.last_seen > horizon:
                break
            if not trace.root_id or trace.last_seen <= patience:  # no root; or an open span never ended
                settled_ids.append(trace_id)
        for trace_id in settled_ids:
            if self._rag[trace_id].root_id:
                out.append(self._resolve(trace_id))
            else:
                self._end(trace_id)
                out.append(Resolved(trace_id, None, INCOMPLETE_NO_ROOT))
        while self._rooted and next(iter(self._rooted.values())).last_seen <= now - self.not_rag_after_s:
            self._drop(next(iter(self._rooted)))
        while self._other and next(iter(self._other.values())).last_seen <= horizon:
            self._drop(next(iter(self._other)))
        return out

    def rooted(self, trace_id: int) -> bool:
        trace = self._get(trace_id)
        return trace is not None and bool(trace.root_id)

    def next_deadline(self) -> float | None:
        """When ``due`` next has something to do without new spans (None: nothing held)."""
        deadlines = [self._rag[t].last_seen + self.grace_s for t in self._ready if not self._rag[t].open]
        deadlines += [
            next(iter(pool.values())).last_seen + wait
            for pool, wait in (
                (self._rag, self.settle_s),
                (self._other, self.settle_s),
                (self._rooted, self.not_rag_after_s),
            )
            if pool
        ]
        return min(deadlines) if deadlines else None

    def _end(self, trace_id: int) -> bool:
        """Forget a RAG trace for good (reported elsewhere); True if it was held."""
        held = trace_id in self._rag
        self._discard(trace_id)
        self._resolved.add(trace_id)
        return held

    def _resolve(self, trace_id: int) -> Resolved:
        trace = self._rag[trace_id]
        self._end(trace_id)
        item, reason = item_of(trace_id, trace)
        return Resolved(trace_id, item, reason)
