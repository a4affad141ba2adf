"""Slowloris: what N idle half-open connections cost a scheduler, and whether it still answers.

A real `al start` (default `[gateway] maxConnections` 1000, `headerTimeout` 10 s) serves a
temporary project on 127.0.0.1. This process opens N TCP connections to it that never send a
byte, then, with all of them open, times control calls (`GET /control/health` with the token,
each on a new connection) and counts the scheduler's open file descriptors. Before the
connection cap, 20,000 such connections exhausted the scheduler's descriptors and the CLI and
webhooks were refused.

    python bench/idle_connections.py [--connections N] [--calls C]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from webhook_ingest import make_project, start_signed_scheduler  # noqa: E402


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.connections + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.connections + 100), hard))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        make_project(root)
        proc, base = start_signed_scheduler(root, Path(tmp) / "credentials")
        port = int(base.rsplit(":", 1)[1])
        idle: list[socket.socket] = []
        try:
            token = (root / ".al" / "control-token").read_text().strip()
            fds_before = open_fds(proc.pid)
            started = time.perf_counter()
            for _ in range(args.connections):
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=30))
            opened_in = time.perf_counter() - started
            latencies = []
            for _ in range(args.calls):
                start = time.perf_counter()
                response = requests.get(
                    f"{base}/control/health",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=30,
                )
                latencies.append(time.perf_counter() - start)
                response.raise_for_status()
            fds_during = open_fds(proc.pid)
        finally:
            for sock in idle:
                sock.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    cuts = statistics.quantiles(latencies, n=100)
    print(f"idle connections: {args.connections} opened in {opened_in:.1f} s, none sending")
    print(f"scheduler file descriptors: {fds_before} before, {fds_during} with them all open")
    print(
        f"control calls during the flood: {args.calls}, all answered; p50 {cuts[49] * 1000:.1f} "
        f"ms, max {max(latencies) * 1000:.1f} ms; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"idle connections: {args.connections} held open -> {fds_during} scheduler fds, "
        f"control p50 {cuts[49] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
