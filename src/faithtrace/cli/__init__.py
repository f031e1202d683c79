"""The ``faithtrace`` command (``faithtrace = "faithtrace.cli:main"``; also ``python -m faithtrace.cli``)."""

from faithtrace.cli.main import main

__all__ = ["main"]
