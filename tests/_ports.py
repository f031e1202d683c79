"""Loopback ports for the processes a test starts, from one helper: no two callers in a run share one."""

from __future__ import annotations

import os
import random
import socket
import threading

# Below Linux's ephemeral range (32768-60999): see free_port.
LOW, HIGH = 20000, 32000

# Ports handed out in this pytest process. A port is chosen here and bound later by another process (a
# scorer, a Collector, a broker); a second caller probing before that bind would find the same port free,
# which made a Collector fail to start with "address already in use" (CI of 36d4e62).
_handed_out: set[int] = set()
_lock = threading.Lock()


def port_range() -> range:
    """This process's share of LOW..HIGH: the whole of it, or under pytest-xdist one slice per worker.

    Each xdist worker is a process of its own with its own ``_handed_out``, so two workers probing the same
    range would hand out the same free port for two processes that bind it later; disjoint slices cannot."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... under xdist
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count <= 1:
        return range(LOW, HIGH)
    index = int(worker[2:]) % count
    size = (HIGH - LOW) // count
    return range(LOW + index * size, LOW + (index + 1) * size)


def free_port() -> int:
    """A free loopback port below Linux's ephemeral range (32768-60999), never the same one twice per run.

    Below the ephemeral range because the port is bound later: a port from that range can be taken in
    between by any outgoing connection of the run itself (the app's, the Collector's, the scorers').
    """
    ports = port_range()
    with _lock:
        for _ in range(500):
            port = random.choice(ports)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop}")
