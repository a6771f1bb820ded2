"""One bounded cycle of the engine inside a web request (``views.run_batch``).

A web request is a poor place for handlers: a proxy gives up on it after some tens of
seconds, and the server's thread is needed back.  So, unlike ``Stator.run_once``:

- each handler runs on a thread of its own while the request's thread waits for it, at most
  until its state's ``timeout`` and at most until the request's ``budget`` ends; a handler
  still running then is abandoned and recorded as a timeout of that row (an attempt, with
  the stack it was stuck in), its late result discarded.  An abandoned thread cannot be
  stopped: at most ``MAX_ABANDONED`` may still be running in the process, and while that
  many are, requests run nothing and answer 503;
- whatever a handler raises, ``SystemExit`` and ``KeyboardInterrupt`` included, is that
  row's failure (recorded, an attempt counted); its batch-mates run and are written;
- a handler starts only while at least ``min(its timeout, budget / 2)`` of the budget is
  left (and, as in a worker, a whole timeout of the batch's lease); the rest of the batch is
  handed back unstarted (due at once, no attempt counted) for the next request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .._execute import Executor, Task, stack_of
from .._policy import Write, release
from .._stator import Stator, _run_async_inline
from .._store import TrackedModel

DEFAULT_BUDGET = 10.0  # seconds: well under the 30-60 s after which proxies give up
MAX_ABANDONED = 4  # handler threads past their deadline that may still be running

_abandoned: set[threading.Thread] = set()
_abandoned_lock = threading.Lock()


@dataclass
class RequestReport:
    claimed: int = 0
    transitions: int = 0
    errors: int = 0
    timeouts: int = 0
    lost: int = 0
    handed_back: int = 0
    per_model: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed, "transitions": self.transitions, "errors": self.errors,
            "timeouts": self.timeouts, "lost": self.lost, "handed_back": self.handed_back,
            "per_model": self.per_model,
        }


def too_many_abandoned() -> str | None:
    """Why nothing may run now (``MAX_ABANDONED`` abandoned threads still running), or None."""
    with _abandoned_lock:
        for thread in [t for t in _abandoned if not t.is_alive()]:
            _abandoned.discard(thread)
        hung = len(_abandoned)
    if hung < MAX_ABANDONED:
        return None
    return (f"{hung} handler threads abandoned past their deadline are still running in "
            "this process; nothing runs until they end")


def run_in_request(stator: Stator, budget: float) -> RequestReport:
    """Claim one batch per model and run it within ``budget`` seconds (see the module)."""
    ends = time.monotonic() + budget
    executor = Executor(stator.store, stator.clock, worker_id="in-request")
    report = RequestReport()
    groups: list[tuple[TrackedModel, list[Write]]] = []
    for tracked in stator.store.tracked:
        claimed = tracked.in_claim_order(
            stator.store.claim(tracked, stator.clock.now(), stator.batch_size)
        )
        report.per_model[tracked.name] = len(claimed)
        report.claimed += len(claimed)
        writes: list[Write] = []
        for obj, row in claimed:
            task = executor.prepare(tracked, obj, row)
            if ends - time.monotonic() < min(task.timeout, budget / 2):
                task.write = release(row, stator.clock.now())
                report.handed_back += 1
            elif executor.before(task):
                _run_bounded(executor, task, ends, report)
            report.lost += task.lost
            if task.write is not None:
                writes.append(task.write)
                report.errors += task.write.failure is not None
            elif task.committed is not None:
                report.transitions += task.committed.moved
        groups.append((tracked, writes))
    lost = stator.store.write_all(groups)
    report.lost += sum(len(v) for v in lost.values())
    for tracked, writes in groups:
        refused = lost.get(tracked.name, set())
        report.transitions += sum(w.moved and w.pk not in refused for w in writes)
    return report


def _run_bounded(executor: Executor, task: Task, ends: float, report: RequestReport) -> None:
    """Run ``task``'s handler on a thread of its own; stop waiting at its deadline or at the
    budget's end, whichever comes first, and record a timeout then."""
    limit = max(0.0, min(task.timeout, ends - time.monotonic()))
    task.timeout = limit  # what its timeout record will say, if it gets one
    task.started = time.monotonic()
    task.deadline = task.started + limit
    thread = threading.Thread(target=_handler_thread, args=(executor, task), daemon=True,
                              name=f"stator-in-request-{task.claimed.pk}")
    thread.start()
    thread.join(limit)
    if thread.is_alive() and task.abandon():
        with _abandoned_lock:
            _abandoned.add(thread)
        task.write = executor.timed_out(task, stack_of(thread))
        report.timeouts += 1


def _handler_thread(executor: Executor, task: Task) -> None:
    try:
        if task.tracked.graph.states[task.claimed.state].handler_is_async:
            asyncio.run(_run_async_inline(executor, task))
        else:
            executor.run_sync(task)
    except BaseException:  # recorded as the row's failure by run_sync: the thread ends here
        pass
    finally:
        executor.store.thread_done()  # this thread's connection goes with it
