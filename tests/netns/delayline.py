"""A user-space delay line: a TCP proxy that holds every chunk for a while before passing it on.

This kernel has no ``netem`` qdisc, so latency and a bad link are made here instead, between
the hosts and PostgreSQL: each chunk read from one side is written to the other ``delay``
milliseconds later (order kept, so the line adds latency without reordering), plus up to
``jitter`` milliseconds more.  ``stall`` is the chance that a chunk waits an extra ``stall_ms``,
as a TCP segment does when it was lost and sent again: a byte stream cannot lose bytes, a
lossy link only makes some of them late.

Run as a script (``python delayline.py LISTEN_HOST:PORT TARGET_HOST:PORT --delay 5``), one
process per host's link, so the proxy does not share a GIL with the test or the workers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import time
from dataclasses import dataclass


@dataclass
class Line:
    delay: float  # seconds, each way
    jitter: float = 0.0
    stall: float = 0.0  # probability per chunk
    stall_for: float = 0.2

    def hold(self) -> float:
        extra = random.uniform(0, self.jitter) if self.jitter else 0.0
        if self.stall and random.random() < self.stall:
            extra += self.stall_for
        return self.delay + extra


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: Line
) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    delivering = asyncio.create_task(deliver())
    last_due = 0.0
    try:
        while data := await reader.read(65536):
            last_due = max(last_due, time.monotonic() + line.hold())  # never reorder
            queue.put_nowait((last_due, data))
    except OSError:
        pass
    queue.put_nowait((last_due, b""))
    with contextlib.suppress(OSError):
        await delivering


async def _serve(listen: tuple[str, int], target: tuple[str, int], line: Line) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(_pump(client_r, server_w, line), _pump(server_r, client_w, line))
        except asyncio.CancelledError:
            pass  # the line is being shut down: end quietly, not with a logged traceback
        finally:
            for w in (client_w, server_w):
                w.close()

    server = await asyncio.start_server(handle, *listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        print("ready", flush=True)
        await stop.wait()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("listen", type=_address)
    parser.add_argument("target", type=_address)
    parser.add_argument("--delay", type=float, default=0.0, help="milliseconds each way")
    parser.add_argument("--jitter", type=float, default=0.0, help="up to this many ms more")
    parser.add_argument("--stall", type=float, default=0.0, help="chance a chunk is late")
    parser.add_argument("--stall-ms", type=float, default=200.0)
    args = parser.parse_args()
    line = Line(args.delay / 1000, args.jitter / 1000, args.stall, args.stall_ms / 1000)
    asyncio.run(_serve(args.listen, args.target, line))


if __name__ == "__main__":
    main()
