"""Workers on three hosts (network namespaces) sharing one PostgreSQL, and the network failing
under them: a host's link cut mid-handler for longer than the lease, the server restarted, a
slow and lossy link.  After each: no row lost, no transition applied twice (the ledger and
every row's ``state_history``), and the workers carried on without being restarted.

Waits are bounded polls; the figures (takeover time, handler re-runs) are printed, not
asserted.  The partition test fails without ``idle_in_transaction_session_timeout``: the cut
host's row locks would keep its rows from every other host until its link came back.
"""

from __future__ import annotations

import signal
import time

import pytest

from faults.load import outage_lines
from processes.procs import Proc, assert_exactly_once, error_count, lost_writes, wait_until

from .conftest import NetApp, NetCluster
from .hosts import DelayLine, Network, free_port

pytestmark = pytest.mark.slow

TIMEOUT = 4.0  # every handler's deadline: leases of 8 s, an idle-in-transaction limit of 6 s
LEASE = 2 * TIMEOUT
SLEEP = 0.4  # each handler sleeps this long with its row locked
MORE = 120  # rows added once a cut host's link is back


def committed(app: NetApp) -> set[tuple[int, str]]:
    return {(row_id, step) for row_id, step, _pid in app.ledger()}


def in_flight(app: NetApp, proc: Proc) -> set[tuple[int, str]]:
    """(row, step) handlers this process started that have not been committed (by anyone)."""
    started = {(row_id, step) for row_id, step, pid in app.traced() if pid == proc.pid}
    return started - committed(app)


def commits_by(app: NetApp, proc: Proc) -> int:
    return sum(1 for _row, _step, pid in app.ledger() if pid == proc.pid)


def start_hosts(
    app: NetApp, hosts: Network, urls: list[str], rows: int, timeout: float = TIMEOUT
) -> list[Proc]:
    app.migrate()
    app.insert(rows)
    return [
        app.spawn_on(hosts, i, url, "--concurrency", "4", sleep=SLEEP, timeout=timeout)
        for i, url in enumerate(urls)
    ]


def finish(app: NetApp, procs: list[Proc], rows: int) -> None:
    wait_until(lambda: app.done() == rows, f"all {rows} rows to be done", timeout=240,
               watch=procs, app=app)
    for proc in procs:
        proc.send(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(60) == 0, proc.describe()
    assert_exactly_once(app, rows)
    reruns = len(app.traced()) - 3 * rows
    print(f"\nhandler runs repeated: {reruns}; writes refused by the fence: {lost_writes(app)}")


def test_a_cut_host_loses_its_rows_to_the_others_and_its_late_writes(
    hosts: Network, net_cluster: NetCluster, net_app: NetApp
) -> None:
    rows = 240
    procs = start_hosts(net_app, hosts, [net_cluster.host_url] * 3, rows)
    cut = procs[0]
    wait_until(lambda: in_flight(net_app, cut), "host 0 to be mid-handler", watch=procs,
               app=net_app)
    hosts.cut(0)
    cut_at = time.monotonic()
    held = in_flight(net_app, cut)  # row locks stranded in its sessions on the server
    before = commits_by(net_app, cut)
    try:
        def taken_over() -> bool:
            done = committed(net_app)
            elsewhere = {(r, s) for r, s, pid in net_app.traced() if pid != cut.pid}
            return all(pair in done or pair in elsewhere for pair in held)

        # Must happen while the link is still down: with the locks stranded until the host
        # comes back, nothing else could take these rows.
        wait_until(taken_over, f"the other hosts to take over {len(held)} rows",
                   timeout=5 * LEASE, watch=procs[1:], app=net_app)
        took = time.monotonic() - cut_at
        time.sleep(max(0.0, cut_at + 1.5 * LEASE - time.monotonic()))  # cut past the lease
    finally:
        hosts.restore(0)
    print(f"\ncut host's {len(held)} in-flight rows taken over after {took:.1f}s "
          f"(lease {LEASE:g}s)")
    # Fresh work for the host that comes back: the takeover can take until the server drops
    # the cut sessions, and by then the other hosts may have finished every first row.
    net_app.insert(MORE, start=rows + 1)
    wait_until(lambda: commits_by(net_app, cut) > before, "the cut host to commit again",
               timeout=60, watch=procs, app=net_app)
    finish(net_app, procs, rows + MORE)
    assert lost_writes(net_app, cut.pid) >= 1  # its late results met the fence
    lines = outage_lines(cut)
    assert lines[("worker", "unavailable")] == 1, lines
    assert all(n == 1 for n in lines.values()), lines  # once per activity, start and end


def test_a_database_restart_under_three_hosts(
    hosts: Network, net_cluster: NetCluster, net_app: NetApp
) -> None:
    rows = 240
    procs = start_hosts(net_app, hosts, [net_cluster.host_url] * 3, rows)
    wait_until(lambda: all(commits_by(net_app, p) for p in procs), "every host to commit",
               watch=procs, app=net_app)
    net_cluster.cluster.restart("fast", downtime=1.0)
    net_app.engine.dispose()  # the test's own connections died with the server
    before = {p.pid: commits_by(net_app, p) for p in procs}
    wait_until(lambda: all(commits_by(net_app, p) > before[p.pid] for p in procs),
               "every host to commit again after the restart", timeout=90, watch=procs,
               app=net_app)
    finish(net_app, procs, rows)
    for proc in procs:
        assert outage_lines(proc)[("worker", "unavailable")] <= 1


def test_a_slow_lossy_link(hosts: Network, net_cluster: NetCluster, net_app: NetApp) -> None:
    """Host 0 reaches PostgreSQL through a delay line adding 5 ms each way, up to 200 ms of
    jitter and, on 5% of the chunks, the 200 ms of a lost segment sent again."""
    cluster = net_cluster.cluster
    port = free_port(hosts.address)
    line = DelayLine(
        (hosts.address, port), ("127.0.0.1", cluster.port), delay_ms=5,
        jitter_ms=200, stall=0.05, stall_ms=200,
    )
    try:
        urls = [net_cluster.url_via(hosts.address, port), net_cluster.host_url]
        rows = 120
        # A deadline that suits the link (a handler makes a few round trips, each up to
        # 0.8 s late here): the jitter and the late chunks cost time, never an attempt.
        procs = start_hosts(net_app, hosts, urls, rows, timeout=6.0)
        finish(net_app, procs, rows)
        assert error_count(net_app) == 0
        slow = procs[0]
        assert commits_by(net_app, slow) > 0
        assert "Traceback" not in slow.stderr(), slow.describe()
    finally:
        line.close()
