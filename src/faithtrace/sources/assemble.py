"""OpenInference trace assembly: the documents of a trace's RETRIEVER spans plus the question and answer of
its root (or enclosing CHAIN) span make one answer to score.

Spans of one trace arrive in any order and, over OTLP, in several requests. A trace is kept from its first
relevant span; it resolves as soon as its root span has been seen (the root ends last in the app), or once no
span of it has come for ``settle_s`` (a root outside the instrumentation, or one that never comes). Traces
without a retriever are forgotten when they settle. Memory is bounded in traces and in bytes: callers check
``is_full()`` first (the receiver answers "retry later"); past that, the oldest trace is resolved early.
Resolved trace ids are remembered in a bounded window, so late or re-sent spans of a scored trace are ignored.
Not thread-safe: one owner (the receiver's event loop, or the span processor's lock).
"""

from __future__ import annotations

import collections
from typing import Final

from faithtrace._telemetry import names as n
from faithtrace.sources.spans import CHAIN, OWNED, RETRIEVER, RagItem, SpanView, documents, oi_text

SOURCE_OPENINFERENCE: Final = "openinference"


class _Trace:
    __slots__ = ("chains", "last_seen", "owned", "retrievers", "root_id", "seen", "size")

    def __init__(self, now: float) -> None:
        self.retrievers: list[tuple[int, int, int, list[str]]] = []  # (start, span id, parent id, documents)
        self.chains: dict[int, tuple[int, str, str | None, str | None]] = {}  # id -> (parent, name, q, a)
        self.root_id = 0
        self.last_seen = now
        self.size = 0
        self.owned = False
        self.seen: set[int] = set()  # span ids: a re-sent batch adds nothing twice


Resolved = tuple[int, RagItem | None]  # (trace id, the item; None: a RAG trace without question or answer)


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
    ) -> None:
        self.settle_s = settle_s
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.max_documents = max_documents
        self.max_chars = max_chars_per_trace
        # Least recently extended first: settling and eviction both look at the front only.
        self._traces: collections.OrderedDict[int, _Trace] = collections.OrderedDict()
        self._ready: set[int] = set()
        self._resolved: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._resolved_window = resolved_window
        self.bytes = 0
        self.evicted = 0  # traces resolved early because memory was full

    # --- intake --------------------------------------------------------------------------------------------
    def tracks(self, trace_id: int) -> bool:
        return trace_id in self._traces

    def was_resolved(self, trace_id: int) -> bool:
        return trace_id in self._resolved

    def forget(self, trace_id: int) -> None:
        """Its scoring failed: let the spans, when re-sent, assemble the trace again."""
        self._resolved.pop(trace_id, None)

    def is_full(self, extra_traces: int = 0) -> bool:
        return len(self._traces) + extra_traces > self.max_traces or self.bytes >= self.max_bytes

    def has_retriever(self, trace_id: int) -> bool:
        trace = self._traces.get(trace_id)
        return trace is not None and bool(trace.retrievers) and not trace.owned

    def add(self, view: SpanView, now: float) -> list[Resolved]:
        """Keep what ``view`` adds to its trace. Returns traces resolved early to make room (rare)."""
        if view.trace_id in self._resolved:
            return []
        trace = self._traces.get(view.trace_id)
        if trace is None:
            trace = self._traces[view.trace_id] = _Trace(now)
        else:
            self._traces.move_to_end(view.trace_id)
        trace.last_seen = now
        if view.span_id in trace.seen:
            return []
        trace.seen.add(view.span_id)
        before = trace.size
        if view.role == OWNED:
            trace.owned = True  # faithtrace's decorator scores this trace itself
        elif view.role == RETRIEVER:
            room = self.max_chars - trace.size
            docs = [
                d[: max(0, room)]
                for d in documents(view.attrs, n.RETRIEVAL_DOCUMENT_CONTENT, self.max_documents)
            ]
            docs = [d for d in docs if d]
            trace.retrievers.append((view.start_ns, view.span_id, view.parent_id, docs))
            trace.size += sum(len(d) for d in docs) + 64
        elif view.role == CHAIN:
            q = oi_text(view.attrs, n.INPUT_VALUE, n.INPUT_MIME_TYPE)
            a = oi_text(view.attrs, n.OUTPUT_VALUE, n.OUTPUT_MIME_TYPE)
            q = q[: self.max_chars] if q else q
            a = a[: self.max_chars] if a else a
            trace.chains[view.span_id] = (view.parent_id, view.name, q, a)
            trace.size += len(q or "") + len(a or "") + 64
        if not view.parent_id:
            self.root_seen(view.trace_id, view.span_id)
        self.bytes += trace.size - before
        out: list[Resolved] = []
        while len(self._traces) > self.max_traces or (self.bytes > self.max_bytes and len(self._traces) > 1):
            oldest = next(iter(self._traces))
            if oldest == view.trace_id:
                break
            self.evicted += 1
            out.extend(self._resolve(oldest))
        return out

    def root_seen(self, trace_id: int, span_id: int) -> None:
        """The trace's root span has ended (it may be outside the instrumentation): resolve it now."""
        trace = self._traces.get(trace_id)
        if trace is not None:
            trace.root_id = trace.root_id or span_id
            self._ready.add(trace_id)

    # --- resolution ----------------------------------------------------------------------------------------
    def due(self, now: float, *, everything: bool = False) -> list[Resolved]:
        """Traces whose root was seen, and (with ``now``) traces settled for ``settle_s``; ``everything``
        resolves all (shutdown)."""
        out: list[Resolved] = []
        if everything:
            ids = list(self._traces)
        else:
            # A root seen before any retriever (batches cross) waits for the settle window: not RAG yet.
            ids = [t for t in self._ready if t in self._traces and self._traces[t].retrievers]
            self._ready.difference_update(ids)
            self._ready.intersection_update(self._traces)
        for trace_id in ids:
            out.extend(self._resolve(trace_id))
        if not everything:
            horizon = now - self.settle_s
            while self._traces:
                trace_id, trace = next(iter(self._traces.items()))
                if trace.last_seen > horizon:
                    break
                out.extend(self._resolve(trace_id))
        return out

    def next_deadline(self) -> float | None:
        if not self._traces:
            return None
        return next(iter(self._traces.values())).last_seen + self.settle_s

    def pending(self) -> int:
        return len(self._traces)

    def _resolve(self, trace_id: int) -> list[Resolved]:
        trace = self._traces.pop(trace_id, None)
        self._ready.discard(trace_id)
        if trace is None:
            return []
        self.bytes -= trace.size
        if trace.owned or not trace.retrievers:
            return []  # not RAG, or scored by the decorator in the app
        self._resolved[trace_id] = None
        while len(self._resolved) > self._resolved_window:
            self._resolved.popitem(last=False)
        return [(trace_id, _item(trace_id, trace))]


def _holder(trace: _Trace) -> tuple[int, str, str | None, str] | None:
    """The span whose question and answer go with the documents: the root when it has both, else the
    outermost ancestor of a retriever that has both, else any span that has both (the outermost first)."""

    def complete(span_id: int) -> bool:
        chain = trace.chains.get(span_id)
        return chain is not None and bool(chain[3])

    candidates: list[int] = []
    if trace.root_id and complete(trace.root_id):
        candidates.append(trace.root_id)
    for _start, _sid, parent, _docs in sorted(trace.retrievers):
        chain_ids: list[int] = []
        seen: set[int] = set()
        while parent in trace.chains and parent not in seen:
            seen.add(parent)
            chain_ids.append(parent)
            parent = trace.chains[parent][0]
        candidates.extend(i for i in reversed(chain_ids) if complete(i))
    outermost = [i for i, c in trace.chains.items() if c[0] not in trace.chains and complete(i)]
    candidates.extend(outermost)
    candidates.extend(i for i in trace.chains if complete(i))
    if not candidates:
        return None
    span_id = candidates[0]
    _parent, name, query, answer = trace.chains[span_id]
    assert answer is not None
    return span_id, name, query, answer


def _item(trace_id: int, trace: _Trace) -> RagItem | None:
    holder = _holder(trace)
    docs = [d for _start, _sid, _parent, ds in sorted(trace.retrievers, key=lambda r: r[0]) for d in ds]
    if holder is None or not docs:
        return None
    span_id, name, query, answer = holder
    return RagItem(trace_id, span_id, name, query, tuple(docs), answer, SOURCE_OPENINFERENCE)
