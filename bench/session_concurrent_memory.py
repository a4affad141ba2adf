"""Scheduler memory for 200 concurrent runs (each a session thread holding a host-user sandbox).

One process, as the scheduler: 200 manual runs of an agent with scale 200 are dispatched; every
run's first model request blocks until all 200 sessions are inside it, so they are alive at
once. The figure is the process's RSS growth over the idle engine, total and per run.

    python bench/session_concurrent_memory.py [--runs N]
"""

from __future__ import annotations

import argparse
import getpass
import tempfile
import threading
import time
from pathlib import Path

from llamaherd import hookimpl
from llamaherd.plugins import get_manager
from llamaherd.types import Reply, TriggerEvent

ARRIVED = threading.Semaphore(0)
RELEASE = threading.Event()


class GateProvider:
    """Holds every run's first model request until released."""

    name = "gate"
    description = "benchmark provider"
    schema: dict = {}
    credential_type = None
    key_required = False

    def complete(self, messages, tools, model, options):
        ARRIVED.release()
        RELEASE.wait(120)
        return Reply(text="done")


class Plugin:
    @hookimpl
    def register_providers(self, register):
        register(GateProvider())


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def project(root: Path, runs: int) -> Path:
    (root / "agents" / "bench").mkdir(parents=True)
    (root / "config.toml").write_text(
        f'workQueueSize = {runs}\n[models.gate]\nprovider = "gate"\nmodel = "x"\n'
    )
    (root / "agents" / "bench" / "SKILL.md").write_text("---\nname: bench\n---\nWork.\n")
    (root / "agents" / "bench" / "config.toml").write_text(
        f'models = ["gate"]\nscale = {runs}\n'
        f'[runtime]\ntype = "host-user"\nrun_as = "{getpass.getuser()}"\n'
    )
    return root


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    from llamaherd.engine import Engine
    from llamaherd.project import load_project

    get_manager().register(Plugin(), "bench-gate")
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(load_project(project(Path(tmp), args.runs)))
        engine.serve(port=0)
        try:
            # Warm up: one run end to end, so imports and caches are not counted.
            RELEASE.set()
            engine.emit(TriggerEvent("bench", "manual"))
            engine.dispatch()
            ARRIVED.acquire(timeout=30)
            for thread in list(engine.threads.values()):
                thread.join(10)
            RELEASE.clear()
            base = rss_kb()
            started = time.perf_counter()
            for _ in range(args.runs):
                engine.emit(TriggerEvent("bench", "manual"))
            engine.dispatch()
            for _ in range(args.runs):
                if not ARRIVED.acquire(timeout=120):
                    raise SystemExit("runs did not all reach the model")
            elapsed = time.perf_counter() - started
            peak = rss_kb()
            active = engine.store.active_count("bench")
            RELEASE.set()
            for thread in list(engine.threads.values()):
                thread.join(30)
        finally:
            engine.close()
    grown = (peak - base) / 1024
    print(
        f"{active} concurrent runs (all in their first model request after {elapsed:.1f} s): "
        f"scheduler RSS +{grown:.1f} MiB, {grown * 1024 / args.runs:.0f} KiB per run"
    )


if __name__ == "__main__":
    main()
