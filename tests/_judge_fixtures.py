"""Session fixture for end-to-end tests against the real embedded local judge.

Register from ``tests/conftest.py`` with ``pytest_plugins = ["_judge_fixtures"]`` (``tests/`` is on
``sys.path`` because it has no ``__init__.py``). Tests that use it should be marked ``@pytest.mark.judge``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from faithtrace.judge.local.endpoint import (
    LocalEndpoint,
    ensure_local_judge,
    local_judge_status,
    stop_local_judge,
)


@pytest.fixture(scope="session")
def local_judge() -> Iterator[LocalEndpoint]:
    """The machine's local judge, started if needed; stopped at the end only if this session started it
    (a developer's own running judge, or one shared with another test run, is left alone)."""
    before = local_judge_status()
    endpoint = ensure_local_judge()
    after = local_judge_status()
    started_here = after is not None and (
        before is None or not before["healthy"] or before["pid"] != after["pid"]
    )
    try:
        yield endpoint
    finally:
        if started_here:
            current = local_judge_status()
            if current is not None and after is not None and current["pid"] == after["pid"]:
                stop_local_judge()
