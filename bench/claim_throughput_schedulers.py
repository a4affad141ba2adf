"""End-to-end throughput of 1, 2 and 4 scheduler processes (`al start`) on one PostgreSQL queue.

bench/claim_throughput_postgres.py measures the store's claims alone; this measures what a user
gets from adding scheduler hosts: each host is its own checkout of one project with ``database``
set to the same PostgreSQL database (a fresh schema per measurement), N items are queued for an
agent with the offline scripted provider (one turn) in host-user mode, and the figure is runs
finished ``done`` per second of wall time, from unpausing the queue to the last run's end. The agent's
``scale`` (default 16) is the cap across all hosts. SQLite's single scheduler is measured beside.
Every host runs on this machine, so the figure shows the coordination cost of more hosts, not
more CPUs. PostgreSQL's URL: --url, else AL_TEST_POSTGRES_URL (``bash .ci/postgres.sh``).

    python bench/claim_throughput_schedulers.py [--items N] [--scale S] [--url postgresql://...]
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llamaherd.client import ControlClient
from llamaherd.store import Store
from llamaherd.testing import postgres_schema

SCHEDULERS = (1, 2, 4)
PROJECT = """
{database}

[models.scripted]
provider = "scripted"
model = "scripted"

[gateway]
port = 0
"""
AGENT = """
models = ["scripted"]
scale = {scale}

[runtime]
type = "host-user"
run_as = "{user}"
"""
SCRIPT = '[[turns]]\ntext = "done"\n'


def checkout(root: Path, url: str, scale: int) -> Path:
    """One host's copy of the project."""
    agent = root / "agents" / "work"
    agent.mkdir(parents=True)
    database = f'database = "{url}"' if url.startswith("postgresql") else ""
    (root / "config.toml").write_text(PROJECT.format(database=database))
    (agent / "SKILL.md").write_text("---\nname: work\ndescription: bench agent\n---\nWork.\n")
    (agent / "config.toml").write_text(AGENT.format(scale=scale, user=getpass.getuser()))
    (agent / "script.toml").write_text(SCRIPT)
    return root


def start(project: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "llamaherd", "--project", str(project), "start", "--grace", "5"]
    with open(project / "scheduler.log", "w") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    info = project / ".al" / "scheduler.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if json.loads(info.read_text())["pid"] == proc.pid:
                return proc
        except (OSError, ValueError, KeyError):
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(
        f"scheduler in {project} did not start: {(project / 'scheduler.log').read_text()}"
    )


def measure(url: str, items: int, schedulers: int, scale: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        roots = [checkout(Path(tmp) / f"host{i}", url, scale) for i in range(schedulers)]
        store = Store.open(url, str(roots[0]))
        store.set_paused(None, True)
        for n in range(items):
            store.enqueue("work", "manual", {"n": n}, limit=items)
        procs = [start(root) for root in roots]
        try:
            begin = time.perf_counter()
            store.set_paused(None, False)
            for root in roots:  # written behind their backs: wake them, as `al resume` does
                with ControlClient.of_state_dir(root / ".al") as client:
                    client.post("/control/wake")
            while store.queue_depth().get("work") or store.active_count("work"):
                time.sleep(0.05)
            elapsed = time.perf_counter() - begin
            states = store.stats("work")["states"]
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
            store.close()
    if states.get("done") != items:
        print(f"  not every run ended done: {states}")
    return states.get("done", 0) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--scale", type=int, default=16)
    parser.add_argument("--url", default=os.environ.get("AL_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    figures = {}
    if args.url:
        for schedulers in SCHEDULERS:
            with postgres_schema(args.url, "bench_") as (_schema, url):
                figures[f"postgresql x{schedulers}"] = measure(
                    url, args.items, schedulers, args.scale
                )
            print(
                f"postgresql {schedulers} scheduler(s): {figures[f'postgresql x{schedulers}']:6.1f} runs/s"
            )
    figures["sqlite x1"] = measure("sqlite:///.al/work-queue.db", args.items, 1, args.scale)
    print(f"sqlite     1 scheduler:    {figures['sqlite x1']:6.1f} runs/s")
    print(
        f"end-to-end runs/s, {args.items} one-turn runs, scale {args.scale} across hosts: "
        + "; ".join(f"{name} {rate:.1f}" for name, rate in figures.items())
    )


if __name__ == "__main__":
    main()
