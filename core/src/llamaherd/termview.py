"""The terminal view of a scheduler (``al start`` in a terminal, ``al stat --watch``): the
scheduler line, the agents, the active runs with their status text, the latest results and the
queue depth, redrawn with ``rich``.

A ``snapshot`` is plain JSON-able data read through a ``llamaherd.readers.Reader`` (this
project's store, or a remote control API); ``render`` draws one. ``TerminalView`` runs the view
below a scheduler's log lines while it runs.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from llamaherd.logview import clean
from llamaherd.markup import escape
from llamaherd.status import FINAL, ago, budget_line, key_line, size_text, until
from llamaherd.tables import Column, Part, Sheet, to_rich

if TYPE_CHECKING:  # drawn with rich only in a terminal: `al stat | grep` never imports it
    from rich.console import Console, RenderableType

RECENT = 8  # finished runs the view lists
REFRESH_SECONDS = 1.0
# A large project's snapshot takes a while (one query per agent): redraw less often then, so
# the view never costs the scheduler more than a tenth of a core.
BUSY_FACTOR = 10
LIVE_STATES = ("running", "waiting")
STATE_STYLES = {
    "active": "green",
    "running": "green",
    "waiting": "cyan",
    "error": "red",
    "idle": "dim",
    "off": "red",
    "hibernate": "blue",
    "suspended": "yellow",
    "paused": "yellow",
    "disabled": "dim",
    "done": "green",
    "timeout": "red",
    "killed": "red",
}


def styled(state: str | None) -> str:
    """``state`` in its colour (markup)."""
    return f"[{STATE_STYLES.get(state or '', 'white')}]{escape(state or '-')}[/]"


def in_style(text: str, style: str) -> str:
    """Plain ``text`` in ``style`` (markup)."""
    return f"[{style}]{escape(text)}[/]"


# ---------------------------------------------------------------------- data
def snapshot(reader: Any, agent: str | None = None) -> dict[str, Any]:
    """What the view shows, of every agent or of ``agent``: ``stat`` (scheduler and agent
    rows) plus the live runs (``active``) and the latest finished ones (``recent``)."""
    found = reader.stat()
    rows = [row for row in found["agents"] if agent in (None, row["agent"])]
    active = []
    for row in rows:
        live = row["active"] + row["waiting"]
        if live:
            runs = reader.runs(row["agent"], live + RECENT)
            active += [run for run in runs if run["state"] in LIVE_STATES]
    recent = [run for run in reader.runs(agent, 4 * RECENT) if run["state"] in FINAL][:RECENT]
    return {"scheduler": found["scheduler"], "agents": rows, "active": active, "recent": recent}


# ---------------------------------------------------------------------- drawing
def scheduler_line(scheduler: dict[str, Any]) -> str:
    """One line (rich markup) on the scheduler: up since when, version, config current (else
    the problems that refused the config on disk, one line each), then what failed in it (a
    trigger that did not start, a plugin installed after the start), one line each."""
    if not scheduler["running"]:
        return (
            "[yellow]no scheduler is running[/]: schedules and webhooks fire nothing (`al start`)"
        )
    where = "" if scheduler["where"] == "this machine" else f" on {scheduler['where']}"
    about = [f"pid {scheduler['pid']}", scheduler["host"], f"llamaherd {scheduler['version']}"]
    about += [scheduler["url"]] if scheduler["url"] else []  # not yet while it starts
    line = f"[green]scheduler up[/] since {ago(scheduler['since'])}{where} ({', '.join(about)})"
    if scheduler.get("loading"):  # listening, its agents not all read yet
        return line + f"; [yellow]{escape(scheduler['loading']['text'])}[/]"
    if scheduler.get("config_errors"):
        problems = "".join(f"\n  {escape(p)}" for p in scheduler["config_errors"])
        line += f"; [red]config change refused[/] (the last good config runs):{problems}"
    elif scheduler["config_current"] is False:
        line += "; [yellow]config changed on disk since it loaded it[/]"
    elif scheduler["config_current"]:
        line += "; config current"
    problems = scheduler.get("problems") or []
    if problems:
        line += f"; [red]{len(problems)} problem(s)[/]:" + "".join(
            f"\n  {escape(p)}" for p in problems
        )
    return line


def stat_view(stat: dict[str, Any]) -> list[Part]:
    """``al stat``: the scheduler line above the agents' table; no next fires when no
    scheduler will fire them. Below it the database, what each agent's runtime says (a pool's
    hosts, one that is down) and why an agent's runs wait; for one agent (``al stat AGENT``)
    also its flow control per key and its spend against its budgets."""
    parts: list[Part] = [
        scheduler_line(stat["scheduler"]),
        *database_line(stat),
        agents_table(stat),
    ]
    for row in stat["agents"]:
        parts.extend(runtime_lines(row))
        if row.get("held"):
            parts.append(in_style(f"{row['agent']} waits: {clean(row['held'])}", "yellow"))
        if len(stat["agents"]) == 1:
            parts.extend(flow_lines(row, stat.get("now")))
    return parts


def runtime_lines(row: dict[str, Any]) -> list[str]:
    """What the agent's runtime says about where its runs go, one line each."""
    return [escape(f"{row['agent']}: {clean(line)}") for line in row.get("runtime") or []]


def database_line(stat: dict[str, Any]) -> list[str]:
    """The database, its size and how long history is kept (none from an older scheduler)."""
    found = stat.get("database")
    if not found:
        return []
    kept = found["retention_days"]
    return [
        f"database {escape(found['where'])}: {size_text(found['bytes'])} (runs kept {kept:g} days)"
    ]


def flow_lines(row: dict[str, Any], now: float | None = None) -> list[str]:
    """``al stat AGENT``: its flow controls, per key what is pending or active, its budgets."""
    lines = []
    flow = row.get("flow")
    if flow:
        lines.append(in_style("flow: " + "; ".join(flow["controls"]), "bold"))
        for entry in flow["keys"]:
            lines.append(escape("  " + clean(key_line(entry, now))))
    for budget in row.get("budget") or []:
        lines.append(escape(budget_line(budget, now)))
    return lines


def agents_table(stat: dict[str, Any]) -> Sheet:
    running = stat["scheduler"]["running"]
    rows = []
    for row in stat["agents"]:
        last = "-"
        if row["last_result"]:
            last = f"{styled(row['last_result'])} {ago(row['last_finished_at'])}"
        waiting = f" (+{row['waiting']} waiting)" if row["waiting"] else ""
        rows.append(
            (
                escape(row["agent"]),
                styled(row["state"]),
                f"{row['active']}/{row['scale']}{waiting}",
                str(row["queued"]),
                last,
                next_fire_text(row) if running else "-",
                escape(", ".join(row["hosts"]) or "-"),
            )
        )
    return Sheet.of(["AGENT", "STATE", "ACTIVE", "QUEUED", "LAST", "NEXT FIRE", "HOST"], rows)


def next_fire_text(row: dict[str, Any]) -> str:
    """When the agent's schedule fires next: ``in 5m``, ``never`` (a date that does not
    exist), ``-`` (no schedule)."""
    return "never" if row.get("never_fires") else until(row["next_fire"])


def active_table(runs: list[dict[str, Any]], now: float) -> Sheet:
    return Sheet.of(
        [Column("RUN", keep=True), "AGENT", "STATE", "FOR", "TRIGGER", "STATUS"],
        (
            (
                run["id"],
                escape(run["agent"]),
                styled(run["state"]),
                _duration(run["started_at"], now),
                escape(run["trigger_kind"]),
                in_style(clean(run["status"] or "-"), "cyan" if run["status"] else "dim"),
            )
            for run in runs
        ),
    )


def recent_table(runs: list[dict[str, Any]]) -> Sheet:
    return Sheet.of(
        [Column("RUN", keep=True), "AGENT", "RESULT", "EXIT", "ENDED", "TOOK", "REASON"],
        (
            (
                run["id"],
                escape(run["agent"]),
                styled(run["state"]),
                "-" if run["exit_code"] is None else str(run["exit_code"]),
                ago(run["finished_at"]),
                _duration(run["started_at"], run["finished_at"]),
                escape(clean(run["reason"] or "")),
            )
            for run in runs
        ),
    )


def redraw_after(took: float) -> float:
    """Seconds until the next redraw, after a snapshot that took ``took`` seconds."""
    return max(REFRESH_SECONDS, BUSY_FACTOR * took)


def render(view: dict[str, Any], now: float | None = None) -> RenderableType:
    """The whole view of a ``snapshot``, drawn with rich."""
    now = time.time() if now is None else now
    depth = sum(row["queued"] for row in view["agents"])
    parts: list[Part] = [
        scheduler_line(view["scheduler"]),
        "",
        agents_table(view),
        *[line for row in view["agents"] for line in runtime_lines(row)],
        "",
        f"[bold]Active runs[/] ({len(view['active'])})",
    ]
    parts.append(active_table(view["active"], now) if view["active"] else "[dim]  none[/]")
    parts += ["", "[bold]Recent results[/]"]
    parts.append(recent_table(view["recent"]) if view["recent"] else "[dim]  none yet[/]")
    parts += ["", f"[bold]Queue depth[/]: {depth} item(s) waiting"]
    return to_rich(parts)


def _duration(start: float | None, end: float | None) -> str:
    if start is None or end is None:
        return "-"
    seconds = max(0, int(end - start))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# ---------------------------------------------------------------------- live
def wants_view(headless: bool) -> bool:
    """The live view only in a terminal (stdout and stderr), and not with ``--headless``."""
    return not headless and sys.stdout.isatty() and sys.stderr.isatty()


class TerminalView:
    """While a scheduler runs (``with TerminalView(scheduler): scheduler.run()``): its log
    lines scroll above the view, which redraws every second until the scheduler stops."""

    def __init__(self, engine: Any, console: Console | None = None):
        from rich.console import Console
        from rich.live import Live

        self.engine = engine
        self.console = console or Console(highlight=False)
        self.live = Live(
            console=self.console,
            auto_refresh=False,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="al-view", daemon=True)
        self._streams: list[tuple[logging.StreamHandler[Any], Any]] = []

    def __enter__(self) -> TerminalView:
        self.live.start()
        # Log handlers hold the real stderr: point them at the live display's proxy, so each
        # line is printed above the view instead of through it.
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream in (
                sys.__stderr__,
                sys.__stdout__,
            ):
                self._streams.append((handler, handler.setStream(sys.stderr)))
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join(5)
        for handler, stream in self._streams:
            handler.setStream(stream)
        self.live.stop()

    def _loop(self) -> None:
        while not self._done.is_set():
            start = time.monotonic()
            try:
                self.live.update(render(self._snapshot()), refresh=True)
            except Exception as exc:  # a database blip: the scheduler logs it; keep drawing
                self.live.update(to_rich(in_style(f"view: {exc}", "red")), refresh=True)
            self._done.wait(redraw_after(time.monotonic() - start))

    def _snapshot(self) -> dict[str, Any]:
        from llamaherd.readers import StoreReader
        from llamaherd.status import serving_status

        engine = self.engine
        if not engine.loading.ready:  # its agents are being read: only how far it got
            return {"scheduler": serving_status(engine), "agents": [], "active": [], "recent": []}
        view = snapshot(StoreReader(engine.store, engine.project, engine.registry))
        view["scheduler"] = serving_status(engine)  # up before scheduler.json is
        return view
