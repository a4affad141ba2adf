"""The "container" runtime: one fresh, locked-down Docker container per run.

Isolation (DESIGN §6): read-only root fs; ``/tmp`` (the working dir ``/tmp/work``) and the home dir
are tmpfs; ``/app/bin`` (the language-skill commands), ``/credentials`` (only the credentials the
agent declares), ``/app/static/shared`` (the project's ``shared/`` files, as Action Llama bakes
them in) and ``/run/al-gateway`` (the gateway's unix socket) are read-only binds; every
capability dropped, ``no-new-privileges``, pids/memory/CPU limits, network ``bridge`` or ``none``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import secrets
import socket
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaherd.api import (
    SHARED_PATH,
    ConfigError,
    SandboxError,
    SandboxSpec,
    SshError,
    SshMasters,
    SshTarget,
)
from llamaherd_docker import images
from llamaherd_docker.daemon import docker_errors
from llamaherd_docker.hosts import Engine, LocalEngine, RemoteEngine, Staged, engine_target
from llamaherd_docker.sandbox import WORKDIR, ContainerSandbox, remove

log = logging.getLogger("llamaherd.docker")

BIN = "/app/bin"
CREDENTIALS = "/credentials"
GATEWAY_DIR = "/run/al-gateway"
# PID 1 only idles: exists in busybox, Alpine and Debian, and exits at once on SIGTERM.
IDLE_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]

LABEL_RUN = "llamaherd.run"
LABEL_AGENT = "llamaherd.agent"
LABEL_PROJECT = "llamaherd.project"
LABEL_OWNER = "llamaherd.owner"  # "<hostname>:<pid>" of the process that started it
LABEL_CREDENTIALS = "llamaherd.credentials"  # host dir of the staged credentials

_SIZE = "^[0-9]+(\\.[0-9]+)?[bkmgBKMG]?$"

SCHEMA: dict[str, Any] = {
    "network": {
        "enum": ["bridge", "none"],
        "default": "bridge",
        "description": 'Container network: "bridge" (outbound access) or "none".',
    },
    "memory": {
        "type": "string",
        "pattern": _SIZE,
        "description": 'Memory limit, e.g. "4g" (default: [local].memory).',
    },
    "cpus": {
        "type": "number",
        "exclusiveMinimum": 0,
        "description": "CPU limit (default: [local].cpus).",
    },
    "pids": {
        "type": "integer",
        "minimum": 16,
        "default": 512,
        "description": "Most processes the run may have at once (contains fork bombs).",
    },
    "tmpSize": {
        "type": "string",
        "pattern": _SIZE,
        "default": "2g",
        "description": "Size of the /tmp tmpfs (the working dir is /tmp/work).",
    },
    "homeSize": {
        "type": "string",
        "pattern": _SIZE,
        "default": "64m",
        "description": "Size of the home dir tmpfs.",
    },
    "host": {
        "type": "string",
        "pattern": "^ssh://",
        "description": (
            'The Docker engine of another host, "ssh://[user@]host[:port]": images are built '
            "and containers run there, over one SSH connection (default: this machine's)."
        ),
    },
    "key_path": {
        "type": "string",
        "minLength": 1,
        "description": "With host: the private key to log in with (default: ssh's).",
    },
    "ssh_options": {
        "type": "object",
        "additionalProperties": {"type": ["string", "integer", "boolean"]},
        "description": "With host: extra ssh_config options (as for the ssh runtime).",
    },
}


@dataclass(frozen=True)
class Limits:
    """An agent's container settings: its ``[runtime]`` table, then ``[local]``, then defaults."""

    network: str
    memory: str
    cpus: float
    pids: int
    tmp_size: str
    home_size: str

    @classmethod
    def of(cls, agent: Any, project: Any) -> Limits:
        table, local = agent.runtime, project.local
        return cls(
            network=str(table.get("network", SCHEMA["network"]["default"])),
            memory=str(table.get("memory", local["memory"])),
            cpus=float(table.get("cpus", local["cpus"])),
            pids=int(table.get("pids", SCHEMA["pids"]["default"])),
            tmp_size=str(table.get("tmpSize", SCHEMA["tmpSize"]["default"])),
            home_size=str(table.get("homeSize", SCHEMA["homeSize"]["default"])),
        )

    def host_config(self, home: str, uid: int, gid: int) -> dict[str, Any]:
        """Keyword arguments of ``containers.create`` for these limits and DESIGN §6."""
        from docker.utils import parse_bytes

        def tmpfs(size: str, owner: str) -> str:
            # Whole bytes for the kernel ("1.5g" is docker's syntax, not tmpfs's); `exec` because
            # agents build and run code in their working dir.
            return f"size={parse_bytes(size)},{owner},exec"

        return {
            "read_only": True,
            "tmpfs": {
                "/tmp": tmpfs(self.tmp_size, "mode=1777"),
                home: tmpfs(self.home_size, f"uid={uid},gid={gid},mode=0700"),
            },
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "pids_limit": self.pids,
            "mem_limit": self.memory,
            "nano_cpus": int(self.cpus * 1e9),
            "network_mode": self.network,
            "init": True,  # reaps what killed commands leave behind
        }


def _env_map(config: dict[str, Any]) -> dict[str, str]:
    pairs = (item.partition("=") for item in config.get("Env") or [])
    return {key: value for key, _, value in pairs}


def home_dir(config: dict[str, Any]) -> str:
    """The image user's home: ``$HOME`` of the image, else derived from its ``USER``."""
    env_home = _env_map(config).get("HOME")
    if env_home:
        return env_home
    user = (config.get("User") or "").split(":")[0]
    if user in ("", "0", "root"):
        return "/root"
    return "/home/agent" if user.isdigit() else f"/home/{user}"


def sandbox_env(spec: SandboxSpec, config: dict[str, Any]) -> dict[str, str]:
    """The env of every exec: image PATH behind /app/bin, the run's vars, credential vars."""
    image_path = _env_map(config).get("PATH", "/usr/local/bin:/usr/bin:/bin")
    env = {
        "HOME": home_dir(config),
        "PATH": f"{BIN}:{image_path}",
        "AL_RUN_ID": spec.run_id,
        "AL_AGENT": spec.agent.name,
        **spec.env,
        **spec.credential_env(CREDENTIALS),
        "AL_CREDENTIALS_PATH": CREDENTIALS,
    }
    if spec.gateway_socket:
        env["AL_GATEWAY_URL"] = f"unix://{GATEWAY_DIR}/{os.path.basename(spec.gateway_socket)}"
    return env


def _log_progress(line: str) -> None:
    log.info("%s", line)


def _uses_al_base(dockerfile: Path, project: Any) -> bool:
    """Whether an agent Dockerfile builds on our layers (``FROM al-agent`` or [local].image)."""
    base = project.local["image"]
    return images.uses_base(images.rewrite_from(images.project_text(dockerfile), base), base)


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str | None) -> bool:
    """Whether the process that started a container still runs (unknown hosts count as alive)."""
    host, _, pid = (owner or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # not this machine's to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, just another user's
        return True
    return True


class ContainerRuntime:
    """``[runtime] type = "container"``: see the module docstring."""

    name = "container"
    description = (
        "Docker containers: read-only root fs, tmpfs /tmp and home, read-only credentials, "
        "no capabilities, pids/memory/CPU limits."
    )
    schema = SCHEMA

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engines: dict[SshTarget | None, Engine] = {}
        self._masters = SshMasters()
        self._build_locks: dict[tuple[str, str, str], threading.Lock] = {}
        self._prepared: dict[tuple[str, str, str], str] = {}
        self._users: dict[str, tuple[int, int]] = {}  # image id -> (uid, gid) of its USER
        self._roots: set[str] = set()  # projects this process validated or prepared agents of
        # id of a loaded project -> (engine, base image) -> what validating its agents found.
        self._validated: dict[int, dict[tuple[str, str | None], list[str]]] = {}

    def engine(self, agent: Any = None) -> Engine:
        """The Docker engine ``agent``'s containers run on (this machine's without one, or
        when its ``host`` is not set); ConfigError for a ``host`` that is not ssh://..."""
        table = agent.runtime if agent is not None else {}
        if table.get("host") is None:  # this machine's (the file is named only in an error)
            return self._engine(None)
        return self._engine(engine_target(table, agent.project.relative(agent.config_file)))

    def _engine(self, target: SshTarget | None) -> Engine:
        with self._lock:
            found = self._engines.get(target)
            if found is None:
                found = LocalEngine() if target is None else RemoteEngine(target, self._masters)
                self._engines[target] = found
            return found

    def client(self, agent: Any = None) -> Any:
        """The Docker client of ``agent``'s engine, connected on first use (SandboxError if
        the daemon is down or its host cannot be reached)."""
        engine = self.engine(agent)
        with self._lock:
            return engine.client()

    # ------------------------------------------------------------------ images

    def prepare(self, agent: Any, project: Any, progress: images.Progress | None = None) -> str:
        """Make sure the agent's image exists, building what is missing: ``al-agent:latest``
        (when it is ``[local].image``), the project image, the agent's (``images``); return
        its tag.

        ``progress`` receives the builds' log lines (default: the ``llamaherd.docker`` log,
        which ``al start`` prints). Raises SandboxError naming the Dockerfile when a build
        fails, or naming the image when a base image is missing.
        """
        client = self.client(agent)
        engine = self.engine(agent)
        key = (engine.name, str(project.root), agent.name)
        self._roots.add(key[1])
        say = progress or _log_progress
        dockerfile = agent.path / "Dockerfile"
        if dockerfile.is_file() and not _uses_al_base(dockerfile, project):
            lower = project.local["image"]  # FROM another image: no layer of ours below
        else:
            lower = self._lower_layers(project, say, engine)
        if not dockerfile.is_file():
            tag = lower
        else:
            what = project.relative(dockerfile)
            labels = {LABEL_AGENT: agent.name, LABEL_PROJECT: str(project.root)}
            with self._building(key, project):
                tag = images.build_agent(client, agent.path, what, lower, say, labels)
        self._prepared[key] = tag
        return tag

    @contextlib.contextmanager
    def _building(self, key: tuple[str, str, str], project: Any) -> Iterator[None]:
        """One build of an image at a time, among this process's threads and among processes
        (`al test -n`'s workers, a scheduler and `al test` at once): an flock on a file of
        the project's state dir named for the build. Whoever waited then finds the image."""
        with self._lock:
            lock = self._build_locks.setdefault(key, threading.Lock())
        digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
        project.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with lock, open(project.state_dir / f"build-{digest}.lock", "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # released as the file closes
            yield

    def _lower_layers(self, project: Any, progress: images.Progress, engine: Engine) -> str:
        """The image agents of ``project`` build on: the project image (built from the
        project Dockerfile), else ``[local].image``; the base is built first when missing."""
        base = project.local["image"]
        root = str(project.root)
        with self._building((engine.name, root, ""), project):
            self._ensure_base(base, progress, engine)
            labels = {LABEL_PROJECT: root}
            built = images.build_project(engine.client(), project.root, base, progress, labels)
        return built or base

    def _ensure_base(self, base: str, progress: images.Progress, engine: Engine) -> None:
        """``base`` exists; ``al-agent:latest`` is built when missing, as ``al setup docker``
        would (from ``node:20-alpine``, pulled if need be)."""
        try:
            self._require(base, engine)
            return
        except SandboxError:
            if base != images.AL_BASE:
                raise
        source = images.default_base_image()
        progress(f"{base} not found locally: building it from {source} (as `al setup docker`)")
        try:
            images.build_base(engine.client(), source, base, progress)
        except SandboxError as exc:
            raise SandboxError(
                f"image {base} not found locally, and building it from {source} failed "
                f"({exc}); build it with `al setup docker --base-image IMAGE`"
            ) from None

    def _require(self, image: str, engine: Engine) -> dict[str, Any]:
        """The image's inspect data; SandboxError saying how to get it when it is not there."""
        from docker.errors import ImageNotFound

        with docker_errors(f"image {image}", engine.where):
            try:
                return engine.client().api.inspect_image(image)
            except ImageNotFound:
                where = "locally" if engine.name == "local" else f"on {engine.name}"
                raise SandboxError(
                    f"image {image} not found {where}: build it with `al setup docker` "
                    f"(or `docker pull {image}` and set [local].image)"
                ) from None

    def validate(self, agent: Any, project: Any) -> list[str]:
        """Warnings ``al validate`` gives for this agent's environment: no daemon, no base
        image (``al start`` builds what it can). Never errors: the config itself is sound.

        A scheduler validates its project on start, which also tells ``cleanup_orphans`` whose
        containers it may judge.
        """
        self._roots.add(str(project.root))
        try:
            engine = self.engine(agent)
        except ConfigError as exc:
            return [exc]
        dockerfile = agent.path / "Dockerfile"
        own = dockerfile.is_file() and not _uses_al_base(dockerfile, project)
        base = None if own else project.local["image"]
        # Asked of the daemon once per engine and image of a loaded project, not per agent
        # (5,000 agents on one image were 5,000 round trips at a scheduler's start).
        checked = self._validated.get(id(project))
        if checked is None:
            checked = self._validated[id(project)] = {}
            weakref.finalize(project, self._validated.pop, id(project), None)
        key = (engine.name, base)
        if key not in checked:
            checked[key] = self._engine_warnings(agent, engine, base)
        return engine.option_warnings() + checked[key]

    def _engine_warnings(self, agent: Any, engine: Engine, base: str | None) -> list[str]:
        """The daemon of ``agent``'s engine answers, and has image ``base`` (None: any)."""
        unchecked = engine.unchecked()
        if unchecked is not None:
            return [f"warning: Docker engine {engine.where}: {unchecked}"]
        try:
            self.client(agent)
        except SandboxError as exc:
            return [f"warning: {exc}"]
        if base is None:
            return []
        try:
            self._require(base, engine)
        except SandboxError as exc:
            if base != images.AL_BASE or engine.name != "local":
                return [f"warning: {exc}"]
            return [
                f"warning: image {base} not found locally: `al start` builds it from "
                f"{images.DEFAULT_BASE_IMAGE} (which needs that image or a registry), or build "
                "it now with `al setup docker --base-image IMAGE`"
            ]
        return []

    # ------------------------------------------------------------------ sandboxes

    def start(self, spec: SandboxSpec) -> ContainerSandbox:
        """A fresh container for the run, its working dir made; SandboxError if it cannot."""
        agent, project = spec.agent, spec.project
        engine = self.engine(agent)
        key = (engine.name, str(project.root), agent.name)
        tag = self._prepared.get(key) or self.prepare(agent, project)
        image = self._require(tag, engine)
        config = image["Config"] or {}
        if image["Id"] not in self._users:
            self._users[image["Id"]] = images.image_user(engine.client(), tag, config.get("User"))
        staged = engine.stage(spec)
        try:
            container_id = self._create(spec, tag, config, self._users[image["Id"]], staged, engine)
        except BaseException:
            engine.unstage(staged.private)
            raise
        sandbox = ContainerSandbox(engine, container_id, sandbox_env(spec, config), staged.private)
        try:
            code, _out, err = sandbox._run(["mkdir", "-p", WORKDIR], workdir="/")
            if code != 0:
                raise SandboxError(
                    f"cannot create {WORKDIR}: {err.decode(errors='replace').strip()}"
                )
        except BaseException:
            sandbox.cleanup()
            raise
        return sandbox

    def _create(
        self,
        spec: SandboxSpec,
        tag: str,
        config: dict[str, Any],
        user: tuple[int, int],
        staged: Staged,
        engine: Engine,
    ) -> str:
        client = engine.client()
        home = home_dir(config)
        volumes = {
            staged.bin: {"bind": BIN, "mode": "ro"},
            staged.credentials: {"bind": CREDENTIALS, "mode": "ro"},
        }
        if staged.gateway:
            volumes[staged.gateway] = {"bind": GATEWAY_DIR, "mode": "ro"}
        if staged.shared:
            volumes[staged.shared] = {"bind": SHARED_PATH, "mode": "ro"}
        labels = {
            LABEL_RUN: spec.run_id,
            LABEL_AGENT: spec.agent.name,
            LABEL_PROJECT: str(spec.project.root),
            LABEL_OWNER: _owner(),
            LABEL_CREDENTIALS: staged.private,
        }
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"al-{spec.run_id}-{secrets.token_hex(3)}")
        host = Limits.of(spec.agent, spec.project).host_config(home, *user)
        with docker_errors(f"agent {spec.agent.name}: cannot start its container", engine.where):
            container = client.containers.create(
                tag, IDLE_COMMAND, name=name, labels=labels, volumes=volumes, **host
            )
            try:
                container.start()
            except BaseException:
                remove(engine, container.id, None)
                raise
        return container.id

    def attach(self, handle: dict[str, Any], spec: SandboxSpec | None) -> ContainerSandbox | None:
        """The container recorded in ``handle`` if it still exists (running or not), else None.

        Without ``spec`` (cleanup only) the sandbox has no run env.
        """
        from docker.errors import NotFound

        container_id = (handle or {}).get("container")
        if not container_id:
            return None
        try:
            target = SshTarget.from_dict(handle["engine"]) if handle.get("engine") else None
        except (KeyError, TypeError, SshError):
            return None
        engine = self._engine(target)
        with docker_errors(f"container {container_id[:12]}", engine.where):
            try:
                attrs = engine.client().api.inspect_container(container_id)
            except NotFound:
                return None
        env = sandbox_env(spec, attrs["Config"]) if spec is not None else {}
        credentials = handle.get("credentials_dir") or attrs["Config"]["Labels"].get(
            LABEL_CREDENTIALS
        )
        return ContainerSandbox(engine, attrs["Id"], env, credentials)

    def cleanup_orphans(self, live_run_ids: set[str], project: Any = None) -> int:
        """Remove a project's containers whose run is not in ``live_run_ids``; return how many.

        ``live_run_ids`` only speaks for one project, so only that project's containers are
        considered: ``project``'s, or without it those of the projects this process has
        validated or prepared agents of. Containers whose starting process still runs are left
        alone (a run being started now). Each engine the project's agents use is visited
        (this machine's, other hosts'); one that cannot be reached has none of ours running
        that we could remove: 0 there.
        """
        roots = {str(project.root)} if project is not None else set(self._roots)
        if not roots:
            return 0
        engines = {id(e): e for e in self._engines_of(project)}.values()
        return sum(self._clean_engine(engine, roots, live_run_ids) for engine in engines)

    def _engines_of(self, project: Any) -> list[Engine]:
        if project is None:
            with self._lock:
                return list(self._engines.values()) or [self._engine(None)]
        found = [self._engine(None)]
        for agent in project.agents.values():
            if agent.runtime.get("type") == self.name:
                try:
                    found.append(self.engine(agent))
                except ConfigError:
                    continue
        return found

    def _clean_engine(self, engine: Engine, roots: set[str], live_run_ids: set[str]) -> int:
        try:
            client = engine.client()
        except SandboxError:
            return 0
        with docker_errors("orphan cleanup", engine.where):
            found = client.api.containers(all=True, filters={"label": [LABEL_RUN]})
        removed = 0
        for info in found:
            labels = info.get("Labels") or {}
            if labels.get(LABEL_PROJECT) not in roots or labels.get(LABEL_RUN) in live_run_ids:
                continue
            if _owner_alive(labels.get(LABEL_OWNER)) and labels.get(LABEL_OWNER) != _owner():
                continue
            remove(engine, info["Id"], labels.get(LABEL_CREDENTIALS))
            removed += 1
        return removed
