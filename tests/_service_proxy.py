"""A loopback L4 proxy standing for the Kubernetes Service in front of the kit's Collectors (a StatefulSet
of 2), routing as kube-proxy does: each new TCP connection goes to one backend that is ready and not
terminating (round robin), and bytes are copied both ways until either side closes. A connection already
open stays with its backend, as conntrack keeps it, until that backend closes it (a Collector that stops
sends its gRPC clients GOAWAY first, and they reconnect: through here, to the other one).

- ready: the backend's health_check endpoint answers 200 (polled every 0.2 s, like a readiness probe);
- terminating: set by the harness when it sends the backend SIGTERM (Kubernetes takes a terminating pod out of
  the Service's endpoints at once, ready or not), cleared when it starts the backend again.

Run by tests/_fleet_fixtures.py (``Fleet(collectors=2)``) as its own process:

    python _service_proxy.py --control PORT --health HOST:PORT0,HOST:PORT1 --route LISTEN=PORT0,PORT1 ...

The control port takes one command per connection, a line: ``terminating I``, ``started I`` or ``stats``,
and answers one JSON line (each backend's state and the connections routed to it). ``--no-endpoints`` routes
every connection round robin whatever the backends' state: a Service that never drops a stopped Collector,
for the tests' check that the rolling restart's result depends on the routing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from dataclasses import dataclass
from typing import Any

POLL_S = 0.2
CHUNK = 65536


@dataclass
class Backend:
    health: str  # host:port of its health_check endpoint
    ready: bool = False
    terminating: bool = False
    routed: int = 0  # connections sent to it
    routed_terminating: int = 0  # ... while it was terminating (only with --no-endpoints)
    open: int = 0


@dataclass
class Proxy:
    backends: list[Backend]
    endpoints: bool = True  # False: --no-endpoints
    refused: int = 0  # connections closed at once: no backend in the endpoints
    _next: int = 0

    def pick(self) -> int | None:
        count = len(self.backends)
        for step in range(count):
            index = (self._next + step) % count
            backend = self.backends[index]
            if not self.endpoints or (backend.ready and not backend.terminating):
                self._next = index + 1
                return index
        return None

    async def poll(self) -> None:
        while True:
            for backend in self.backends:
                backend.ready = await _healthy(backend.health)
            await asyncio.sleep(POLL_S)

    async def serve(self, listen: int, ports: list[int]) -> asyncio.Server:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            index = self.pick()
            if index is None:
                self.refused += 1
                writer.close()
                return
            backend = self.backends[index]
            backend.routed += 1
            backend.routed_terminating += int(backend.terminating)
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", ports[index])
            except OSError:
                self.refused += 1  # nothing listens there (a stopped backend, with --no-endpoints)
                writer.close()
                return
            backend.open += 1
            try:
                await _splice(reader, writer, up_reader, up_writer)
            finally:
                backend.open -= 1

        return await asyncio.start_server(accepted, "127.0.0.1", listen)

    def command(self, line: str) -> dict[str, Any]:
        verb, _, arg = line.strip().partition(" ")
        if verb in ("terminating", "started"):
            self.backends[int(arg)].terminating = verb == "terminating"
        elif verb != "stats":
            return {"error": f"unknown command {line.strip()!r}"}
        return {
            "backends": [
                {
                    "ready": b.ready,
                    "terminating": b.terminating,
                    "routed": b.routed,
                    "routed_terminating": b.routed_terminating,
                    "open": b.open,
                }
                for b in self.backends
            ],
            "refused": self.refused,
        }


async def _healthy(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 0.5)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(b"GET / HTTP/1.0\r\nHost: health\r\n\r\n")
        status = await asyncio.wait_for(reader.readline(), 0.5)
        return status.split(b" ")[1:2] == [b"200"]
    except (OSError, TimeoutError, IndexError):
        return False
    finally:
        writer.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()


async def _splice(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until either side closes, then close both (what the other side sent is delivered)."""
    tasks = [asyncio.create_task(_copy(reader, up_writer)), asyncio.create_task(_copy(up_reader, writer))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for w in (writer, up_writer):
            with contextlib.suppress(OSError):
                w.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument(
        "--health", required=True, help="each backend's health_check host:port, comma-separated"
    )
    parser.add_argument("--route", action="append", required=True, help="LISTEN=PORT0,PORT1,...")
    parser.add_argument("--no-endpoints", action="store_true")
    args = parser.parse_args()
    proxy = Proxy([Backend(h) for h in args.health.split(",")], endpoints=not args.no_endpoints)
    servers = []
    for route in args.route:
        listen, _, ports = route.partition("=")
        servers.append(await proxy.serve(int(listen), [int(p) for p in ports.split(",")]))

    async def control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode()
        writer.write(json.dumps(proxy.command(line)).encode() + b"\n")
        await writer.drain()
        writer.close()

    servers.append(await asyncio.start_server(control, "127.0.0.1", args.control))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    poller = asyncio.create_task(proxy.poll())
    await stop.wait()
    poller.cancel()
    for server in servers:
        server.close()


if __name__ == "__main__":
    asyncio.run(main())
