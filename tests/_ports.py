"""Loopback ports for the processes a test starts, from one helper: no two callers in a run share one."""

from __future__ import annotations

import random
import socket
import threading

# Ports handed out in this pytest process. A port is chosen here and bound later by another process (a
# scorer, a Collector, a broker); a second caller probing before that bind would find the same port free,
# which made a Collector fail to start with "address already in use" (CI of 36d4e62).
_handed_out: set[int] = set()
_lock = threading.Lock()


def free_port() -> int:
    """A free loopback port below Linux's ephemeral range (32768-60999), never the same one twice per run.

    Below the ephemeral range because the port is bound later: a port from that range can be taken in
    between by any outgoing connection of the run itself (the app's, the Collector's, the scorers').
    """
    with _lock:
        for _ in range(500):
            port = random.randrange(20000, 32000)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port in 20000-32000")
