"""The receiver's use of its spool (spool.py): which parts to keep when a request is answered before its
traces are scored, when they are done with, and where they go at a start or a stop. Without a spool every
call does nothing, so the receiver never asks whether it has one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from faithtrace.serve.limits import Counters
from faithtrace.serve.spool import Spool

# Levels, not running totals: exported as Prometheus gauges (a counter's rate() over them would be nonsense).
SPOOL_GAUGES = frozenset({"spool_traces", "spool_bytes"})


class Keeper:
    """``needed(trace_id)``: the replica still holds or scores the trace. ``refeed(trace_ids)``: put spooled
    traces back into the replica's assembler (set by the receiver, which owns the assembler)."""

    def __init__(
        self, spool: Spool | None, counters: Counters, needed: Callable[[int], bool], retry_after_s: float
    ) -> None:
        self.spool = spool
        self.counters = counters
        self.needed = needed
        self.retry_after_s = retry_after_s
        self.refeed: Callable[[list[int]], None] = lambda _trace_ids: None
        self.closing = False
        self._sweeper: asyncio.TimerHandle | None = None

    def __contains__(self, trace_id: int) -> bool:
        return self.spool is not None and trace_id in self.spool

    def stats(self) -> dict[str, Any]:
        spool = self.spool
        return {
            "spool_traces": len(spool) if spool is not None else 0,
            "spool_bytes": spool.bytes if spool is not None else 0,
        }

    def load(self, trace_id: int) -> ExportTraceServiceRequest:
        return self.spool.load(trace_id) if self.spool is not None else ExportTraceServiceRequest()

    def keep(self, request: ExportTraceServiceRequest, touched: set[int]) -> None:
        """The request is about to be answered: write its spans of every trace it touched that is not scored
        yet, since the Collector then lets go of them. (A root outside OpenInference that came before any
        span of its trace is remembered by id only, and not kept: every request's roots would be, whenever a
        trace is held.)"""
        if self.spool is None:
            return
        at_risk = {t for t in touched if self.needed(t)}
        if not at_risk:
            return
        kept, full = self.spool.keep_parts(request, at_risk)
        self.counters.spool_kept += kept
        self.counters.spool_full += full
        self.arm()

    def done(self, trace_id: int) -> None:
        """Its results are exported, or it left without an evaluation."""
        if self.spool is not None:
            self.spool.drop(trace_id)

    def failed(self, trace_id: int) -> None:
        """Its evaluation failed. Spans acknowledged earlier are not re-sent by anyone: they join the re-sent
        ones once the client has waited as it was told to (a judge still down then fails them again, no
        sooner)."""
        if trace_id in self and not self.closing:
            asyncio.get_running_loop().call_later(self.retry_after_s, self._refeed, [trace_id])

    def arm(self) -> None:
        if self._sweeper is None and self.spool is not None and len(self.spool) and not self.closing:
            self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)

    def _sweep(self) -> None:
        """Mark done the traces that left without an evaluation (dropped as not RAG, scored in the app): once
        a second while the spool holds any, rather than on every drop."""
        self._sweeper = None
        if self.spool is None or self.closing:
            return
        self.spool.sweep(self.needed)
        self.arm()

    def _refeed(self, trace_ids: list[int]) -> None:
        if self.closing:
            return
        self.refeed(trace_ids)
        self.counters.spool_refed += len(trace_ids)
        self.arm()

    def stop(self, first: Callable[[int], bool]) -> list[int]:
        """The replica is stopping: no more sweeps (what it holds stays on disk). Returns the spooled traces
        for which ``first`` holds, to be sent on before the rest should the deadline come."""
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        return [t for t in self.spool.traces() if first(t)] if self.spool is not None else []

    async def replay(self, endpoint: str | None, attempts: int = 30, first: list[int] | None = None) -> None:
        """The spooled traces found at start (or left at stop): sent to ``endpoint``, the Collector's replay
        receiver, whose load balancer routes each to the replica that owns its trace now (the ring may have
        changed while this one was away); each is done once the Collector took it. Without an endpoint they
        are fed to this replica's own assembler (right with the static resolver, or a single replica)."""
        if self.spool is None or not len(self.spool):
            return
        if not endpoint:
            self._refeed(self.spool.traces())
            return
        from faithtrace.serve.replay import send_spool

        replayed, failed = await send_spool(self.spool, endpoint, attempts, first or [])
        self.counters.spool_replayed += replayed
        self.counters.spool_replay_failed += failed
