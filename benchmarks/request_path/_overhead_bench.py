"""What overhead.py's variants are made of: the timed function with its set-up and drain, and the bench that
holds them. Its own module so that the variant builders (``_overhead_variants``, ``_overhead_faithtrace``)
both import it and not each other."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

CONTEXTS = [
    "Refunds are accepted within 30 days of purchase with a receipt.",
    "Store credit is offered after 30 days.",
]
ANSWER = "You can get a refund within 30 days if you have the receipt."


def _noop() -> None:
    return None


@dataclass
class Variant:
    name: str
    fn: Callable[[str, list[str]], Any]
    setup: Callable[[], None] = _noop
    note: str = ""
    exporter: InMemorySpanExporter | None = None  # where its spans land, for the sanity check
    drain: Callable[[], Any] = _noop  # waits for work the variant defers to a background thread


@dataclass
class Bench:
    variants: list[Variant] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    exporters: list[InMemorySpanExporter] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    def clear(self) -> None:
        for e in self.exporters:
            e.clear()

    def check(self) -> dict[str, str]:
        """Each variant that should export a span did: a benchmark of a no-op proves nothing."""
        out: dict[str, str] = {}
        for v in self.variants:
            if v.exporter is None:
                continue
            v.setup()
            self.clear()
            for _ in range(3):
                v.fn("q", CONTEXTS)
            with contextlib.suppress(Exception):
                v.drain()
                _flush_all()
            n = len(v.exporter.get_finished_spans())
            out[v.name] = f"{n} spans for 3 calls"
        return out

    def close(self) -> None:
        for c in reversed(self.closers):
            with contextlib.suppress(Exception):
                c()


FLUSHERS: list[Callable[[], Any]] = []


def _flush_all() -> None:
    for f in FLUSHERS:
        f()
