"""Dashboard overview with 200 agents: server time of ``GET /`` and the page's size.

A real scheduler process (``al start``) serves a temporary project of 200 agents (cron
``schedule``, ``every`` and manual ones) whose store holds a day of history: 10 finished runs
per agent, each with a model call and five tool calls, so every row has a last result, a sparkline, a success rate
and a cost. The scheduler is paused (nothing runs while measuring). The page is fetched with the
control token over keep-alive HTTP on 127.0.0.1; the figure is the median and p95 of the time to
the whole response (the server's work: one ``agent_rows``, activity and cost over 24 h, the
template), and the page's size in bytes (the budget: 300 ms and 100 KB).

    python bench/dashboard_overview.py [--agents N] [--requests N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import requests

from llamaherd.store import Store
from llamaherd.testing import OfflineProject, SchedulerProcess

RUNS_PER_AGENT = 10
TOOL_CALLS = 5  # events of each run beside its model call
BUDGET_MS = 300.0
BUDGET_BYTES = 100_000


def agent_config(n: int) -> str:
    """A third on a cron schedule, a third every few minutes, a third manual only."""
    return ('schedule = "0 3 * * *"', 'every = "2h"', "")[n % 3]


def history(project: OfflineProject, agents: list[str]) -> None:
    """A day of finished runs with a model call each, written straight into the store."""
    store = Store.open(project.load().database_url, str(project.root))
    try:
        for n, agent in enumerate(agents):
            for k in range(RUNS_PER_AGENT):
                run = store.create_run(agent, "manual")
                store.add_event(
                    run.id,
                    "model_call",
                    {"model": "scripted", "input_tokens": 900, "output_tokens": 40,
                     "cost_usd": 0.0021, "ok": True},
                )  # fmt: skip
                for step in range(TOOL_CALLS):
                    store.add_event(run.id, "tool_call", {"tool": "bash", "output": f"step {step}"})
                store.transition(run.id, "error" if (n + k) % 7 == 0 else "done")
        store.set_paused(None, True)
    finally:
        store.close()


def measure(agents: int, requests_count: int) -> tuple[list[float], int]:
    with tempfile.TemporaryDirectory() as tmp:
        project = OfflineProject(Path(tmp) / "proj")
        names = [f"agent-{n:03d}" for n in range(agents)]
        for n, name in enumerate(names):
            project.add_scripted_agent(name, agent_config(n))
        history(project, names)
        sched = SchedulerProcess(project)
        try:
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {sched.token}"
            first = session.get(sched.url + "/", timeout=30)
            first.raise_for_status()
            assert first.text.count("data-agent=") == agents, "every agent has a row"
            times = []
            for _ in range(requests_count):
                start = time.perf_counter()
                response = session.get(sched.url + "/", timeout=30)
                times.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200
            return times, len(first.content)
        finally:
            sched.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    times, size = measure(args.agents, args.requests)
    median = statistics.median(times)
    p95 = sorted(times)[int(0.95 * (len(times) - 1))]
    print(f"{args.agents} agents x {RUNS_PER_AGENT} runs; {args.requests} requests")
    verdict = "within" if p95 < BUDGET_MS and size < BUDGET_BYTES else "OVER"
    print(
        f"dashboard overview: median {median:.0f} ms, p95 {p95:.0f} ms, "
        f"page {size / 1000:.0f} KB ({verdict} {BUDGET_MS:.0f} ms / {BUDGET_BYTES // 1000} KB)"
    )


if __name__ == "__main__":
    main()
