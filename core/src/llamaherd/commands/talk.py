"""Talking to runs: ``al reply RUN TEXT``, ``al say RUN TEXT`` and ``al chat AGENT``.

``reply`` answers a run's ``ask`` (or, after its ``respond``, gives the human's next message);
``say`` interrupts a running run. Both go through the running scheduler when there is one, else
act on the database (a waiting run is resumed by whichever process dispatches it). ``chat``
starts a manual run in interactive mode and is the human end of it in the terminal.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import click

from llamaherd.cli import AppContext, pass_app
from llamaherd.commands.state import through
from llamaherd.errors import LlamaherdError

END_WORDS = ("/exit", "/quit", "/end")
POLL = 0.1


def _text(words: tuple[str, ...]) -> str:
    """The message: the words given, or stdin when none (or ``-``)."""
    text = sys.stdin.read() if words in ((), ("-",)) else " ".join(words)
    if not text.strip():
        raise LlamaherdError("the message is empty")
    return text.strip()


def _talk_command(reply: bool) -> click.Command:
    """``al reply RUN TEXT`` or ``al say RUN TEXT``: the same operation as the control API's."""
    verb = "reply" if reply else "say"

    @click.command(verb)
    @click.argument("run")
    @click.argument("text", nargs=-1)
    @pass_app
    def command(app: AppContext, run: str, text: tuple[str, ...]) -> None:
        from llamaherd.agents import reply_to_run, say_to_run

        talk = reply_to_run if reply else say_to_run
        message = _text(text)
        answer = through(
            app,
            f"/control/runs/{run}/{verb}",
            {"text": message},
            lambda engine: talk(engine, run, message),
        )
        click.echo(f"run {answer['run']}: delivered ({answer['delivered']})")

    command.help = (
        "Answer RUN's question (its ask), or give your next message after it responded. "
        "TEXT, or stdin when none."
        if reply
        else "Interrupt RUN with a message: its current turn is cut short (the model request "
        "and the command running are stopped, the tool calls not yet run are skipped) and it "
        "goes on with TEXT (or stdin) as new input."
    )
    return command


# ---------------------------------------------------------------------- chat
class Chat:
    """The terminal end of an interactive run: prints what the agent says, and reads the
    human's answer whenever the run waits for one (after each ``ask`` or ``respond``)."""

    def __init__(self, store: Any, run_id: str, send: Callable[[str, bool], Any], agent: str):
        self.store = store
        self.run_id = run_id
        self.send = send  # (text, end) -> the control API's or the database's reply
        self.agent = agent
        self.after = 0  # last event shown
        self.prompted = 0  # the ask/respond event last answered

    def loop(self) -> int:
        """Until the run ends; its exit code."""
        from llamaherd.agents import human_wait

        while True:
            run = self.store.get_run(self.run_id)
            turn = self._show()
            if run is None or run.state in ("done", "error", "timeout", "killed"):
                self._show()
                state = run.state if run else "gone"
                click.echo(f"[run {self.run_id} {state}{_because(run)}]")
                return run.exit_code if run and run.exit_code is not None else 1
            if human_wait(run) and turn > self.prompted:
                self.prompted = turn
                self._answer()
            time.sleep(POLL)

    def _show(self) -> int:
        """Print the new events; the id of the latest ask/respond seen."""
        latest = self.prompted
        for event in self.store.events(self.run_id, self.after):
            self.after = event["id"]
            line = _line(self.agent, event)
            if line:
                click.echo(line)
            if event["type"] in ("ask", "respond"):
                latest = event["id"]
        return max(latest, self.prompted)

    def _answer(self) -> None:
        try:
            text = input("you> ").strip()
        except EOFError:
            text = END_WORDS[0]
        if text in END_WORDS:
            self.send("", True)
            return
        self.send(text or "(no answer)", False)


def _because(run: Any) -> str:
    return f": {run.reason}" if run is not None and run.reason else ""


def _line(agent: str, event: dict[str, Any]) -> str | None:
    data = event.get("data") or {}
    kind = event["type"]
    if kind == "respond":
        return f"{agent}> {data.get('message', '')}"
    if kind == "ask":
        return f"{agent} asks> {data.get('question', '')}"
    if kind == "say":
        return f"{agent} (progress)> {data.get('message', '')}"
    if kind == "tool_call" and data.get("tool") not in ("respond", "ask", "say"):
        return f"  [{data.get('tool')}] {str(data.get('arguments', ''))[:120]}"
    if kind in ("run_error", "turn_error"):
        return f"  [{kind}] {data.get('message') or data.get('reason') or ''}"
    return None


@click.command("chat")
@click.argument("agent")
@click.argument("message", nargs=-1)
@click.option("--wake", is_flag=True, help="Set a hibernating or off agent idle first.")
@pass_app
def chat_command(app: AppContext, agent: str, message: tuple[str, ...], wake: bool) -> None:
    """Talk with AGENT: a manual run in interactive mode, in its sandbox with its credentials.

    MESSAGE (or the first line you type) opens the conversation. The agent's answers and
    questions show here; after each one, type yours. /exit (or Ctrl-D) ends the conversation,
    and the run ends done.
    """
    from llamaherd.agents import queue_chat, reply_to_run
    from llamaherd.client import ControlClient
    from llamaherd.commands.scheduler import _store, _wait_for_item, run_foreground

    project = app.project
    project.agent(agent)
    first = " ".join(message).strip()
    if not first:
        try:
            first = input("you> ").strip()
        except EOFError:
            first = ""
    if not first:
        raise LlamaherdError("the message is empty")
    client = ControlClient.find(project)
    if client is None:  # no scheduler: this process runs the agent too

        def watch(engine: Any, run_id: str) -> int:
            def send(text: str, end: bool) -> Any:
                return reply_to_run(engine, run_id, text, end)

            return Chat(engine.store, run_id, send, agent).loop()

        sys.exit(
            run_foreground(
                project, agent, lambda engine: queue_chat(engine, agent, first, wake), watch
            )
        )
    body = {"agent": agent, "chat": first, "wake": wake}
    item = client.post("/control/run", body)["items"][0]
    store = _store(app)
    run_id = _wait_for_item(store, agent, item)

    def send(text: str, end: bool) -> Any:
        return client.post(f"/control/runs/{run_id}/reply", {"text": text, "end": end})

    sys.exit(Chat(store, run_id, send, agent).loop())


def register(cli: click.Group) -> None:
    for command in (_talk_command(True), _talk_command(False), chat_command):
        cli.add_command(command)
