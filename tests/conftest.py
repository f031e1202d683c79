"""Shared test set-up. Fixture modules live next to this file and are registered here.

The suite runs under pytest-xdist (`make test`: ``-n 3 --dist loadgroup``); how a test stays xdist-safe is in
docs/development.md ("Writing a test"). This file puts the tests that share one process-wide backend (the
local judge, Phoenix) or a module-scoped fixture on one worker, and sends the slow ones out first.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from faithtrace._common import safety

# faithtrace's own suite, and only it, runs in strict mode: a faithtrace bug raises where it happens instead
# of being swallowed and counted (what it does in production, and in any app's own test run).
safety.raise_internal_errors = True

# litellm must never try to fetch its price map from the internet during tests (the suite runs offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Session-wide fixtures (the real local judge, a real Phoenix). Fake judges are NOT registered here: two fake
# judges with different scripts exist (scoring tests vs tracing tests), so each test module imports the one it
# means by name and no plugin-level fixture can shadow it.
pytest_plugins = ["_judge_fixtures", "_phoenix_fixtures"]

# Session fixtures whose backend is one per machine or too big to start once per worker: every test that uses
# one runs on the same xdist worker, which starts it once. The local judge is one server per network
# namespace (a second worker would find it, and the first one to finish would stop it under the other), and
# the `judge` tests load the 1.1 GB model in-process besides; Phoenix holds ~450 MB and takes 11-15 s to
# start.
SHARED_BACKENDS = {"local_judge": "judge", "phoenix_server": "phoenix"}

# Sent out first, so that no worker picks up a long test when the others are already done.
_FIRST = ("judge", "slow", "backend")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Import litellm before the first test (each worker scores through it sooner or later): its import costs
    seconds of CPU, tens of seconds on a busy machine, which no test's flush deadline should pay for."""
    if getattr(session.config.option, "numprocesses", None):  # pytest-xdist's controller runs no test
        return
    with contextlib.suppress(ImportError):
        import litellm  # noqa: F401


def _group(item: pytest.Item) -> str | None:
    """The xdist group ``item`` must share a worker with, if any (see SHARED_BACKENDS)."""
    if item.get_closest_marker("judge") is not None:
        return "judge"
    for fixture, group in SHARED_BACKENDS.items():
        if fixture in getattr(item, "fixturenames", ()):
            return group
    # A docs page's snippets (Sybil items, not functions) run in order in one namespace: one worker, in order.
    if not isinstance(item, pytest.Function):
        return item.nodeid.split("::", 1)[0]
    # A module- or class-scoped fixture is one start shared by the module's tests: keep them on one worker,
    # or each worker would start its own.
    info = getattr(item, "_fixtureinfo", None)
    for definitions in getattr(info, "name2fixturedefs", {}).values():
        if any(str(getattr(d, "scope", "")) in ("module", "class", "package") for d in definitions):
            return item.nodeid.split("::", 1)[0]
    return None


def _weight(item: pytest.Item) -> int:
    return next((len(_FIRST) - i for i, m in enumerate(_FIRST) if item.get_closest_marker(m)), 0)


# First: pytest-xdist's own hook (on each worker) reads the xdist_group marks added here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    scope_weight: dict[str, int] = {}
    scopes: dict[str, str] = {}
    for item in items:
        explicit = item.get_closest_marker("xdist_group")
        group = str(explicit.args[0]) if explicit and explicit.args else _group(item)
        if group is not None and explicit is None:
            item.add_marker(pytest.mark.xdist_group(group))
        scope = group or item.nodeid
        scopes[item.nodeid] = scope
        scope_weight[scope] = max(scope_weight.get(scope, 0), _weight(item))
    # Heaviest scopes first (a stable sort: a module's tests keep their order and stay together). xdist hands
    # scopes to workers in this order (with --no-loadscope-reorder, which the Makefile passes), so the long
    # ones start at once and overlap.
    items.sort(key=lambda it: -scope_weight[scopes[it.nodeid]])


def pytest_runtest_setup(item: pytest.Item) -> None:
    """On an xdist worker, fail a grouped test whose group loadgroup did not take (it marks a grouped test's
    node ID with ``@group``): silently ignored groups run a docs page's snippets, or the users of one local
    judge, on two workers at once, and fail far from the cause."""
    grouped = item.config.getoption("loadgroup", default=False) and item.get_closest_marker("xdist_group")
    if grouped and "@" not in item.nodeid:
        pytest.fail("pytest-xdist ignored this test's xdist_group (see the pytest pin in pyproject.toml)")
