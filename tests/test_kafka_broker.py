"""The Kafka broker the Kafka-path tests run against: a real KRaft broker from Maven Central's artifacts, on
loopback, that keeps its data and committed offsets through a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from _kafka_fixtures import kafka_broker

pytestmark = [pytest.mark.backend, pytest.mark.slow, pytest.mark.timeout(300)]


def test_broker_keeps_messages_and_offsets_through_a_restart(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer

    with kafka_broker(tmp_path) as broker:
        broker.create_topic("spans", partitions=2)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce("spans", key=f"trace-{i}".encode(), value=f"m{i}".encode())
        assert producer.flush(30) == 0

        def consume(count: int) -> list[bytes]:
            consumer = Consumer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "group.id": "g",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
            consumer.subscribe(["spans"])
            got: list[bytes] = []
            for _ in range(120):
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
                    if len(got) == count:
                        break
            consumer.commit(asynchronous=False)
            consumer.close()
            return got

        assert sorted(consume(10)) == sorted(f"m{i}".encode() for i in range(10))
        broker.restart()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        producer.produce("spans", key=b"trace-x", value=b"after")
        assert producer.flush(30) == 0
        # Only the message produced after the commit comes back: the offsets survived the restart.
        assert consume(1) == [b"after"]
