"""The fleet's judge budget and record of scored traces (serve/fleet.py, budget.py, store.py), against a real
Redis: replicas are `Fleet` objects, each with its own connection, as `faithtrace serve` processes hold them.
What an evaluation spent is handed over as the judge's records of its calls (`LLMCall`), as the pipeline
reports them."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _redis_fixtures import RedisServer, redis_server
from faithtrace.judge import LLMCall
from faithtrace.scoring.models import FaithfulnessResult, Outcome
from faithtrace.serve.budget import BudgetLimits, LocalWindow
from faithtrace.serve.fleet import Fleet, Ticket
from faithtrace.serve.store import RedisStore, StoreDown, Window

pytestmark = [pytest.mark.backend, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def fleet_name() -> str:
    return f"test-{time.monotonic_ns()}"


def spent(tokens: int, requests: int = 1, cost: float | None = None) -> FaithfulnessResult:
    """An evaluation's result as the pipeline reports its spend: one record per judge request."""
    if tokens == 0:
        return FaithfulnessResult(outcome=Outcome.SCORED, threshold=0.5)
    calls = [
        LLMCall(
            step="verdicts",
            model="judge",
            start_time_ns=time.time_ns(),
            duration_s=0.01,
            input_tokens=tokens // requests - 10,
            output_tokens=10,
            cost_usd=None if cost is None else cost / requests,
        )
        for _ in range(requests)
    ]
    return FaithfulnessResult(outcome=Outcome.SCORED, threshold=0.5, calls=calls)


def replica(url: str, fleet: str, name: str, limits: BudgetLimits, **kwargs: float) -> Fleet:
    return Fleet(limits, RedisStore(url, fleet, name, **kwargs))


WINDOW = Window(tokens=1000, bucket_ms=1000, buckets=60)


@pytest.mark.parametrize("where", ["replica alone", "redis"])
async def test_the_store_and_a_replica_alone_apply_the_same_rules(
    where: str, redis: RedisServer, fleet_name: str
) -> None:
    local = LocalWindow(WINDOW)
    store = RedisStore(redis.url, fleet_name, "r0")

    async def begin(est: tuple[float, float, float], n: int) -> object:
        if where == "redis":
            return await store.begin((1, n), WINDOW, est)
        return local.begin(est)

    async def settle(bucket: int, tokens: float) -> None:
        if where == "redis":
            await store.finish(None, 60, WINDOW, (bucket, tokens, 0.0, 0.0))
        else:
            local.settle(bucket, tokens, 0.0, 0.0)

    granted = [await begin((300.0, 0.0, 1.0), i) for i in range(3)]
    assert all(g.granted for g in granted)  # type: ignore[attr-defined]
    refused = await begin((300.0, 0.0, 1.0), 3)
    assert not refused.granted
    assert refused.reason == "tokens"
    # Room comes back when the first reservation's bucket leaves the window: the current bucket and 60 before.
    assert 59.0 < refused.wait_s <= 61.0  # type: ignore[attr-defined]
    assert refused.tokens == pytest.approx(900.0)  # type: ignore[attr-defined]
    # The first evaluation spent 100 tokens, not the 300 it reserved: the difference is free again.
    await settle(granted[0].bucket, -200.0)  # type: ignore[attr-defined]
    again = await begin((300.0, 0.0, 1.0), 4)
    assert again.granted
    assert again.tokens == pytest.approx(1000.0)
    # An evaluation larger than the whole budget runs only once the window is empty, never beside others.
    assert not (await begin((5000.0, 0.0, 1.0), 5)).granted  # type: ignore[attr-defined]
    await store.close()


async def test_the_request_rate_is_a_schedule_with_one_seconds_burst(
    redis: RedisServer, fleet_name: str
) -> None:
    window = BudgetLimits(requests_per_minute=600, window_s=60).window()  # 10 requests a second
    store = RedisStore(redis.url, fleet_name, "r0")
    granted = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.0:
        answer = await store.begin((2, granted), window, (0.0, 0.0, 1.0))
        if answer.granted:
            granted += 1
        else:
            assert answer.reason == "requests"
            assert 0 < answer.wait_s <= 0.1
            await asyncio.sleep(answer.wait_s)
    # 1 s at 10/s, plus the burst of a second's worth: 20 at most (and the schedule lets them all through).
    assert 18 <= granted <= 22, granted
    await store.close()


async def test_replicas_that_come_and_go_spend_within_the_budget_and_one_evaluation_each(
    redis: RedisServer, fleet_name: str
) -> None:
    """Four replicas and then some, two evaluations at a time each, judges whose spend differs from every
    estimate by up to 30 %; one replica killed mid-run (its reservations stay charged), two added."""
    budget = 40_000  # tokens in the (60 s) window: the test runs well inside one
    limits = BudgetLimits(tokens_per_hour=budget * 60, window_s=60)
    rng = random.Random(7)
    actual: list[int] = []
    largest = 0
    replicas = [replica(redis.url, fleet_name, f"r{i}", limits) for i in range(4)]

    async def evaluate(fleet: Fleet, ident: tuple[int, int]) -> None:
        nonlocal largest
        ticket = await fleet.begin(ident, chars=rng.randrange(2_000, 8_000))
        if ticket.kind != "go":
            assert ticket.kind == "skip"
            return
        assert ticket.reservation is not None
        tokens = round(ticket.reservation.est[0] * rng.uniform(0.7, 1.3))
        await asyncio.sleep(0.005)
        actual.append(tokens)
        largest = max(largest, tokens)
        await fleet.finish(ticket, ident, spent(tokens), exported=True)

    async def run(fleet: Fleet, index: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            n += 2
            await asyncio.gather(evaluate(fleet, (index, n)), evaluate(fleet, (index, n + 1)))
            await asyncio.sleep(0.001)

    first = [asyncio.create_task(run(f, i, 1.5)) for i, f in enumerate(replicas)]
    await asyncio.sleep(0.4)
    first[3].cancel()  # killed: what it reserved is never settled
    joined = [replica(redis.url, fleet_name, f"r{i}", limits) for i in (4, 5)]
    later = [asyncio.create_task(run(f, i + 4, 1.0)) for i, f in enumerate(joined)]
    await asyncio.gather(*first[:3], *later)
    total = sum(actual)
    stats = [f.stats() for f in replicas + joined]
    print(f"\nspent {total} of {budget} tokens; largest evaluation {largest}; {len(actual)} evaluations")
    assert sum(s["budget_skipped"] for s in stats) > 0, "the budget was never reached: the test tests nothing"
    # Within the budget plus one evaluation's worth per replica that ever ran (6).
    assert total <= budget + 6 * largest, (total, budget, largest)
    assert total >= 0.6 * budget  # and the budget is spent, not wasted on over-reservations
    for f in replicas + joined:
        await f.stop()


async def test_an_item_one_replica_scored_is_not_judged_by_another_and_a_second_export_is_known(
    redis: RedisServer, fleet_name: str
) -> None:
    a = replica(redis.url, fleet_name, "a", BudgetLimits())
    b = replica(redis.url, fleet_name, "b", BudgetLimits())
    ident = (0xABC, 0xDEF)
    ticket_a, ticket_b = await a.begin(ident, 100), await b.begin(ident, 100)
    assert (ticket_a.kind, ticket_b.kind) == ("go", "go")  # both judging it at once: neither knows yet
    assert await a.finish(ticket_a, ident, spent(100), exported=True) is True
    assert await b.finish(ticket_b, ident, spent(100), exported=True) is False  # its metrics are not counted
    assert b.stats()["duplicates_exported"] == 1
    # From now on any replica finds it scored before judging.
    assert (await b.begin(ident, 100)).kind == "scored"
    assert b.stats()["scored_elsewhere"] == 1
    # An export that failed records nothing: the re-sent item is judged again.
    other = (0xABC, 0x123)
    ticket = await a.begin(other, 100)
    assert await a.finish(ticket, other, spent(100), exported=False) is None
    assert (await b.begin(other, 100)).kind == "go"
    await a.stop()
    await b.stop()


async def _timed(fleet: Fleet, ident: tuple[int, int]) -> tuple[Ticket, float]:
    t0 = time.perf_counter()
    ticket = await fleet.begin(ident, 4000)
    return ticket, time.perf_counter() - t0


async def test_a_frozen_store_costs_each_check_a_bounded_wait_then_none(
    tmp_path: Path, fleet_name: str
) -> None:
    with redis_server(tmp_path / "redis") as server:
        limits = BudgetLimits(tokens_per_hour=10**9)
        fleet = replica(server.url, fleet_name, "r0", limits, timeout_s=0.25)
        assert (await fleet.begin((5, 1), 4000)).kind == "go"
        server.pause()  # SIGSTOP: the connection stays open, nothing answers
        ticket, took = await _timed(fleet, (5, 2))
        assert ticket.kind == "go"
        assert took < 0.4, took  # the timeout, then this replica's share
        assert fleet.stats()["store_down"] == 1
        # In the back-off, checks do not touch the network at all.
        ticks = [await _timed(fleet, (5, 3 + i)) for i in range(20)]
        assert max(t for _, t in ticks) < 0.02
        assert all(t.kind == "go" for t, _ in ticks)
        stats = fleet.stats()
        assert stats["store_unchecked"] == 21
        assert stats["budget_granted_local"] == 21
        server.resume()
        deadline = time.monotonic() + 20  # the back-off doubles from 0.5 s: the next probe finds it
        while (await fleet.begin((5, 100), 4000)).kind == "go" and fleet.stats()["store_down"]:
            assert time.monotonic() < deadline, "the store answered again and the replica never noticed"
            await asyncio.sleep(0.1)
        await fleet.stop()


async def test_while_the_store_is_down_each_replica_keeps_to_its_share_and_it_is_handed_over_after(
    tmp_path: Path, fleet_name: str
) -> None:
    budget = 10_000
    limits = BudgetLimits(tokens_per_hour=budget * 60, window_s=60)
    with redis_server(tmp_path / "redis") as server:
        replicas = [replica(server.url, fleet_name, f"r{i}", limits) for i in range(4)]
        for i in range(8):  # twice round: every replica has seen all four, so the share is a quarter
            f = replicas[i % 4]
            ticket = await f.begin((6, i), 1000)
            await f.finish(ticket, (6, i), spent(500), exported=True)
        server.stop()  # the store goes away mid-run (the connection is refused)
        spend = 0
        for i in range(200):
            f = replicas[i % 4]
            ticket, took = await _timed(f, (7, i))
            assert took < 0.4, took
            if ticket.kind == "go":
                await f.finish(ticket, (7, i), spent(500), exported=True)
                spend += 500
        # Each kept to a quarter of the budget less a quarter of the fleet's spend it last saw (at most the
        # 4,000 spent before), give or take one evaluation each.
        assert 4_000 + spend <= budget + 4 * 500, spend
        assert sum(f.stats()["budget_skipped"] for f in replicas) > 0
        assert all(f.stats()["store_unrecorded"] > 0 for f in replicas)
        server.start()  # a new, empty Redis on the same port
        for n, f in enumerate(replicas):
            deadline = time.monotonic() + 20
            while f.stats().get("store_down"):
                ticket = await f.begin((8, n), 1000)  # a probe that then spends nothing
                if ticket.kind == "go":
                    await f.finish(ticket, (8, n), spent(0), exported=False)
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
        check = RedisStore(server.url, fleet_name, "check")
        window = limits.window()
        # What the replicas spent while it was away is handed over in the background, into its window (what
        # came before went with it).
        deadline = time.monotonic() + 10
        while (answer := await check.begin((9, 9), window, (0.0, 0.0, 0.0))).tokens < 0.95 * spend:
            assert time.monotonic() < deadline, (answer.tokens, spend)
            await asyncio.sleep(0.1)
        assert answer.tokens == pytest.approx(spend, rel=0.05), (answer.tokens, spend)
        await check.close()
        for f in replicas:
            await f.stop()


async def test_closed_refuses_as_retryable_while_the_store_is_down(tmp_path: Path, fleet_name: str) -> None:
    with redis_server(tmp_path / "redis") as server:
        fleet = replica(
            server.url, fleet_name, "r0", BudgetLimits(tokens_per_hour=10**6, store_down="closed")
        )
        assert (await fleet.begin((1, 1), 100)).kind == "go"
        server.stop()
        ticket, took = await _timed(fleet, (1, 2))
        assert ticket.kind == "wait"
        assert ticket.retry_after_s >= 0.5
        assert took < 0.4
        assert fleet.stats()["budget_refused_store_down"] == 1
        await fleet.stop()


async def test_a_spent_budget_skips_or_defers_as_configured_and_the_rate_makes_evaluations_wait(
    redis: RedisServer, fleet_name: str
) -> None:
    skip = replica(redis.url, fleet_name + "-s", "r0", BudgetLimits(tokens_per_hour=60_000, window_s=60))
    wait = replica(
        redis.url,
        fleet_name + "-w",
        "r0",
        BudgetLimits(tokens_per_hour=60_000, window_s=60, exhausted="wait"),
    )
    for fleet in (skip, wait):
        first = await fleet.begin((1, 1), 1000)  # 1.5 x (250 + 500) tokens of the 1,000 in the window
        assert first.kind == "go"
    assert (await skip.begin((1, 2), 1000)).kind == "skip"
    deferred = await wait.begin((1, 2), 1000)
    assert deferred.kind == "wait"
    assert 1 <= deferred.retry_after_s <= 60
    rate = replica(redis.url, fleet_name + "-r", "r0", BudgetLimits(requests_per_minute=120))  # 2 a second
    t0 = time.monotonic()
    kinds = [(await rate.begin((2, i), 100)).kind for i in range(6)]
    assert kinds == ["go"] * 6  # they waited their turn instead of being skipped
    assert time.monotonic() - t0 >= 1.0
    assert rate.stats()["budget_rate_waits"] >= 2
    for fleet in (skip, wait, rate):
        await fleet.stop()


def test_a_store_down_before_it_was_ever_reached_is_down_at_once(fleet_name: str) -> None:
    """No Redis at that address at all: the first check fails within the timeout and nothing raises."""

    async def go() -> None:
        store = RedisStore("redis://127.0.0.1:1/0", fleet_name, "r0", timeout_s=0.25)
        t0 = time.perf_counter()
        with pytest.raises(StoreDown):
            await store.begin((1, 1), WINDOW, (1.0, 0.0, 1.0))
        assert time.perf_counter() - t0 < 0.4
        assert store.down
        await store.close()

    asyncio.run(go())
