"""Debian's Chromium driven headless by playwright-core from npm (``make backends`` installs both): the tools,
and a helper that runs one of the scripts in tests/browser/ and returns what it printed as JSON.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE_MODULES = Path.home() / ".cache" / "faithtrace" / "node" / "node_modules"
SCRIPTS = Path(__file__).parent / "browser"


def _missing(what: str) -> None:
    message = f"{what}: run `make backends` (installs Chromium from Debian and playwright-core from npm)"
    if os.environ.get("FAITHTRACE_REQUIRE_BACKENDS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def browser_tools() -> tuple[str, str, Path]:
    """(the Chromium binary, node, the playwright-core package folder)."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    node = shutil.which("node")
    playwright = NODE_MODULES / "playwright-core"
    if not os.access(chromium, os.X_OK):
        _missing("Chromium not found")
    if node is None or not (playwright / "package.json").exists():
        _missing(f"node or playwright-core ({playwright}) not found")
    assert node is not None
    return chromium, node, playwright


def run_script(
    tools: tuple[str, str, Path], script: str, args: list[str], timeout: float = 180, **env: str
) -> dict[str, Any]:
    """Run tests/browser/``script`` with ``args``; its stdout is JSON. ``log`` holds its stderr's tail."""
    chromium, node, playwright = tools
    environ = {
        **os.environ,
        "PLAYWRIGHT_CORE": str(playwright),
        "CHROMIUM": chromium,
        "NO_PROXY": "127.0.0.1",
    }
    environ.update(env)
    done = subprocess.run(
        [node, str(SCRIPTS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    page: dict[str, Any] = json.loads(done.stdout)
    page["log"] = done.stderr[-2000:]
    return page
