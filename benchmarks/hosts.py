"""Worker processes on several hosts, with and without added network latency.

    sudo python benchmarks/hosts.py                          # 1, 2, 3 hosts; 0 and 5 ms
    sudo python benchmarks/hosts.py --rows 20000 --hosts 1,3 --delay 0,5,20

Hosts are Linux network namespaces on a bridge (``tests/netns/hosts.py``); a throwaway
PostgreSQL cluster listens on the bridge.  With a delay, each host reaches PostgreSQL through
its own delay line (``tests/netns/delayline.py``: every chunk held that many milliseconds
each way, order kept; this kernel has no netem).  Each host runs one ``stator run`` process
(concurrency 4) on ``--rows`` rows going a -> b -> c -> done through no-op handlers.  The rate
is transitions per second from the first row seen moving to the last row done (polled every
50 ms), so process start-up is left out.  Needs root (namespaces) and PostgreSQL's server binaries.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from faults.cluster import find_bindir, throwaway_cluster  # noqa: E402
from netns.hosts import DelayLine, Network, free_port, unavailable  # noqa: E402

STATOR = [sys.executable, "-c", "from stator.cli import main; main(prog_name='stator')"]


def run_once(
    network: Network, cluster_port: int, hosts: int, delay_ms: float, rows: int, n: int
) -> tuple[float, float]:
    """Transitions per second, and server connections per host at the end."""
    database = f"hosts_{n}"
    with psycopg.connect(host="127.0.0.1", port=cluster_port, user="postgres",
                         dbname="postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {database}")
        admin.execute(f"CREATE DATABASE {database}")
    local = f"postgresql+psycopg://postgres@127.0.0.1:{cluster_port}/{database}"
    env = {**os.environ, "STATOR_BENCH_DB": local, "PYTHONPATH": str(ROOT / "benchmarks")}
    subprocess.run([*STATOR, "migrate", "hosts_app:stator"], env=env, check=True,
                   capture_output=True)
    with psycopg.connect(local.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute("INSERT INTO host_rows (id) SELECT generate_series(1, %s)", (rows,))
    lines: list[DelayLine] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(hosts):
            port = cluster_port
            if delay_ms:
                port = free_port(network.address)
                lines.append(DelayLine((network.address, port), ("127.0.0.1", cluster_port),
                                       delay_ms=delay_ms))
            url = f"postgresql+psycopg://postgres@{network.address}:{port}/{database}"
            procs.append(subprocess.Popen(
                [*network.exec_prefix(i), *STATOR, "run", "hosts_app:stator",
                 "--concurrency", "4", "--log-level", "WARNING"],
                env={**env, "STATOR_BENCH_DB": url}, stdin=subprocess.DEVNULL,
            ))
        with psycopg.connect(local.replace("+psycopg", ""), autocommit=True) as conn:
            deadline = time.monotonic() + 900
            began: float | None = None
            while True:
                (moved, left) = conn.execute(  # type: ignore[misc]
                    "SELECT count(*) FILTER (WHERE state <> 'a'), "
                    "count(*) FILTER (WHERE state <> 'done') FROM host_rows").fetchone()
                now = time.monotonic()
                if began is None and moved:
                    began = now
                if left == 0:
                    (connections,) = conn.execute(  # type: ignore[misc]
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                        "AND pid <> pg_backend_pid()", (database,)).fetchone()
                    break
                if now > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError("the run did not finish")
                time.sleep(0.05)
        assert began is not None
        return 3 * rows / (now - began), connections / hosts
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for line in lines:
            line.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--hosts", default="1,2,3")
    parser.add_argument("--delay", default="0,5", help="milliseconds each way, comma-separated")
    args = parser.parse_args()
    reason = unavailable()
    bindir = find_bindir()
    if reason or bindir is None:
        print(f"error: {reason or 'no PostgreSQL server binaries'}", file=sys.stderr)
        return 2
    host_counts = [int(h) for h in args.hosts.split(",")]
    delays = [float(d) for d in args.delay.split(",")]
    network = Network(max(host_counts))
    results: dict[tuple[float, int], float] = {}
    try:
        with throwaway_cluster(bindir, f"127.0.0.1,{network.address}",
                               trust=(f"{network.subnet}0/24",)) as cluster:
            n = 0
            for delay in delays:
                for hosts in host_counts:
                    n += 1
                    rate, per_host = run_once(network, cluster.port, hosts, delay, args.rows, n)
                    results[(delay, hosts)] = rate
                    print(f"{hosts} host(s), {delay:g} ms each way: {rate:,.0f} transitions/s, "
                          f"{per_host:.0f} connections per host", flush=True)
    finally:
        network.close()
    print("\n| added latency (each way) | " + " | ".join(f"{h} host(s)" for h in host_counts)
          + " |")
    print("| --- |" + " --- |" * len(host_counts))
    for delay in delays:
        cells = " | ".join(f"{results[(delay, h)]:,.0f}/s" for h in host_counts)
        print(f"| {delay:g} ms | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
