"""The receiver behind the transports (OTLP gRPC and HTTP, Kafka): admission, idempotence, trace assembly,
scoring and honest answers; the evaluations themselves (concurrency, duplicates, export) are evaluations.py's.

One OTLP request is answered OK only when every RAG item it carries has been scored and its results were
accepted by the exporter (``App.export``), or was skipped and counted (incomplete, duplicate). Requests that
carry OpenInference retriever spans wait for their trace to resolve (sources/assemble.py: its root arrives,
in this request or a later one), at most ``hold_s`` while the root is missing, and for the score once it
came; the request carrying the root waits for the score. Held traces are bounded on their own
(``max_traces``, ``max_bytes``), not by ``max_pending``, so a part that completes one is never refused for
them. Everything else is answered at once.

A request answered while a trace it touched is not scored yet (a root before its retriever, a part past
``hold_s``) leaves that trace's spans only here: with a spool they are written to disk first, and a replica
that starts on them sends them on (keeper.py).

Load is refused, after a bounded wait for room (admission.py), before any work is admitted (``Saturated``:
HTTP 429 / RESOURCE_EXHAUSTED with RetryInfo), and so is a transient judge failure (rate limit, timeout,
judge down): the Collector keeps the batch and retries it. A finished item is remembered by (trace id,
span id) in a bounded window, and a re-sent item still running joins the running evaluation: the load
balancer re-sends whole batches.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from faithtrace._config.settings import Settings
from faithtrace.serve.admission import Admission
from faithtrace.serve.apps import Apps
from faithtrace.serve.evaluations import Evaluations, ResourceKey
from faithtrace.serve.fleet import Fleet
from faithtrace.serve.keeper import Keeper
from faithtrace.serve.limits import Counters, Limits, Saturated, Unavailable
from faithtrace.serve.otlp import Found, scan
from faithtrace.serve.spool import Spool
from faithtrace.sources.assemble import INCOMPLETE_NO_ROOT, Assembler, Resolved
from faithtrace.sources.conventions import (
    FAITHTRACE_REMOTE,
    OWN,
    RETRIEVER,
    Convention,
    RagItem,
    self_contained,
    watched_keys,
)


class Receiver:
    def __init__(
        self,
        settings: Settings,
        apps: Apps,
        limits: Limits,
        conventions: tuple[Convention, ...] = (),
        spool: Spool | None = None,
        fleet: Fleet | None = None,
    ) -> None:
        self.settings = settings
        self.limits = limits
        self.apps = apps
        self.conventions = (FAITHTRACE_REMOTE, *conventions)
        self.watched = watched_keys(self.conventions)
        self._markers = [key.encode() for key in self.watched]
        self.counters = Counters()
        self.evaluations = Evaluations(settings, apps, limits, self.counters, self._settled, fleet)
        self.fleet = self.evaluations.fleet
        self.assembler = Assembler(
            settle_s=limits.settle_s,
            max_traces=limits.max_traces,
            max_bytes=limits.max_bytes,
            grace_s=limits.grace_s,
        )
        # Full: a request waits up to 2 x retry_after_s for room, in a line of at most 4 x max_pending items.
        self.admission = Admission(4 * limits.max_pending, 2 * limits.retry_after_s)
        self.closing = False
        self.warm = False  # the judge's one-time start-up is done (readiness waits for it)
        self._waiters: dict[int, asyncio.Future[str]] = {}  # OpenInference traces not resolved yet
        self._trace_resource: dict[int, tuple[ResourceKey, dict[str, Any]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.requests_open = 0
        self.stat_sources: list[Callable[[], dict[str, int]]] = []  # e.g. the Kafka consumer's counters
        self._evaluating: set[int] = set()  # OpenInference traces being scored
        self.keeper = Keeper(
            spool,
            self.counters,
            lambda t: self.assembler.tracks(t) or t in self._evaluating,
            limits.retry_after_s,
        )
        self.keeper.refeed = self._refeed

    def stats(self) -> dict[str, Any]:
        extra: dict[str, Any] = self.fleet.stats()
        for source in self.stat_sources:
            extra.update(source())
        return {
            **asdict(self.counters),
            **extra,
            "pending": self.load(),
            "held_traces": self.assembler.held(),
            "requests_open": self.requests_open,
            "waiting": self.admission.waiting,
            "warm": int(self.warm),
            **self.keeper.stats(),
        }

    async def warm_up(self) -> str | None:
        """The judge's one-time start-up (litellm's import takes seconds; the embedded judge starts its
        server), done before the replica reports ready instead of inside its first request: the load balancer
        sends one request's traces to its backends one after another, so a replica that starts up inside a
        request stalls every replica that request still has to visit. Returns why the judge is not usable
        (evaluations then retry the start-up), or None."""
        failed = await self.evaluations.scoring.warm_up()
        self.warm = True
        return None if failed is None else f"{failed.type}: {failed.message}"

    def load(self) -> int:
        """Evaluations admitted and not finished. Traces held for their root are not counted: the request
        carrying the root must get in (it needs no room here) however long they wait."""
        return self.evaluations.load()

    # --- one request ---------------------------------------------------------------------------------------
    async def export_raw(
        self,
        body: bytes,
        parse: Callable[[bytes], ExportTraceServiceRequest],
        *,
        whole: bool = False,
        admitted: Callable[[], None] | None = None,
    ) -> None:
        """The cheapest check first: a body in which no watched attribute key occurs (a byte search) holds
        no RAG span, and while no trace is waiting for its root its spans are not looked at one by one. It
        is still decoded (about 1 µs per span), so that malformed input gets its clear error."""
        if self.closing:
            raise Unavailable("shutting down")
        request = parse(body)
        if not self.assembler.pending() and not any(m in body for m in self._markers):
            self.counters.requests += 1
            self.counters.requests_skipped += 1
            self.counters.spans += sum(
                len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans
            )
            if admitted is not None:
                admitted()
            return
        await self.export(request, whole=whole, admitted=admitted)

    async def export(
        self,
        request: ExportTraceServiceRequest,
        *,
        whole: bool = False,
        admitted: Callable[[], None] | None = None,
    ) -> None:
        """Score what ``request`` carries; return once it may be acknowledged, else raise Saturated or
        Unavailable. ``whole``: wait for every trace it touched in full, however long its root takes (a
        Kafka message is committed only then: its spans are not kept anywhere else). ``admitted`` is called
        once the request's spans are in the assembler: a Kafka partition feeds its next message only then,
        so that a trace's parts are assembled in the order they were written."""
        if self.closing:
            raise Unavailable("shutting down")
        self.counters.requests += 1
        found = scan(request, self.watched, self.conventions)
        self.counters.spans += found.spans
        if not found.views and not found.roots:
            if admitted is not None:
                admitted()
            return
        loop = asyncio.get_running_loop()
        own, oi = self._split(found)
        fresh = [i for _, i in own if not self.evaluations.known((i.trace_id, i.span_id))]
        new_traces = {
            v.trace_id for _, v in oi if v.role == RETRIEVER and not self.assembler.has_retriever(v.trace_id)
        }
        need = len(fresh) + len(new_traces)
        if need and self.apps.health.down():
            # Its results could not be exported now either: judging it would be wasted (the Collector
            # re-sends the request, and it is scored then).
            self.counters.rejected_export_down += 1
            raise Unavailable("the results could not be exported a moment ago")

        def refusal() -> tuple[str, str] | None:
            """Why the request cannot be admitted now (the counter, the message), or None. A new RAG trace
            is an evaluation to come, so it needs room in both bounds; a part that only adds to a held trace
            (its root, say) needs none."""
            if self.load() > 0 and self.load() + need > self.limits.max_pending:
                message = f"{self.load()} evaluations pending (max {self.limits.max_pending})"
                return "rejected_saturated", message
            if new_traces and self.assembler.is_full(len(new_traces)):
                return "rejected_held", self.assembler.full_reason()
            return None

        if need:
            if not await self.admission.wait(lambda: refusal() is None, need):
                counter, message = refusal() or (
                    "rejected_saturated",
                    f"{self.admission.waiting} items already waiting for room",
                )
                setattr(self.counters, counter, getattr(self.counters, counter) + 1)
                raise Saturated(message, self.limits.retry_after_s)
            if self.closing:
                raise Unavailable("shutting down")
        self.requests_open += 1
        try:
            waits, partial = self._admit(own, oi, found.roots, found.resources, loop.time())
            if admitted is not None:
                admitted()
            if partial and whole:
                waits += partial.values()
            elif partial:
                # Traces still missing their root: wait a little for the rest, then let the request go (its
                # spans stay in the assembler). A sender that exports one request at a time (the SDK's batch
                # processor) would otherwise never send the root while this request waits.
                await asyncio.wait(partial.values(), timeout=self.limits.hold_s)
                # A trace whose root came meanwhile is being scored, or waits out its grace (rooted, not
                # whole yet): the request waits for that score, as the root's request does. Acknowledged at
                # --hold, its spans were lost with a replica killed before the score, though the Collector
                # had handed them over.
                waits += [w for t, w in partial.items() if not self._root_missing(t, w)]
            if waits:
                # Shielded: the futures are shared with every request carrying the same items. A request
                # its sender gave up on (a Collector killed or timed out) is cancelled, and gather would
                # cancel them too: a re-sent request that joined them would get CancelledError, which gRPC
                # answers with nothing at all, and its Collector would wait out its send timeout (110 s).
                self.evaluations.answer(await asyncio.gather(*map(asyncio.shield, waits)))
            if not whole:  # a Kafka message is committed only once its traces are whole: nothing to keep
                self.keeper.keep(request, {v.trace_id for _, v in oi} | {t for t, _ in found.roots})
        finally:
            self.requests_open -= 1

    def _split(self, found: Found) -> tuple[list[tuple[ResourceKey, RagItem]], list[tuple[ResourceKey, Any]]]:
        """Self-contained RAG items (scored as they are), and OpenInference views of traces not resolved."""
        own: list[tuple[ResourceKey, RagItem]] = []
        oi = []
        for key, view in found.views:
            if not view.trace_id or not view.span_id:
                self.counters.invalid_ids += 1
            elif view.role == OWN:
                convention = next(c for c in self.conventions if c.marker in view.attrs)
                item = self_contained(view, convention, max_documents=100)
                if item is None:
                    self._incomplete("span")
                else:
                    own.append((key, item))
            elif not self.assembler.was_resolved(view.trace_id):
                oi.append((key, view))
        return own, oi

    def _admit(
        self,
        own: list[tuple[ResourceKey, RagItem]],
        oi: list[tuple[ResourceKey, Any]],
        roots: list[tuple[int, int]],
        resources: dict[ResourceKey, dict[str, Any]],
        now: float,
    ) -> tuple[list[asyncio.Future[str]], dict[int, asyncio.Future[str]]]:
        """Feed the assembler and start the scoring; returns what the request waits for: in full, and for
        at most ``hold_s`` by trace id (traces not whole yet)."""
        resolved: list[Resolved] = []
        for key, view in oi:
            self._trace_resource.setdefault(view.trace_id, (key, resources[key]))
            resolved += self.assembler.add(view, now)
        for trace_id, span_id in roots:
            self.assembler.root_seen(trace_id, span_id)
        # A request that brings a held trace's root (an OpenInference span or not) waits for its score too.
        # (A root that comes before any retriever of its trace is answered at once: most such roots are chat
        # traces', and waiting for a retriever that never comes cost a chat flood 50 % more time.)
        touched = {v.trace_id for _, v in oi} | {trace_id for trace_id, _ in roots}
        waiting: dict[int, asyncio.Future[str]] = {}
        for trace_id in touched:
            if self.assembler.has_retriever(trace_id):
                waiter = self._waiters.get(trace_id)
                if waiter is None:
                    waiter = self._waiters[trace_id] = asyncio.get_running_loop().create_future()
                waiting[trace_id] = waiter
        resolved += self.assembler.due(now)
        self._dispatch(resolved)
        # Traces whose root has not come are waited for at most hold_s (see export); a trace whose root is
        # here is waited for in full, so the request carrying the root is acknowledged after its score.
        partial = {t: w for t, w in waiting.items() if self._root_missing(t, w)}
        waits = [w for t, w in waiting.items() if t not in partial]
        for key, item in own:
            waits.append(self.evaluations.start(key, resources[key], item))
        self._arm_timer()
        return waits, partial

    # --- OpenInference traces ------------------------------------------------------------------------------
    def _root_missing(self, trace_id: int, waiter: asyncio.Future[str]) -> bool:
        """The trace still waits for its root: not answered, not rooted, not resolved and being scored."""
        return not waiter.done() and not self.assembler.rooted(trace_id) and not self._scoring(trace_id)

    def _scoring(self, trace_id: int) -> bool:
        """The trace resolved and its waiter is chained to a running evaluation (or already answered)."""
        return self.assembler.was_resolved(trace_id) and trace_id not in self._waiters

    def _dispatch(self, resolved: list[Resolved]) -> None:
        self.counters.evicted_traces = self.assembler.evicted
        self.counters.dropped_not_rag = self.assembler.dropped
        for trace_id, item, reason in resolved:
            waiter = self._waiters.pop(trace_id, None)
            where = self._trace_resource.pop(trace_id, None)
            if item is None or where is None:
                if self.closing and trace_id in self.keeper:
                    # Not incomplete: its spans wait on disk for the next start (``replay``).
                    self.counters.spool_left += 1
                    if waiter is not None and not waiter.done():
                        waiter.set_result("ok")
                    continue
                self.keeper.done(trace_id)
                self._incomplete(reason or INCOMPLETE_NO_ROOT)
                if waiter is not None and not waiter.done():
                    waiter.set_result("ok")
                continue
            future = self.evaluations.start(where[0], where[1], item)
            self._evaluating.add(trace_id)
            if waiter is not None:
                _chain(future, waiter)
        # Traces that left the assembler without a result (not RAG after all, or scored in the app).
        for trace_id in [t for t in self._waiters if not self.assembler.tracks(t)]:
            waiter = self._waiters.pop(trace_id)
            if not waiter.done():
                waiter.set_result("ok")
        self.admission.freed()  # traces that left the waiters made room too

    def _arm_timer(self) -> None:
        # A new deadline may come before the armed one (a rooted trace's grace_s under a missing root's
        # settle_s): the timer is re-armed for the earliest.
        deadline = self.assembler.next_deadline()
        if deadline is None or (self._timer is not None and self._timer.when() <= deadline + 0.01):
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(deadline + 0.01, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        self._dispatch(self.assembler.due(loop.time()))
        for trace_id in [t for t in self._trace_resource if not self.assembler.tracks(t)]:
            del self._trace_resource[trace_id]
        self._arm_timer()

    def _incomplete(self, reason: str) -> None:
        self.counters.incomplete += 1
        name = f"incomplete_{reason}"
        setattr(self.counters, name, getattr(self.counters, name) + 1)

    # --- evaluations (evaluations.py) ---------------------------------------------------------------------
    def _settled(self, item: RagItem, outcome: str) -> None:
        self._evaluating.discard(item.trace_id)
        if outcome != "ok":
            self.assembler.forget(item.trace_id)  # the re-sent spans must assemble it again
            self.keeper.failed(item.trace_id)
        else:
            self.keeper.done(item.trace_id)
        self.admission.freed()

    def _refeed(self, trace_ids: list[int]) -> None:
        """Put spooled spans (keeper.py) back into the assembler, as if they had just come (nobody waits)."""
        loop = asyncio.get_running_loop()
        for trace_id in trace_ids:
            found = scan(self.keeper.load(trace_id), self.watched, self.conventions)
            _, oi = self._split(found)
            self._admit([], oi, found.roots, found.resources, loop.time())

    # --- shutdown ------------------------------------------------------------------------------------------
    async def drain(self, timeout_s: float, replay_endpoint: str | None = None) -> None:
        """Stop taking requests, resolve held traces, finish running evaluations within ``timeout_s``. Held
        traces that are spooled stay on disk; sent to ``replay_endpoint`` if given, within the deadline."""
        self.closing = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # RAG traces first, should the deadline come before the rest (roots that came alone, most of them
        # chat traces').
        first = self.keeper.stop(lambda t: self.assembler.has_retriever(t) or t in self._evaluating)
        self._dispatch(self.assembler.due(loop.time(), closing=True))
        await self.evaluations.drain(timeout_s)
        if self._timer is not None:
            self._timer.cancel()
        if replay_endpoint:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.keeper.replay(replay_endpoint, attempts=3, first=first),
                    max(0.1, deadline - loop.time()),
                )
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.apps.close)


def _chain(source: asyncio.Future[str], target: asyncio.Future[str]) -> None:
    def copy(f: asyncio.Future[str]) -> None:
        if not target.done():
            target.set_result(f.result() if not f.cancelled() else "failed")

    source.add_done_callback(copy)
