"""Discover and validate a generated project of 1,000 agents.

Times, in one process: loading the project, parsing every SKILL.md and config.toml, and
validating all of them against the assembled schema (plugins already loaded, as in a running
`al`). Also times `al validate` end to end. Usage: python bench/discover_1000.py [AGENTS]
Aim: < 1 s.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llamaherd.plugins import registry
from llamaherd.project import load_project
from llamaherd.schema import validate_project

PROJECT = """
[models.main]
provider = "scripted"
model = "scripted"
"""

SKILL = """---
name: {name}
description: Generated agent number {i} for the discovery benchmark.
---
# Agent {i}

Look at the repository, pick one open issue, and report on it with al-status.
"""

CONFIG = """
models = ["main"]
credentials = []
scale = 2
timeout = 600
[params]
repo = "example/repo-{i}"
[hooks]
pre = ["echo start"]
[runtime]
type = "host-user"
run_as = "al-agent"
"""


def generate(root: Path, count: int) -> None:
    (root / "config.toml").write_text(PROJECT)
    for i in range(count):
        agent = root / "agents" / f"agent-{i:04d}"
        agent.mkdir(parents=True)
        (agent / "SKILL.md").write_text(SKILL.format(name=agent.name, i=i))
        (agent / "config.toml").write_text(CONFIG.format(i=i))


def discover_and_validate(root: Path) -> tuple[float, float, int, int]:
    """Wall time, CPU time, agents found and errors of one discovery + validation."""
    start, cpu = time.perf_counter(), time.process_time()
    project = load_project(root)
    problems = validate_project(project, registry())
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return elapsed, cpu, len(project.agents), sum(p.is_error for p in problems)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    registry()  # plugin loading is the CLI's cold start, measured by cli_cold_start.py
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root, count)
        runs = [discover_and_validate(root) for _ in range(5)]
        _, _, agents, errors = runs[0]
        start = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).with_name("al")), "validate"], cwd=root, capture_output=True
        )
        cli = time.perf_counter() - start
    median = statistics.median(run[0] for run in runs)
    cpu = statistics.median(run[1] for run in runs)
    print(f"agents: {agents}, errors: {errors}, `al validate` end to end: {cli * 1000:.0f} ms")
    print(f"median CPU time: {cpu * 1000:.0f} ms")
    print(f"discover + validate {count} agents (median of 5): {median * 1000:.0f} ms")


if __name__ == "__main__":
    main()
