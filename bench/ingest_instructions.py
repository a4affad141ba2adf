"""Scheduler instructions per webhook delivery (callgrind): repeatable whatever the machine's
load, unlike time. ``al start -H`` runs under ``valgrind --tool=callgrind --instr-atstart=no``
on the side-by-side project (bench/compare/common.py: one agent taking ``issues``), paused;
after 30 warm-up deliveries of a kind, counting is switched on for ``--requests`` signed GitHub
deliveries from one keep-alive connection, and the dump's total divided by their number.

    python bench/ingest_instructions.py [--requests N]
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).with_name("compare")))
from common import binary, credentials, free_port, load, make_project, ready, run_cli  # noqa: E402
from webhook_ingest import EVENTS, delivery  # noqa: E402


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True, check=True)


def count(pid: int, out: Path, port: int, kind: str, requests: int) -> float:
    """Instructions per delivery of ``kind`` in the scheduler process ``pid``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    event, payload = EVENTS[kind]

    def post() -> None:
        body, headers = delivery(event, payload)
        conn.request("POST", "/webhooks/github", body=body, headers=headers)
        reply = conn.getresponse()
        reply.read()
        assert reply.status < 300, reply.status

    for _ in range(30):
        post()
    before = set(out.parent.glob(f"{out.name}.*"))
    control(pid, "-z")
    control(pid, "-i", "on")
    for _ in range(requests):
        post()
    control(pid, "-i", "off")
    control(pid, f"--dump={kind}")
    deadline = time.monotonic() + 60
    while not (dumps := set(out.parent.glob(f"{out.name}.*")) - before):
        assert time.monotonic() < deadline, "callgrind wrote no dump"
        time.sleep(0.5)
    time.sleep(1)  # the dump is written whole
    text = next(iter(dumps)).read_text()
    total = max(int(line.split()[1]) for line in text.splitlines() if line.startswith("totals:"))
    return total / requests


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        root = make_project(Path(tmp) / "project", 1, port)
        env = credentials(Path(tmp) / "credentials")
        out = Path(tmp) / "callgrind.out"
        python = Path(binary("ours")).with_name("python")
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={out}.%p", str(python), "-m", "llamaherd", "start", "-H"]  # fmt: skip
        with open(Path(tmp) / "scheduler.log", "w") as log:
            proc = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=log)
        try:
            while not ready(port):
                assert proc.poll() is None, (Path(tmp) / "scheduler.log").read_text()[-2000:]
                time.sleep(0.5)
            run_cli("ours", ["pause"], root, env)
            for kind in EVENTS:
                per = count(proc.pid, out, port, kind, args.requests)
                print(f"webhook {kind}, c=1: {per / 1e6:.2f} M scheduler instructions per "
                      f"delivery ({args.requests} deliveries, {load()})", flush=True)  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)


if __name__ == "__main__":
    os.environ.setdefault("AL_LOG_LEVEL", "WARNING")
    main()
