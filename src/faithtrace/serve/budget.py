"""The judge budget's pieces that need no store: its limits, an evaluation's expected size, and a window kept
in this process (a replica alone, or its share of the fleet's budget while the store is down).

Tokens and cost are counted in 60 buckets over the window (a sliding window: what leaves it leaves one bucket
at a time); the request rate is a GCRA with a burst of one second's worth. The same rules run in Redis for the
fleet (store.py's scripts): an evaluation is let in only if its expected tokens and cost fit what the window
has left and the request rate's schedule is at most the burst ahead; it then reserves them, and settles the
difference once the judge has said what it spent.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from faithtrace.serve.store import Begun, Window

_BUCKETS = 60
_BURST_MS = 1000.0  # a request may run this far ahead of the rate's schedule: a second's worth of them
_PROMPT_OVERHEAD_TOKENS = 500  # instructions and output around the texts, before any evaluation has settled
_PRIOR_RATIO = 1.5  # the first reservations err on the high side; the settled ones correct them
_ALPHA = 0.2


@dataclass(frozen=True)
class BudgetLimits:
    """What ``faithtrace serve``'s budget options say."""

    tokens_per_hour: int | None = None
    cost_usd_per_hour: float | None = None
    requests_per_minute: float | None = None
    window_s: float = 3600.0
    exhausted: str = "skip"  # skip | wait
    store_down: str = "share"  # share | closed

    @property
    def active(self) -> bool:
        return any(
            x is not None for x in (self.tokens_per_hour, self.cost_usd_per_hour, self.requests_per_minute)
        )

    def window(self) -> Window:
        """The limits per window (the hourly amounts scaled to it), in the scripts' units."""
        scale = self.window_s / 3600.0
        interval = 60_000.0 / self.requests_per_minute if self.requests_per_minute else 0.0
        return Window(
            tokens=self.tokens_per_hour * scale if self.tokens_per_hour is not None else -1.0,
            cost=self.cost_usd_per_hour * scale if self.cost_usd_per_hour is not None else -1.0,
            interval_ms=interval,
            burst_ms=_BURST_MS if interval else 0.0,
            bucket_ms=max(1, round(self.window_s * 1000 / _BUCKETS)),
            buckets=_BUCKETS,
        )


class Estimator:
    """An evaluation's expected tokens, cost and judge requests, learnt from the evaluations settled on this
    replica: tokens per (a quarter of the texts' characters plus the prompt's overhead), cost per token,
    requests per evaluation, each a moving average. Before the first settles: 1.5 times that size, the
    model's dearer per-token price in litellm's map (``price``, once the judge has started), one request."""

    def __init__(self) -> None:
        self.ratio = _PRIOR_RATIO
        self.cost_per_token = 0.0
        self.requests = 1.0
        self.learnt = 0

    def price(self, per_token: float | None) -> None:
        if per_token is not None and not self.learnt:
            self.cost_per_token = per_token

    @staticmethod
    def _base(chars: int) -> float:
        return chars / 4 + _PROMPT_OVERHEAD_TOKENS

    def estimate(self, chars: int) -> tuple[float, float, float]:
        tokens = self.ratio * self._base(chars)
        return tokens, tokens * self.cost_per_token, self.requests

    def learn(self, chars: int, tokens: float, cost: float | None, requests: int) -> None:
        alpha = 1.0 if self.learnt == 0 else _ALPHA
        self.learnt += 1
        self.ratio += alpha * (tokens / self._base(chars) - self.ratio)
        self.requests += alpha * (requests - self.requests)
        if cost is not None and tokens > 0:
            self.cost_per_token += alpha * (cost / tokens - self.cost_per_token)


class LocalWindow:
    """The budget's window in this process, for ``share`` of the limits. ``seed`` (tokens, cost) is spend the
    fleet had already made, counted in the bucket of the window's creation. With ``for_store``, every change
    to this window's own spend is also kept to be handed to the store (``take``), once it answers again."""

    def __init__(
        self,
        window: Window,
        share: float = 1.0,
        seed: tuple[float, float] = (0.0, 0.0),
        *,
        for_store: bool = False,
    ) -> None:
        def scaled(limit: float) -> float:
            return limit * share if limit >= 0 else limit

        self.window = Window(
            tokens=scaled(window.tokens),
            cost=scaled(window.cost),
            interval_ms=window.interval_ms / share if window.interval_ms else 0.0,
            burst_ms=window.burst_ms,
            bucket_ms=window.bucket_ms,
            buckets=window.buckets,
        )
        self.tokens: dict[int, float] = {}
        self.cost: dict[int, float] = {}
        self.tat = 0.0
        self._seed_bucket = self._bucket(_now_ms())
        self._seed = seed
        self._for_store = for_store
        self._unsent: dict[int, list[float]] = {}  # bucket -> [tokens, cost, requests] not handed over yet
        self.handed_at: float | None = None  # when the store last took all of it (monotonic)

    def _bucket(self, now_ms: float) -> int:
        return math.floor(now_ms / self.window.bucket_ms)

    def _spent(
        self, spend: dict[int, float], seed: float, oldest: int
    ) -> tuple[float, list[tuple[int, float]]]:
        for b in [b for b in spend if b < oldest]:
            del spend[b]
        by = sorted(spend.items())
        if seed and self._seed_bucket >= oldest:
            by = sorted([*by, (self._seed_bucket, seed)])
        return sum(v for _, v in by), by

    def _wait_ms(
        self, limit: float, est: float, total: float, by: list[tuple[int, float]], now: float
    ) -> float:
        """-1 if ``est`` fits, else ms until enough of the window's spend has left it."""
        est = min(est, limit)
        if limit < 0 or total + est <= limit:
            return -1.0
        left = total
        for bucket, value in by:
            left -= value
            if left + est <= limit:
                return (bucket + self.window.buckets + 1) * self.window.bucket_ms - now
        return float(self.window.bucket_ms)

    def begin(self, est: tuple[float, float, float]) -> Begun:
        w = self.window
        now = _now_ms()
        bucket = self._bucket(now)
        oldest = bucket - w.buckets  # the current bucket and the n before it (store.py says why)
        tokens, by_tokens = self._spent(self.tokens, self._seed[0], oldest)
        cost, by_cost = self._spent(self.cost, self._seed[1], oldest)
        for reason, wait in (
            ("tokens", self._wait_ms(w.tokens, est[0], tokens, by_tokens, now)),
            ("cost", self._wait_ms(w.cost, est[1], cost, by_cost, now)),
        ):
            if wait >= 0:
                return Begun(granted=False, reason=reason, wait_s=wait / 1000, tokens=tokens, cost=cost)
        if w.interval_ms:
            tat = max(self.tat, now)
            if tat - now > w.burst_ms:
                return Begun(
                    granted=False, reason="requests", wait_s=(tat - now - w.burst_ms) / 1000, tokens=tokens
                )
            self.tat = tat + w.interval_ms * est[2]
        self.tokens[bucket] = self.tokens.get(bucket, 0.0) + est[0]
        self.cost[bucket] = self.cost.get(bucket, 0.0) + est[1]
        self._unsend(bucket, *est)
        return Begun(bucket=bucket, tokens=tokens + est[0], cost=cost + est[1])

    def settle(self, bucket: int, tokens: float, cost: float, requests: float, *, keep: bool = True) -> None:
        """Add the differences between spent and reserved (``keep``: to be handed to the store too)."""
        if bucket in self.tokens:
            self.tokens[bucket] += tokens
            self.cost[bucket] += cost
        if keep:
            self._unsend(bucket, tokens, cost, requests)
        if self.window.interval_ms and requests:
            now = _now_ms()
            self.tat = max(now, max(self.tat, now) + self.window.interval_ms * requests)

    def _unsend(self, bucket: int, tokens: float, cost: float, requests: float) -> None:
        if self._for_store:
            entry = self._unsent.setdefault(bucket, [0.0, 0.0, 0.0])
            entry[0] += tokens
            entry[1] += cost
            entry[2] += requests

    def take(self) -> list[tuple[int, float, float, float]]:
        """What the store has not been handed yet (bucket, tokens, cost, requests), handed over now."""
        unsent, self._unsent = self._unsent, {}
        return [(b, t, c, r) for b, (t, c, r) in sorted(unsent.items())]


def _now_ms() -> float:
    # Wall-clock time, as the store's TIME: a window kept here during an outage lines up with the store's.
    return time.time() * 1000
