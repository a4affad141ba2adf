"""``al push``: ship a project to a server and (re)start its scheduler there.

The steps, each printed as it runs; nothing the running scheduler uses changes before the last:

1. check the project here (``al validate``, but the agents' runtime checks are the server's);
2. check the server (``helper.op_probe``): Python >= 3.11 with venv support, free disk, what is
   deployed and running;
3. plan: the files (as git sees them, never ``.al/``), the credentials the project references,
   the packages (llamaherd and exactly the plugins the project uses, pinned to the versions
   here); ``--dry-run`` prints the plan and stops;
4. upload what changed (one tar stream), build a venv when the packages changed;
5. assemble the new release beside the running one and validate it on the server, with its own
   venv and credentials (refused: removed again, nothing changed);
6. activate: stop the scheduler gracefully, flip the ``current`` links, start it (systemd unit or
   supervisor) and wait for its control API; if it does not come up, flip back and start the
   old release.

Without live reload a changed release restarts the scheduler: ``al stop``'s graceful stop lets
active runs finish (``--grace``), waiting runs keep their sandboxes and resume after the start,
and queued work stays in the database. Changed credentials alone need no restart: the scheduler
reads them for each run.
"""

from __future__ import annotations

import io
import secrets
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from llamaherd.api import CommandFailed, LlamaherdError
from llamaherd_deploy import plan as plans
from llamaherd_deploy.environments import Environment
from llamaherd_deploy.ssh import Connection

MIN_PYTHON = (3, 11)
MIN_FREE_VENV = 300 * 1024 * 1024  # a venv with llamaherd and its dependencies, with room
MIN_FREE = 20 * 1024 * 1024
VENV_TIMEOUT = 1800.0
ACTIVATE_MARGIN = 300.0


@dataclass(frozen=True)
class Options:
    dry_run: bool = False
    creds_only: bool = False
    files_only: bool = False
    wheels: Path | None = None
    extra: tuple[str, ...] = ()
    grace: float = 300.0
    start_timeout: float = 120.0
    force_install: bool = False


def server_problems(info: dict[str, Any], need: int = MIN_FREE) -> list[tuple[bool, str]]:
    """``(ok, line)`` for each thing a push needs of the server (``al env check`` prints them)."""
    python = ".".join(map(str, info["python"]))
    checks = [(tuple(info["python"][:2]) >= MIN_PYTHON,
               f"Python {python} ({info['executable']}); llamaherd needs 3.11 or later")]  # fmt: skip
    if not checks[0][0]:
        return checks
    checks[0] = (True, f"Python {python} ({info['executable']})")
    checks += [
        (
            info["venv_support"],
            "venv support"
            if info["venv_support"]
            else "no venv support in that Python (Debian/Ubuntu: apt-get install python3-venv)",
        ),
        (
            info["writable"],
            f"{info['base']} is writable by {info['user']}"
            if info["writable"]
            else f"{info['user']} cannot create or write {info['base']} (create it and chown it, "
            "or choose another --path)",
        ),
        (
            info["free"] >= need,
            f"{info['free'] / 2**30:.1f} GiB free at {info['base']}"
            + ("" if info["free"] >= need else f" (a push needs {need / 2**20:.0f} MiB)"),
        ),
    ]
    return checks


def describe_service(info: dict[str, Any]) -> str:
    mode = info["service"]["mode"]
    what = {"system": "systemd system unit", "user": "systemd user unit"}.get(mode, "supervisor")
    return f"{what} ({info['service']['why']})"


class Push:
    def __init__(
        self,
        project: Any,
        registry: Any,
        env: Environment,
        agent: str | None,
        options: Options,
        echo: Callable[[str], None],
    ):
        self.project = project
        self.registry = registry
        self.env = env
        self.agent = agent
        self.options = options
        self.echo = echo
        self.agents = [agent] if agent else None
        self.scope = plans.scope_of(agent)
        self.id = plans.release_id()
        self.nonce = secrets.token_hex(16)

    def step(self, text: str) -> None:
        self.echo(f"==> {text}")

    def detail(self, text: str) -> None:
        self.echo(f"    {text}")

    # ------------------------------------------------------------------ here
    def check_project(self) -> None:
        self.step(f"checking {'agents/' + self.agent if self.agent else 'the project'} here")
        if self.agent:
            self.project.agent(self.agent)
        problems = plans.local_problems(self.project, self.registry, self.agents)
        for problem in problems:
            self.detail(str(problem))
        errors = [p for p in problems if p.is_error]
        if errors:
            raise LlamaherdError(
                f"the project has {len(errors)} error(s) (listed above); fix them, then "
                "`al validate`: nothing was sent to the server"
            )

    # ------------------------------------------------------------------ the push
    def run(self) -> None:
        opts = self.options
        self.echo(f"push {self.agent or 'the project'} to {self.env.where} (env {self.env.name})")
        self.check_project()
        files = {} if opts.creds_only else plans.project_files(self.project.root, self.scope)
        generated = (
            None if opts.creds_only or self.scope else plans.server_env_toml(self.project, self.env)
        )
        if generated is not None:
            files[generated.path] = generated
        creds = {} if opts.files_only else plans.credential_files(
            self.project, self.registry, self.agents
        )  # fmt: skip
        wheels = plans.wheel_digests(opts.wheels)
        with Connection(self.env) as conn:
            self.step(f"checking {self.env.user}@{self.env.host}")
            info = conn.call(
                "probe", {"base": self.env.base, "scope": self.scope, "nonce": self.nonce}
            )
            self.check_server(info, need=MIN_FREE)
            deployed = info.get("deployed")
            if self.agent and not deployed:
                raise CommandFailed(
                    f"nothing is deployed in {self.env.where} yet: push the whole project "
                    f"first (`al push {self.env.name}`)"
                )
            work = self.plan(info, files, creds, wheels)
            if opts.dry_run:
                self.echo("dry run: nothing was changed on the server")
                return
            if not work.anything:
                running = info.get("scheduler")
                self.echo(f"up to date: release {deployed['release']} runs (pid {running['pid']})")
                return
            if work.venv_needed:
                self.check_server(info, need=MIN_FREE_VENV)
            try:
                self.apply(conn, work, files, creds)
            except BaseException:
                self.discard(conn)
                raise

    def check_server(self, info: dict[str, Any], need: int) -> None:
        failed = [line for ok, line in server_problems(info, need) if not ok]
        if failed:
            raise CommandFailed(f"{self.env.where}: {failed[0]}")

    def plan(
        self,
        info: dict[str, Any],
        files: dict[str, plans.LocalFile],
        creds: dict[str, bytes],
        wheels: dict[str, str],
    ) -> Work:
        opts, deployed = self.options, info.get("deployed")
        work = Work()
        if not opts.creds_only:
            work.files = plans.file_changes(files, info.get("files", {}))
        if not opts.files_only:
            work.creds = plans.credential_changes(
                creds, info.get("credentials", {}), self.nonce, scoped=bool(self.agent)
            )
        reqs = plans.requirements(self.project, self.registry, self.agents, opts.extra)
        if self.agent and deployed and deployed.get("requirements"):
            reqs = merge_requirements(deployed["requirements"], reqs)
        salt = [self.id] if opts.force_install else []
        work.requirements = reqs
        work.venv = plans.venv_key(
            info["python"], info["executable"], reqs, [*sorted(wheels.values()), *salt]
        )
        if opts.creds_only:
            work.venv = deployed["venv"] if deployed else work.venv
        work.venv_needed = work.venv not in info.get("venvs", [])
        work.release = not opts.creds_only and (
            bool(work.files) or not deployed or work.venv != deployed.get("venv")
        )
        work.credset = not opts.files_only and (bool(work.creds) or not deployed)
        work.start = info.get("scheduler") is None
        self.print_plan(info, work)
        return work

    def print_plan(self, info: dict[str, Any], work: Work) -> None:
        deployed, running = info.get("deployed"), info.get("scheduler")
        self.step("plan")
        if deployed:
            state = f"pid {running['pid']}" if running else "not running"
            self.detail(f"deployed: release {deployed['release']} (scheduler {state})")
        else:
            self.detail(f"deployed: nothing yet in {info['base']}")
        if work.venv_needed:
            self.detail(f"packages: new venv {work.venv}: {' '.join(work.requirements)}")
        else:
            self.detail(f"packages: unchanged (venv {work.venv})")
        if not self.options.creds_only:
            self.detail(f"files: {work.files.summary()}")
            for line in work.files.lines():
                self.detail(f"  {line}")
        if not self.options.files_only:
            self.detail(f"credentials: {work.creds.summary()}")
            for line in work.creds.lines():
                self.detail(f"  {line}")
        if work.start:
            action = "start"
        elif work.release:
            action = "restart (graceful: active runs finish first)"
        else:
            action = "keep running" + (" (it reads credentials per run)" if work.credset else "")
        self.detail(f"scheduler: {action}, as a {describe_service(info)}")

    # ------------------------------------------------------------------ changing the server
    def apply(
        self, conn: Connection, work: Work, files: dict[str, Any], creds: dict[str, bytes]
    ) -> None:
        opts = self.options
        uploads = [files[p] for p in work.files.upload] if work.release else []
        creds_up = creds if work.credset else {}
        wheels = sorted(opts.wheels.glob("*.whl")) if opts.wheels and work.venv_needed else []
        if uploads or creds_up or wheels:
            self.step(
                f"uploading {len(uploads)} file(s), {len(creds_up)} credential file(s)"
                + (f", {len(wheels)} wheel(s)" if wheels else "")
            )
            conn.call(
                "upload",
                {"base": self.env.base, "id": self.id},
                payload=lambda stream: write_archive(stream, uploads, creds_up, wheels),
            )
        if work.venv_needed:
            self.step(f"installing {len(work.requirements)} package(s) into venv {work.venv}")
            conn.call(
                "venv",
                {
                    "base": self.env.base,
                    "key": work.venv,
                    "requirements": work.requirements,
                    "no_index": bool(opts.wheels),
                    "find_links": self.id if opts.wheels else None,
                },
                progress=self.detail,
                timeout=VENV_TIMEOUT,
            )
        if work.release or work.credset:
            self.assemble(conn, work, files)
        self.step("activating" if work.release or work.credset else "starting the scheduler")
        answer = conn.call(
            "activate",
            {
                "base": self.env.base,
                "id": self.id,
                "project": work.release,
                "credentials": work.credset,
                "restart": work.release,
                "grace": opts.grace,
                "start_timeout": opts.start_timeout,
            },
            progress=self.detail,
            timeout=opts.grace + opts.start_timeout + ACTIVATE_MARGIN,
        )
        running = answer.get("scheduler") or {}
        what = f"release {self.id}" if work.release else "the deployed release"
        self.echo(
            f"done: {what} runs on {self.env.host} (pid {running.get('pid', '?')}, "
            f"{running.get('url', '?')} on the server); `al stat --env {self.env.name}` shows it"
        )

    def assemble(self, conn: Connection, work: Work, files: dict[str, Any]) -> None:
        self.step(f"assembling release {self.id} on the server")
        answer = conn.call(
            "release",
            {
                "base": self.env.base,
                "id": self.id,
                "project": work.release,
                "credentials": work.credset,
                "scope": self.scope,
                "venv": work.venv,
                "files": {path: [f.sha, f.executable] for path, f in files.items()},
                "agents": self.agents or [],
            },
            progress=self.detail,
        )
        for line in answer["output"].splitlines():
            self.detail(line)
        if not answer["ok"]:
            raise LlamaherdError(
                f"{self.env.where}: the release does not validate on the server (listed "
                "above); nothing changed there"
            )

    def discard(self, conn: Connection) -> None:
        try:
            conn.call("discard", {"base": self.env.base, "id": self.id})
        except LlamaherdError:
            pass  # the connection is gone: the server prunes stale uploads itself


@dataclass
class Work:
    """What a push changes: filled in by ``Push.plan``."""

    files: plans.Changes = field(default_factory=plans.Changes)
    creds: plans.Changes = field(default_factory=plans.Changes)
    requirements: list[str] = field(default_factory=list)
    venv: str = ""
    venv_needed: bool = False
    release: bool = False  # a new release of the project (then a restart)
    credset: bool = False  # a new credential set
    start: bool = False  # the scheduler is not running: start it

    @property
    def anything(self) -> bool:
        return self.release or self.credset or self.start


def merge_requirements(old: list[str], new: list[str]) -> list[str]:
    """``old`` with ``new`` added; for a distribution in both, ``new`` (this machine's pin)."""
    merged = {_distribution(r): r for r in old}
    merged.update({_distribution(r): r for r in new})
    return sorted(merged.values())


def _distribution(requirement: str) -> str:
    for mark in ("[", "=", "<", ">", "!", "~", " ", ";"):
        requirement = requirement.split(mark, 1)[0]
    return requirement.lower().replace("_", "-")


def write_archive(
    stream: IO[bytes], files: list[Any], creds: dict[str, bytes], wheels: list[Path]
) -> None:
    """One tar stream: ``files/<path>``, ``credentials/<type>/<instance>/<field>``,
    ``wheels/<name>``."""
    with tarfile.open(fileobj=stream, mode="w|") as tar:
        for local in files:
            content = local.read()
            if plans.sha256_bytes(content) != local.sha:
                raise CommandFailed(f"{local.path} changed during the push; push again")
            _add(tar, f"files/{local.path}", content, 0o755 if local.executable else 0o644)
        for key, content in creds.items():
            _add(tar, f"credentials/{key}", content, 0o600)
        for wheel in wheels:
            _add(tar, f"wheels/{wheel.name}", wheel.read_bytes(), 0o644)


def _add(tar: tarfile.TarFile, name: str, content: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(content), mode, int(time.time())
    tar.addfile(info, io.BytesIO(content))
