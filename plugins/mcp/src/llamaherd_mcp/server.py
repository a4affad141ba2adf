"""The MCP server of ``al mcp serve``: tools to operate the project, resources to read it.

Tool names follow Action Llama's MCP server (``al_status``, ``al_agents``, ``al_run``,
``al_logs``, ``al_pause``, ``al_resume``, ``al_kill``, ``al_start``, ``al_stop``), so a client
configured for it keeps working; ``al_runs``, ``al_state``, ``al_approve`` and ``al_deny`` are
llamaherd's. Where the answers come from is ``llamaherd_mcp.herd``'s docstring.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Any, Literal

from llamaherd.api import LlamaherdError, __version__, event_summary
from llamaherd_mcp.herd import FINAL, Herd

OUTPUT_LINES = 20  # tail of a tool call's output shown in al_logs
INSTRUCTIONS = (
    "Operate a llamaherd project: its agents run on schedules and events in a scheduler. "
    "al_status shows agents and the scheduler; al_run starts a run (wait=true returns its "
    "result); al_logs reads a run's log; al_runs lists runs. Reads work without a scheduler "
    "(from the project's store); runs and kills need one (al_start)."
)


def _raising(error: Callable[[str], Exception], function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with a ``LlamaherdError`` turned into ``error``: one line, as the CLI
    shows it, for the client (a tool's error result, a resource read's error)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except LlamaherdError as exc:
            raise error(str(exc)) from None

    return wrapper


def log_text(events: list[dict[str, Any]], limit: int) -> str:
    """A run's events as lines a model reads easily (the last ``limit`` events)."""
    shown = events[-limit:] if limit > 0 else events
    lines = []
    if len(shown) < len(events):
        lines.append(f"({len(events) - len(shown)} earlier events not shown: raise limit)")
    for event in shown:
        stamp = time.strftime("%H:%M:%S", time.localtime(event.get("at") or 0))
        data = event.get("data") or {}
        lines.append(f"[{stamp}] {event['type']}: {event_summary(data)}")
        output = data.get("output") if isinstance(data, dict) else None
        if output:
            rows = str(output).rstrip().splitlines()
            if len(rows) > OUTPUT_LINES:
                lines.append(f"    ({len(rows) - OUTPUT_LINES} earlier output lines not shown)")
            lines += ["    " + row for row in rows[-OUTPUT_LINES:]]
    return "\n".join(lines) or "(no events yet)"


def build_server(herd: Herd) -> Any:
    """The ``MCPServer`` with every tool and resource bound to ``herd``."""
    from mcp.server import MCPServer

    server = MCPServer("llamaherd", version=__version__, instructions=INSTRUCTIONS)
    _add_tools(server, herd)
    _add_resources(server, herd)
    return server


def _add_tools(server: Any, herd: Herd) -> None:  # noqa: C901 (one closure per tool)
    from mcp.server.mcpserver.exceptions import ToolError

    def tool(function: Callable[..., Any]) -> None:
        server.add_tool(_raising(ToolError, function))

    def al_status() -> dict[str, Any]:
        """The scheduler (up or not, since when, version, config current) and every agent:
        state, active/scale, queued, last result, next scheduled fire."""
        return {"source": herd.source(), **herd.stat()}

    def al_agents(name: str | None = None) -> dict[str, Any]:
        """The project's agents with their description, models, credentials and triggers;
        with a name, that agent's config and SKILL.md instructions too."""
        project = herd.project()
        if name is None:
            return {"agents": [_agent_summary(a) for a in project.agents.values()]}
        agent = project.agent(name)
        return {**_agent_summary(agent), "config": agent.config, "instructions": agent.body}

    def al_runs(agent: str | None = None, limit: int = 20) -> dict[str, Any]:
        """Recent runs, newest first (of one agent when named): id, state, exit code, trigger,
        times, tokens, reason."""
        return {"runs": herd.runs(agent, max(1, min(limit, 500)))}

    def al_logs(target: str, limit: int = 200) -> str:
        """A run's log (TARGET: a run id, a unique prefix, or an agent for its latest run):
        model turns, tool calls with their output, status, state changes."""
        run = herd.run(target)
        head = f"run {run['id']} of {run['agent']}: {run['state']}"
        if run["state"] in FINAL:
            head += f" (exit {run['exit_code']}{', ' + run['reason'] if run['reason'] else ''})"
        return head + "\n" + log_text(herd.events(run["id"]), limit)

    def al_run(
        agent: str, prompt: str | None = None, wait: bool = False, timeout: float = 600
    ) -> dict[str, Any]:
        """Start a run of AGENT now (PROMPT, when given, is its task). With wait=true, return
        when it has ended (or after TIMEOUT seconds) with its state, exit code, return value
        and log; else at once, with the work item to look for in al_runs."""
        item = herd.start_run(agent, prompt)
        answer: dict[str, Any] = {"agent": agent, "queued": item}
        if not wait:
            return answer
        run = herd.wait_for_item(agent, item, max(1.0, timeout))
        if run is None:
            return {**answer, "state": "queued"}
        answer.update(
            run=run["id"],
            state=run["state"],
            exit_code=run["exit_code"],
            reason=run["reason"],
            return_value=run["return_value"],
        )
        if run["state"] in FINAL:
            answer["log"] = log_text(herd.events(run["id"]), 200)
        return answer

    def al_kill(target: str) -> dict[str, Any]:
        """Kill a run (id or unique prefix), or every live run of an agent."""
        return {"killed": herd.kill(target)}

    def al_pause(name: str | None = None) -> str:
        """Stop starting runs of agent NAME (of every agent when omitted); triggers still
        queue."""
        herd.pause(name, True)
        return f"paused {name or 'every agent'}"

    def al_resume(name: str | None = None) -> str:
        """Start runs again (of agent NAME, of every agent when omitted)."""
        herd.pause(name, False)
        return f"resumed {name or 'every agent'}"

    def al_state(
        agent: str,
        state: Literal["idle", "hibernate", "off"] | None = None,
        reason: str = "",
    ) -> dict[str, Any]:
        """AGENT's state and why it was last set; with STATE, set it: idle (every trigger
        runs), hibernate (only its schedule), off (nothing fires; its runs are killed)."""
        if state is None:
            return herd.agent_state(agent)
        cause = f"MCP al_state: {reason}" if reason else "set through MCP (al_state)"
        return herd.set_state(agent, state, cause)

    def al_approve(run: str, reason: str = "") -> dict[str, Any]:
        """Resume RUN, suspended at its agent's maxTurns, with a renewed turn budget."""
        return herd.answer(run, True, f"MCP al_approve: {reason}" if reason else "through MCP")

    def al_deny(run: str, reason: str = "") -> dict[str, Any]:
        """Refuse RUN, suspended at its maxTurns: it is killed and its agent turned off."""
        return herd.answer(run, False, f"MCP al_deny: {reason}" if reason else "through MCP")

    def al_start() -> str:
        """Start the project's scheduler in the background (`al start --detach`)."""
        return herd.start_scheduler()

    def al_stop() -> str:
        """Stop the project's scheduler gracefully (active runs get its grace period)."""
        return herd.stop_scheduler()

    for function in (
        al_status, al_agents, al_runs, al_logs, al_run, al_kill, al_pause, al_resume,
        al_state, al_approve, al_deny, al_start, al_stop,
    ):  # fmt: skip
        tool(function)


def _agent_summary(agent: Any) -> dict[str, Any]:
    config = agent.config
    triggers = {k: config[k] for k in ("schedule", "every", "webhooks") if k in config}
    return {
        "name": agent.name,
        "description": agent.description,
        "models": agent.models,
        "credentials": agent.credentials,
        "scale": config.get("scale", 1),
        "triggers": triggers,
    }


def _add_resources(server: Any, herd: Herd) -> None:
    from mcp.server.mcpserver.exceptions import ResourceError

    def resource(uri: str, mime: str = "application/json") -> Callable[..., Any]:
        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            return server.resource(uri, mime_type=mime)(_raising(ResourceError, function))

        return register

    @resource("al://agents")
    def agents() -> str:
        """Every agent with its state, active runs, queue depth and last result."""
        return json.dumps(herd.stat(), indent=2, default=str)

    @resource("al://agents/{name}")
    def agent(name: str) -> str:
        """One agent: its config, description and current state."""
        found = herd.project().agent(name)
        state = next((r for r in herd.stat()["agents"] if r["agent"] == name), None)
        body = {**_agent_summary(found), "config": found.config, "status": state}
        return json.dumps(body, indent=2, default=str)

    @resource("al://agents/{name}/skill", mime="text/markdown")
    def skill(name: str) -> str:
        """The agent's SKILL.md instructions."""
        return herd.project().agent(name).body or "(empty SKILL.md)"

    @resource("al://runs")
    def runs() -> str:
        """The 50 most recent runs, newest first."""
        return json.dumps({"runs": herd.runs(None, 50)}, indent=2, default=str)

    @resource("al://runs/{run_id}")
    def run(run_id: str) -> str:
        """One run and its events."""
        found = herd.run(run_id)
        body = {"run": found, "events": herd.events(found["id"])}
        return json.dumps(body, indent=2, default=str)
