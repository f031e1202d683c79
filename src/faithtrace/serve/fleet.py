"""What one replica asks of the fleet around each evaluation: whether the item is scored already, and room
in the judge budget before its judge calls (``begin``); the record that it was scored and the budget's
settlement after its export (``finish``).

With a store (``--redis``) both hold for the fleet. The record is checked before judging, so a trace a
killed replica had scored is not judged again by the one that takes its work over; it is written after the
evaluation was exported (a replica killed before that leaves nothing recorded, and the trace is scored again:
at least once), with ``SET NX``, whose answer says whether another replica had exported the same item first:
then this export was a duplicate and its metrics are not counted. Without a store the budget is this
replica's own and there is no fleet record (each replica still remembers what it scored itself).

When the store does not answer (bounded: store.py), nothing stalls or fails: the record is not consulted
(the item is judged: at least once wins; ``store_unchecked``, ``store_unrecorded``), and the budget is, with
``share``, kept here for this replica's share of it (the budget divided by the replicas the store last
counted, starting from the fleet's spend it last reported), or with ``closed`` nothing is judged until it
answers. What was spent meanwhile is added to the store's window once it answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from faithtrace.scoring.models import FaithfulnessResult
from faithtrace.serve.budget import BudgetLimits, Estimator, LocalWindow
from faithtrace.serve.store import Begun, RedisStore, StoreDown

FLEET_GAUGES = frozenset({"store_down", "fleet_members", "budget_window_tokens", "budget_window_cost_usd"})
_RATE_WAIT_S = 2.0  # an evaluation waits at most this long at a time for its turn in the request rate
_RATE_WAIT_TOTAL_S = 10.0  # ... and this long in all, then it is refused as retryable
_MAX_RETRY_AFTER_S = 60.0  # a refused item is looked at again at least this often
_HEARTBEAT_S = 10.0
_MAX_PENDING_SETTLEMENTS = 10_000


@dataclass
class FleetCounters:
    scored_elsewhere: int = 0  # items the store's record says were scored already: not judged
    duplicates_exported: int = 0  # another replica had exported them first: their metrics not counted
    store_unchecked: int = 0  # judged without the record's word: the store did not answer
    store_unrecorded: int = 0  # exported and not recorded: the store did not answer
    store_outages: int = 0
    budget_granted: int = 0  # evaluations let in by the budget
    budget_granted_local: int = 0  # ... from this replica's share while the store was down
    budget_refused_tokens: int = 0
    budget_refused_cost: int = 0
    budget_refused_requests: int = 0
    budget_refused_store_down: int = 0  # budget_store_down=closed
    budget_rate_waits: int = 0  # evaluations that waited their turn in the request rate
    budget_skipped: int = 0  # not scored: the budget was spent (budget_exhausted=skip)
    budget_deferred: int = 0  # refused as retryable: no room yet (budget_exhausted=wait, or the request rate)
    budget_tokens_spent: int = 0  # as the judge counted them, over the settled evaluations
    budget_cost_usd_micros: int = 0


@dataclass
class Reservation:
    est: tuple[float, float, float]
    bucket: int
    chars: int
    local: LocalWindow | None  # where it was made: None for the store


@dataclass
class Ticket:
    """``begin``'s decision: go (judge it), scored (elsewhere: skip, it is done), skip (the budget is spent:
    acknowledge it unscored) or wait (refuse it as retryable for ``retry_after_s``)."""

    kind: Literal["go", "scored", "skip", "wait"]
    reservation: Reservation | None = None
    retry_after_s: float = 0.0


GO = Ticket("go")


class Fleet:
    def __init__(
        self,
        limits: BudgetLimits | None = None,
        store: RedisStore | None = None,
        *,
        scored_ttl_s: float = 3600.0,
    ) -> None:
        self.limits = limits or BudgetLimits()
        self.store = store
        self.scored_ttl_s = scored_ttl_s
        self.window = self.limits.window()
        self.budgeted = self.limits.active
        self.estimator = Estimator()
        self.counters = FleetCounters()
        self._local = LocalWindow(self.window)
        self._outage: LocalWindow | None = None
        self._members = 1
        self._seen = (0.0, 0.0)  # the window's spend (tokens, cost) the store last reported
        self._pending: list[tuple[int, float, float, float]] = []  # settlements the store missed
        self._pushing = 0  # hand-overs to the store in flight
        self._heartbeat: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def active(self) -> bool:
        return self.budgeted or self.store is not None

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self.counters)
        if self.store is not None:
            out.update(self.store.stats(), fleet_members=self._members)
        if self.budgeted:
            out.update(
                budget_window_tokens=round(self._seen[0]), budget_window_cost_usd=round(self._seen[1], 6)
            )
        return out

    def describe(self) -> str:
        """A line for the start-up banner (never the store's URL: it may hold a password)."""
        parts = []
        limits = self.limits
        for value, unit in (
            (limits.tokens_per_hour, "tokens/hour"),
            (limits.cost_usd_per_hour, "USD/hour"),
            (limits.requests_per_minute, "judge requests/minute"),
        ):
            if value is not None:
                parts.append(f"{value:g} {unit}")
        budget = f"judge budget {', '.join(parts)} over {limits.window_s:g} s windows" if parts else ""
        where = "shared with the fleet in Redis" if self.store is not None else "for this replica alone"
        record = "record of scored traces shared in Redis" if self.store is not None else ""
        return "; ".join(p for p in (f"{budget} {where}" if budget else "", record) if p)

    # --- before the judge ---------------------------------------------------------------------------------
    async def begin(self, ident: tuple[int, int], chars: int) -> Ticket:
        if not self.active:
            return GO
        est = self.estimator.estimate(chars) if self.budgeted else None
        waited = 0.0
        while True:
            begun, local = await self._begin_once(ident, est)
            if begun is None:
                self.counters.budget_refused_store_down += 1
                self.counters.budget_deferred += 1
                assert self.store is not None
                return Ticket("wait", retry_after_s=max(1.0, self.store.seconds_to_probe()))
            if begun.scored:
                self.counters.scored_elsewhere += 1
                return Ticket("scored")
            if begun.granted:
                if est is None:
                    return GO
                self.counters.budget_granted += 1
                if local is not None and local is self._outage:
                    self.counters.budget_granted_local += 1
                return Ticket("go", Reservation(est, begun.bucket, chars, local))
            name = f"budget_refused_{begun.reason}"
            setattr(self.counters, name, getattr(self.counters, name) + 1)
            if begun.reason == "requests" and begun.wait_s <= _RATE_WAIT_S and waited < _RATE_WAIT_TOTAL_S:
                self.counters.budget_rate_waits += 1
                await asyncio.sleep(begun.wait_s)
                waited += begun.wait_s
                continue
            if begun.reason == "requests" or self.limits.exhausted == "wait":
                self.counters.budget_deferred += 1
                return Ticket("wait", retry_after_s=min(_MAX_RETRY_AFTER_S, max(0.5, begun.wait_s)))
            self.counters.budget_skipped += 1
            return Ticket("skip")

    async def _begin_once(
        self, ident: tuple[int, int], est: tuple[float, float, float] | None
    ) -> tuple[Begun | None, LocalWindow | None]:
        """The store's answer; this replica's window's (without a store, or its share while the store is
        down); None: the store is down and the budget closed."""
        if self.store is None:
            if est is None:
                return Begun(), self._local
            begun = self._local.begin(est)
            self._seen = (begun.tokens, begun.cost)
            return begun, self._local
        asked = time.monotonic()
        try:
            begun = await self.store.begin(ident, self.window, est)
        except StoreDown:
            self.counters.store_unchecked += 1
            if est is None:
                return Begun(), None
            if self.limits.store_down == "closed":
                return None, None
            outage = self._outage_window()
            return outage.begin(est), outage
        self._members = begun.members
        if self.budgeted and not begun.scored:
            self._seen = (begun.tokens, begun.cost)
        self._hand_over(asked)
        return begun, None

    def _outage_window(self) -> LocalWindow:
        """This replica's share, for as long as the store is down, and after that until the store has taken
        all that was spent in it and answered again (so that a store that comes and goes never gives a new
        share on top of spend it has not counted)."""
        if self._outage is None:
            share = 1.0 / max(1, self._members)
            seed = (self._seen[0] * share, self._seen[1] * share)
            self._outage = LocalWindow(self.window, share, seed, for_store=True)
            self.counters.store_outages += 1
        return self._outage

    def _hand_over(self, asked: float) -> None:
        """The store answered a call made at ``asked``: hand it what it missed, in the buckets it was spent
        in; let the outage window go once all of it was handed over before that call."""
        outage = self._outage
        settlements = self._pending + (outage.take() if outage is not None else [])
        self._pending = []
        if settlements:
            if outage is not None:
                outage.handed_at = None
            self._spawn(self._push(settlements, outage))
        elif (
            outage is not None
            and not self._pushing
            and outage.handed_at is not None
            and asked > outage.handed_at
        ):
            self._outage = None

    async def _push(
        self, settlements: list[tuple[int, float, float, float]], outage: LocalWindow | None
    ) -> None:
        assert self.store is not None
        self._pushing += 1
        try:
            for i, settlement in enumerate(settlements):
                try:
                    await self.store.finish(None, self.scored_ttl_s, self.window, settlement)
                except StoreDown:
                    self._keep(settlements[i:])
                    return
            if outage is not None:
                outage.handed_at = time.monotonic()
        finally:
            self._pushing -= 1

    def _keep(self, settlements: list[tuple[int, float, float, float]]) -> None:
        self._pending = (self._pending + settlements)[-_MAX_PENDING_SETTLEMENTS:]

    # --- after the judge ----------------------------------------------------------------------------------
    async def finish(
        self, ticket: Ticket, ident: tuple[int, int], result: FaithfulnessResult | None, exported: bool
    ) -> bool | None:
        """Settle the reservation with ``result``'s spend (None: unknown, the reservation stands) and, once
        ``exported``, record the item. True: this replica recorded it first; False: another replica had (this
        export was a duplicate); None: nothing recorded (no store, or it did not answer)."""
        settle = self._settlement(ticket.reservation, result)
        if self.store is None or (not exported and settle is None):
            return None
        asked = time.monotonic()
        try:
            first = await self.store.finish(
                ident if exported else None, self.scored_ttl_s, self.window, settle
            )
        except StoreDown:
            if exported:
                self.counters.store_unrecorded += 1
            if settle is not None:
                self._keep([settle])
            return None
        self._hand_over(asked)
        if first is False:
            self.counters.duplicates_exported += 1
        return first

    def _settlement(
        self, reservation: Reservation | None, result: FaithfulnessResult | None
    ) -> tuple[int, float, float, float] | None:
        """The differences (bucket, tokens, cost, requests) the store still has to add; the ones of a
        reservation made here are added here."""
        if (
            reservation is None
            or result is None
            or (result.error is not None and result.error.type == "timeout")
        ):
            return None  # a timed-out evaluation's calls are not known: what was reserved stays charged
        calls = result.calls
        tokens = sum((c.input_tokens or 0) + (c.output_tokens or 0) for c in calls)
        costs = [c.cost_usd for c in calls if c.error_type is None]
        cost = sum(c for c in costs if c is not None) if costs and None not in costs else None
        self.counters.budget_tokens_spent += tokens
        self.counters.budget_cost_usd_micros += round((cost or 0.0) * 1e6)
        if calls:
            self.estimator.learn(reservation.chars, tokens, cost, len(calls))
        est_tokens, est_cost, est_requests = reservation.est
        diff = (reservation.bucket, tokens - est_tokens, (cost or 0.0) - est_cost, len(calls) - est_requests)
        local = reservation.local
        if local is None:
            return diff
        # A reservation of the outage window still in use is handed over with it; one of a window let go
        # goes straight to the store; without a store there is nobody to tell.
        current = local is self._outage or self.store is None
        local.settle(*diff, keep=current)
        return None if current else diff

    # --- the replica's life -------------------------------------------------------------------------------
    def start(self) -> None:
        if self.store is not None and self._heartbeat is None:
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        """Keeps this replica counted while idle (the share each takes while the store is down), and probes
        a store that went down."""
        assert self.store is not None
        while True:
            asked = time.monotonic()
            with contextlib.suppress(StoreDown):
                self._members = await self.store.heartbeat()
                self._hand_over(asked)
            await asyncio.sleep(_HEARTBEAT_S)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """A graceful stop: leave the fleet's count, close the connection."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        if self.store is not None:
            await self.store.leave()
            await self.store.close()
