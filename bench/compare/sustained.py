"""Sustained runs, ours against the peer's: ``--deliveries`` signed GitHub ``issues`` deliveries
(each a new issue), sent by ``--senders`` concurrent senders to one agent with room for
``--scale`` runs at once, each run one model turn answered at once by the fake model server of
``first_request.py``; runs per minute from the first POST until the last run's answer.

Both tools run the agent as the OS user ``al-agent`` on this host, without Docker, as in
``first_request.py`` (``al setup host-user``; the peer also needs ``sudo``). Interleaved rounds
(see common.py), each on a scheduler started afresh, so one round's history never slows the next.

    AL_PEER_BIN=/work/peer/node_modules/.bin/al python bench/compare/sustained.py
        [--deliveries 1000] [--senders 8 64] [--scale 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import TOOLS, credentials, emit, free_port, interleaved, line, scheduler
from first_request import TIMEOUT, FakeModel, post, project

PATIENCE = 600.0  # seconds a round may take at most


def runs_per_minute(
    tool: str, model: FakeModel, deliveries: int, senders: int, scale: int, env: dict | None = None
) -> float:
    """One round: a fresh scheduler of ``tool``, the deliveries sent, until every run has been
    answered; runs per minute. ``env``: more of the scheduler's environment (a checkout's
    ``PYTHONPATH``: ``bench/runs_across_commits.py``)."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        root = project(Path(tmp) / "project", 1, port, model.url)
        config = root / "agents" / "agent-0000" / "config.toml"
        config.write_text(config.read_text().replace("models =", f"scale = {scale}\nmodels =", 1))
        config = root / "config.toml"
        text = config.read_text().replace("workQueueSize = 100", f"workQueueSize = {deliveries}")
        config.write_text(text)
        with scheduler(tool, root, port, {**credentials(Path(tmp) / "creds"), **(env or {})}):
            model_ready(model)
            start = time.perf_counter()
            with ThreadPoolExecutor(senders) as pool:
                list(pool.map(lambda _: post(port), range(deliveries)))
            model.wait(model.answered, start, 1, TIMEOUT)
            done = wait_answers(model, start, deliveries)
    return 60 * deliveries / (done - start)


def model_ready(model: FakeModel) -> None:
    with model.changed:
        model.answered.clear()
        model.arrived.clear()


def wait_answers(model: FakeModel, since: float, count: int) -> float:
    """When the ``count``-th answer after ``since`` went out (one agent: answers, not agents)."""
    deadline = time.perf_counter() + PATIENCE
    with model.changed:
        while True:
            answers = [at for at, _ in model.answered if at >= since]
            if len(answers) >= count:
                return sorted(answers)[count - 1]
            if time.perf_counter() > deadline:
                raise SystemExit(
                    f"only {len(answers)} of {count} runs answered in {PATIENCE:.0f} s"
                )
            model.changed.wait(1.0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--senders", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--scale", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = FakeModel()
    threading.Thread(target=model.serve_forever, daemon=True).start()
    lines = []
    for senders in args.senders:
        found = interleaved(
            args.rounds,
            lambda tool, s=senders: runs_per_minute(tool, model, args.deliveries, s, args.scale),
        )
        name = f"sustained: {args.deliveries} deliveries from {senders} senders, runs per minute"
        lines.append(line(name, found, "runs/min"))
    emit(lines)


if __name__ == "__main__":
    assert TOOLS == ("ours", "peer")
    main()
