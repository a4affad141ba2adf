"""What the side-by-side benchmarks share: the two `al`s, one project both run, a scheduler
started as a user starts it, CPU time of a process tree, interleaved rounds, the report.

The same project (Action Llama's layout: ``agents/<name>/SKILL.md`` + ``config.toml``, a
project ``config.toml`` with a model and a GitHub webhook source) is run by both tools, each
started with ``al start -H`` and reached over HTTP on 127.0.0.1, as a user would. The two tools
alternate within every round, so a change of machine load hits both alike; each figure is the
median of its rounds, reported with the load average while it was taken.

Tools: ``ours`` is the ``al`` next to this interpreter (``AL_OURS_BIN`` to override); ``peer``
is ``AL_PEER_BIN``, by default ``/work/peer/node_modules/.bin/al`` (Action Llama 0.29.1 from
npm: ``mkdir -p /work/peer && cd /work/peer && npm install @action-llama/action-llama@0.29.1``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PEER_BIN = "/work/peer/node_modules/.bin/al"  # where the install below puts it
# A bench stopped with SIGTERM (`timeout`) still stops the schedulers it started (``finally``).
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
SECRET = "bench-secret"
START_TIMEOUT = 120.0
TOOLS = ("ours", "peer")


def binary(tool: str, env: dict[str, str] | None = None) -> str:
    """The `al` executable of ``tool`` (``AL_OURS_BIN`` of ``env``, else of this process)."""
    if tool == "ours":
        chosen = (env or os.environ).get("AL_OURS_BIN")
        return chosen or str(Path(sys.executable).with_name("al"))
    peer = os.environ.get("AL_PEER_BIN") or (PEER_BIN if Path(PEER_BIN).exists() else "")
    if not peer:
        raise SystemExit(
            "set AL_PEER_BIN to Action Llama's `al` (npm install @action-llama/action-llama@0.29.1)"
        )
    return peer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_project(
    root: Path, agents: int, port: int, queue_size: int = 100, scale: int | None = None
) -> Path:
    """A project both tools run: ``agents`` agents on a yearly schedule (nothing fires while
    measured), each taking GitHub ``issues`` deliveries of the ``bench`` source (``scale``
    runs at once, when given)."""
    (root / "agents").mkdir(parents=True)
    (root / "config.toml").write_text(
        f"""workQueueSize = {queue_size}

[models.sonnet]
provider = "anthropic"
model = "claude-sonnet-4-20250514"
authType = "api_key"

[gateway]
port = {port}

[webhooks.bench]
type = "github"
credential = "bench"
"""
    )
    for i in range(agents):
        agent = root / "agents" / f"agent-{i:04d}"
        agent.mkdir()
        agent.joinpath("SKILL.md").write_text(
            "---\ndescription: bench agent\n---\nSay hello and stop.\n"
        )
        agent.joinpath("config.toml").write_text(
            'models = ["sonnet"]\nschedule = "0 0 1 1 *"\n'
            + (f"scale = {scale}\n" if scale is not None else "")
            + '\n[[webhooks]]\nsource = "bench"\nevents = ["issues"]\n'
        )
    return root


def credentials(directory: Path) -> dict[str, str]:
    """The environment pointing both tools at a credentials directory with a (fake) model key
    and the webhook secret."""
    for kind, instance, name, value in (
        ("anthropic_key", "default", "token", "sk-ant-bench"),
        ("github_webhook_secret", "bench", "secret", SECRET),
    ):
        path = directory / kind / instance
        path.mkdir(parents=True, exist_ok=True)
        path.joinpath(name).write_text(value)
    return {**os.environ, "AL_CREDENTIALS_DIR": str(directory), "AL_LOG_LEVEL": "WARNING"}


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and every live descendant (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    return _tree_sum(pid, lambda fields: (int(fields[11]) + int(fields[12])) / tick)


def tree_rss(pid: int) -> float:
    """Resident bytes of ``pid`` and every live descendant (Linux /proc)."""
    page = os.sysconf("SC_PAGE_SIZE")
    return _tree_sum(pid, lambda fields: int(fields[21]) * page)


def _tree_sum(pid: int, value: Callable[[list[str]], float]) -> float:
    """``value`` of each process of the tree under ``pid`` (given its ``/proc/PID/stat`` fields
    after the command name), summed."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), value(fields))
    total, frontier = 0.0, {pid}
    while frontier:
        total += sum(stats[p][1] for p in frontier if p in stats)
        frontier = {child for child, (parent, _) in stats.items() if parent in frontier}
    return total


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} on {os.cpu_count()} CPUs"


def _health(port: int) -> bytes | None:
    """``/health``'s body when it answers 200, else None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as reply:
            return reply.read() if reply.status == 200 else None
    except OSError:
        return None


def health(port: int) -> bool:
    return _health(port) is not None


def ready(port: int) -> bool:
    """``/health`` answers and no longer says the agents are loading (ours listens before it
    loads them; the peer answers once it has)."""
    body = _health(port)
    try:
        return body is not None and "loading" not in json.loads(body)
    except ValueError:
        return False


@dataclass
class Running:
    tool: str
    proc: subprocess.Popen
    port: int
    started_in: float  # seconds from spawn to a healthy /health
    ready_in: float  # ... to a /health that no longer says the agents are loading
    root: Path
    env: dict[str, str] = field(repr=False)

    def stop(self) -> float:
        """SIGTERM, and the seconds until the process has exited."""
        start = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return time.perf_counter() - start


@contextmanager
def scheduler(tool: str, root: Path, port: int, env: dict[str, str]) -> Iterator[Running]:
    """``al start -H`` of ``tool`` in ``root``, once its ``/health`` answers and its agents
    are loaded."""
    log = open(root / f"{tool}-scheduler.log", "w")  # noqa: SIM115 (closed below)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [binary(tool, env), "start", "-H"],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    running = Running(tool, proc, port, 0.0, 0.0, root, env)
    try:
        deadline = start + START_TIMEOUT
        while not health(port):
            if proc.poll() is not None or time.perf_counter() > deadline:
                raise SystemExit(
                    f"{tool} scheduler did not come up:\n"
                    f"{(root / f'{tool}-scheduler.log').read_text()[-2000:]}"
                )
            time.sleep(0.01)
        running.started_in = time.perf_counter() - start
        while not ready(port):  # every figure but start → /health wants the agents loaded
            if proc.poll() is not None or time.perf_counter() > deadline:
                raise SystemExit(f"{tool} scheduler did not finish loading its agents")
            time.sleep(0.01)
        running.ready_in = time.perf_counter() - start
        yield running
    finally:
        if proc.poll() is None:
            running.stop()
        log.close()


def run_cli(tool: str, args: list[str], root: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `al ARGS` in ``root``; it must succeed."""
    before = os.times()
    start = time.perf_counter()
    done = subprocess.run([binary(tool), *args], cwd=root, env=env, capture_output=True)
    wall = time.perf_counter() - start
    after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"{tool} al {' '.join(args)} failed: {done.stderr.decode()[-1000:]}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu


def interleaved(
    rounds: int, measure: Callable[[str], float], tools: Sequence[str] = TOOLS
) -> dict[str, list[float]]:
    """``measure(tool)`` ``rounds`` times per tool, alternating which goes first."""
    found: dict[str, list[float]] = {tool: [] for tool in tools}
    for n in range(rounds):
        for tool in tools if n % 2 == 0 else tools[::-1]:
            found[tool].append(measure(tool))
    return found


def line(figure: str, values: dict[str, list[float]], unit: str, scale: float = 1.0) -> str:
    """``figure: ours X, peer Y, ratio R (median of N, load ...)`` (ratio = ours / peer)."""
    ours, peer = (statistics.median(values[tool]) * scale for tool in TOOLS)
    ratio = ours / peer if peer else float("inf")
    rounds = len(values["ours"])
    return (
        f"{figure}: ours {_number(ours)} {unit}, peer {_number(peer)} {unit}, "
        f"ratio {ratio:.2f} (median of {rounds}, {load()})"
    )


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def emit(lines: list[str], as_json: dict | None = None) -> None:
    """Print the figures (the last line sums them up, as bench/run_all.py reads it)."""
    for text in lines:
        print(text, flush=True)
    if as_json is not None and os.environ.get("AL_BENCH_JSON"):
        Path(os.environ["AL_BENCH_JSON"]).write_text(json.dumps(as_json, indent=2))
    print(" | ".join(text.split(" (median")[0] for text in lines))
