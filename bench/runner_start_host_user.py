"""Runner start latency of the host-user runtime: ``start()`` plus the first exec reaching its command.

Each sample: start a sandbox (working dir, private area, the core's language-skill commands
copied, one credential staged, cgroup created) and exec ``true`` as the agent user up to the
moment that process runs, then clean up (not timed). As root it switches to the user
``al-agent`` (created if missing, as `al setup host-user` does); otherwise it runs as you.

Usage: python bench/runner_start_host_user.py [RUNS]   (default 50). Aim: p50 < 100 ms.
"""

from __future__ import annotations

import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llamaherd_host_user.identity import DEFAULT_USER, useradd_command
from llamaherd_host_user.runtime import HostUserRuntime

import llamaherd
from llamaherd.project import load_project
from llamaherd.types import SandboxSpec, StagedFile

BIN_DIR = Path(llamaherd.__file__).parent / "sandbox_bin"


def agent_user() -> str:
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam(DEFAULT_USER)
    except KeyError:
        subprocess.run(useradd_command(DEFAULT_USER), check=True)
    return DEFAULT_USER


def make_agent(root: Path, user: str):
    agent_dir = root / "agents" / "bench"
    agent_dir.mkdir(parents=True)
    (agent_dir / "SKILL.md").write_text("---\nname: bench\n---\nBenchmark.\n")
    (agent_dir / "config.toml").write_text(f'[runtime]\ntype = "host-user"\nrun_as = "{user}"\n')
    return load_project(root).agent("bench")


def sample(runtime: HostUserRuntime, agent, n: int) -> tuple[float, float]:
    """(start seconds, start + first exec seconds) for one run."""
    spec = SandboxSpec(
        run_id=f"bench-{os.getpid()}-{n}",
        agent=agent,
        project=agent.project,
        credential_files=[StagedFile("github_token/default/token", b"bench-token\n", 0o400)],
        env={"AL_AGENT": agent.name, "AL_GATEWAY_URL": "http://127.0.0.1:9"},
        bin_dir=BIN_DIR,
        timeout=60,
    )
    begun = time.perf_counter()
    sandbox = runtime.start(spec)
    started = time.perf_counter()
    result = sandbox.exec("true")
    finished = time.perf_counter()
    sandbox.cleanup()
    assert result.exit_code == 0, result.output
    return started - begun, finished - begun


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    runtime = HostUserRuntime()
    with tempfile.TemporaryDirectory() as tmp:
        agent = make_agent(Path(tmp), agent_user())
        sample(runtime, agent, -1)  # warm the page cache and the plugin registry
        samples = [sample(runtime, agent, n) for n in range(runs)]
    starts = [s * 1000 for s, _ in samples]
    totals = [t * 1000 for _, t in samples]
    kind = type(runtime.start.__self__).__name__
    print(f"{kind}, user {agent.runtime['run_as']}, runs {runs}")
    print(
        f"start() alone: p50 {statistics.median(starts):.1f} ms, p99 {percentile(starts, 99):.1f} ms"
    )
    print(
        f"host-user runner start (start + first exec of `true`): "
        f"p50 {statistics.median(totals):.1f} ms, p99 {percentile(totals, 99):.1f} ms"
    )


if __name__ == "__main__":
    main()
