"""What a push ships, worked out on this machine: the project's files (as git sees them), the
distributions the server needs, the credentials the project references, and how they differ
from what the server's ``probe`` reported. Nothing here talks to the server.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from llamaherd import __version__
from llamaherd.api import (
    ENV_TOML,
    CommandFailed,
    CredentialStore,
    LlamaherdError,
    Problem,
    agents_using,
    deep_merge,
    describe_plugins,
    format_ref,
    read_env_toml,
    referenced_credentials,
    shared_entries,
    validate_project,
)

# Never shipped, whatever .gitignore says: the state (database, control token, logs), git's,
# and this machine's .env.toml (the server gets its own: ``server_env_toml``).
NEVER = (".al", ".git", ENV_TOML)
SHARED = "shared"  # files every agent reads (the peer's /app/static/shared/): always shipped
# Plugins that act on every run or on the server whenever they are installed.
SERVER_HOOKS = ("register_routes", "run_started", "run_finished")


@dataclass(frozen=True)
class LocalFile:
    path: str  # relative to the project root, "/"-separated
    source: Path | None  # None: ``content`` was made for the server
    sha: str
    executable: bool
    content: bytes | None = None

    def read(self) -> bytes:
        return self.content if self.content is not None else self.source.read_bytes()  # type: ignore[union-attr]


# --------------------------------------------------------------------------- validation


def deferred(problem: Problem) -> bool:
    """Runtime checks (the agents' OS users, the Docker daemon, images) are about the machine
    that runs the agents, so a push leaves them to the validation on the server. Which runtime
    a type names is not: a missing runtime plugin here means we cannot install it there."""
    return problem.key.startswith("runtime") and not problem.key.startswith("runtime.type")


def local_problems(project: Any, registry: Any, agents: list[str] | None) -> list[Problem]:
    return [p for p in validate_project(project, registry, agents) if not deferred(p)]


# --------------------------------------------------------------------------- files


def project_files(root: Path, scope: list[str] | None = None) -> dict[str, LocalFile]:
    """The project's files as git would commit them (tracked and untracked, minus what any
    ``.gitignore``, ``.git/info/exclude`` or the user's global excludes ignore), whether or not
    the project is a git repository, except under ``shared/``: there exactly the files runs
    see (``shared_entries``: hidden ones and links out of the project left out, ignored ones
    kept); never ``.al/``, ``.git/`` or ``.env.toml``. ``scope``: path prefixes."""
    shared = _shared_files(root)
    listed = [rel for rel in _git_listing(root) if rel.split("/")[0] != SHARED]
    found = {}
    for rel in sorted({*listed, *shared}):
        parts = rel.split("/")
        if parts[0] in NEVER or (scope and not rel.startswith(tuple(scope))):
            continue
        path = root / rel
        if not path.is_file():  # deleted but still in the index, or a dangling link
            continue
        found[rel] = LocalFile(rel, path, _sha256(path), bool(path.stat().st_mode & 0o100))
    return found


def _shared_files(root: Path) -> list[str]:
    """``shared/...`` paths of the files under the project's ``shared/`` that runs see."""
    return [f"{SHARED}/{rel}" for rel, _, left_out in shared_entries(root) if left_out is None]


def server_env_toml(project: Any, env: Any) -> LocalFile | None:
    """The server's ``.env.toml``: this machine's settings over config.toml (its ``.env.toml``
    without the binding) with the environment's over them, and ``[gateway] bind = "0.0.0.0"``
    when the environment says ``expose``; so the server runs what ``-E NAME`` runs here."""
    from llamaherd_deploy.environments import dumps

    local = {k: v for k, v in read_env_toml(project.root).items() if k != "environment"}
    data = deep_merge(local, env.layers)
    if env.expose:
        data = deep_merge(data, {"gateway": {"bind": "0.0.0.0"}})
    if not data:
        return None
    content = ("# Written by `al push` for environment " + env.name + ".\n" + dumps(data)).encode()
    return LocalFile(ENV_TOML, None, sha256_bytes(content), False, content)


def _git_listing(root: Path) -> list[str]:
    if shutil.which("git") is None:
        raise CommandFailed(
            "al push needs git to read the project's .gitignore files (apt-get install git)"
        )
    inside = _git(["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"], check=False)
    if inside.returncode == 0 and inside.stdout.strip() == b"true":
        listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."]
        return _split(_git(["git", "-C", str(root), *listing]).stdout)
    # Not a repository: git applies the ignore files of a work tree through an empty one.
    with tempfile.TemporaryDirectory(prefix="al-push-git-") as tmp:
        _git(["git", "init", "-q", tmp])
        command = ["git", f"--git-dir={tmp}/.git", f"--work-tree={root}", "-C", str(root)]
        return _split(_git([*command, "ls-files", "-z", "--others", "--exclude-standard"]).stdout)


def _git(command: list[str], check: bool = True) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(command, capture_output=True, timeout=120)
    if check and result.returncode != 0:
        raise CommandFailed(
            f"{' '.join(command[:4])}: {result.stderr.decode(errors='replace').strip()}"
        )
    return result


def _split(output: bytes) -> list[str]:
    return sorted({p for p in output.decode("utf-8", errors="surrogateescape").split("\0") if p})


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


# --------------------------------------------------------------------------- distributions


def needed_plugins(project: Any, registry: Any, agents: list[str] | None = None) -> set[str]:
    """Names of the plugins whose objects the project (or ``agents``) uses, plus those that
    act on every run or on the server (routes, run hooks) and language skills that speak to
    one of its agents."""
    chosen = [a for n, a in project.agents.items() if agents is None or n in agents]
    owner = registry.owner
    used: set[str | None] = set()
    models = project.config.get("models", {})
    for agent in chosen:
        used.add(owner.get(("runtimes", agent.runtime.get("type"))))
        for name in agent.models:
            used.add(owner.get(("providers", (models.get(name) or {}).get("provider"))))
    for type_name, _ in referenced_credentials(project, registry, agents):
        used.add(owner.get(("credential_types", type_name)))
    for trigger in registry.trigger_types.values():
        if agents_using(trigger, chosen):
            used.add(owner.get(("trigger_types", trigger.name)))
    for table in project.config.get("webhooks", {}).values():
        used.add(owner.get(("webhook_sources", table.get("type"))))
    for name, skill in registry.language_skills.items():
        if _speaks(skill, chosen):
            used.add(owner.get(("language_skills", name)))
    for info in describe_plugins():
        if set(info.hooks) & set(SERVER_HOOKS):
            used.add(info.name)
    return {name for name in used if name}


def _speaks(skill: Any, agents: list[Any]) -> bool:
    """Whether a language skill adds tools, or a preamble for one of ``agents``' runs."""
    if skill.tools:
        return True
    for agent in agents:
        preview = SimpleNamespace(
            run_id="push-preview", agent=agent, trigger={}, sandbox=None, engine=None,
            store=None, project=agent.project, redact=lambda text: text, log=lambda *a: None,
        )  # fmt: skip
        try:
            if skill.preamble(preview):
                return True
        except Exception:  # a skill that cannot preview may still speak: ship it
            return True
    return False


def requirements(
    project: Any, registry: Any, agents: list[str] | None, extra: tuple[str, ...] = ()
) -> list[str]:
    """pip requirements for the server: llamaherd and the needed plugins, pinned to the
    versions installed here (what was validated), plus this plugin (the server runs
    ``al service``) and ``extra`` (``--with``)."""
    plugins = needed_plugins(project, registry, agents) | {"deploy"}
    infos = {info.name: info for info in describe_plugins()}
    wanted: dict[str, str] = {}
    for name in sorted(plugins):
        info = infos.get(name)
        if info is None or info.builtin or not info.distribution:
            continue
        wanted[info.distribution] = f"{info.distribution}=={info.version}"
    postgres = str(project.setting("database")).startswith("postgres")
    wanted["llamaherd"] = f"llamaherd{'[postgres]' if postgres else ''}=={__version__}"
    versions = {info.distribution: info.version for info in infos.values() if info.distribution}
    for requirement in extra:
        name = requirement.strip()
        wanted[name] = f"{name}=={versions[name]}" if name in versions else name
    return sorted(wanted.values())


def venv_key(python: list[int], executable: str, reqs: list[str], wheels: list[str]) -> str:
    """The name of the server venv for this set of requirements: the same set reuses it."""
    blob = json.dumps([python, executable, sorted(reqs), sorted(wheels)])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def wheel_digests(directory: Path | None) -> dict[str, str]:
    if directory is None:
        return {}
    wheels = sorted(directory.glob("*.whl"))
    if not wheels:
        raise LlamaherdError(f"--wheels {directory}: no .whl files there")
    return {wheel.name: _sha256(wheel) for wheel in wheels}


# --------------------------------------------------------------------------- credentials


def credential_files(project: Any, registry: Any, agents: list[str] | None) -> dict[str, bytes]:
    """``{type/instance/field: file content}`` of the credentials the project references, from
    the local store; every one must be there."""
    store = CredentialStore()
    files: dict[str, bytes] = {}
    missing = []
    for type_name, instance in sorted(referenced_credentials(project, registry, agents)):
        values = store.read(type_name, instance)
        if not values:
            missing.append(format_ref(type_name, instance))
            continue
        for name, value in values.items():
            files[f"{type_name}/{instance}/{name}"] = (value + "\n").encode()
    if missing:
        raise LlamaherdError(
            f"cannot push: credential(s) {', '.join(missing)} not in {store.root}; add them "
            f"with `al creds add {missing[0]}`"
        )
    return files


def digest(nonce: str, content: bytes) -> str:
    return hmac.new(nonce.encode(), content, hashlib.sha256).hexdigest()


# --------------------------------------------------------------------------- the plan


@dataclass
class Changes:
    """Added, changed and removed names of one kind (files or credentials)."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @classmethod
    def between(cls, wanted: dict[str, Any], present: dict[str, Any]) -> Changes:
        return cls(
            added=sorted(set(wanted) - set(present)),
            changed=sorted(k for k in set(wanted) & set(present) if wanted[k] != present[k]),
            removed=sorted(set(present) - set(wanted)),
        )

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)

    @property
    def upload(self) -> list[str]:
        return self.added + self.changed

    def summary(self) -> str:
        parts = [(len(self.added), "new"), (len(self.changed), "changed"),
                 (len(self.removed), "removed")]  # fmt: skip
        return ", ".join(f"{n} {what}" for n, what in parts if n) or "unchanged"

    def lines(self) -> list[str]:
        return (
            [f"+ {name}" for name in self.added]
            + [f"~ {name}" for name in self.changed]
            + [f"- {name}" for name in self.removed]
        )


def file_changes(files: dict[str, LocalFile], remote: dict[str, list[Any]]) -> Changes:
    wanted = {path: [f.sha, f.executable] for path, f in files.items()}
    return Changes.between(wanted, remote)


def credential_changes(
    creds: dict[str, bytes], remote: dict[str, str], nonce: str, scoped: bool
) -> Changes:
    """What differs; a one-agent push never removes the other agents' credentials."""
    wanted = {key: digest(nonce, content) for key, content in creds.items()}
    changes = Changes.between(wanted, remote)
    if scoped:
        changes.removed = []
    return changes


def scope_of(agent: str | None) -> list[str] | None:
    """What a one-agent push ships: that agent's folder, and ``shared/`` (which it may read)."""
    return [f"agents/{agent}/", f"{SHARED}/"] if agent else None


def release_id() -> str:
    import secrets
    import time

    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)
