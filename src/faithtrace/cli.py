"""The ``faithtrace`` command (implementation in progress)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    raise NotImplementedError
