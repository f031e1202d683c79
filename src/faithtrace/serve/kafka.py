"""``faithtrace serve --kafka``: a consumer-group member that reads OTLP trace requests from a Kafka topic and
feeds them to the same scorer as the OTLP receivers.

The Collector's Kafka exporter (``partition_traces_by_id``) writes one message per trace (or part of one),
keyed by trace ID, so every part of a trace reaches one partition and so one replica, in order.

Delivery is at least once: a message's offset is committed only after every trace it touched was scored
and its evaluation accepted by the exporter (or counted as skipped: incomplete, malformed, a duplicate).
Offsets are committed per partition up to the first message not finished yet, every ``commit_every_s``
(0.5 s), so a replica killed at any point leaves its unfinished messages (and those finished after the last
commit, ``kafka_uncommitted``: scored twice, unless the fleet shares a record of scored traces) to the
replica that takes its partitions over. A refused message (the scorer is saturated, the judge
is rate-limited, results could not be exported) is retried in place; it holds its partition's commits back,
which is what lag (the scaling signal) should show.

Memory is bounded by pausing: once ``max_buffered`` messages or ``max_buffered_bytes`` are in flight, every
assigned partition is paused (the client stops fetching) until half of that has drained. librdkafka's own
prefetch queue is capped too (``queued.max.messages.kbytes``).

Every call into the client runs on one thread of its own (librdkafka's rebalance callbacks run inside
``consume``); the messages are scored on the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from faithtrace._common import safety
from faithtrace.serve.kafka_partition import Partition
from faithtrace.serve.limits import Saturated, Unavailable
from faithtrace.serve.otlp import BadRequest, parse_protobuf
from faithtrace.serve.receiver import Receiver

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, TopicPartition

_CONSUME_BATCH = 256
_POLL_S = 0.2
_LAG_EVERY_S = 1.0


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str
    topic: str = "otlp_spans"
    group: str = "faithtrace-serve"
    max_buffered: int = 1024  # messages fetched and not finished, across partitions
    max_buffered_bytes: int = 64 << 20
    revoke_timeout_s: float = 20.0  # a partition taken away may finish its messages this long first
    commit_every_s: float = 0.5  # how often finished messages' offsets are committed
    options: Mapping[str, str] = field(default_factory=dict)  # librdkafka settings (security, timeouts)

    def client_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            # Offsets are committed by hand once a message is finished, never by the client on a timer.
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # A group that has committed nothing yet starts at the oldest message: nothing is skipped.
            "auto.offset.reset": "earliest",
            # A rebalance moves only the partitions that change owner; the others keep being scored.
            "partition.assignment.strategy": "cooperative-sticky",
            # A killed replica's partitions move after 10 s (librdkafka's default is 45 s).
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 2_000,
            # librdkafka's prefetch queue per partition, bounded (its default is 64 MiB).
            "queued.max.messages.kbytes": 8192,
            "enable.partition.eof": False,
            "client.id": f"faithtrace-serve-{self.group}",
        }
        config.update(self.options)
        return config


@dataclass
class KafkaCounters:
    kafka_messages: int = 0  # messages fetched
    kafka_bytes: int = 0
    kafka_committed: int = 0  # messages whose offset has been committed
    kafka_redelivered: int = 0  # messages fetched again by this replica (after a rewind or a reassignment)
    kafka_malformed: int = 0  # not an OTLP protobuf trace request: skipped and committed
    kafka_retries: int = 0  # a message refused by the scorer (saturated, judge or exporter down), retried
    kafka_rebalances: int = 0
    kafka_errors: int = 0  # client errors reported by consume (the client reconnects by itself)
    kafka_commit_failures: int = 0


KAFKA_GAUGES = frozenset(
    {
        "kafka_lag",
        "kafka_buffered",
        "kafka_buffered_bytes",
        "kafka_paused",
        "kafka_partitions",
        "kafka_uncommitted",
    }
)


class KafkaSource:
    """Consumes the topic into ``scorer`` until ``stop()``."""

    def __init__(self, scorer: Receiver, settings: KafkaSettings) -> None:
        self.scorer = scorer
        self.settings = settings
        self.counters = KafkaCounters()
        self._consumer: Consumer | None = None
        self._client = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="faithtrace-kafka")
        self._parts: dict[tuple[str, int], Partition] = {}
        # Each message in flight with its partition's tracker: a tracker dropped by a rebalance is not
        # committed through any more, even if the partition comes back.
        self._tasks: dict[asyncio.Task[None], tuple[Partition, int, int]] = {}
        self._highest: dict[tuple[str, int], int] = {}  # highest offset fetched per partition, ever
        self._buffered_bytes = 0
        self._paused = False
        self._stopping = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lag = 0
        self._pending_pause = False  # partitions were assigned while paused: pause them too

    # --- stats ----------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        return {
            **asdict(self.counters),
            "kafka_lag": self._lag,
            "kafka_buffered": len(self._tasks),
            "kafka_buffered_bytes": self._buffered_bytes,
            "kafka_paused": int(self._paused),
            "kafka_partitions": len(self._parts),
            "kafka_uncommitted": sum(part.uncommitted() for part in list(self._parts.values())),
        }

    # --- the client, on its own thread ----------------------------------------------------------------------
    async def _call(self, fn: Any, *args: Any) -> Any:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._client, fn, *args)

    def _open(self) -> Consumer:
        from confluent_kafka import Consumer

        consumer = Consumer({**self.settings.client_config(), "on_commit": self._on_commit})
        consumer.subscribe(
            [self.settings.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        return consumer

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.counters.kafka_rebalances += 1
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._parts.setdefault(key, Partition(key))
        if self._paused and partitions:
            # Newly assigned partitions start fetching; while paused, they wait like the others.
            self._pending_pause = True

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Called inside ``consume`` on the client thread: let the partitions' messages finish (bounded),
        commit what finished, then let them go. What is still running is scored again by the next owner."""
        self.counters.kafka_rebalances += 1
        keys = {(tp.topic, tp.partition) for tp in partitions}
        if self._loop is not None and not self._closed:
            waiting = asyncio.run_coroutine_threadsafe(self._finish(keys), self._loop)
            with contextlib.suppress(Exception):
                waiting.result(self.settings.revoke_timeout_s + 5)
        self._commit_sync(consumer, keys)
        for key in keys:
            self._parts.pop(key, None)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The group went on without us (session timed out): no commit would be accepted.
        self.counters.kafka_rebalances += 1
        for tp in partitions:
            self._parts.pop((tp.topic, tp.partition), None)

    async def _finish(self, keys: set[tuple[str, int]]) -> None:
        parts = {id(self._parts[k]) for k in keys if k in self._parts}
        tasks = [t for t, (part, _, _) in self._tasks.items() if id(part) in parts]
        if tasks:
            await asyncio.wait(tasks, timeout=self.settings.revoke_timeout_s)

    def _committable(self, keys: set[tuple[str, int]] | None = None) -> list[TopicPartition]:
        from confluent_kafka import TopicPartition

        out = []
        for (topic, partition), part in self._parts.items():
            if keys is not None and (topic, partition) not in keys:
                continue
            offset = part.commit_offset()
            if offset is not None:
                out.append(TopicPartition(topic, partition, offset))
        return out

    def _committed(self, offsets: list[TopicPartition]) -> None:
        for tp in offsets:
            part = self._parts.get((tp.topic, tp.partition))
            if part is not None:
                self.counters.kafka_committed += part.confirm(tp.offset)

    def _commit_async(self, consumer: Consumer) -> None:
        """The periodic commit: never blocks the client thread (a synchronous commit waits for the group
        coordinator, however long a broker restart takes); ``_on_commit`` records what the broker took."""
        offsets = self._committable()
        if offsets:
            with contextlib.suppress(Exception):
                consumer.commit(offsets=offsets, asynchronous=True)

    def _on_commit(self, error: Any, partitions: list[TopicPartition]) -> None:
        if error is not None:
            self.counters.kafka_commit_failures += 1
            return
        self._committed([tp for tp in partitions if tp.error is None])

    def _commit_sync(self, consumer: Consumer, keys: set[tuple[str, int]] | None = None) -> None:
        offsets = self._committable(keys)
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as exc:
            # The broker is away or the group is rebalancing: not our failure. The offsets stay pending and
            # are committed with the next ones (or read again by the next owner: at least once).
            self.counters.kafka_commit_failures += 1
            safety.warn_rate_limited("kafka-commit", "faithtrace serve: Kafka commit failed (%s)", exc)
            return
        self._committed(offsets)

    def _lag_now(self, consumer: Consumer) -> int:
        """Messages in the assigned partitions not committed yet: high watermark minus committed offset
        (from the client's cached watermarks: no request to the broker)."""
        from confluent_kafka import TopicPartition

        total = 0
        for (topic, partition), part in list(self._parts.items()):
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            except Exception:
                continue
            if high < 0:
                continue
            if part.committed is not None:
                start = part.committed
            elif part.first is not None:
                # Nothing committed by this replica yet: everything since its first fetch is lag, finished
                # messages included (a replica killed now leaves them to be read again).
                start = part.first
            else:  # nothing committed or fetched by this replica yet: from where it will fetch
                start = consumer.position([TopicPartition(topic, partition)])[0].offset
                if start < 0:
                    continue
            total += max(0, high - start)
        return total

    # --- the loop -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Consume until ``stop()``; never raises for a broker outage (the client reconnects)."""
        self._loop = asyncio.get_running_loop()
        consumer = self._consumer = await self._call(self._open)
        last_commit = last_lag = time.monotonic()
        while not self._stopping:
            await self._flow(consumer)
            # Never more than max_buffered (+1 while full: consume must still run for rebalances).
            room = max(1, min(_CONSUME_BATCH, self.settings.max_buffered - len(self._tasks)))
            messages: list[Message] = await self._call(consumer.consume, room, _POLL_S)
            for message in messages:
                self._take(message)
            now = time.monotonic()
            if now - last_commit >= self.settings.commit_every_s:
                last_commit = now
                await self._call(self._commit_async, consumer)
            if now - last_lag >= _LAG_EVERY_S:
                last_lag = now
                self._lag = await self._call(self._lag_now, consumer)

    def _take(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            self.counters.kafka_errors += 1
            return
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            return
        key = (topic, partition)
        part = self._parts.get(key)
        if part is None:  # fetched just before its partition was taken away: the next owner reads it
            return
        value = message.value() or b""
        self.counters.kafka_messages += 1
        self.counters.kafka_bytes += len(value)
        part.add(offset)
        if offset <= self._highest.get(key, -1):
            self.counters.kafka_redelivered += 1
        self._highest[key] = max(offset, self._highest.get(key, -1))
        self._buffered_bytes += len(value)
        assert self._loop is not None
        # A message is fed to the scorer only once the one before it in its partition is in the assembler:
        # a trace's parts are written in order, and a refused part must not let a later one overtake it
        # (its root would come first and the trace would be taken for one without a retriever).
        previous, mine = part.admitted, self._loop.create_future()
        part.admitted = mine
        task = self._loop.create_task(self._score(value, previous, mine))
        self._tasks[task] = (part, offset, len(value))
        task.add_done_callback(self._finished)

    async def _score(
        self, value: bytes, previous: asyncio.Future[None] | None, mine: asyncio.Future[None]
    ) -> None:
        """Until the scorer takes the message in full: refusals are retried after the delay they ask for."""

        def admitted() -> None:
            if not mine.done():
                mine.set_result(None)

        try:
            if previous is not None:
                await previous
            while True:
                try:
                    await self.scorer.export_raw(value, parse_protobuf, whole=True, admitted=admitted)
                    return
                except BadRequest:
                    self.counters.kafka_malformed += 1
                    self.scorer.counters.bad_requests += 1
                    return
                except Saturated as exc:
                    self.counters.kafka_retries += 1
                    await asyncio.sleep(exc.retry_after_s)
                except Unavailable:
                    if self._stopping or self.scorer.closing:
                        raise
                    self.counters.kafka_retries += 1
                    await asyncio.sleep(1.0)
        finally:
            admitted()

    def _finished(self, task: asyncio.Task[None]) -> None:
        part, offset, size = self._tasks.pop(task)
        self._buffered_bytes -= size
        if task.cancelled() or self._closed:
            return
        error = task.exception()
        if error is not None:
            if not isinstance(error, Unavailable):
                safety.internal_error("scoring a Kafka message", error)
            return  # not finished: never committed, read again by whoever owns the partition next
        if self._parts.get(part.key) is part:
            part.finish(offset)

    async def _flow(self, consumer: Consumer) -> None:
        """Pause every assigned partition while too much is in flight; resume once half has drained."""
        limit, limit_bytes = self.settings.max_buffered, self.settings.max_buffered_bytes
        over = len(self._tasks) >= limit or self._buffered_bytes >= limit_bytes
        under = len(self._tasks) <= limit // 2 and self._buffered_bytes <= limit_bytes // 2
        if (over and not self._paused) or (self._paused and self._pending_pause):
            self._pending_pause = False
            await self._call(lambda: consumer.pause(consumer.assignment()))
            self._paused = True
        elif self._paused and under:
            await self._call(lambda: consumer.resume(consumer.assignment()))
            self._paused = False

    async def stop(self, timeout_s: float) -> None:
        """Stop fetching, give the messages in flight ``timeout_s`` to finish, commit them, leave the group.
        Messages still running then are not committed (the next owner scores them)."""
        self._stopping = True
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)
        consumer = self._consumer
        if consumer is not None:
            await self._call(self._commit_sync, consumer)
            self._closed = True
            with contextlib.suppress(Exception):
                await self._call(consumer.close)
        self._closed = True
        self._client.shutdown(wait=False)
