"""One trace held for assembly: what its OpenInference spans add to it, and the answer they resolve to.

The answer is the holder's own output text; when that is no text (a streaming engine's query span records
its generator), it is the reply of the last LLM span inside the holder, where the streamed answer is
assembled. The evaluation still belongs to the holder, never to the LLM span. The holder is the root or an
ancestor of a retriever, nothing else: a span beside the retrieval (a text splitter's output is the
documents themselves) never answers.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from faithtrace._telemetry import names as n
from faithtrace.sources.conventions import (
    CHAIN,
    RETRIEVER,
    RagItem,
    SpanView,
    documents,
    is_llm,
    llm_reply,
    oi_text,
)

SOURCE_OPENINFERENCE: Final = "openinference"

# Why a RAG trace was not scored (counted per reason by the callers).
INCOMPLETE_NO_ROOT: Final = "no_root"  # its root never came within settle_s of its last span
INCOMPLETE_NO_ANSWER: Final = "no_answer"  # neither the root nor a retriever's ancestor holds an answer
INCOMPLETE_NO_DOCUMENTS: Final = "no_documents"  # the retrievers returned no document text
INCOMPLETE_EVICTED: Final = "evicted"  # held-trace memory was full before its root came
INCOMPLETE_LATE_RETRIEVER: Final = "late_retriever"  # its spans were dropped as not RAG before it came
INCOMPLETE_REASONS: Final = (
    INCOMPLETE_NO_ROOT,
    INCOMPLETE_NO_ANSWER,
    INCOMPLETE_NO_DOCUMENTS,
    INCOMPLETE_EVICTED,
    INCOMPLETE_LATE_RETRIEVER,
)


class _Chain(NamedTuple):
    parent: int
    name: str
    query: str | None
    answer: str | None  # its own output text (an LLM span: its reply)
    llm: bool
    order: tuple[int, int]  # (end time, arrival): the last LLM reply is the answer


class HeldTrace:
    __slots__ = ("chains", "last_seen", "open", "retrievers", "root_id", "seen", "size")

    def __init__(self, now: float) -> None:
        self.retrievers: list[tuple[int, int, int, list[str]]] = []  # (start, span id, parent id, documents)
        self.chains: dict[int, _Chain] = {}
        self.root_id = 0
        self.last_seen = now
        self.size = 0
        self.seen: set[int] = set()  # span ids: a re-sent batch adds nothing twice
        self.open: set[int] = set()  # spans seen starting and not yet ended

    def keep(self, view: SpanView, max_chars: int, max_documents: int) -> int:
        """Keep what ``view`` adds (its texts cut to ``max_chars`` in all); returns the bytes added."""
        before = self.size
        if view.role == RETRIEVER:
            room = max(0, max_chars - self.size)
            docs = [d[:room] for d in documents(view.attrs, n.RETRIEVAL_DOCUMENT_CONTENT, max_documents)]
            docs = [d for d in docs if d]
            self.retrievers.append((view.start_ns, view.span_id, view.parent_id, docs))
            self.size += sum(len(d) for d in docs) + 64
        elif view.role == CHAIN:
            llm = is_llm(view.attrs)
            # An LLM span's input is its prompt (documents and all), never the user's question.
            q = None if llm else oi_text(view.attrs, n.INPUT_VALUE, n.INPUT_MIME_TYPE)
            a = llm_reply(view.attrs) if llm else oi_text(view.attrs, n.OUTPUT_VALUE, n.OUTPUT_MIME_TYPE)
            q = q[:max_chars] if q else q
            a = a[:max_chars] if a else a
            order = (view.end_ns, len(self.seen))
            # A local root's parent is in another service: as a frame it has no parent here.
            parent = 0 if view.local_root else view.parent_id
            self.chains[view.span_id] = _Chain(parent, view.name, q, a, llm, order)
            self.size += len(q or "") + len(a or "") + 64
        return self.size - before


def whole(trace: HeldTrace) -> bool:
    """Nothing of a rooted trace seems missing: its answer is found and every span kept hangs from the
    root through spans kept (a span whose parent has not come, a text splitter under a synthesizer that is
    still in another request, says that part of the trace is on its way). A trace that is not whole
    resolves once no span of it came for ``grace_s``; a leaf that never shows a gap (a second retriever)
    is what that window is for too."""
    chains = trace.chains
    tops = {0, trace.root_id}
    root = chains.get(trace.root_id)
    if root is not None:
        tops.add(root.parent)
    if any(c.parent not in chains and c.parent not in tops for c in chains.values()):
        return False
    if any(parent not in chains and parent not in tops for _, _, parent, _ in trace.retrievers):
        return False
    return _holder(trace) is not None


def _inside(chains: dict[int, _Chain], span_id: int, ancestor: int) -> bool:
    seen: set[int] = set()
    while span_id in chains and span_id not in seen:
        seen.add(span_id)
        span_id = chains[span_id].parent
        if span_id == ancestor:
            return True
    return False


def _holder(trace: HeldTrace) -> tuple[int, str, str | None, str] | None:
    """The span whose question and answer go with the documents, and the answer.

    The frames are the root and the ancestors of a retriever (the outermost first); LLM spans never frame.
    The first frame with its own answer holds it; else the first frame with an LLM reply inside it holds the
    last such reply (a streaming engine). Nothing else is tried: a span that is neither the root nor around
    a retrieval (a text splitter, a prompt formatter) may output anything, the documents included.
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
    return None


def item_of(trace_id: int, trace: HeldTrace) -> tuple[RagItem | None, str]:
    docs = [d for _start, _sid, _parent, ds in sorted(trace.retrievers, key=lambda r: r[0]) for d in ds]
    if not docs:
        return None, INCOMPLETE_NO_DOCUMENTS
    holder = _holder(trace)
    if holder is None:
        return None, INCOMPLETE_NO_ANSWER
    span_id, name, query, answer = holder
    return RagItem(trace_id, span_id, name, query, tuple(docs), answer, SOURCE_OPENINFERENCE), ""
