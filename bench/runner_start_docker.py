"""Runner start latency of the docker runtime: ``start()`` plus the first exec reaching its command.

Each sample: start a sandbox (a fresh container with every DESIGN §6 restriction, the core's
language-skill commands bound at /app/bin, one credential staged, the working dir made) and exec
a command that prints the wall clock the moment it runs (the container shares the host's clock);
the figure is that instant minus the start of ``start()``. Cleanup is not timed.

Needs a daemon and the project base image: ``bash .ci/docker.sh`` then
``al setup docker --base-image local/debian-python:bookworm`` (or any image with `date +%N`).

Usage: python bench/runner_start_docker.py [RUNS] [IMAGE]   (defaults 20, al-agent:latest).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from llamaherd_docker.runtime import ContainerRuntime

import llamaherd
from llamaherd.project import load_project
from llamaherd.types import SandboxSpec, StagedFile

BIN_DIR = Path(llamaherd.__file__).parent / "sandbox_bin"


def make_agent(root: Path, image: str):
    (root / "config.toml").write_text(f'[local]\nimage = "{image}"\n')
    agent_dir = root / "agents" / "bench"
    agent_dir.mkdir(parents=True)
    (agent_dir / "SKILL.md").write_text("---\nname: bench\n---\nBenchmark.\n")
    (agent_dir / "config.toml").write_text('[runtime]\ntype = "container"\n')
    return load_project(root).agent("bench")


def sample(runtime: ContainerRuntime, agent, n: int) -> tuple[float, float, float]:
    """Seconds from start() begun to: start() returned, the exec's process ran, exec returned."""
    spec = SandboxSpec(
        run_id=f"bench-{os.getpid()}-{n}",
        agent=agent,
        project=agent.project,
        credential_files=[StagedFile("github_token/default/token", b"bench-token\n", 0o400)],
        env={"AL_AGENT": agent.name, "AL_GATEWAY_URL": "http://127.0.0.1:9"},
        bin_dir=BIN_DIR,
        timeout=60,
    )
    begun = time.time()
    sandbox = runtime.start(spec)
    started = time.time()
    result = sandbox.exec("date +%s.%N")
    finished = time.time()
    sandbox.cleanup()
    assert result.exit_code == 0, result.output
    return started - begun, float(result.output) - begun, finished - begun


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def line(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{label}: p50 {statistics.median(ms):.0f} ms, p99 {percentile(ms, 99):.0f} ms"


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    image = sys.argv[2] if len(sys.argv) > 2 else "al-agent:latest"
    runtime = ContainerRuntime()
    with tempfile.TemporaryDirectory() as tmp:
        agent = make_agent(Path(tmp), image)
        runtime.prepare(agent, agent.project)
        sample(runtime, agent, -1)  # warm the image's user lookup and the connection pool
        samples = [sample(runtime, agent, n) for n in range(runs)]
    print(f"docker runtime, image {image}, runs {runs}")
    print(line("start() alone", [s for s, _, _ in samples]))
    print(line("start() + first exec returned", [t for _, _, t in samples]))
    print(
        line(
            "docker runner start (start + first exec to process start)", [p for _, p, _ in samples]
        )
    )


if __name__ == "__main__":
    main()
