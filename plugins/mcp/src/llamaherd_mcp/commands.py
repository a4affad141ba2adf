"""``al mcp serve`` and ``al mcp init``."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from llamaherd.api import AppContext, LlamaherdError, environment_option, pass_app

SERVER_NAME = "llamaherd"
CONFIG_FILE = ".mcp.json"  # Claude Code's project-scoped MCP servers
# What MCP clients accept as a server's name (a key of mcpServers, shown in their tool names).
SERVER_NAME_SHAPE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _server_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not SERVER_NAME_SHAPE.fullmatch(value):
        raise click.BadParameter(
            f"{value!r}: expected 1 to 64 letters, digits, '_' or '-'", param_hint="--name"
        )
    return value


@click.group("mcp")
def mcp() -> None:
    """The project as an MCP server, for Claude Code, Claude Desktop and other MCP clients."""


@mcp.command("serve")
@environment_option
@pass_app
def serve(app: AppContext) -> None:
    """Serve the project over MCP on stdin/stdout (the client starts this command).

    Tools: al_status, al_agents, al_runs, al_logs, al_run, al_kill, al_pause, al_resume,
    al_state, al_approve, al_deny, al_start, al_stop. Resources: al://agents, al://agents/NAME,
    al://agents/NAME/skill, al://runs, al://runs/RUN.
    """
    from llamaherd_mcp.herd import Herd
    from llamaherd_mcp.server import build_server

    herd = Herd(app.project.root, app.registry, app.environment)
    try:
        build_server(herd).run("stdio")
    finally:
        herd.close()


@mcp.command("init")
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Print the snippet for a client outside the project (Claude Desktop's "
    "claude_desktop_config.json) instead of writing .mcp.json.",
)
@click.option(
    "--name",
    default=SERVER_NAME,
    show_default=True,
    callback=_server_name,
    help="The server's name (letters, digits, '_' and '-').",
)
@pass_app
def init(app: AppContext, print_only: bool, name: str) -> None:
    """Write the project's .mcp.json (Claude Code starts `al mcp serve` from it), keeping the
    other servers it lists."""
    root = app.project.root
    if print_only:
        entry = {"command": _al(), "args": ["--project", str(root), "mcp", "serve"]}
        click.echo(json.dumps({"mcpServers": {name: entry}}, indent=2))
        return
    path = root / CONFIG_FILE
    config = _read(path)
    servers = config.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise LlamaherdError(f"{path}: mcpServers: expected an object")
    verb = "replaced" if name in servers else "added"
    # Relative to the project, as Claude Code runs it: the file works in every checkout.
    servers[name] = {"command": "al", "args": ["mcp", "serve"]}
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    click.echo(f"{verb} the {name!r} server in {path}")


def _al() -> str:
    """The `al` of this environment, by absolute path (a desktop app has another PATH)."""
    beside = Path(sys.executable).with_name("al")
    return str(beside) if beside.is_file() else shutil.which("al") or "al"


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise LlamaherdError(f"{path}: not valid JSON ({exc}); fix or remove it") from None
    if not isinstance(config, dict):
        raise LlamaherdError(f"{path}: expected a JSON object")
    return config
