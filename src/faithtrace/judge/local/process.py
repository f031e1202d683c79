"""Finding, starting, keeping alive and stopping the one local judge server of this machine (per cache dir).

The server registers itself in a state file; a file lock serialises starts so that two processes (or two
gunicorn workers) never start two servers. A registered server is trusted only if its pid is alive, its
command line is ours and it answers the health probe; anything else is stale and replaced.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faithtrace._common.errors import LocalJudgeError
from faithtrace._config import options
from faithtrace.judge.local.model import Progress, cache_root, file_lock, resolve_model, say
from faithtrace.judge.local.server import HEALTH_PATH, STATE_VERSION, remove_state_if_ours

logger = logging.getLogger("faithtrace")

SERVE_MODULE = "faithtrace.judge.local.server"
_LOG_TAIL_LINES = 25
_LOG_MAX_BYTES = 5 << 20
# One HTTP opener that ignores HTTP(S)_PROXY: a loopback probe must never be sent to a proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Paths:
    """The files of one server. They are per network namespace: a server in another namespace (e.g. a test
    run under ``unshare -n``) is alive but unreachable from here, and must be neither reused nor killed."""

    directory: Path
    netns: str = ""

    def _name(self, suffix: str) -> Path:
        return self.directory / (f"server-{self.netns}{suffix}" if self.netns else f"server{suffix}")

    @property
    def state(self) -> Path:
        return self._name(".json")

    @property
    def lock(self) -> Path:
        return self._name(".lock")

    @property
    def log(self) -> Path:
        return self._name(".log")


def paths() -> Paths:
    return Paths(cache_root() / "judge", _netns_id())


def _netns_id() -> str:
    try:
        link = os.readlink("/proc/self/ns/net")  # "net:[4026531840]"
    except OSError:
        return ""
    return "".join(ch for ch in link if ch.isdigit())


@dataclass(frozen=True)
class Running:
    pid: int
    port: int
    model_path: str
    started_at: float


# --- reading and checking ----------------------------------------------------------------------------------
def read_state(p: Paths) -> dict[str, Any] | None:
    try:
        record = json.loads(p.state.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("version") != STATE_VERSION:
        return None
    if not isinstance(record.get("pid"), int) or not isinstance(record.get("port"), int):
        return None
    return record


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else: not ours to use or kill
        return True
    return True


def is_our_server(pid: int) -> bool:
    """True when ``pid`` runs our server module (a recycled pid may now be anything)."""
    proc = Path(f"/proc/{pid}/cmdline")
    if Path("/proc/self").exists():
        try:
            return SERVE_MODULE.encode() in proc.read_bytes().split(b"\0")
        except OSError:
            return False
    try:  # no procfs (macOS): ask ps
        out = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return f"-m {SERVE_MODULE} " in out


def probe(port: int, alias: str, pid: int | None = None, timeout_s: float = 2.0) -> bool:
    """Does a faithtrace judge with ``alias`` (and ``pid``) answer on 127.0.0.1:``port``?"""
    try:
        with _OPENER.open(f"http://127.0.0.1:{port}{HEALTH_PATH}", timeout=timeout_s) as resp:
            body = json.loads(resp.read(4096))
    except (OSError, ValueError, urllib.error.URLError):
        return False
    return (
        isinstance(body, dict)
        and body.get("service") == "faithtrace-local-judge"
        and body.get("alias") == alias
        and (pid is None or body.get("pid") == pid)
    )


def healthy_from_state(p: Paths, alias: str) -> Running | None:
    record = read_state(p)
    if record is None or record.get("alias") != alias:
        return None
    pid, port = int(record["pid"]), int(record["port"])
    if not pid_alive(pid) or not probe(port, alias, pid):
        return None
    return Running(pid, port, str(record.get("model_path", "")), float(record.get("started_at", 0.0)))


# --- starting ----------------------------------------------------------------------------------------------
def free_port(preferred: int | None = None) -> int:
    """A free loopback port: the ``preferred`` one when it is free (endpoints cached by clients survive a
    restart), else one the kernel picks."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise LocalJudgeError("no free TCP port on 127.0.0.1 for the local judge")  # pragma: no cover


def ensure_running(
    *, alias: str, progress: Progress | None, idle_timeout_s: float, start_timeout_s: float
) -> Running:
    p = paths()
    found = healthy_from_state(p, alias)
    if found is not None:
        return found
    p.directory.mkdir(parents=True, exist_ok=True)
    # Generous: a first start may include assembling the model in another process that holds this lock.
    with file_lock(p.lock, 900.0 + start_timeout_s, "starting the local judge"):
        found = healthy_from_state(p, alias)  # another process may have started it while we waited
        if found is not None:
            return found
        previous = read_state(p)
        slow = _patient_probe(previous, alias)
        if slow is not None:
            return slow
        _clear_stale(p, previous)
        model = resolve_model(progress)
        preferred = int(previous["port"]) if previous else None
        last_error: LocalJudgeError | None = None
        for _attempt in range(2):  # a second try covers losing the chosen port to another program
            port = free_port(preferred)
            try:
                return _start(p, alias, str(model.path), port, progress, idle_timeout_s, start_timeout_s)
            except _PortLost as exc:
                last_error = exc.error
                preferred = None
        assert last_error is not None
        raise last_error


class _PortLost(Exception):
    def __init__(self, error: LocalJudgeError) -> None:
        self.error = error


def _patient_probe(record: dict[str, Any] | None, alias: str) -> Running | None:
    # A server busy with a long prompt on a loaded machine may miss the quick probe; look again, longer,
    # before declaring it dead and killing work in progress.
    if record is None or record.get("alias") != alias:
        return None
    pid, port = int(record["pid"]), int(record["port"])
    if pid_alive(pid) and is_our_server(pid) and probe(port, alias, pid, timeout_s=10.0):
        return Running(pid, port, str(record.get("model_path", "")), float(record.get("started_at", 0.0)))
    return None


def _clear_stale(p: Paths, record: dict[str, Any] | None) -> None:
    if record is None:
        return
    pid = int(record["pid"])
    if pid_alive(pid) and is_our_server(pid):
        # Ours but not answering (hung, or still loading after a crash of its starter): replace it.
        logger.warning("faithtrace: the local judge (pid %d) does not answer; restarting it", pid)
        _terminate(pid, grace_s=5.0)
    remove_state_if_ours(p.state, pid)


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    # Nothing the host configured for llama-cpp-python's settings or its own config file applies to ours.
    env.pop("CONFIG_FILE", None)
    # Loopback must bypass any proxy, here and in the host's HTTP clients talking to us.
    env["NO_PROXY"] = with_loopback(env.get("NO_PROXY") or env.get("no_proxy") or "")
    env["no_proxy"] = env["NO_PROXY"]
    return env


def with_loopback(value: str) -> str:
    items = [v.strip() for v in value.split(",") if v.strip()]
    for host in ("127.0.0.1", "localhost"):
        if host not in items:
            items.append(host)
    return ",".join(items)


def _start(
    p: Paths,
    alias: str,
    model_path: str,
    port: int,
    progress: Progress | None,
    idle_timeout_s: float,
    start_timeout_s: float,
) -> Running:
    _rotate_log(p.log)
    _prune_other_namespaces(p)
    say(progress, f"starting the local judge on 127.0.0.1:{port} (log: {p.log})…")
    t0 = time.perf_counter()
    cmd = [
        sys.executable, "-m", SERVE_MODULE,
        "--model", model_path, "--alias", alias, "--host", "127.0.0.1", "--port", str(port),
        "--n-ctx", str(n_ctx()), "--n-threads", str(n_threads()),
        "--idle-timeout", str(idle_timeout_s), "--state-file", str(p.state), "--nice", "10",
    ]  # fmt: skip
    if not logprobs():
        cmd.append("--no-logprobs")
    with p.log.open("ab") as log:
        log_offset = log.tell()
        # A new session: the host's Ctrl-C or terminal hang-up must not kill a server other processes share.
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(p.directory),
            env=server_env(),
            start_new_session=True,
            close_fds=True,
        )
    _reap_in_background(proc)
    deadline = time.monotonic() + start_timeout_s
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            tail = log_tail(p.log, log_offset)
            error = LocalJudgeError(
                f"the local judge exited during start-up (exit code {code}). Last lines of {p.log}:\n{tail}"
            )
            if "address already in use" in tail.lower():
                raise _PortLost(error)
            raise error
        record = read_state(p)
        if record is not None and record.get("pid") == proc.pid and probe(port, alias, proc.pid):
            say(progress, f"local judge ready on 127.0.0.1:{port} in {time.perf_counter() - t0:.1f} s")
            return Running(proc.pid, port, model_path, float(record.get("started_at", time.time())))
        time.sleep(0.2)
    _terminate(proc.pid, grace_s=5.0)
    raise LocalJudgeError(
        f"the local judge did not become ready within {start_timeout_s:.0f} s "
        f"(FAITHTRACE_LOCAL_JUDGE_START_TIMEOUT); it was stopped. Last lines of {p.log}:\n"
        f"{log_tail(p.log, log_offset)}"
    )


def _reap_in_background(proc: subprocess.Popen[bytes]) -> None:
    # The server outlives requests but may exit (idle timeout) while this process lives on: wait for it so
    # it does not linger as a zombie, which would also look alive to kill(pid, 0).
    threading.Thread(target=proc.wait, name="faithtrace-judge-reaper", daemon=True).start()


# --- stopping ----------------------------------------------------------------------------------------------
def stop(p: Paths | None = None) -> bool:
    p = p or paths()
    if not p.directory.exists():
        return False
    with file_lock(p.lock, 60.0, "starting or stopping the local judge"):
        record = read_state(p)
        if record is None:
            return False
        pid = int(record["pid"])
        stopped = False
        if pid_alive(pid) and is_our_server(pid):
            stopped = _terminate(pid, grace_s=10.0)
        remove_state_if_ours(p.state, pid)
        return stopped


def _terminate(pid: int, grace_s: float) -> bool:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not pid_alive(pid) or _is_zombie(pid):
            return True
        time.sleep(0.05)
    logger.warning("faithtrace: the local judge (pid %d) ignored SIGTERM; killing it", pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


# --- logs and settings -------------------------------------------------------------------------------------
def log_tail(log: Path, offset: int = 0, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with log.open("rb") as f:
            f.seek(offset)
            data = f.read()[-64_000:]
    except OSError:
        return "(no log)"
    text = data.decode("utf-8", "replace").rstrip().splitlines()
    return "\n".join(text[-lines:]) or "(empty log)"


def _prune_other_namespaces(p: Paths, max_age_s: float = 86400.0) -> None:
    # Each network namespace (every `unshare -n` test run) leaves a lock and a log; drop old ones that no
    # longer belong to a registered server.
    now = time.time()
    for f in p.directory.glob("server-*"):
        if f.suffix not in (".lock", ".log", ".1") or f.name.startswith(p.state.stem):
            continue
        stem = f.name.split(".", 1)[0]
        try:
            if not (p.directory / f"{stem}.json").exists() and now - f.stat().st_mtime > max_age_s:
                f.unlink()
        except OSError:
            pass


def _rotate_log(log: Path) -> None:
    try:
        if log.stat().st_size > _LOG_MAX_BYTES:
            os.replace(log, log.with_name(log.name + ".1"))
    except OSError:
        pass


def n_ctx() -> int:
    n: int = options.read("local_judge.n_ctx")
    return n


def logprobs() -> bool:
    """Whether the server returns log-probabilities (``FAITHTRACE_LOCAL_JUDGE_LOGPROBS``, default on)."""
    on: bool = options.read("local_judge.logprobs")
    return on


def n_threads() -> int:
    """Half the cores by default. llama.cpp's threads spin at every barrier: when the machine is busy (the
    host application, tests, another model) and they outnumber free cores, a verdict got ~10x slower in our
    measurements on 2 cores (25 s vs 2.4 s), and it takes the host's CPU. Idle-machine prefill is what we
    give up, and FAITHTRACE_LOCAL_JUDGE_THREADS takes it back."""
    n: int = options.read("local_judge.threads")
    return n
