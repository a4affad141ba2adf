"""Where ``al add`` gets skills, and how an added agent's config is fitted to the project.

A source is a folder, a git URL, or GitHub shorthand ``owner/repo`` (cloned from
``$AL_GITHUB_URL/owner/repo.git``, ``https://github.com`` by default), optionally with
``#path`` naming the skill's folder inside it. Without ``#path`` every SKILL.md is found as
Action Llama finds them: at the root, then in ``skills/*/`` and ``agents/*/``.

A skill shipped with a ``config.toml`` keeps it, but the model and webhook source names it
references are names in *its* project: ``fit_config`` maps each onto this project's (the same
name; else the definition the source repo's own ``config.toml`` gives, matched by provider and
model or by source type) and says exactly what to add for the rest.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.errors import CommandFailed, ConfigError, LlamaherdError
from llamaherd.project import parse_skill, read_toml

GITHUB_URL_ENV = "AL_GITHUB_URL"
GITHUB_URL = "https://github.com"
# Action Llama's shorthand: owner/repo.
SHORTHAND = re.compile(r"^[A-Za-z0-9_-]+/[A-Za-z0-9._-]+$")
# A scp-like git address (user@host:path) or any URL with a scheme.
GIT_URL = re.compile(r"^([a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)", re.IGNORECASE)
COLLECTIONS = ("skills", "agents")
CLONE_TIMEOUT = 300


@dataclass
class Skill:
    """A SKILL.md found in a source: its name (frontmatter ``name``, else its folder's) and
    where it is (``""`` for the source's root)."""

    name: str
    description: str
    path: Path
    where: str


@dataclass
class Fetched:
    """A source on disk: its root (a folder, or a shallow clone) and what to call it."""

    root: Path
    label: str  # the repository or folder name, for a root skill without a name
    subdir: str = ""
    cloned: bool = False  # someone else's repository: its symlinks must stay inside it


def github_url(shorthand: str) -> str:
    """The clone URL of ``owner/repo`` (``$AL_GITHUB_URL`` overrides GitHub, e.g. in tests)."""
    base = os.environ.get(GITHUB_URL_ENV) or GITHUB_URL
    return f"{base.rstrip('/')}/{shorthand.removesuffix('.git')}.git"


def fetch(source: str, tmp: Path) -> Fetched:
    """The source's folder (a local one, or a shallow clone into ``tmp``)."""
    address, _, subdir = source.partition("#")
    subdir = subdir.strip("/")
    if ".." in Path(subdir).parts or Path(subdir).is_absolute():
        raise LlamaherdError(f"{source}: the #path must stay inside the source")
    is_url = bool(GIT_URL.match(address))
    local = Path(address).expanduser()
    if not is_url and local.is_dir():
        root = local.resolve()
        return Fetched(root, root.name, subdir)
    if not is_url and SHORTHAND.match(address):
        address = github_url(address)
    elif not is_url and not address.endswith(".git"):
        raise LlamaherdError(f"{source}: no such folder, and not a git URL or owner/repo")
    clone = tmp / "clone"
    _clone(address, clone)
    label = re.split(r"[/:]", address.rstrip("/"))[-1].removesuffix(".git")
    return Fetched(clone.resolve(), label, subdir, cloned=True)


def check_links(fetched: Fetched, folder: Path, source: str) -> None:
    """Refuse a cloned skill folder reaching outside its repository through a symlink (its
    own path, or any link in it, followed as copying it would): a repository could otherwise
    have ``al add`` copy ``/etc/shadow`` or the credential store into ``agents/``."""
    if not fetched.cloned:
        return  # the user's own folder: its links are theirs
    seen: set[Path] = set()
    pending = [folder]
    while pending:
        path = pending.pop()
        real = path.resolve()
        where = path.relative_to(fetched.root) if path.is_relative_to(fetched.root) else path
        if not real.is_relative_to(fetched.root):
            raise LlamaherdError(
                f"{source}: {where} is a symlink leading out of the repository (to {real}); "
                "refusing to install it"
            )
        if real.is_dir() and real not in seen:
            seen.add(real)  # a link back to a folder already seen: no endless walk
            pending += [child for child in path.iterdir() if child.name != ".git"]


def _clone(address: str, target: Path) -> None:
    try:
        result = subprocess.run(
            ["git", "clone", "--depth", "1", "--quiet", address, str(target)],
            capture_output=True,
            text=True,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},  # never hang on a password prompt
            timeout=CLONE_TIMEOUT,
        )
    except OSError as exc:
        raise CommandFailed(f"cannot run git to fetch {address}: {exc.strerror}") from None
    except subprocess.TimeoutExpired:
        raise CommandFailed(f"git clone {address} timed out after {CLONE_TIMEOUT} s") from None
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {result.returncode}"
        raise CommandFailed(f"git clone {address} failed: {reason}")


def _skill(path: Path, where: str, fallback: str, source: str) -> Skill:
    try:
        meta, _ = parse_skill(path / "SKILL.md")
    except ConfigError as exc:  # name the source, not our temporary clone
        raise ConfigError(f"{source}: {where or '.'}/SKILL.md", exc.key, exc.message) from None
    name, description = meta.get("name"), meta.get("description")
    return Skill(
        name=name.strip() if isinstance(name, str) and name.strip() else fallback,
        description=description.strip() if isinstance(description, str) else "",
        path=path,
        where=where,
    )


def discover(fetched: Fetched, source: str) -> list[Skill]:
    """The skills of a source: its ``#path``, else its root SKILL.md, then ``skills/*/`` and
    ``agents/*/`` (a name found twice is kept once, the first)."""
    if fetched.subdir:
        path = fetched.root / fetched.subdir
        check_links(fetched, path, source)
        if not (path / "SKILL.md").is_file():
            raise LlamaherdError(f"{source}: no SKILL.md there")
        return [_skill(path, fetched.subdir, Path(fetched.subdir).name, source)]
    found: list[Skill] = []
    if (fetched.root / "SKILL.md").is_file():
        check_links(fetched, fetched.root, source)
        found.append(_skill(fetched.root, "", fetched.label, source))
    for collection in COLLECTIONS:
        folder = fetched.root / collection
        for entry in sorted(folder.iterdir() if folder.is_dir() else []):
            check_links(fetched, entry, source)  # before anything in it is read
            if (entry / "SKILL.md").is_file():
                skill = _skill(entry, f"{collection}/{entry.name}", entry.name, source)
                if all(other.name != skill.name for other in found):
                    found.append(skill)
    if not found:
        raise LlamaherdError(f"{source}: no SKILL.md there (nor in skills/*/ or agents/*/)")
    return found


def choose(skills: list[Skill], wanted: str | None, source: str) -> Skill:
    """The skill ``-a NAME`` names (by name or folder), or the only one."""
    if wanted is None and len(skills) == 1:
        return skills[0]
    if wanted is not None:
        for skill in skills:
            if wanted in (skill.name, Path(skill.where).name):
                return skill
    listing = "; ".join(
        f"{s.name} ({s.where or 'root'})" + (f": {s.description}" if s.description else "")
        for s in skills
    )
    if wanted is None:
        raise LlamaherdError(
            f"{source} holds {len(skills)} skills, pick one with -a NAME: {listing}"
        )
    raise LlamaherdError(f"{source} has no skill {wanted!r}; it holds: {listing}")


def source_config(fetched: Fetched, skill: Skill) -> dict[str, Any]:
    """The project config of the source repo (its root ``config.toml``), when the skill is
    not itself at the root (where that file would be the skill's own)."""
    path = fetched.root / "config.toml"
    if not skill.where or not path.is_file():
        return {}
    try:
        return read_toml(path)
    except ConfigError:
        return {}  # their project's problem: we only read definitions from it


def skill_config(skill_dir: Path) -> dict[str, Any]:
    """The agent config a skill folder carries: its ``config.toml`` with its ``SKILL.md``
    frontmatter's runtime keys merged under it (as the project will load it). ConfigError
    when either cannot be read."""
    from llamaherd import compat

    own = skill_dir / "config.toml"
    meta, _ = parse_skill(skill_dir / "SKILL.md")
    config, _, _ = compat.merge_frontmatter(meta, read_toml(own) if own.exists() else {})
    return config


# --------------------------------------------------------------------------- fitting names


@dataclass
class Fitted:
    """What ``fit_config`` changed and what is left for the user to add."""

    renamed: list[str] = field(default_factory=list)  # "models: sonnet -> claude (why)"
    todo: list[str] = field(default_factory=list)  # exact text to add, and where


def _tables(config: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    value = config.get(key)
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(v, dict)}


def _toml_table(header: str, table: dict[str, Any]) -> str:
    import tomlkit

    return f"[{header}]\n" + tomlkit.dumps(
        {k: v for k, v in table.items() if not isinstance(v, dict)}
    )


def _model_for(
    name: str, theirs: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]
) -> str | None:
    """The project's model for their model ``name``: the same name, else the one with the
    provider and model their definition gives."""
    if name in ours:
        return name
    definition = theirs.get(name)
    if definition is None:
        return None
    same = (definition.get("provider"), definition.get("model"))
    return next((n for n, t in ours.items() if (t.get("provider"), t.get("model")) == same), None)


def fit_models(
    models: list[Any], theirs: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]
) -> tuple[list[str], Fitted]:
    """The agent's ``models`` mapped onto the project's. Names with no counterpart are kept
    when none maps (so `al validate` names them) and dropped as fallbacks otherwise; either
    way the exact table to add is given."""
    fitted = Fitted()
    mapped: list[str] = []
    missing: list[str] = []
    for name in [m for m in models if isinstance(m, str)]:
        target = _model_for(name, theirs, ours)
        if target is None:
            missing.append(name)
        elif target not in mapped:
            mapped.append(target)
            if target != name:
                fitted.renamed.append(f"models: {name} -> {target} (same provider and model)")
    for name in missing:
        where = "config.toml"
        if name in theirs:
            fitted.todo.append(f"add to {where}:\n{_toml_table(f'models.{name}', theirs[name])}")
        else:
            fitted.todo.append(
                f'add a [models.{name}] table to {where} (provider = "...", model = "...")'
                + (f", or use one of: {', '.join(ours)}" if ours else "")
            )
    if mapped and missing:
        fitted.renamed.append(f"models: dropped {', '.join(missing)} (not in this project)")
        return mapped, fitted
    return mapped + missing, fitted


def _source_for(
    name: str, theirs: dict[str, dict[str, Any]], ours: dict[str, dict[str, Any]]
) -> tuple[str | None, str | None]:
    """(the project's source for their source ``name``, its type when known)."""
    if name in ours:
        return name, None
    kind = theirs.get(name, {}).get("type")
    kind = kind if isinstance(kind, str) else name  # Action Llama projects often name it so
    same = [n for n, t in ours.items() if t.get("type", "generic") == kind]
    return (same[0] if len(same) == 1 else None), kind


def fit_webhooks(
    entries: list[Any],
    theirs: dict[str, dict[str, Any]],
    ours: dict[str, dict[str, Any]],
    known_types: set[str],
) -> Fitted:
    """Point each ``[[webhooks]] source`` at the project's source (in place)."""
    fitted = Fitted()
    for entry in entries:
        name = entry.get("source") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            continue
        target, kind = _source_for(name, theirs, ours)
        if target is not None:
            if target != name:
                entry["source"] = target
                fitted.renamed.append(f"webhooks: source {name} -> {target} (type {kind})")
            continue
        candidates = [n for n, t in ours.items() if t.get("type", "generic") == kind]
        if candidates:
            fitted.todo.append(
                f"webhooks: set source = one of {', '.join(candidates)} (type {kind}) "
                f"instead of {name!r} in the agent's config.toml"
            )
        elif name in theirs:
            fitted.todo.append(
                f"add to config.toml:\n{_toml_table(f'webhooks.{name}', theirs[name])}"
            )
        elif kind in known_types:
            fitted.todo.append(
                f'add to config.toml:\n[webhooks.{name}]\ntype = "{kind}"\n'
                'credential = "default"   # the instance of its secret credential'
            )
        else:
            fitted.todo.append(f'add a [webhooks.{name}] table (type = "...") to config.toml')
    return fitted


def fit_config(
    text: str, theirs: dict[str, Any], ours: dict[str, Any], source: str, known_types: set[str]
) -> tuple[str, Fitted]:
    """An added agent's config.toml (comments kept) with ``source`` set and its model and
    webhook source names fitted to the project (``ours``)."""
    import tomlkit

    try:
        document = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise LlamaherdError(f"{source}: its config.toml is not valid TOML: {exc}") from None
    fitted = Fitted()
    models = document.get("models")
    if isinstance(models, list):
        mapped, fitted = fit_models(
            list(models), _tables(theirs, "models"), _tables(ours, "models")
        )
        if mapped != list(models):
            document["models"] = mapped
    hooks = document.get("webhooks")
    if isinstance(hooks, list):
        webhooks = fit_webhooks(
            hooks, _tables(theirs, "webhooks"), _tables(ours, "webhooks"), known_types
        )
        fitted.renamed += webhooks.renamed
        fitted.todo += webhooks.todo
    if "source" not in document:
        document["source"] = source
        document["source"].comment("where `al add` got this skill")
    return tomlkit.dumps(document), fitted
