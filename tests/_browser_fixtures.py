"""Debian's Chromium driven headless by playwright-core from npm (``make backends`` installs both): the tools,
and a session that keeps one of the scripts in tests/browser/ (and the one browser it launched) running to
answer the test's requests, each a JSON line in and out.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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


def _environ(tools: tuple[str, str, Path]) -> dict[str, str]:
    chromium, _, playwright = tools
    return {**os.environ, "PLAYWRIGHT_CORE": str(playwright), "CHROMIUM": chromium, "NO_PROXY": "127.0.0.1"}


class BrowserSession:
    """tests/browser/``script`` kept running: it reads one JSON request a line and answers each with one JSON
    line, in the one browser it launched (a browser start costs seconds, more on a busy machine)."""

    def __init__(self, tools: tuple[str, str, Path], script: str, log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self._process = subprocess.Popen(
            [tools[1], str(SCRIPTS / script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=_environ(tools),
            text=True,
        )
        self._answers: queue.Queue[str | None] = queue.Queue()
        assert self._process.stdout is not None
        threading.Thread(target=self._read, args=(self._process.stdout,), daemon=True).start()

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            self._answers.put(line)
        self._answers.put(None)  # the script exited

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def request(self, timeout: float = 180, **fields: Any) -> dict[str, Any]:
        """Send one request; its answer, with ``log`` holding the script's stderr's tail."""
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(fields) + "\n")
        self._process.stdin.flush()
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout} s to {fields}:\n{self.log_tail()}") from None
        assert line is not None, f"the browser script exited ({self._process.poll()}):\n{self.log_tail()}"
        answer: dict[str, Any] = json.loads(line)
        assert "error" not in answer, f"{answer['error']}\n{self.log_tail()}"
        answer["log"] = self.log_tail()
        return answer

    def close(self) -> None:
        """Close its stdin (the script closes its browser and exits); killed if it does not within 30 s."""
        assert self._process.stdin is not None
        try:
            self._process.stdin.close()
            self._process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait(timeout=10)
        finally:
            self._log.close()


@pytest.fixture
def browser(
    browser_tools: tuple[str, str, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[BrowserSession]:
    """One browser for the test's pages: the test module's ``BROWSER_SCRIPT`` kept running."""
    session = BrowserSession(browser_tools, request.module.BROWSER_SCRIPT, tmp_path / "browser.log")
    try:
        yield session
    finally:
        session.close()
