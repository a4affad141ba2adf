"""One webhook delivery matching 200 agents: how long until the HTTP answer (the 202 goes out
once the 200 work items and the receipt are committed, in one transaction).

A real scheduler process (`al start`) serves a temporary project on 127.0.0.1 with one GitHub
source and N agents that all take `pull_request` deliveries. The scheduler is paused, so the
queued runs do not start and compete with the next round; every round sends one distinct, signed
delivery and checks that it queued one item per agent.

    python bench/webhook_fanout.py [--agents N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import requests
from webhook_ingest import AGENT, CONFIG, cpu_seconds, delivery, start_signed_scheduler


def make_project(root: Path, agents: int) -> None:
    (root / "config.toml").parent.mkdir(parents=True)
    (root / "config.toml").write_text(CONFIG)
    for n in range(agents):
        folder = root / "agents" / f"reviewer-{n:03d}"
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(
            f"---\nname: reviewer-{n:03d}\ndescription: bench\n---\nReview.\n"
        )
        (folder / "config.toml").write_text(AGENT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        make_project(root, args.agents)
        proc, base = start_signed_scheduler(root, Path(tmp) / "credentials")
        answers: list[float] = []
        try:
            token = (root / ".al" / "control-token").read_text().strip()
            http = requests.Session()
            bearer = {"Authorization": f"Bearer {token}"}
            http.post(f"{base}/control/pause", json={}, headers=bearer, timeout=10)
            cpu_before = cpu_seconds(proc.pid)
            for n in range(args.rounds + 1):  # round 0 warms connections and SQLite pages
                body, headers = delivery(n)
                start = time.perf_counter()
                response = http.post(f"{base}/webhooks/github", data=body, headers=headers)
                took = time.perf_counter() - start
                queued = response.json().get("agents", [])
                if response.status_code != 202 or len(queued) != args.agents:
                    raise SystemExit(
                        f"round {n}: HTTP {response.status_code}, {len(queued)} agents"
                    )
                if n:
                    answers.append(took)
            server_cpu = cpu_seconds(proc.pid) - cpu_before
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    print(
        f"{args.rounds} deliveries, each matching {args.agents} agents ({args.agents} items and "
        f"a receipt in one commit); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(f"scheduler CPU per delivery: {server_cpu / (args.rounds + 1) * 1000:.1f} ms")
    print(
        f"webhook fan-out to {args.agents} agents: HTTP answer p50 "
        f"{statistics.median(answers) * 1000:.1f} ms, max {max(answers) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
