"""A real Redis server (Debian's `redis-server`, `make backends` installs it) on a free loopback port, for the
fleet's shared judge budget and record of scored traces.

Each `RedisServer` runs in memory only (no RDB or AOF files), is stopped by its own PID, and can be stopped
and started again on the same port (the store going away and coming back) or frozen with SIGSTOP (a store
that accepts connections and never answers: what a hung or partitioned Redis looks like to a client).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from _fleet_fixtures import _require
from _ports import free_port


def redis_binary() -> str:
    """$FAITHTRACE_REDIS_BIN, else `redis-server` on PATH (Debian's package); skipped, or failed under
    FAITHTRACE_REQUIRE_BACKENDS=1, when neither exists."""
    path = os.environ.get("FAITHTRACE_REDIS_BIN") or shutil.which("redis-server") or ""
    if not path or not os.access(path, os.X_OK):
        _require(
            "no redis-server: install Debian's redis-server (make backends does) or set FAITHTRACE_REDIS_BIN"
        )
    return path


def redis_client_available() -> None:
    try:
        import redis  # noqa: F401
    except ImportError:
        _require("redis-py is not installed (pip install 'faithtrace[redis]')")


@dataclass
class RedisServer:
    workdir: Path
    binary: str
    port: int = field(default_factory=free_port)
    popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> RedisServer:
        argv = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            "--protected-mode", "no",
        ]  # fmt: skip
        with (self.workdir / "redis.log").open("ab") as out:
            self.popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.popen.poll() is not None:
                raise AssertionError(f"redis-server exited:\n{(self.workdir / 'redis.log').read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"redis-server not answering on {self.port} within {timeout}s")
            time.sleep(0.05)
        return self

    def answers(self) -> bool:
        """PING answered PONG (a frozen server accepts the connection and says nothing)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.resume()
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: connections stay open and unanswered."""
        if self.popen is not None:
            self.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    """A started Redis; stopped (by its PID) however the caller ends."""
    redis_client_available()
    workdir.mkdir(parents=True, exist_ok=True)
    server = RedisServer(workdir, redis_binary())
    try:
        yield server.start()
    finally:
        server.stop()
