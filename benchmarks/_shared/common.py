"""What the three benchmarks share: the fake judge process, result files, tables, machine facts."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE.parent / "results"


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_1m": os.getloadavg()[0],
    }


def default_out(name: str, quick: bool) -> Path:
    # Quick runs (make bench) get their own file so they never overwrite a full run's figures.
    return RESULTS_DIR / (f"{name}-quick.json" if quick else f"{name}.json")


def write_results(name: str, data: dict[str, Any], out: str | Path) -> Path:
    """Write ``out`` with the benchmark name, date, machine and command line attached."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": name,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        **data,
    }
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return path


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append(
            "  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(r, widths, strict=True))
        )
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:  # NaN
            return "nan"
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def _numeric(text: str) -> bool:
    return bool(text) and (text[0].isdigit() or text[0] in "-+.") and text != "-"


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def rss_mb() -> float:
    """Current resident set size of this process, in MiB."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@contextlib.contextmanager
def fake_judge(latency_s: float, *, items: int = 3, max_seconds: float = 3600.0) -> Iterator[str]:
    """Start the fake judge in its own process (it takes no GIL from the host); yield its ``/v1`` URL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "fakejudge.py"),
            "--latency",
            str(latency_s),
            "--items",
            str(items),
            "--max-seconds",
            str(max_seconds),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and not line.startswith("PORT "):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError("the fake judge exited before it listened")
        if not line.startswith("PORT "):
            raise RuntimeError("the fake judge did not start in 30 s")
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def gc_pauses_text(gcs: dict[str, Any]) -> str:
    """The collector's pauses per generation, as ``throughput.py`` records them (``gc_during_overload``)."""
    per_gen = "; ".join(
        f"{g}: {gcs[g]['collections']} collections, max {gcs[g]['max_ms']:.1f} ms, "
        f"total {gcs[g]['total_ms']:,.0f} ms"
        for g in ("gen0", "gen1", "gen2")
    )
    return f"{per_gen}; {gcs['tracked_objects']:,} objects tracked, {gcs['frozen_objects']:,} frozen"
