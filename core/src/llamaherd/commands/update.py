"""``al update [AGENT]``: fetch each agent's ``source`` again and update its SKILL.md and
Dockerfile from it, showing the diff. ``config.toml`` is the user's and is never touched, but
a SKILL.md frontmatter may carry agent config (older skills' ``hooks``, ``runtime``,
``credentials``...): what a new one grants that the agent did not have (``llamaherd.grants``)
is shown, and taken only when the user agrees, as ``al add`` does."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from llamaherd.cli import AppContext, pass_app
from llamaherd.errors import LlamaherdError

# What an update may replace, in an agent's folder; every other file stays as it is.
UPDATED_FILES = ("SKILL.md", "Dockerfile")


@dataclass
class Change:
    """One file of an agent that differs from its source."""

    name: str
    old: str | None  # None: the agent has none yet
    new: str

    def diff(self, agent: str) -> list[str]:
        import difflib  # late: `al --help` loads this module

        return list(
            difflib.unified_diff(
                (self.old or "").splitlines(keepends=True),
                self.new.splitlines(keepends=True),
                f"agents/{agent}/{self.name}",
                f"agents/{agent}/{self.name} (source)",
            )
        )


@click.command("update")
@click.argument("agent", required=False)
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Update without asking, also when a new SKILL.md grants the agent powers.",
)
@pass_app
def update_command(app: AppContext, agent: str | None, dry_run: bool, yes: bool) -> None:
    """Fetch AGENT's source again (every agent with a `source` when none is named) and update
    its SKILL.md and Dockerfile, showing the diff; its config.toml is never touched.

    Asks before writing unless --yes; exit 1 when a source could not be fetched. A new SKILL.md
    whose frontmatter grants the agent a power it did not have (hooks, runtime, credentials,
    any key not known to be harmless) is shown and asked about with the default no; without a
    terminal it needs --yes.
    """
    project = app.project
    agents = [project.agent(agent)] if agent else list(project.agents.values())
    sourced = [a for a in agents if isinstance(a.config.get("source"), str)]
    if agent and not sourced:
        raise LlamaherdError(
            f"agents/{agent} has no `source` in its config.toml: nothing to update from "
            "(`al add SOURCE --force` installs it again)"
        )
    if not sourced:
        click.echo("no agent has a `source` in its config.toml: nothing to update")
        return
    failures = 0
    for one in sourced:
        try:
            _update(project, one, dry_run, yes)
        except LlamaherdError as exc:
            failures += 1
            click.echo(f"agents/{one.name}: {exc}", err=True)
    sys.exit(1 if failures else 0)


def _update(project: Any, agent: Any, dry_run: bool, yes: bool) -> None:
    source = agent.config["source"]
    changes, granted = fetch_changes(project, agent, source)
    if not changes:
        click.echo(f"agents/{agent.name}: up to date with {source}")
        return
    for change in changes:
        _show(change.diff(agent.name))
    names = " and ".join(change.name for change in changes)
    if granted:
        click.echo(f"agents/{agent.name}: the new SKILL.md grants the agent:", err=True)
        for grant in granted:
            click.echo(f"  {grant}", err=True)
    if dry_run:
        click.echo(f"agents/{agent.name}: {names} would be updated from {source} (dry run)")
        return
    if granted and not yes and not sys.stdin.isatty():
        keys = ", ".join(dict.fromkeys(grant.key for grant in granted))
        raise LlamaherdError(
            f"not updated: the new SKILL.md sets {keys} (listed above); run again with --yes "
            "to take it anyway"
        )
    if not yes and not _confirm(f"update {names} of agents/{agent.name}?", not granted):
        click.echo(f"agents/{agent.name}: left as it is")
        return
    for change in changes:
        (agent.path / change.name).write_text(change.new, encoding="utf-8")
    click.echo(f"agents/{agent.name}: updated {names} from {source}")


def _confirm(question: str, default: bool) -> bool:
    try:
        return click.confirm(question, default=default)
    except click.Abort:  # no answer (stdin closed): nothing is written
        click.echo("no answer: use --yes to update without asking", err=True)
        return False


def fetch_changes(project: Any, agent: Any, source: str) -> tuple[list[Change], list[Any]]:
    """The files of ``UPDATED_FILES`` whose copy at ``source`` differs from the agent's, and
    the grants (``llamaherd.grants.Grant``) the new SKILL.md would add to the agent's config."""
    from llamaherd.skill_sources import discover, fetch

    with tempfile.TemporaryDirectory(prefix="al-update-") as tmp:
        skills = discover(fetch(_located(project, source), Path(tmp)), source)
        skill_dir = upstream_skill(skills, agent.name, source)
        changes = []
        for name in UPDATED_FILES:
            new = _read(skill_dir / name)
            old = _read(agent.path / name)
            if new is not None and new != old:
                changes.append(Change(name, old, new))
        skill = skill_dir / "SKILL.md"
        granted = _new_grants(agent, skill) if any(c.name == "SKILL.md" for c in changes) else []
        return changes, granted


def _new_grants(agent: Any, skill: Path) -> list[Any]:
    """What the agent's config would grant with ``skill`` as its SKILL.md that it does not
    grant now (the frontmatter's runtime keys go under its own config.toml)."""
    from llamaherd import compat, grants
    from llamaherd.project import parse_skill, read_toml

    meta, _ = parse_skill(skill)
    own = read_toml(agent.config_file) if agent.config_file.exists() else {}
    after, _, _ = compat.merge_frontmatter(meta, own)
    return grants.new_grants(agent.config, after)


def _located(project: Any, source: str) -> str:
    """A relative folder source is taken from the project root when it is there (``al add``
    may have been run from it), else from the current directory."""
    address, hash_, subdir = source.partition("#")
    candidate = project.root / address
    if not Path(address).is_absolute() and "://" not in address and candidate.is_dir():
        return f"{candidate}{hash_}{subdir}"
    return source


def upstream_skill(skills: list[Any], name: str, source: str) -> Path:
    """The folder of the agent's skill among those its source holds (``al add``'s discovery):
    the one named like the agent, else the source's only one."""
    from llamaherd.skill_sources import choose

    named = [skill for skill in skills if name in (skill.name, Path(skill.where).name)]
    return choose(named or skills, None, source).path


def _read(path: Path) -> str | None:
    from llamaherd.project import read_project_text

    return read_project_text(path) if path.exists() else None


def _show(lines: list[str]) -> None:
    styles = {"+": "green", "-": "red", "@": "cyan"}
    for line in lines:
        text = line.rstrip("\n")
        style = None if text.startswith(("+++", "---")) else styles.get(text[:1])
        click.secho(text, fg=style, bold=text.startswith(("+++", "---")))


def register(cli: click.Group) -> None:
    cli.add_command(update_command)
