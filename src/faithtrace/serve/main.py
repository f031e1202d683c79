"""``faithtrace serve``: both receivers on one event loop, and a graceful stop on SIGTERM/SIGINT.

On a signal: readiness turns false, new requests are refused as retryable (UNAVAILABLE / 503, not load),
held traces are resolved, running evaluations get ``--shutdown-timeout`` seconds, then what is left is
cancelled (its requests are not acknowledged, so the Collector re-sends them to another replica).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faithtrace._common.errors import ConfigError
from faithtrace._config import options
from faithtrace._config.judge_settings import JudgeSettings
from faithtrace._config.settings import Settings, build_settings
from faithtrace.sources.conventions import Convention

if TYPE_CHECKING:
    from faithtrace.serve.fleet import Fleet
    from faithtrace.serve.kafka import KafkaSettings

logger = logging.getLogger("faithtrace")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per ``serve`` option of the table. A flag left out falls back to its ``FAITHTRACE_SERVE_*``
    variable, then to the table's default (``serve_options``): argparse holds no default of its own."""
    kafka = p.add_argument_group("Kafka", "read OTLP traces from a Kafka topic as one consumer group member")
    for o in options.group("serve"):
        where = kafka if o.name.startswith("kafka") else p
        shown = options.shown_default(o).replace("—", "none")
        text = f"{o.doc} Default: {shown}; env {', '.join(o.env)}.".replace("%", "%%")
        metavar = o.metavar or ("SECONDS" if o.name.endswith("_s") else None)
        if o.name == "kafka_option":
            where.add_argument(o.flag, dest=o.name, action="append", metavar=metavar, help=text)
        else:
            where.add_argument(o.flag, dest=o.name, type=o.parse, metavar=metavar, help=text)


def serve_options(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Every ``serve`` option: its flag, else its variable, else its default. An explicit flag out of the
    table's bounds raises ``ConfigError``; an invalid variable warns and falls back to the default."""
    return argparse.Namespace(
        **{
            o.name: options.resolve(o.key, getattr(args, o.name, None), environ)
            for o in options.group("serve")
        }
    )


def _conventions(path: Path | None) -> tuple[Convention, ...]:
    if path is None:
        return ()
    try:
        raw = json.loads(path.read_text())
        return tuple(Convention.model_validate(c) for c in raw)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--mapping {path}: {exc}") from exc


def _kafka_settings(cfg: argparse.Namespace) -> KafkaSettings | None:
    if not cfg.kafka:
        return None
    from faithtrace.serve.kafka import KafkaSettings

    options: dict[str, str] = {}
    for item in cfg.kafka_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--kafka-option {item!r}: expected KEY=VALUE")
        options[key.strip()] = value
    return KafkaSettings(
        bootstrap=cfg.kafka,
        topic=cfg.kafka_topic,
        group=cfg.kafka_group,
        max_buffered=cfg.kafka_max_buffered,
        max_buffered_bytes=cfg.kafka_max_buffered_bytes,
        commit_every_s=cfg.kafka_commit_interval_s,
        options=options,
    )


def _fleet(cfg: argparse.Namespace, settings: Settings, instance: str) -> Fleet:
    """The judge budget (the serve options, else the app's sampling budgets) and the store it is shared in."""
    from faithtrace.serve.budget import BudgetLimits
    from faithtrace.serve.fleet import Fleet

    sampling = settings.sampling
    limits = BudgetLimits(
        tokens_per_hour=cfg.max_tokens_per_hour or sampling.max_tokens_per_hour,
        cost_usd_per_hour=cfg.max_cost_usd_per_hour or sampling.max_cost_usd_per_hour,
        requests_per_minute=cfg.max_judge_requests_per_minute,
        window_s=cfg.budget_window_s,
        exhausted=cfg.budget_exhausted,
        store_down=cfg.budget_store_down,
    )
    store = None
    if cfg.redis:
        try:
            import redis  # noqa: F401
        except ImportError:
            raise ConfigError(
                "faithtrace serve --redis needs its extra: pip install 'faithtrace[redis]'"
            ) from None
        from faithtrace.serve.store import RedisStore

        name = cfg.fleet or (cfg.kafka_group if cfg.kafka else "faithtrace")
        try:
            store = RedisStore(cfg.redis, name, instance, timeout_s=cfg.redis_timeout_s)
        except ValueError as exc:
            raise ConfigError(f"--redis {cfg.redis}: {exc}") from None
    return Fleet(limits, store, scored_ttl_s=cfg.scored_ttl_s)


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
    from faithtrace.serve.receiver import Receiver

    cfg = serve_options(args)

    # Evaluations at once = the judge's max_concurrency (FAITHTRACE_JUDGE_CONCURRENCY); --concurrency sets it.
    judge = JudgeSettings(max_concurrency=cfg.concurrency) if cfg.concurrency else None
    settings = build_settings(judge=judge)
    concurrency = settings.concurrency
    limits = Limits(
        concurrency=concurrency,
        max_pending=cfg.max_pending or 8 * concurrency,
        settle_s=cfg.settle_s,
        hold_s=cfg.hold_s,
        max_traces=cfg.max_traces,
        max_bytes=cfg.max_trace_bytes,
        retry_after_s=cfg.retry_after_s,
    )
    kafka_settings = _kafka_settings(cfg)
    if kafka_settings is not None:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            raise ConfigError(
                "faithtrace serve --kafka needs its extra: pip install 'faithtrace[kafka]'"
            ) from None
    instance = cfg.instance_id or f"{socket.gethostname()}-{os.getpid()}"
    spool = None
    if cfg.spool is not None:
        from faithtrace.serve.spool import Spool

        try:
            spool = Spool(cfg.spool, cfg.max_spool_bytes)
        except OSError as exc:
            raise ConfigError(f"--spool {cfg.spool}: {exc}") from exc
    if cfg.replay_endpoint:
        from faithtrace.serve.replay import target

        try:
            target(cfg.replay_endpoint)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    fleet = _fleet(cfg, settings, instance)
    scorer = Receiver(settings, Apps(instance_id=instance), limits, _conventions(cfg.mapping), spool, fleet)

    grpc, grpc_port = await grpc_server.start(scorer, cfg.host, cfg.grpc_port, cfg.max_request_bytes)
    config = uvicorn.Config(
        OtlpHttpApp(scorer, cfg.max_request_bytes),
        host=cfg.host,
        port=cfg.http_port,
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
        raise ConfigError(f"cannot serve HTTP on {cfg.host}:{cfg.http_port}")
    http_port = http.servers[0].sockets[0].getsockname()[1]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    replaying: asyncio.Task[None] | None = None
    if spool is not None and len(spool):
        # Parts acknowledged and not scored when this replica last stopped (or died): sent on once it serves,
        # since the Collector may route them straight back here.
        found = f"{len(spool)} spooled traces found in {cfg.spool}"
        print(f"faithtrace serve: {found}; sending them on", flush=True)
        replaying = asyncio.create_task(scorer.keeper.replay(cfg.replay_endpoint))
    # Ready (/readyz, --ready-file, the banner) once the judge has started up. Requests that arrive meanwhile
    # are taken and wait for it; /healthz answers throughout.
    warming = asyncio.create_task(scorer.warm_up())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({warming, stopping}, return_when=asyncio.FIRST_COMPLETED)
    _settle_heap()
    if warming.done():
        problem = warming.result()
        if problem is not None:
            print(f"faithtrace serve: the judge did not start ({problem}); evaluations retry it", flush=True)
        if fleet.budgeted and settings.judge.model:
            from faithtrace.judge import load_litellm, price_per_token

            model = settings.judge.model
            fleet.estimator.price(await asyncio.to_thread(lambda: price_per_token(load_litellm(), model)))
        fleet.start()
        if fleet.active:
            print(f"faithtrace serve: {fleet.describe()}", flush=True)
        info: dict[str, Any] = {"grpc_port": grpc_port, "http_port": http_port, "pid": os.getpid()}
        if cfg.ready_file:
            cfg.ready_file.write_text(json.dumps(info))
        print(
            f"faithtrace serve: OTLP gRPC {cfg.host}:{grpc_port}, HTTP {cfg.host}:{http_port}, "
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
    deadline = cfg.shutdown_timeout_s
    if source is not None and consuming is not None:
        # Kafka first: the messages in flight finish (while the scorer still resolves traces as usual) and
        # are committed; the rest is left to the replica that takes the partitions over.
        await source.stop(deadline)
        consuming.cancel()
        with contextlib.suppress(BaseException):
            await consuming
    if replaying is not None and not replaying.done():
        replaying.cancel()
        with contextlib.suppress(BaseException):
            await replaying
    drained = asyncio.create_task(scorer.drain(deadline, cfg.replay_endpoint))
    # In-flight requests finish while new ones are refused (the scorer is closing); then the servers go.
    await asyncio.wait({drained}, timeout=deadline + 5)
    await grpc.stop(1.0)
    http.should_exit = True
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(http_task, 5)
    await fleet.stop()
    if spool is not None:
        spool.close()
    print(f"faithtrace serve: stopped {json.dumps(scorer.stats())}", flush=True)
    return 0


def _settle_heap() -> None:
    """Once started: what the start-up built (the modules of uvicorn, gRPC, litellm and its price tables, a
    few hundred thousand objects that live as long as the process) leaves the cyclic collector's view, and
    the collector runs again for what requests allocate. Its full passes then scan requests' objects only,
    and the process exits in a fraction of a second after it stopped instead of spending seconds of CPU
    (more on a busy node) collecting a heap that is about to go: a rolling restart waits for every exit."""
    gc.freeze()
    gc.enable()


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        raise ConfigError("faithtrace serve needs its extra: pip install 'faithtrace[serve]'") from None
    # No collection while the process starts: the imports only add objects that stay (a collection finds
    # nothing to free), and the passes over the growing heap take about half of litellm's import time,
    # which /readyz waits for. `_settle_heap` turns the collector back on once the judge has started.
    gc.disable()
    try:
        return asyncio.run(serve(args))
    finally:
        gc.enable()
