"""Worker processes for the benchmark: a real Stator worker in a process of its own.

Run as ``python -m stator._bench._child`` with its SPEC (JSON) in ``STATOR_BENCH_CHILD``: the
environment, not the command line, where ``ps`` would show the database password to every
user.  The child measures itself (CPU,
memory, statements sent) and talks to the parent one JSON line at a time on stdout, taking
orders on stdin, so the parent can start several workers at the same moment and read the
database server's CPU while the workers still hold their connections:

    child  → {"ready": …}      connected, worker built
    parent → go
    child  → {"window": …} / {"serving": …}   (idle / serve modes)
    parent → stop                             (idle / serve modes)
    child  → {"result": …}
    parent → exit              (the child disposes its engine and ends)

Modes: ``drain`` runs until nothing is due (throughput, memory, fan-out), ``idle`` runs a
worker with nothing to do, ``serve`` runs a worker until told to ``stop`` (latency).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from .._stator import Stator
from .._worker import Worker
from ..errors import StatorError
from ._measure import StatementCounter, cpu_seconds, peak_rss_mb, rss_mb
from ._models import MODELS, FanOut


class BenchError(StatorError):
    """A benchmark step failed (a worker process died or stalled)."""


@dataclass
class ChildSpec:
    url: str
    mode: str  # "drain", "idle" or "serve"
    models: list[str]
    concurrency: int = 4
    batch_size: int = 100
    seconds: float = 0.0  # idle: the measured window
    settle: float = 0.5  # idle / serve: time for the worker to settle before measuring
    sample_every: float = 0.0  # drain: sample RSS this often (0: not at all)
    fan_out: int = 10


# -- the child side --------------------------------------------------------------------------


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _expect(word: str) -> None:
    line = sys.stdin.readline()
    if line.strip() != word:
        raise SystemExit(f"expected {word!r} from the parent, got {line.strip()!r}")


class RssSampler:
    """Samples this process's resident memory in a thread: (seconds since start, MB)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._began = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.samples.append((round(time.perf_counter() - self._began, 3), round(rss_mb(), 2)))
            if self._stop.wait(self.every):
                return

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join()
        return self.samples


def _drain(stator: Stator, spec: ChildSpec, counter: StatementCounter) -> dict[str, Any]:
    worker = stator.worker(until_idle=True, idle_window=0.0)
    _say({"ready": True, "pid": os.getpid()})
    _expect("go")
    sampler = RssSampler(spec.sample_every) if spec.sample_every > 0 else None
    cpu0, statements0, start = cpu_seconds(), counter.count, time.time()
    began = time.perf_counter()
    summary = worker.run()
    seconds = time.perf_counter() - began
    return {
        "start": start, "end": start + seconds, "seconds": seconds,
        "cpu": cpu_seconds() - cpu0, "statements": counter.count - statements0,
        "transitions": summary.transitions,
        "per_model": {name: c.transitions for name, c in summary.counters.items()},
        "peak_rss_mb": peak_rss_mb(),
        "rss": sampler.stop() if sampler is not None else [],
    }


def _start(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, name="bench-worker")
    thread.start()
    return thread


def _idle(stator: Stator, spec: ChildSpec, counter: StatementCounter) -> dict[str, Any]:
    worker = stator.worker()
    _say({"ready": True, "pid": os.getpid()})
    _expect("go")
    thread = _start(worker)
    time.sleep(spec.settle)  # past start-up: the first heartbeat and look for due rows
    cpu0, statements0, began = cpu_seconds(), counter.count, time.perf_counter()
    _say({"window": "start"})
    time.sleep(spec.seconds)
    cpu, statements = cpu_seconds() - cpu0, counter.count - statements0
    seconds = time.perf_counter() - began
    _say({"window": "end"})
    _expect("stop")  # the parent has read the server's counters; the stop's writes are not idle
    worker.stop()
    thread.join()
    return {"seconds": seconds, "cpu": cpu, "statements": statements,
            "peak_rss_mb": peak_rss_mb()}


def _serve(stator: Stator, spec: ChildSpec, counter: StatementCounter) -> dict[str, Any]:
    worker = stator.worker()
    _say({"ready": True, "pid": os.getpid()})
    _expect("go")
    thread = _start(worker)
    time.sleep(spec.settle)  # the LISTEN connection, or the data_version poll, is in place
    _say({"serving": True})
    _expect("stop")
    worker.stop()
    thread.join()
    return {"statements": counter.count, "peak_rss_mb": peak_rss_mb()}


MODES: dict[str, Callable[[Stator, ChildSpec, StatementCounter], dict[str, Any]]] = {
    "drain": _drain, "idle": _idle, "serve": _serve,
}


SPEC_VARIABLE = "STATOR_BENCH_CHILD"


def main() -> None:
    spec = ChildSpec(**json.loads(os.environ.pop(SPEC_VARIABLE)))
    FanOut.children_per_parent = spec.fan_out
    stator = Stator(
        spec.url, [MODELS[name] for name in spec.models],
        concurrency=spec.concurrency, batch_size=spec.batch_size,
    )
    counter = StatementCounter(stator.engine)
    with stator.engine.connect():
        pass  # connect before the clock starts
    result = MODES[spec.mode](stator, spec, counter)
    _say({"result": result})
    _expect("exit")  # the parent has read the server's CPU for our connections
    stator.dispose()


# -- the parent side -------------------------------------------------------------------------


class Child:
    """One worker process, seen from the benchmark."""

    def __init__(self, spec: ChildSpec, folder: Path) -> None:
        self.spec = spec
        self._err_path = folder / f"child-{id(self)}.err"
        self._err: IO[bytes] = open(self._err_path, "wb")  # noqa: SIM115 (closed in kill)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stator._bench._child"],
            env=dict(os.environ, **{SPEC_VARIABLE: json.dumps(asdict(spec))}),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, name="bench-child-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def expect(self, key: str, timeout: float) -> dict[str, Any]:
        """The next message carrying ``key``; raises if the child dies or stalls."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                raise BenchError(
                    f"worker process {self.proc.pid} ({self.spec.mode}) sent no {key!r} "
                    f"within {timeout:g}s{self._stderr_tail()}"
                ) from None
            if line is None:
                code = self.proc.wait()
                raise BenchError(
                    f"worker process {self.proc.pid} ({self.spec.mode}) exited with code "
                    f"{code} before sending {key!r}{self._stderr_tail()}"
                )
            with suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict) and key in message:
                    return message

    def send(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def finish(self) -> None:
        """Let the child end by itself (it disposes its engine); kill it if it does not."""
        with suppress(OSError):
            self.send("exit")
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with suppress(OSError):
                    stream.close()
        self._err.close()

    def _stderr_tail(self) -> str:
        self._err.flush()
        text = self._err_path.read_text(errors="replace").strip()
        return f":\n{text[-2000:]}" if text else ""


@contextmanager
def children(specs: list[ChildSpec], folder: Path) -> Iterator[list[Child]]:
    """Start one process per spec, wait until all are ready; always kill them at the end."""
    started: list[Child] = []
    try:
        for spec in specs:
            started.append(Child(spec, folder))
        for child in started:
            child.expect("ready", timeout=60)
        yield started
    finally:
        for child in started:
            child.kill()


if __name__ == "__main__":
    main()
