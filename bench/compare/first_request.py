"""From a trigger to the model, ours against the peer's: how long after a trigger the fake model
server in this script receives the run's first model request, and how long one delivery that
200 agents take needs until all their runs are answered. Interleaved rounds (see common.py).

1. webhook: a signed GitHub ``issues`` delivery to ``/webhooks/github`` (one agent takes it),
   timed from just before the POST to the arrival of the run's first model request; p50, p99.
2. ``al run AGENT`` typed with the scheduler up (``al start -H``), timed from spawning the
   command to the first model request; p50.
3. fan-out: one delivery that 200 agents take, timed from the POST until the server has sent
   its answer to the 200th agent's run. Every answer is a final text (no tool call), so a run's
   model session ends with its first answer; the last answer is what both tools show alike.

Both tools run the agents as the OS user ``al-agent`` on this host, no Docker
(``[runtime] type = "host-user"``): run as root, after ``al setup host-user`` (creates the
user), with ``sudo`` installed (the peer gives each run a shell through ``sudo -u al-agent``).
In both the model session runs in the scheduler. The model (``[models.sonnet]``, ``baseUrl`` =
the fake server) is reached by ours with the Anthropic Messages API (``POST /v1/messages``);
the peer, given a ``baseUrl``, registers a custom provider speaking OpenAI Chat Completions
(``POST /chat/completions``, streamed): the server speaks both, streamed or not, and tells the
agents apart by a marker in each SKILL.md.
Between rounds the bench waits until the tool's run history (``/api/stats/triggers``, served by
both) answers and has no run left running. A fan-out is given up when runs ended without
reaching the model (the figure says how many did), and the tool's process tree is stopped
when it grows past ``--rss`` GB or the fan-out takes longer than ``--fanout-timeout``.

    AL_PEER_BIN=/work/peer/node_modules/.bin/al python bench/compare/first_request.py
        [--rounds 15] [--cli-rounds 9] [--fanout-rounds 3] [--fanout 200]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from common import (
    TOOLS,
    Running,
    binary,
    credentials,
    emit,
    free_port,
    interleaved,
    line,
    load,
    make_project,
    scheduler,
    tree_rss,
)
from webhook_ingest import delivery

API_KEY = "bench-gateway-key"
MARKER = re.compile(rb"bench-marker-(agent-\d{4})")
TIMEOUT = 60.0  # seconds for one run to reach the model, or to finish
ISSUES = itertools.count(1)
QUIET = 5.0  # seconds without an answer or a running run: a fan-out's missing runs are lost


class FakeModel(ThreadingHTTPServer):
    """A model server answering every request with a final text; it records when each request
    arrived and when its answer was sent, by agent."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ModelHandler)
        self.changed = threading.Condition()
        self.arrived: list[tuple[float, str]] = []
        self.answered: list[tuple[float, str]] = []

    def handle_error(self, request: object, client_address: object) -> None:
        """A client dropping its connection (a scheduler stopping) is no error of the bench."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, events: list[tuple[float, str]], agent: str) -> None:
        at = time.perf_counter()
        with self.changed:
            events.append((at, agent))
            self.changed.notify_all()

    def when(self, events: list[tuple[float, str]], since: float, agents: int) -> float | None:
        """When the ``agents``-th distinct agent had an event after ``since`` (None: not yet)."""
        seen: set[str] = set()
        for at, agent in events:
            if at >= since:
                seen.add(agent)
                if len(seen) == agents:
                    return at
        return None

    def reached(self, since: float) -> tuple[int, float]:
        """How many agents' runs have been answered after ``since``, and when the last was."""
        with self.changed:
            answers = [(at, agent) for at, agent in self.answered if at >= since]
        return len({agent for _, agent in answers}), max((at for at, _ in answers), default=since)

    def wait(
        self,
        events: list[tuple[float, str]],
        since: float,
        agents: int = 1,
        timeout: float = TIMEOUT,
        check: Callable[[], None] = lambda: None,
    ) -> float:
        """The time by which ``agents`` distinct agents have an event after ``since``;
        ``check()`` is called every half second meanwhile (it raises to give up)."""
        deadline = time.perf_counter() + timeout
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.when(events, since, agents), 0.5)
                done = self.when(events, since, agents)
            if done is not None:
                return done
            if time.perf_counter() > deadline:
                raise SystemExit(f"{agents} runs did not reach the model in {timeout:.0f} s")
            check()


class ModelHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeModel

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        found = MARKER.search(body)
        agent = found.group(1).decode() if found else "?"
        self.server.record(self.server.arrived, agent)
        request = json.loads(body)
        openai = self.path.endswith("/chat/completions")
        if request.get("stream"):
            events = openai_stream() if openai else anthropic_stream()
            self.reply("text/event-stream", "".join(events).encode())
        else:
            answer = openai_answer() if openai else anthropic_answer()
            self.reply("application/json", json.dumps(answer).encode())
        self.server.record(self.server.answered, agent)

    def reply(self, kind: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def log_message(self, *_: object) -> None:
        pass


def anthropic_answer() -> dict:
    return {
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench",
        "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
    }  # fmt: skip


def anthropic_stream() -> list[str]:
    message = {**anthropic_answer(), "content": [], "stop_reason": None}
    events = [
        ("message_start", {"message": message}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Done."}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
        ("message_stop", {}),
    ]
    return [
        f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n" for kind, data in events
    ]


def openai_answer() -> dict:
    return {
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Done."},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


def openai_stream() -> list[str]:
    chunk = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
    }
    chunks = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Done."}}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                           "total_tokens": 2}},
    ]  # fmt: skip
    return [f"data: {json.dumps(data)}\n\n" for data in chunks] + ["data: [DONE]\n\n"]


def project(root: Path, agents: int, port: int, model: str) -> Path:
    """make_project's project, its model at ``model``, each agent marked and run as al-agent
    on this host."""
    make_project(root, agents, port, queue_size=max(100, agents))
    config = root / "config.toml"
    text = config.read_text().replace(
        'authType = "api_key"\n', f'authType = "api_key"\nbaseUrl = "{model}"\n'
    )
    config.write_text(text)
    for agent in sorted((root / "agents").iterdir()):
        agent.joinpath("SKILL.md").write_text(
            f"---\ndescription: bench agent\n---\nSay hello and stop. bench-marker-{agent.name}\n"
        )
        with agent.joinpath("config.toml").open("a") as conf:
            conf.write('\n[runtime]\ntype = "host-user"\nrun_as = "al-agent"\n')
    return root


def busy(port: int) -> bool:
    """Whether the scheduler's run history shows a run running, or it does not answer yet
    (the peer answers ``/health`` before it has loaded its agents)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/stats/triggers?limit=100",
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            triggers = json.load(reply)["triggers"]
    except OSError:
        return True
    return any(trigger["result"] == "running" for trigger in triggers)


def settle(port: int, timeout: float = TIMEOUT) -> None:
    """Wait until the scheduler answers and no run is running (and a moment more, for the
    run's end to be written)."""
    deadline = time.perf_counter() + timeout
    while busy(port):
        if time.perf_counter() > deadline:
            raise SystemExit("a run did not finish")
        time.sleep(0.05)
    time.sleep(0.3)


def post(port: int) -> float:
    """Send one signed ``issues`` delivery (a new issue each time: a repeated body is a
    replay); the time just before it was sent."""
    issue = {"number": next(ISSUES), "title": "t", "body": ""}
    body, headers = delivery("issues", {"action": "opened", "issue": issue})
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/webhooks/github", data=body, headers=headers
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()
    return start


@contextmanager
def schedulers(agents: int, model: FakeModel) -> Iterator[dict[str, Running]]:
    """Both tools' schedulers up at once, each on its own copy of the project."""
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        up = {}
        for tool in TOOLS:
            port = free_port()
            root = project(Path(tmp) / tool, agents, port, model.url)
            env = credentials(Path(tmp) / f"{tool}-credentials")
            key = Path(tmp) / f"{tool}-credentials" / "gateway_api_key" / "default"
            key.mkdir(parents=True)
            key.joinpath("key").write_text(API_KEY)
            up[tool] = stack.enter_context(scheduler(tool, root, port, env))
        yield up


def webhook(up: dict[str, Running], model: FakeModel, rounds: int) -> list[str]:
    def measure(tool: str) -> float:
        settle(up[tool].port)
        start = post(up[tool].port)
        return model.wait(model.arrived, start) - start

    found = interleaved(rounds, measure)
    name = "webhook delivery -> first model request"
    return [line(f"{name}, p50", found, "ms", 1000), p99_line(f"{name}, p99", found, "ms", 1000)]


def cli(up: dict[str, Running], model: FakeModel, rounds: int) -> list[str]:
    def measure(tool: str) -> float:
        running = up[tool]
        settle(running.port)
        start = time.perf_counter()
        command = subprocess.Popen(
            [binary(tool), "run", "agent-0000"], cwd=running.root, env=running.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            return model.wait(model.arrived, start) - start
        finally:
            if command.wait(TIMEOUT) != 0:
                raise SystemExit(f"{tool} al run agent-0000 exited {command.returncode}")

    found = interleaved(rounds, measure)
    return [line("al run AGENT (scheduler up) -> first model request, p50", found, "ms", 1000)]


class Stopped(Exception):
    """A fan-out given up: the tool's runs ended without all reaching the model, or its tree
    was stopped for outgrowing the memory or time allowed."""


def fanout(up: dict[str, Running], model: FakeModel, args: argparse.Namespace) -> list[str]:
    found: dict[str, list[float]] = {tool: [] for tool in TOOLS}
    stopped: dict[str, str] = {}
    for n in range(args.fanout_rounds):
        for tool in TOOLS if n % 2 == 0 else TOOLS[::-1]:
            if tool in stopped:
                continue
            settle(up[tool].port, args.fanout_timeout)
            start = post(up[tool].port)
            guard = watch(up[tool], model, start, args)
            try:
                done = model.wait(model.answered, start, args.fanout, args.fanout_timeout, guard)
            except Stopped as why:
                stopped[tool] = f"{why} (round {n + 1}, {load()})"
                continue
            found[tool].append(done - start)
    name = f"one delivery -> {args.fanout} agents' runs all answered"
    if not stopped:
        return [line(name, found, "s")]
    medians = {tool: f"{statistics.median(found[tool]):.2f} s" for tool in TOOLS if found[tool]}
    outcome = {tool: stopped.get(tool) or medians[tool] for tool in TOOLS}
    rounds = max(len(values) for values in found.values())
    return [f"{name}: ours {outcome['ours']}, peer {outcome['peer']} (median of {rounds})"]


def watch(
    running: Running, model: FakeModel, start: float, args: argparse.Namespace
) -> Callable[[], None]:
    """A check giving up a fan-out once no answer has gone out for ``QUIET`` seconds and no run
    is running (some ended without reaching the model), or stopping the tool's process group
    once its tree exceeds ``--rss`` GB or the fan-out ``--fanout-timeout``."""

    def check() -> None:
        rss, elapsed = tree_rss(running.proc.pid), time.perf_counter() - start
        if rss > args.rss * 2**30 or elapsed > args.fanout_timeout:
            os.killpg(running.proc.pid, signal.SIGKILL)
            raise Stopped(f"stopped at {rss / 2**30:.1f} GB RSS after {elapsed:.0f} s")
        reached, last = model.reached(start)
        if time.perf_counter() - last > QUIET and not busy(running.port):
            raise Stopped(
                f"all runs ended by {last - start:.1f} s, only {reached} of {args.fanout} "
                "reached the model"
            )

    return check


def p99_line(figure: str, values: dict[str, list[float]], unit: str, scale: float) -> str:
    """The p99 (nearest rank: the largest of fewer than 100 rounds) as ``line`` shows a median."""
    rounds = len(values["ours"])
    p99 = {tool: [sorted(v)[math.ceil(0.99 * rounds) - 1]] for tool, v in values.items()}
    return line(f"{figure} of {rounds} rounds", p99, unit, scale)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cli-rounds", type=int, default=9)
    parser.add_argument("--fanout-rounds", type=int, default=3)
    parser.add_argument("--fanout", type=int, default=200)
    parser.add_argument("--fanout-timeout", type=float, default=180.0)
    parser.add_argument("--rss", type=float, default=4.0, help="GB a tool's tree may take")
    args = parser.parse_args()
    model = FakeModel()
    threading.Thread(target=model.serve_forever, daemon=True).start()
    with schedulers(1, model) as up:
        lines = webhook(up, model, args.rounds) + cli(up, model, args.cli_rounds)
    with schedulers(args.fanout, model) as up:
        lines += fanout(up, model, args)
    emit(lines)


if __name__ == "__main__":
    main()
