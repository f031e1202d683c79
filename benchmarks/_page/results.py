"""The results files as the Benchmarks page reads them: one run per file, the latest run of each setting, and
every figure on the page traced back to the keys it was read from."""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

RESULTS = Path(__file__).resolve().parents[1] / "results"
T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, eq=False)
class Run:
    """One results file: what a benchmark script wrote (``benchmark``, ``date``, ``command``, ``machine``).
    Loaded once per page, so a run is itself (identity) wherever it is counted."""

    path: Path
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc.get("benchmark", self.path.stem))

    @property
    def date(self) -> str:
        return str(self.doc.get("date", ""))

    @property
    def day(self) -> str:
        return self.date[:10]


def load(folder: Path = RESULTS) -> list[Run]:
    """Every ``*.json`` in ``folder``, by name; a ``--quick`` run is hidden by the full run of its name."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        if path.name.endswith("-quick.json") and path.with_name(path.name.replace("-quick", "")).exists():
            continue
        runs.append(Run(path, json.loads(path.read_text(encoding="utf-8"))))
    return runs


def of_kind(runs: Iterable[Run], kind: str) -> list[Run]:
    return [r for r in runs if r.kind == kind]


def newest(runs: Sequence[Run]) -> Run | None:
    return max(runs, key=lambda r: (r.date, r.path.name), default=None)


def latest(items: Iterable[tuple[K, Run, T]]) -> dict[K, tuple[Run, T]]:
    """Of the items (setting, run, row) that share a setting, the one from the latest run; first-seen "
    "order."""
    kept: dict[K, tuple[Run, T]] = {}
    for key, run, row in items:
        if key not in kept or (run.date, run.path.name) > (kept[key][0].date, kept[key][0].path.name):
            kept[key] = (run, row)
    return kept


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def lookup(doc: Any, keys: Sequence[str | int]) -> Any:
    for key in keys:
        doc = doc[key]
    return doc


@dataclass(frozen=True)
class Figure:
    """A number on the page: the run it comes from, the keys down to it, and how many decimals it shows."""

    run: Run
    keys: tuple[str | int, ...]
    digits: int = 2

    @property
    def value(self) -> Any:
        return lookup(self.run.doc, self.keys)

    @property
    def text(self) -> str:
        return fmt(self.value, self.digits)


@dataclass
class Figures:
    """Collects the figures a line of text cites: ``f(run, "systems", "faithtrace", "auroc")`` returns the
    figure's text and remembers where it came from."""

    cited: list[Figure] = field(default_factory=list)

    def __call__(self, run: Run, *keys: str | int, digits: int = 2) -> str:
        figure = Figure(run, keys, digits)
        self.cited.append(figure)
        return figure.text


@dataclass(frozen=True)
class Headline:
    """A row of the page's headline table: a question, the latest figures that answer it, their section."""

    question: str
    answer: str
    figures: tuple[Figure, ...]
    anchor: str

    @property
    def date(self) -> str:
        return max(f.run.day for f in self.figures)


def index_of(rows: Sequence[dict[str, Any]], key: str, value: Any) -> int | None:
    """The position of the first row whose ``key`` is ``value`` (figures point into lists by position)."""
    return next((i for i, r in enumerate(rows) if r.get(key) == value), None)


class Commands:
    """The runs a table cites, numbered in order of first use, listed under it with date, load and command."""

    def __init__(self) -> None:
        self.runs: list[Run] = []

    def ref(self, run: Run) -> str:
        if run not in self.runs:
            self.runs.append(run)
        return str(self.runs.index(run) + 1)

    def markdown(self) -> str:
        lines = []
        for i, run in enumerate(self.runs, 1):
            load = (run.doc.get("machine") or {}).get("loadavg_1m")
            machine = f", load {load:.1f}" if isinstance(load, float | int) else ""
            lines.append(f"{i}. {run.day}{machine}, `{run.path.name}`: `{run.doc.get('command', '')}`")
        return "Runs (results in `benchmarks/results/`, one file each):\n\n" + "\n".join(lines) + "\n"


def table_section(run: Run, heading: str, intro: str, header: list[str], rows: list[list[str]]) -> str:
    """A section of one run: its heading and what it measures, one table (first column left-aligned, the rest
    figures), and the run's date and command under it."""
    cmds = Commands()
    cmds.ref(run)
    lines = [
        heading + "\n",
        intro + "\n",
        "| " + " | ".join(header) + " |",
        "| --- | " + " | ".join("---:" for _ in header[1:]) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        cmds.markdown(),
    ]
    return "\n".join(lines)
