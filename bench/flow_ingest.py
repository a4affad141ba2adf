"""Flow control on the ingest path: scheduler CPU per matched, signed delivery with a debounce
key, against the same agent without ``[flow]`` (the aim: at most 10% more).

Two real schedulers serve the same project but for the agent's ``[flow]``: plain, and
``key = "pull_request.number"`` with ``debounce = { period = "1h" }`` (each delivery's key is
computed from its body, and it folds into its key's pending item: a lookup and an update
instead of an insert). Both are paused, so only ingest runs: verify, parse, route, flow
control, commit, receipt. Deliveries go to 50 pull requests in turn. Rounds alternate between
the two, and the figure is the median of each over the rounds: the CPU time of the scheduler
process (/proc), not wall time, since the machine is shared.

    python bench/flow_ingest.py [--requests N] [--rounds R] [--threads T]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import threading
from pathlib import Path

import requests
from webhook_ingest import AGENT, CONFIG, cpu_seconds, delivery, start_signed_scheduler

DEBOUNCE = '\n[flow]\nkey = "pull_request.number"\ndebounce = { period = "1h" }\n'
KEYS = 50


def make_project(root: Path, flow: str) -> None:
    agent = root / "agents" / "reviewer"
    agent.mkdir(parents=True)
    (root / "config.toml").write_text(CONFIG)
    (agent / "SKILL.md").write_text("---\nname: reviewer\ndescription: bench\n---\nReview.\n")
    (agent / "config.toml").write_text(AGENT + flow)


def send(url: str, numbers: list[int], errors: list[str]) -> None:
    session = requests.Session()
    for n in numbers:
        body, headers = delivery(n, n % KEYS)  # distinct deliveries, KEYS pull requests
        response = session.post(url, data=body, headers=headers, timeout=30)
        if response.status_code != 202:
            errors.append(f"{n}: HTTP {response.status_code} {response.text[:100]}")


def round_cpu(tmp: Path, name: str, flow: str, requests_n: int, threads_n: int, seq: int) -> float:
    """Scheduler CPU seconds per delivery for one round of ``requests_n`` deliveries."""
    root = tmp / f"{name}-{seq}"
    make_project(root, flow)
    proc, base = start_signed_scheduler(root, tmp / f"credentials-{name}-{seq}")
    try:
        token = (root / ".al" / "control-token").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}
        requests.post(f"{base}/control/pause", json={}, headers=auth, timeout=10).raise_for_status()
        url = f"{base}/webhooks/github"
        errors: list[str] = []
        send(url, list(range(-200, 0)), errors)  # warm-up: connections, caches, pages
        shares = [list(range(i, requests_n, threads_n)) for i in range(threads_n)]
        workers = [threading.Thread(target=send, args=(url, s, errors)) for s in shares]
        before = cpu_seconds(proc.pid)
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        spent = cpu_seconds(proc.pid) - before
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    if errors:
        raise SystemExit(f"{len(errors)} failed deliveries, e.g. {errors[0]}")
    return spent / requests_n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"plain": [], "debounce": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seq in range(args.rounds):
            order = [("plain", ""), ("debounce", DEBOUNCE)]
            for name, flow in order if seq % 2 == 0 else order[::-1]:
                cpu = round_cpu(Path(tmp), name, flow, args.requests, args.threads, seq)
                figures[name].append(cpu)
    plain, debounced = (statistics.median(figures[k]) for k in ("plain", "debounce"))
    for name, values in figures.items():
        print(f"{name}: " + ", ".join(f"{v * 1000:.3f}" for v in values) + " ms CPU per delivery")
    print(
        f"flow ingest: {debounced * 1000:.3f} ms CPU per delivery with a debounce key vs "
        f"{plain * 1000:.3f} ms without ({(debounced / plain - 1) * 100:+.1f}%)"
    )


if __name__ == "__main__":
    main()
