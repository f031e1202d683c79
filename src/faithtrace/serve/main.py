"""``faithtrace serve``: both receivers on one event loop, and a graceful stop on SIGTERM/SIGINT.

On a signal: readiness turns false, new requests are refused as retryable (UNAVAILABLE / 503, not load),
held traces are resolved, running evaluations get ``--shutdown-timeout`` seconds, then what is left is
cancelled (its requests are not acknowledged, so the Collector re-sends them to another replica).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faithtrace._common.errors import ConfigError
from faithtrace._config.judge_settings import JudgeSettings
from faithtrace._config.settings import build_settings
from faithtrace.sources.spans import Convention

if TYPE_CHECKING:
    from faithtrace.serve.kafka import KafkaSettings

logger = logging.getLogger("faithtrace")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--grpc-port", type=int, default=4317, help="OTLP/gRPC port (default 4317; 0 picks one)")
    p.add_argument("--http-port", type=int, default=4318, help="OTLP/HTTP port (default 4318; 0 picks one)")
    p.add_argument(
        "--concurrency", type=int, help="evaluations at once (default FAITHTRACE_CONCURRENCY or 4)"
    )
    p.add_argument("--max-pending", type=int, help="RAG items admitted before 429 (default 8 x concurrency)")
    p.add_argument(
        "--settle",
        type=float,
        default=30.0,
        help="seconds a RAG trace waits for its root after its last span, then counted incomplete (30)",
    )
    p.add_argument("--hold", type=float, default=0.5, help="seconds a request with part of a trace waits")
    p.add_argument(
        "--max-traces", type=int, default=10_000, help="RAG traces held for their root at most (10000)"
    )
    p.add_argument(
        "--max-trace-bytes", type=int, default=64 << 20, help="bytes those RAG traces hold at most"
    )
    p.add_argument("--max-request-bytes", type=int, default=16 << 20, help="largest request accepted")
    p.add_argument("--retry-after", type=float, default=2.0, help="seconds a refused client should wait")
    p.add_argument("--shutdown-timeout", type=float, default=30.0, help="seconds to finish work on SIGTERM")
    p.add_argument("--mapping", type=Path, help="JSON list of extra span conventions (see docs/fleet.md)")
    p.add_argument("--instance-id", help="this replica's id on exported metrics (default host-pid)")
    p.add_argument("--ready-file", type=Path, help="write the bound ports here as JSON once serving")
    kafka = p.add_argument_group("Kafka", "read OTLP traces from a Kafka topic as one consumer group member")
    kafka.add_argument("--kafka", metavar="BOOTSTRAP", help="Kafka bootstrap servers (host:port,...)")
    kafka.add_argument("--kafka-topic", default="otlp_spans", help="topic the Collector writes (otlp_spans)")
    kafka.add_argument("--kafka-group", default="faithtrace-serve", help="consumer group of the replicas")
    kafka.add_argument(
        "--kafka-max-buffered", type=int, default=1024, help="messages in flight before pausing (1024)"
    )
    kafka.add_argument(
        "--kafka-max-buffered-bytes", type=int, default=64 << 20, help="bytes in flight before pausing"
    )
    kafka.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka consumer setting (security.protocol, sasl.*, session.timeout.ms); repeatable",
    )


def _conventions(path: Path | None) -> tuple[Convention, ...]:
    if path is None:
        return ()
    try:
        raw = json.loads(path.read_text())
        return tuple(Convention.model_validate(c) for c in raw)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--mapping {path}: {exc}") from exc


def _kafka_settings(args: argparse.Namespace) -> KafkaSettings | None:
    if not args.kafka:
        return None
    from faithtrace.serve.kafka import KafkaSettings

    options: dict[str, str] = {}
    for item in args.kafka_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--kafka-option {item!r}: expected KEY=VALUE")
        options[key.strip()] = value
    if args.kafka_max_buffered < 1 or args.kafka_max_buffered_bytes < 1:
        raise ConfigError("--kafka-max-buffered and --kafka-max-buffered-bytes must be positive")
    return KafkaSettings(
        bootstrap=args.kafka,
        topic=args.kafka_topic,
        group=args.kafka_group,
        max_buffered=args.kafka_max_buffered,
        max_buffered_bytes=args.kafka_max_buffered_bytes,
        options=options,
    )


class _Quiet:
    """uvicorn without its own signal handling (ours drains the scorer first)."""

    @staticmethod
    @contextlib.contextmanager
    def capture_signals() -> Iterator[None]:
        yield


async def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from faithtrace.serve import grpc_server
    from faithtrace.serve.apps import Apps
    from faithtrace.serve.http_app import OtlpHttpApp
    from faithtrace.serve.limits import Limits
    from faithtrace.serve.scorer import Scorer

    # Evaluations at once = the judge's max_concurrency (FAITHTRACE_JUDGE_CONCURRENCY); --concurrency sets it.
    judge = JudgeSettings(max_concurrency=args.concurrency) if args.concurrency else None
    settings = build_settings(judge=judge)
    concurrency = settings.concurrency
    limits = Limits(
        concurrency=concurrency,
        max_pending=args.max_pending or 8 * concurrency,
        settle_s=args.settle,
        hold_s=args.hold,
        max_traces=args.max_traces,
        max_bytes=args.max_trace_bytes,
        retry_after_s=args.retry_after,
    )
    kafka_settings = _kafka_settings(args)
    if kafka_settings is not None:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            raise ConfigError(
                "faithtrace serve --kafka needs its extra: pip install 'faithtrace[kafka]'"
            ) from None
    instance = args.instance_id or f"{socket.gethostname()}-{os.getpid()}"
    scorer = Scorer(settings, Apps(instance_id=instance), limits, _conventions(args.mapping))

    grpc, grpc_port = await grpc_server.start(scorer, args.host, args.grpc_port, args.max_request_bytes)
    config = uvicorn.Config(
        OtlpHttpApp(scorer, args.max_request_bytes),
        host=args.host,
        port=args.http_port,
        lifespan="off",
        log_level="warning",
        access_log=False,
    )

    class Server(_Quiet, uvicorn.Server):
        pass

    http = Server(config)
    http_task = asyncio.create_task(http.serve())
    while not http.started and not http_task.done():  # noqa: ASYNC110 - uvicorn offers no event for it
        await asyncio.sleep(0.02)
    if http_task.done():
        await grpc.stop(0)
        raise ConfigError(f"cannot serve HTTP on {args.host}:{args.http_port}")
    http_port = http.servers[0].sockets[0].getsockname()[1]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Ready (/readyz, --ready-file, the banner) once the judge has started up. Requests that arrive meanwhile
    # are taken and wait for it; /healthz answers throughout.
    warming = asyncio.create_task(scorer.warm_up())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({warming, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if warming.done():
        problem = warming.result()
        if problem is not None:
            print(f"faithtrace serve: the judge did not start ({problem}); evaluations retry it", flush=True)
        info: dict[str, Any] = {"grpc_port": grpc_port, "http_port": http_port, "pid": os.getpid()}
        if args.ready_file:
            args.ready_file.write_text(json.dumps(info))
        print(
            f"faithtrace serve: OTLP gRPC {args.host}:{grpc_port}, HTTP {args.host}:{http_port}, "
            f"judge {settings.judge.model or 'embedded local judge'}, concurrency {concurrency}",
            flush=True,
        )
    source = None
    consuming: asyncio.Task[None] | None = None
    if kafka_settings is not None and warming.done():
        # Partitions are claimed only once the judge is up: a replica still starting takes no work.
        from faithtrace.serve.kafka import KafkaSource

        source = KafkaSource(scorer, kafka_settings)
        scorer.stat_sources.append(source.stats)
        consuming = asyncio.create_task(source.run())
        print(
            f"faithtrace serve: consuming {kafka_settings.topic} from {kafka_settings.bootstrap} "
            f"as group {kafka_settings.group}",
            flush=True,
        )
        await asyncio.wait({stopping, consuming}, return_when=asyncio.FIRST_COMPLETED)
        if consuming.done() and consuming.exception() is not None:
            print(f"faithtrace serve: the Kafka consumer failed: {consuming.exception()}", flush=True)
            stop.set()
    await stopping
    print("faithtrace serve: stopping", flush=True)
    deadline = args.shutdown_timeout
    if source is not None and consuming is not None:
        # Kafka first: the messages in flight finish (while the scorer still resolves traces as usual) and
        # are committed; the rest is left to the replica that takes the partitions over.
        await source.stop(deadline)
        consuming.cancel()
        with contextlib.suppress(BaseException):
            await consuming
    drained = asyncio.create_task(scorer.drain(deadline))
    # In-flight requests finish while new ones are refused (the scorer is closing); then the servers go.
    await asyncio.wait({drained}, timeout=deadline + 5)
    await grpc.stop(1.0)
    http.should_exit = True
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(http_task, 5)
    print(f"faithtrace serve: stopped {json.dumps(scorer.stats())}", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        raise ConfigError("faithtrace serve needs its extra: pip install 'faithtrace[serve]'") from None
    return asyncio.run(serve(args))
