# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""`faithtrace serve` replicas sharing a real Redis (`--redis`): one judge budget for the fleet, a trace one
replica scored is not judged by another, and a store that freezes or goes away mid-run neither stalls nor
fails them. The judge is the scripted stand-in (through litellm's client and the real parsing path); it
reports usage, and counts what it reported."""

from __future__ import annotations

import argparse
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from _fake_judge import FakeJudge, fake_judge  # noqa: F401
from _redis_fixtures import RedisServer, redis_server
from _serve_fixtures import Serve, Sink, run_serve, run_serves, sink  # noqa: F401
from faithtrace._config.settings import build_settings
from faithtrace.serve.main import _fleet, serve_options
from test_serve import _raw_request

pytestmark = [pytest.mark.backend, pytest.mark.timeout(180)]


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as server:
        yield server


def post(serve: Serve, trace_id: int, span_id: int, timeout: float = 30) -> int:
    req = urllib.request.Request(
        serve.http + "/v1/traces", _raw_request(trace_id, span_id), {"content-type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def replica_dir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    return path


def test_two_replicas_spend_one_budget_and_never_judge_what_the_other_scored(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, redis: RedisServer
) -> None:
    budget = 6_000  # tokens per 60 s window: a handful of this test's evaluations
    env = {
        "FAITHTRACE_SERVE_REDIS": redis.url,
        "FAITHTRACE_SERVE_FLEET": "shop",
        "FAITHTRACE_SERVE_MAX_TOKENS_PER_HOUR": str(budget * 60),
        "FAITHTRACE_SERVE_BUDGET_WINDOW": "60",
    }
    replicas = [(replica_dir(tmp_path, name), (), env) for name in ("a", "b")]
    with run_serves(fake_judge.base_url, sink.port, *replicas) as (a, b):
        banner = f"judge budget {budget * 60} tokens/hour over 60 s windows shared with the fleet in Redis"
        assert banner in a.log.read_text()
        for i in range(
            40
        ):  # one at a time, alternately: every answer is 200 (scored, or skipped and counted)
            assert post(a if i % 2 else b, 100 + i, 1) == 200
        stats = [a.stats(), b.stats()]
        scored = sum(s["scored"] for s in stats)
        skipped = sum(s["budget_skipped"] for s in stats)
        print(
            f"\nbudget {budget} tokens: the judge counted {fake_judge.tokens} over {scored} evaluations "
            f"({skipped} skipped)"
        )
        assert scored + skipped == 40
        assert skipped > 0
        assert scored >= 3
        assert all(s["fleet_members"] == 2 for s in stats), stats
        # Within the budget plus one evaluation per replica (each judge request here is one evaluation).
        assert fake_judge.tokens <= budget + 2 * fake_judge.largest
        assert len(sink.evaluations()) == scored

        # The same RAG spans again, each to the other replica: what was scored is not judged again.
        requests = len(fake_judge.requests)
        for i in range(40):
            assert post(b if i % 2 else a, 100 + i, 1) == 200
        after = [a.stats(), b.stats()]
        assert sum(s["scored_elsewhere"] for s in after) == scored
        assert len(fake_judge.requests) == requests  # nothing judged at all: the skipped ones found no room
        assert len(sink.evaluations()) == scored
    # Skipped evaluations are counted as the app's own budget counts them: sampled_out, reason budget.
    assert sink.metrics is not None
    with sink.metrics.lock:
        budget_points = [
            p
            for p in sink.metrics.points
            if p[1] == "faithtrace.evaluations" and p[2].get("faithtrace.sampling.reason") == "budget"
        ]
    assert budget_points


def test_the_stores_call_bound_comes_from_its_flag_or_variable() -> None:
    def bound(args: dict[str, object], environ: dict[str, str]) -> float:
        cfg = serve_options(argparse.Namespace(redis="redis://127.0.0.1:1/0", **args), environ)
        store = _fleet(cfg, build_settings(), "replica").store  # the client connects on its first call
        assert store is not None
        return store.timeout_s

    assert bound({}, {}) == 0.5
    assert bound({}, {"FAITHTRACE_SERVE_REDIS_TIMEOUT": "2"}) == 2.0
    assert bound({"redis_timeout_s": 5.0}, {"FAITHTRACE_SERVE_REDIS_TIMEOUT": "2"}) == 5.0


def test_a_store_that_freezes_or_goes_away_neither_stalls_nor_fails_a_replica(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, redis: RedisServer
) -> None:
    env = {"FAITHTRACE_SERVE_REDIS": redis.url, "FAITHTRACE_SERVE_MAX_TOKENS_PER_HOUR": "100000000"}
    with run_serve(tmp_path, fake_judge.base_url, sink.port, **env) as serve:
        assert post(serve, 1, 1) == 200

        def burst(first: int, label: str) -> float:
            slowest = 0.0
            for i in range(first, first + 10):
                t0 = time.monotonic()
                assert post(serve, i, 1) == 200, label
                slowest = max(slowest, time.monotonic() - t0)
            return slowest

        healthy = burst(10, "healthy")
        redis.pause()  # SIGSTOP: connections open, nothing answers
        frozen = burst(20, "frozen")
        stats = serve.stats()
        assert stats["store_down"] == 1
        assert stats["store_unchecked"] >= 1
        assert stats["store_errors"] >= 1
        redis.resume()
        redis.stop()  # gone: connections refused
        gone = burst(30, "gone")
        assert serve.stats()["store_down"] == 1
        redis.start()
        deadline = time.monotonic() + 30
        n = 40
        while serve.stats()["store_down"]:
            assert post(serve, n, 1) == 200
            n += 1
            assert time.monotonic() < deadline, "the store came back and the replica never used it again"
            time.sleep(0.2)
        print(f"\nslowest request: healthy {healthy:.3f} s, store frozen {frozen:.3f} s, gone {gone:.3f} s")
        # A frozen store costs a request at most one bounded check (0.25 s) on top of its evaluation.
        assert frozen < healthy + 1.0
        assert gone < healthy + 1.0
        stats = serve.stats()
        assert stats["scored"] == 1 + 30 + (n - 40)  # every RAG span scored, whatever the store did
        assert len(sink.evaluations()) == stats["scored"]
