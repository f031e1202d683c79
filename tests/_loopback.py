"""The loopback HTTP servers the tests stand up (fake judges, OTLP receivers, webhooks), in the background."""

from __future__ import annotations

import socketserver
import threading


def serve_in_background(server: socketserver.BaseServer, name: str = "loopback-server") -> threading.Thread:
    """``server.serve_forever`` on a daemon thread, polling every 0.05 s: ``shutdown()`` returns when it next
    polls, and socketserver's default of 0.5 s added up to half a second per test's tear-down."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
    )
    thread.start()
    return thread
