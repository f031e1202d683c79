"""OpenInference trace assembly: the documents of a trace's RETRIEVER spans plus the question and answer of
its root (or enclosing CHAIN) span make one answer to score.

The answer is the holder's own output text; when that is no text (a streaming engine's query span records
its generator), it is the reply of the last LLM span inside the holder, where the streamed answer is
assembled. The evaluation still belongs to the holder, never to the LLM span.

Spans of one trace arrive in any order and, over OTLP, in several requests. A trace is kept from its first
relevant span; it resolves as soon as its root span has been seen (the root ends last in the app) and no span
it is known to have started is still open, or once no span of it has come for ``settle_s`` (a root outside
the instrumentation, or one that never comes). Open spans are known in-process only (the span processor sees
spans start): a LlamaIndex chat engine's streaming response ends its root span before the stream is read, and
its trace waits for the stream's spans, at most ``max_open_s``. Traces
without a retriever are forgotten when they settle. Memory is bounded in traces and in bytes: callers check
``is_full()`` first (the receiver answers "retry later"); past that, the oldest trace is resolved early.
Resolved trace ids are remembered in a bounded window, so late or re-sent spans of a scored trace are ignored.
Not thread-safe: one owner (the receiver's event loop, or the span processor's lock).
"""

from __future__ import annotations

import collections
from typing import Final, NamedTuple

from faithtrace._telemetry import names as n
from faithtrace.sources.spans import (
    CHAIN,
    OWNED,
    RETRIEVER,
    RagItem,
    SpanView,
    documents,
    is_llm,
    llm_reply,
    oi_text,
)

SOURCE_OPENINFERENCE: Final = "openinference"
_MAX_OPEN: Final = 10_000  # open spans followed per trace


class _Chain(NamedTuple):
    parent: int
    name: str
    query: str | None
    answer: str | None  # its own output text (an LLM span: its reply)
    llm: bool
    order: tuple[int, int]  # (end time, arrival): the last LLM reply is the answer


class _Trace:
    __slots__ = ("chains", "last_seen", "open", "owned", "retrievers", "root_id", "seen", "size")

    def __init__(self, now: float) -> None:
        self.retrievers: list[tuple[int, int, int, list[str]]] = []  # (start, span id, parent id, documents)
        self.chains: dict[int, _Chain] = {}
        self.root_id = 0
        self.last_seen = now
        self.size = 0
        self.owned = False
        self.seen: set[int] = set()  # span ids: a re-sent batch adds nothing twice
        self.open: set[int] = set()  # spans seen starting and not yet ended


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
        max_open_s: float = 300.0,
    ) -> None:
        self.settle_s = settle_s
        self.max_open_s = max_open_s
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

    def started(self, trace_id: int, span_id: int) -> None:
        """A span of a followed trace has started: the trace waits for it to end."""
        trace = self._traces.get(trace_id)
        if trace is not None and len(trace.open) < _MAX_OPEN:
            trace.open.add(span_id)

    def ended(self, trace_id: int, span_id: int, now: float) -> None:
        """A span of a followed trace that adds nothing to it has ended (the trace may wait for it)."""
        trace = self._traces.get(trace_id)
        if trace is not None:
            trace.open.discard(span_id)
            trace.last_seen = now
            self._traces.move_to_end(trace_id)

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
        trace.open.discard(view.span_id)
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
            llm = is_llm(view.attrs)
            # An LLM span's input is its prompt (documents and all), never the user's question.
            q = None if llm else oi_text(view.attrs, n.INPUT_VALUE, n.INPUT_MIME_TYPE)
            a = llm_reply(view.attrs) if llm else oi_text(view.attrs, n.OUTPUT_VALUE, n.OUTPUT_MIME_TYPE)
            q = q[: self.max_chars] if q else q
            a = a[: self.max_chars] if a else a
            order = (view.end_ns, len(trace.seen))
            trace.chains[view.span_id] = _Chain(view.parent_id, view.name, q, a, llm, order)
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
            trace.open.discard(span_id)
            trace.root_id = trace.root_id or span_id
            self._ready.add(trace_id)

    # --- resolution ----------------------------------------------------------------------------------------
    def due(self, now: float, *, everything: bool = False, closing: bool = False) -> list[Resolved]:
        """Traces whose root was seen, and (with ``now``) traces settled for ``settle_s``; ``everything``
        resolves all but those still waiting for a span (a flush), ``closing`` all (shutdown)."""
        out: list[Resolved] = []
        if everything or closing:
            ids = [t for t, trace in self._traces.items() if closing or not trace.open]
        else:
            # A root seen before any retriever (batches cross) waits for the settle window: not RAG yet. A
            # root that ended while spans under it still run (a stream being read) waits for them.
            ids = [
                t
                for t in self._ready
                if t in self._traces and self._traces[t].retrievers and not self._traces[t].open
            ]
            self._ready.difference_update(ids)
            self._ready.intersection_update(self._traces)
        for trace_id in ids:
            out.extend(self._resolve(trace_id))
        if not (everything or closing):
            horizon = now - self.settle_s
            patience = now - self.max_open_s
            settled: list[int] = []
            for trace_id, trace in self._traces.items():
                if trace.last_seen > horizon:
                    break
                if not trace.open or trace.last_seen <= patience:
                    settled.append(trace_id)
            for trace_id in settled:
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


def _inside(chains: dict[int, _Chain], span_id: int, ancestor: int) -> bool:
    seen: set[int] = set()
    while span_id in chains and span_id not in seen:
        seen.add(span_id)
        span_id = chains[span_id].parent
        if span_id == ancestor:
            return True
    return False


def _holder(trace: _Trace) -> tuple[int, str, str | None, str] | None:
    """The span whose question and answer go with the documents, and the answer.

    The frames are the root and the ancestors of a retriever (the outermost first), then the outermost spans;
    LLM spans never frame. The first frame with its own answer holds it; else the first frame with an LLM
    reply inside it holds the last such reply (a streaming engine); else, as a last resort, any span with an
    answer of its own, the outermost first.
    """
    chains = trace.chains
    frames: list[int] = []
    if trace.root_id in chains:
        frames.append(trace.root_id)
    for _start, _sid, parent, _docs in sorted(trace.retrievers):
        ancestors: list[int] = []
        while parent in chains and parent not in ancestors:
            ancestors.append(parent)
            parent = chains[parent].parent
        frames.extend(reversed(ancestors))
    frames.extend(i for i, c in chains.items() if c.parent not in chains)
    frames = [i for i in dict.fromkeys(frames) if not chains[i].llm]
    for span_id in frames:
        chain = chains[span_id]
        if chain.answer:
            return span_id, chain.name, chain.query, chain.answer
    replies = sorted(((c.order, i) for i, c in chains.items() if c.llm and c.answer), reverse=True)
    for span_id in frames:
        for _order, reply_id in replies:
            if _inside(chains, reply_id, span_id):
                chain = chains[span_id]
                answer = chains[reply_id].answer
                assert answer is not None
                return span_id, chain.name, chain.query, answer
    last_resort = [i for i, c in chains.items() if c.parent not in chains] + list(chains)
    for span_id in last_resort:
        chain = chains[span_id]
        if chain.answer:
            return span_id, chain.name, chain.query, chain.answer
    return None


def _item(trace_id: int, trace: _Trace) -> RagItem | None:
    holder = _holder(trace)
    docs = [d for _start, _sid, _parent, ds in sorted(trace.retrievers, key=lambda r: r[0]) for d in ds]
    if holder is None or not docs:
        return None
    span_id, name, query, answer = holder
    return RagItem(trace_id, span_id, name, query, tuple(docs), answer, SOURCE_OPENINFERENCE)
