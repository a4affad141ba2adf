"""Trigger-to-first-model-request latency of a host-user run (Action Llama 0.29: ~69 ms).

In one process, as the scheduler does: ``engine.emit`` of a manual trigger, the dispatcher's
claim, the runner starting a host-user sandbox (as the current user), credentials, prompts, and
the session's first ``provider.complete``, which records the time and ends the run. The figure
is the median and p95 over N runs.

    python bench/session_first_request.py [--runs N]
"""

from __future__ import annotations

import argparse
import getpass
import statistics
import tempfile
import threading
import time
from pathlib import Path

from llamaherd import hookimpl
from llamaherd.plugins import get_manager
from llamaherd.types import Reply, TriggerEvent

FIRST_CALL: dict[str, float] = {}
SEEN = threading.Event()


class StampProvider:
    """Records when the first model request of each run arrives, then ends the run."""

    name = "stamp"
    description = "benchmark provider"
    schema: dict = {}
    credential_type = None
    key_required = False

    def complete(self, messages, tools, model, options):
        FIRST_CALL.setdefault(options["run_id"], time.perf_counter())
        SEEN.set()
        return Reply(text="done")


class Plugin:
    @hookimpl
    def register_providers(self, register):
        register(StampProvider())


def project(root: Path) -> Path:
    (root / "agents" / "bench").mkdir(parents=True)
    (root / "config.toml").write_text('[models.stamp]\nprovider = "stamp"\nmodel = "x"\n')
    (root / "agents" / "bench" / "SKILL.md").write_text("---\nname: bench\n---\nWork.\n")
    (root / "agents" / "bench" / "config.toml").write_text(
        f'models = ["stamp"]\n[runtime]\ntype = "host-user"\nrun_as = "{getpass.getuser()}"\n'
    )
    return root


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    from llamaherd.engine import Engine
    from llamaherd.project import load_project

    get_manager().register(Plugin(), "bench-stamp")
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(load_project(project(Path(tmp))))
        engine.serve(port=0)
        samples = []
        try:
            for i in range(args.runs + 3):  # the first runs warm imports and caches
                SEEN.clear()
                started = time.perf_counter()
                engine.emit(TriggerEvent("bench", "manual"))
                engine.dispatch()
                SEEN.wait(10)
                run_id = max(FIRST_CALL, key=FIRST_CALL.get)
                if i >= 3:
                    samples.append((FIRST_CALL[run_id] - started) * 1000)
                for thread in list(engine.threads.values()):
                    thread.join(10)
        finally:
            engine.close()
    samples.sort()
    p95 = samples[int(len(samples) * 0.95) - 1]
    print(
        f"trigger-to-first-model-request (host-user, current user): "
        f"p50 {statistics.median(samples):.1f} ms, p95 {p95:.1f} ms over {len(samples)} runs"
    )


if __name__ == "__main__":
    main()
