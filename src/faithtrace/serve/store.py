"""The store the replicas of one fleet share: Redis, through two Lua scripts that each do in one round trip
what an evaluation needs before and after its judge calls.

``begin``: is this RAG item scored already (by any replica)? If not, and a budget is set, reserve the
evaluation's expected tokens, cost and requests in the fleet's window, atomically, or say which budget is
spent and when it will have room. ``finish``: record the item as scored (``SET NX``: the answer says whether
this replica was the first) and settle the reservation with what the judge really counted.

Every call is bounded (``timeout_s``); a call that fails or times out marks the store down for a back-off
(0.5 s doubling to 8 s), during which calls fail at once without touching the network, and after which one
caller probes it. The caller decides what "down" means (fleet.py); nothing here raises anything but
``StoreDown``.

Keys carry the fleet's name in a hash tag (``faithtrace:{fleet}:...``), so one fleet's keys share a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

# Tokens and cost per bucket of the window: a hash field per bucket, dropped once out of the window. A window
# of n buckets counts the current bucket and the n before it: any stretch of time as long as the window lies
# within those n + 1, so none ever holds more than the limit. The request rate is a GCRA (the theoretical
# arrival time of the next request, in ms): a request may start while that time is at most the burst ahead.
_BEGIN = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {2} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local member_ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[5], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - member_ttl)
redis.call('PEXPIRE', KEYS[5], member_ttl * 2)
local members = redis.call('ZCARD', KEYS[5])
if ARGV[1] == '0' then return {1, '0', '0', members, '0', '0'} end
local bucket_ms, n = tonumber(ARGV[4]), tonumber(ARGV[5])
local bucket = math.floor(now / bucket_ms)
local oldest = bucket - n
local function window(key, limit, est)
  local all = redis.call('HGETALL', key)
  local total, by = 0, {}
  for i = 1, #all, 2 do
    local b, v = tonumber(all[i]), tonumber(all[i + 1])
    if b < oldest then redis.call('HDEL', key, all[i]) else total = total + v; by[#by + 1] = {b, v} end
  end
  if limit < 0 or total + math.min(est, limit) <= limit then return total, -1 end
  table.sort(by, function(x, y) return x[1] < y[1] end)
  local left = total
  for _, e in ipairs(by) do
    left = left - e[2]
    if left + math.min(est, limit) <= limit then return total, (e[1] + n + 1) * bucket_ms - now end
  end
  return total, bucket_ms
end
local est_tok, est_cost = tonumber(ARGV[8]), tonumber(ARGV[9])
local tok, wait_tok = window(KEYS[2], tonumber(ARGV[6]), est_tok)
local cost, wait_cost = window(KEYS[3], tonumber(ARGV[7]), est_cost)
local function no(reason, wait) return {0, reason, tostring(wait), members, tostring(tok), tostring(cost)} end
if wait_tok >= 0 then return no('tokens', wait_tok) end
if wait_cost >= 0 then return no('cost', wait_cost) end
local interval = tonumber(ARGV[10])
if interval > 0 then
  local tat = math.max(tonumber(redis.call('GET', KEYS[4]) or '0'), now)
  local burst = tonumber(ARGV[11])
  if tat - now > burst then return no('requests', tat - now - burst) end
  local next_tat = tat + interval * tonumber(ARGV[12])
  redis.call('SET', KEYS[4], tostring(next_tat), 'PX', math.ceil(next_tat - now) + 1000)
end
local ttl = (n + 2) * bucket_ms
local function charge(key, amount)
  if amount > 0 then redis.call('HINCRBYFLOAT', key, bucket, amount); redis.call('PEXPIRE', key, ttl) end
end
charge(KEYS[2], est_tok)
charge(KEYS[3], est_cost)
return {1, tostring(bucket), '0', members, tostring(tok + est_tok), tostring(cost + est_cost)}
"""

# A settlement adds the difference between what was reserved and what was spent to the reservation's own
# bucket (while it is in the window) and moves the request rate's arrival time by the requests' difference.
_FINISH = """
local first = -1
if ARGV[1] == '1' then
  first = 0
  if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[2]) then first = 1 end
end
if ARGV[3] == '1' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local bucket_ms, n = tonumber(ARGV[9]), tonumber(ARGV[10])
  local bucket = tonumber(ARGV[4])
  if bucket >= math.floor(now / bucket_ms) - n then
    local ttl = (n + 2) * bucket_ms
    if tonumber(ARGV[5]) ~= 0 then
      redis.call('HINCRBYFLOAT', KEYS[2], ARGV[4], ARGV[5]); redis.call('PEXPIRE', KEYS[2], ttl)
    end
    if tonumber(ARGV[6]) ~= 0 then
      redis.call('HINCRBYFLOAT', KEYS[3], ARGV[4], ARGV[6]); redis.call('PEXPIRE', KEYS[3], ttl)
    end
  end
  local interval, d = tonumber(ARGV[7]), tonumber(ARGV[8])
  if interval > 0 and d ~= 0 then
    local tat = math.max(tonumber(redis.call('GET', KEYS[4]) or '0'), now)
    local next_tat = math.max(now, tat + interval * d)
    redis.call('SET', KEYS[4], tostring(next_tat), 'PX', math.ceil(next_tat - now) + 1000)
  end
end
return first
"""

_BACKOFF_FIRST_S = 0.5
_BACKOFF_MAX_S = 8.0
MEMBER_TTL_S = 30.0  # a replica not heard from for this long is no longer counted


class StoreDown(Exception):
    """The store did not answer (in time), or is in its back-off after such a failure."""


@dataclass(frozen=True)
class Window:
    """The budget's shape as the scripts take it: limits per window (-1: none), the request rate's interval
    and burst in ms (0: none), and the window in buckets."""

    tokens: float = -1.0
    cost: float = -1.0
    interval_ms: float = 0.0
    burst_ms: float = 0.0
    bucket_ms: int = 60_000
    buckets: int = 60

    @property
    def active(self) -> bool:
        return self.tokens >= 0 or self.cost >= 0 or self.interval_ms > 0


@dataclass(frozen=True)
class Begun:
    """``begin``'s answer: ``scored`` (by some replica already), else ``granted`` (with the bucket charged) or
    refused for ``reason`` (tokens, cost, requests) until ``wait_s``; the replicas counted; the window's
    spend as it was."""

    scored: bool = False
    granted: bool = True
    bucket: int = 0
    reason: str = ""
    wait_s: float = 0.0
    members: int = 1
    tokens: float = 0.0
    cost: float = 0.0


class RedisStore:
    """One fleet's keys in one Redis. Used from one event loop."""

    def __init__(self, url: str, fleet: str, member: str, *, timeout_s: float = 0.5) -> None:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self.member = member
        self.timeout_s = timeout_s
        # No retries of its own: a call is bounded by timeout_s, and a store that did not answer is left alone
        # for a back-off rather than asked again by every evaluation.
        self._client = aioredis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            health_check_interval=0,
            # Connections open on demand, one per call in flight (evaluations at once, and their exports):
            # the client's default cap of 100 would fail calls past it as if the store were down.
            max_connections=4096,
        )
        prefix = f"faithtrace:{{{fleet}}}"
        self._scored = f"{prefix}:scored:"
        self._budget_keys = [f"{prefix}:tokens", f"{prefix}:cost", f"{prefix}:requests", f"{prefix}:members"]
        self._begin = self._client.register_script(_BEGIN)
        self._finish = self._client.register_script(_FINISH)
        self._down_until = 0.0
        self._backoff = _BACKOFF_FIRST_S
        self._probing = False
        self.calls = 0
        self.errors = 0
        self.call_seconds = 0.0  # time spent waiting for the store, over all calls
        self.down_since: float | None = None

    def scored_key(self, ident: tuple[int, int]) -> str:
        return f"{self._scored}{ident[0]:032x}{ident[1]:016x}"

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def stats(self) -> dict[str, Any]:
        return {
            "store_calls": self.calls,
            "store_errors": self.errors,
            "store_down": int(self.down),
            "store_ms_total": round(1000 * self.call_seconds),
        }

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        now = time.monotonic()
        if now < self._down_until or self._probing:
            raise StoreDown("in back-off after a failure")
        probe = self.down
        self._probing = probe  # after the back-off, one call probes; the others keep failing at once
        started = time.perf_counter()
        self.calls += 1
        try:
            answer = await asyncio.wait_for(script(keys=keys, args=args), self.timeout_s)
        except Exception as exc:  # timeouts, refused connections, any error the client reports
            self._failed()
            raise StoreDown(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.call_seconds += time.perf_counter() - started
            if probe:
                self._probing = False
        self._backoff = _BACKOFF_FIRST_S
        self.down_since = None
        return answer

    def _failed(self) -> None:
        self.errors += 1
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
        self._down_until = now + self._backoff
        self._backoff = min(_BACKOFF_MAX_S, self._backoff * 2)

    def seconds_to_probe(self) -> float:
        return max(0.0, self._down_until - time.monotonic())

    async def begin(
        self, ident: tuple[int, int], window: Window, est: tuple[float, float, float] | None
    ) -> Begun:
        """Check the record for ``ident`` and, with ``est`` (tokens, cost, requests), reserve it."""
        tokens, cost, requests = est or (0.0, 0.0, 0.0)
        args = [
            "1" if est is not None and window.active else "0",
            self.member,
            int(MEMBER_TTL_S * 1000),
            window.bucket_ms,
            window.buckets,
            window.tokens,
            window.cost,
            tokens,
            cost,
            window.interval_ms,
            window.burst_ms,
            requests,
        ]
        answer = await self._call(self._begin, [self.scored_key(ident), *self._budget_keys], args)
        if int(answer[0]) == 2:
            return Begun(scored=True)
        granted = int(answer[0]) == 1
        return Begun(
            granted=granted,
            bucket=int(answer[1]) if granted else 0,
            reason="" if granted else _text(answer[1]),
            wait_s=0.0 if granted else float(answer[2]) / 1000,
            members=max(1, int(answer[3])),
            tokens=float(answer[4]),
            cost=float(answer[5]),
        )

    async def finish(
        self,
        ident: tuple[int, int] | None,
        ttl_s: float,
        window: Window,
        settle: tuple[int, float, float, float] | None,
    ) -> bool | None:
        """Record ``ident`` as scored (True: first to do so, False: another replica was); settle ``(bucket,
        tokens, cost, requests)`` differences. None when nothing was recorded."""
        bucket, tokens, cost, requests = settle or (0, 0.0, 0.0, 0.0)
        key = self.scored_key(ident) if ident is not None else f"{self._scored}-"
        args = [
            "1" if ident is not None else "0",
            max(1, round(ttl_s)),
            "1" if settle is not None else "0",
            bucket,
            tokens,
            cost,
            window.interval_ms,
            requests,
            window.bucket_ms,
            window.buckets,
        ]
        first = int(await self._call(self._finish, [key, *self._budget_keys[:3]], args))
        return None if first < 0 else first == 1

    async def heartbeat(self) -> int:
        """Count this replica in (an idle one would drop out after MEMBER_TTL_S); returns the replicas."""
        answer = await self.begin((0, 0), Window(), None)
        return answer.members

    async def leave(self) -> None:
        """A graceful stop: no longer counted."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.zrem(self._budget_keys[3], self.member), self.timeout_s)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.aclose(), self.timeout_s)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
