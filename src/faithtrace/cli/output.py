"""Terminal output for the CLI: rich tables and progress with ``faithtrace[cli]`` installed, else text."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TextIO


def _rich() -> Any | None:
    try:
        import rich.console
    except ImportError:  # the optional ``cli`` extra is not installed: plain text it is
        return None
    return rich


class Output:
    """Tables, messages and a progress bar, rendered with rich if available."""

    def __init__(self, stream: TextIO | None = None, *, plain: bool = False) -> None:
        self.stream = stream or sys.stdout
        self.rich = None if plain else _rich()
        self._console: Any = None
        if self.rich is not None:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False, soft_wrap=False)

    def line(self, text: str = "") -> None:
        if self._console is not None:
            self._console.print(text, markup=False, soft_wrap=True)  # never insert line breaks
        else:
            print(text, file=self.stream, flush=True)

    def raw(self, text: str) -> None:
        """Machine-readable output (JSON): written as is, never wrapped or styled."""
        print(text, file=self.stream, flush=True)

    def error(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        if self._console is not None:
            from rich.table import Table

            table = Table(title=title, title_justify="left")
            for h in headers:
                table.add_column(h, overflow="fold")
            for row in rows:
                table.add_row(*row)
            self._console.print(table)
            return
        widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=False)]
        print(title, file=self.stream)
        for row in [headers, ["-" * w for w in widths], *rows]:
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)), file=self.stream)
        self.stream.flush()

    def progress(self, total: int, description: str) -> Progress:
        return Progress(self, total, description)


class Progress:
    """A context manager with ``advance(note)``: a rich bar, or one plain line per finished item."""

    def __init__(self, out: Output, total: int, description: str) -> None:
        self.out = out
        self.total = total
        self.description = description
        self.done = 0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.out._console is not None and self.total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[note]}"),
                console=self.out._console,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.description, total=self.total, note="")
        return self

    def advance(self, note: str = "") -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, note=note)
        else:
            self.out.line(f"[{self.done}/{self.total}] {note}")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
