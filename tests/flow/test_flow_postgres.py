"""Two schedulers on one PostgreSQL database: one singleton key is honoured across both (20
concurrent deliveries, never two active runs for the key), and so is one budget."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from llamaherd.testing import wait_until

pytestmark = pytest.mark.postgres

SINGLETON = """
webhooks = [{ source = "github", events = ["pull_request"] }]
scale = 5

[flow]
key = "pull_request.number"
singleton = { mode = "queue" }
"""
SLOW = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "sleep 0.2" } }]

[[turns]]
text = "done"
"""
ONE_CALL = """
[[turns]]
usage = { input = 1000, output = 500 }
text = "done"
"""


class KeySampler(threading.Thread):
    """Samples how many runs of the key are active (running or waiting), across both hosts."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        from llamaherd.store import Store

        self.store = Store.open(url)
        self.samples: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            live = self.store.runs(agent="reviewer", states=("running", "waiting"), limit=100)
            self.samples.append(len(live))
            time.sleep(0.005)
        self.store.close()


def test_one_singleton_key_across_two_schedulers(
    tmp_path, pg_url, start, kit, clock, credentials, runs_of
):
    a, b = kit.checkouts(
        tmp_path, clock, credentials, pg_url, agents=[("reviewer", SINGLETON, SLOW)]
    )
    hosts = [start(a), start(b)]
    sampler = KeySampler(pg_url)
    sampler.start()
    with ThreadPoolExecutor(20) as pool:
        list(
            pool.map(
                lambda i: kit.deliver(
                    hosts[i % 2].url, kit.pull_request(7, i), event="pull_request"
                ),
                range(20),
            )
        )
    wait_until(lambda: len([r for r in runs_of(a) if r.state == "done"]) == 20, 120, what="20 runs")
    sampler.halt.set()
    sampler.join(10)
    assert sampler.samples and max(sampler.samples) == 1, "never two active runs for the key"
    runs = sorted(runs_of(a), key=lambda r: r.started_at)
    for before, after in zip(runs, runs[1:], strict=False):
        assert after.started_at >= before.finished_at, "each run started after the last ended"


def test_one_budget_across_two_schedulers(
    tmp_path, pg_url, start, kit, clock, credentials, runs_of
):
    priced = (
        "\n[models.scripted.pricing]\ninput = 10.0\noutput = 10.0\n"
        "[budget]\ndaily = { usd = 0.03 }\n"
    )
    a, b = kit.checkouts(
        tmp_path, clock, credentials, pg_url, agents=[("spender", "scale = 2\n", ONE_CALL)]
    )
    for project in (a, b):
        path = project.root / "config.toml"
        path.write_text(path.read_text() + priced)
    hosts = [start(a), start(b)]
    for i in range(6):
        assert hosts[i % 2].post("/control/run", {"agent": "spender"}).status_code == 202
    wait_until(lambda: len([r for r in runs_of(a) if r.state == "done"]) >= 2)
    # Both hosts see the project's $0.03 spent: neither starts another run.
    for project in (a, b):
        stat = json.loads(project.al("stat", "spender", "--json", check=True).stdout)
        assert stat["agents"][0]["held"].startswith("over budget: the project spent")
    done = len(runs_of(a))
    assert done in (2, 3), "a run each host may have claimed before the other's spend landed"
    store = a.store()
    try:
        assert store.queue_depth() == {"spender": 6 - done}, "the rest held, none lost"
    finally:
        store.close()
    clock.advance(86400)
    wait_until(lambda: len(runs_of(a)) >= done + 2, what="the next day's runs")


INTERRUPTED = """
webhooks = [{ source = "github", events = ["pull_request"] }]

[flow]
key = "pull_request.number"
singleton = { mode = "interrupt" }
"""
GATED = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "while [ ! -e '{{ payload.payload.gate }}' ]; do sleep 0.05; done" } }]

[[turns]]
text = "done"
"""


def test_an_interrupt_received_by_one_scheduler_reaches_the_run_on_the_other(
    tmp_path, pg_url, start, kit, clock, credentials, runs_of
):
    a, b = kit.checkouts(
        tmp_path, clock, credentials, pg_url, agents=[("reviewer", INTERRUPTED, GATED)]
    )
    first = start(a)
    gate = tmp_path / "gate"
    kit.deliver(first.url, {**kit.pull_request(7, 1), "gate": str(gate)}, event="pull_request")
    [run] = wait_until(lambda: [r for r in runs_of(a) if r.state == "running"] or None)
    second = start(b)
    answer = kit.deliver(
        second.url, {**kit.pull_request(7, 2), "gate": str(gate)}, event="pull_request"
    )
    assert answer.json()["flow"]["reviewer"] == f"interrupted {run.id}"

    def delivered() -> bool:  # host-a's housekeeping hands it over and drops the message
        store = a.store()
        try:
            return not store.flow_messages(run.host)
        finally:
            store.close()

    wait_until(delivered, what="the message handed to the run on host-a")
    gate.touch()
    [done] = wait_until(lambda: [r for r in runs_of(a) if r.state == "done"] or None)
    assert done.id == run.id and len(runs_of(a)) == 1
    users = [m["content"] for m in done.transcript if m.get("role") == "user"]
    assert '"seq": 2' in users[-1]
