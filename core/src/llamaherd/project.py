"""The project model: find the root, discover agents, parse SKILL.md and config.toml files.

Loading never validates against the assembled schema (``llamaherd.schema`` does that); it only
parses, so ``al validate`` can report every problem at once.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from llamaherd import compat
from llamaherd.errors import ConfigError

# Defaults exactly as DESIGN.md §3.
DEFAULTS: dict[str, Any] = {
    "maxReruns": 10,
    "maxCallDepth": 3,
    "workQueueSize": 100,
    "scale": None,
    "resourceLockTimeout": 1800,
    "defaultWaitTimeout": 1800,
    "historyRetentionDays": 14,
    "database": "sqlite:///.al/work-queue.db",
    "defaultAgentScale": 1,
    "timezone": "UTC",
}
LOCAL_DEFAULTS: dict[str, Any] = {
    "image": "al-agent:latest",
    "memory": "4g",
    "cpus": 2,
    "timeout": 900,
}
GATEWAY_DEFAULTS: dict[str, Any] = {
    "port": 8080,
    "bind": "127.0.0.1",
    "maxConnections": 1000,
    "headerTimeout": 10,
    "bodyTimeout": 30,
    "bodyBudget": 32 * 1024 * 1024,
}
RUN_TIMEOUT = 900
WAIT_TIMEOUT = 1800
STATE_DIR = ".al"
# Bytes of one project file (config.toml, SKILL.md, a Dockerfile) the scheduler reads.
MAX_PROJECT_FILE = 1024 * 1024


def read_project_file(path: Path, limit: int = MAX_PROJECT_FILE) -> bytes:
    """The bytes of a file of the project (a ``config.toml``, a ``SKILL.md``, a Dockerfile).

    It must be a regular file (after links) of at most ``limit`` bytes, else a ConfigError
    says what it is: a FIFO there once blocked live reload and, through ``/control/stat``,
    every request thread, and a link to ``/dev/zero`` was read into gigabytes. Opened without
    blocking, so a FIFO is refused rather than waited on.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(
                str(path),
                "",
                f"not a regular file ({_file_kind(info.st_mode)}); replace it with one",
            )
        if info.st_size > limit:
            raise ConfigError(str(path), "", _too_large(info.st_size, limit))
        # Read to the end (what fstat said is there, then what it grew by), up to one byte
        # past the limit: plain reads, no buffered file object made for each file.
        chunks = [os.read(fd, info.st_size + 1)]
        size = len(chunks[0])
        while chunks[-1] and size <= limit:
            chunks.append(os.read(fd, limit + 1 - size))
            size += len(chunks[-1])
        data = b"".join(chunks)
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while being read
        raise ConfigError(str(path), "", _too_large(len(data), limit))
    return data


def _too_large(size: int, limit: int) -> str:
    return f"{size:,} bytes or more; a project file may have at most {limit:,}"


def _file_kind(mode: int) -> str:
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((name for test, name in kinds.items() if test(mode)), "not a file")


def read_project_text(path: Path, limit: int = MAX_PROJECT_FILE) -> str:
    """``read_project_file`` as UTF-8 text."""
    data = read_project_file(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            str(path), "", f"not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from None


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error becomes a ConfigError naming line and column."""
    text = read_project_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "", f"invalid TOML: {exc}") from None


@dataclass
class SkillFile:
    """A parsed SKILL.md: frontmatter, markdown body, and warnings about how it was read."""

    meta: dict[str, Any]
    body: str
    notes: list[tuple[str, str]] = field(default_factory=list)


def read_skill(path: Path) -> SkillFile:
    """Split SKILL.md into its YAML frontmatter and markdown body, as Action Llama does.

    The frontmatter is optional (leading blank lines allowed): without one, the whole file is
    the body. One that is not closed, or is not a mapping, is read as body too, with a warning.
    Invalid YAML is a ConfigError naming its line.
    """
    text = read_project_text(path).lstrip("\ufeff")
    lead = len(text) - len(text.lstrip())
    parts = text[lead:].split("\n")
    if parts[0].rstrip() != "---":
        return SkillFile({}, text.strip("\n"))
    try:
        end = next(i for i, line in enumerate(parts[1:], 1) if line.strip() == "---")
    except StopIteration:
        note = ("", "frontmatter is not closed by a '---' line: the whole file is the body")
        return SkillFile({}, text.strip("\n"), [note])
    first_line = text[:lead].count("\n") + 1
    meta = _load_frontmatter(path, "\n".join(parts[1:end]), first_line)
    if not isinstance(meta, dict):
        note = ("", "frontmatter is not a YAML mapping (name: ..., description: ...): ignored")
        return SkillFile({}, text.strip("\n"), [note])
    return SkillFile(meta, "\n".join(parts[end + 1 :]).strip("\n"))


def _load_frontmatter(path: Path, frontmatter: str, first_line: int) -> Any:
    import yaml  # here: a scheduler listens before it reads an agent

    try:
        # libyaml when available: ~10x faster.
        return yaml.load(frontmatter, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except yaml.YAMLError:
        # Re-parse with the pure-Python loader: its marks point at the offending token itself.
        try:
            yaml.safe_load(frontmatter)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = (
                f" at line {mark.line + first_line + 1}, column {mark.column + 1}" if mark else ""
            )
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(
                str(path), "", f"invalid YAML frontmatter{where}: {problem}"
            ) from None
        raise


def parse_skill(path: Path) -> tuple[dict[str, Any], str]:
    """SKILL.md's frontmatter and body (``read_skill`` without its notes)."""
    skill = read_skill(path)
    return skill.meta, skill.body


@dataclass
class Agent:
    name: str
    path: Path
    project: Project
    meta: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    # Top-level config keys taken from the SKILL.md frontmatter -> where they were there
    # (``llamaherd.compat.merge_frontmatter``).
    origins: dict[str, str] = field(default_factory=dict)
    # Warnings about how the agent's files were read: (file, dotted key, message).
    notes: list[tuple[str, str, str]] = field(default_factory=list)

    @cached_property
    def skill_file(self) -> Path:
        return self.path / "SKILL.md"

    @cached_property
    def config_file(self) -> Path:
        return self.path / "config.toml"

    @property
    def description(self) -> str:
        return str(self.meta.get("description", ""))

    def get(self, key: str, default: Any = None) -> Any:
        return self.config.get(key, default)

    # Resolved settings: agent, then project, then DESIGN default.
    @property
    def scale(self) -> int:
        return int(self.config.get("scale", self.project.setting("defaultAgentScale")))

    @property
    def disabled(self) -> bool:
        """``scale = 0``: the agent never runs (Action Llama's way to switch one off in its
        config). An invalid scale is not "disabled": validation reports it."""
        try:
            return self.scale == 0
        except (TypeError, ValueError):
            return False

    @property
    def timeout(self) -> float:
        local = self.project.config.get("local", {})
        return float(self.config.get("timeout", local.get("timeout", RUN_TIMEOUT)))

    @property
    def queue_size(self) -> int:
        return int(self.config.get("maxWorkQueueSize", self.project.setting("workQueueSize")))

    @property
    def max_reruns(self) -> int:
        return int(self.config.get("maxReruns", self.project.setting("maxReruns")))

    @property
    def wait_timeout(self) -> float:
        return float(self.config.get("waitTimeout", self.project.setting("defaultWaitTimeout")))

    @property
    def models(self) -> list[str]:
        return list(self.config.get("models", []))

    @property
    def credentials(self) -> list[str]:
        return list(self.config.get("credentials", []))

    @property
    def runtime(self) -> dict[str, Any]:
        runtime = dict(self.config.get("runtime", {}))
        runtime.setdefault("type", "container")
        return runtime

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.config.get("params", {}))

    @cached_property
    def flow(self) -> Any:
        """Its ``[flow]`` (``llamaherd.flow.FlowPolicy``), None when it has none. A broken
        table is a ConfigError (``al validate`` reports it; the scheduler holds the agent)."""
        from llamaherd.flow import parse_policy

        return parse_policy(str(self.config_file), self.config.get("flow"))

    @cached_property
    def budgets(self) -> Any:
        """Its ``[budget]`` and the project's (``llamaherd.budgets.Budgets``)."""
        from llamaherd.budgets import budgets_of

        return budgets_of(self)

    @property
    def hooks(self) -> dict[str, list[str]]:
        hooks = self.config.get("hooks", {})
        return {"pre": list(hooks.get("pre", [])), "post": list(hooks.get("post", []))}


@dataclass
class Project:
    root: Path
    # The merged configuration: config.toml, then .env.toml, then the environment's file.
    config: dict[str, Any] = field(default_factory=dict)
    errors: list[ConfigError] = field(default_factory=list)
    layering: Any = None  # llamaherd.environments.Layered: where the config's layers came from

    @property
    def config_file(self) -> Path:
        return self.root / "config.toml"

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    def setting(self, key: str) -> Any:
        """A top-level setting (or its deprecated Action Llama spelling), else its default."""
        return compat.setting(self.config, key, DEFAULTS.get(key))

    @property
    def environment(self) -> str | None:
        """The environment whose file is merged into the config (``llamaherd.environments``)."""
        binding = self.layering.binding if self.layering is not None else None
        return binding.name if binding is not None else None

    @property
    def requested_environment(self) -> str | None:
        """The environment asked for with ``-E`` (a reload asks for it again; ``$AL_ENV`` and
        ``.env.toml`` are read afresh)."""
        binding = self.layering.binding if self.layering is not None else None
        return binding.name if binding is not None and binding.source == "--env" else None

    def scale_overflow(self) -> tuple[int, int] | None:
        """(the agents' scales added up, the project's ``scale``) when the sum exceeds the cap:
        agents are then throttled, as Action Llama warns. Invalid scales count as none (their
        own error says why)."""
        cap = self.setting("scale")
        if not isinstance(cap, int) or isinstance(cap, bool):
            return None
        total = 0
        for agent in self.agents.values():
            try:
                total += agent.scale
            except (TypeError, ValueError):
                continue
        return (total, cap) if total > cap else None

    @property
    def name(self) -> str:
        """``projectName`` (from the merged config), else the directory's name."""
        return str(self.config.get("projectName") or self.root.name)

    @property
    def public_url(self) -> str | None:
        """``[gateway] url``: where senders reach the server (webhook URLs are shown under it)."""
        url = self.config.get("gateway", {}).get("url")
        return url.rstrip("/") if isinstance(url, str) and url else None

    @property
    def database_url(self) -> str:
        return os.environ.get("AL_DATABASE_URL") or self.setting("database")

    @property
    def gateway(self) -> dict[str, Any]:
        return {**GATEWAY_DEFAULTS, **self.config.get("gateway", {})}

    @property
    def local(self) -> dict[str, Any]:
        return {**LOCAL_DEFAULTS, **self.config.get("local", {})}

    @cached_property
    def agents(self) -> dict[str, Agent]:
        """Agents found by scanning ``agents/*/SKILL.md``; broken ones land in ``errors``."""
        return self.load_agents()

    def load_agents(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Agent]:
        """Read the agents (what ``agents`` holds from then on), calling ``progress(done,
        total)`` after each: a scheduler's start shows how far it got, and may stop there."""
        found: dict[str, Agent] = {}
        agents_dir = self.root / "agents"
        folders = []
        if agents_dir.is_dir():
            entries = sorted(os.scandir(agents_dir), key=lambda e: e.name)
            folders = [e for e in entries if e.is_dir() and os.path.exists(e.path + "/SKILL.md")]
        for done, entry in enumerate(folders, 1):
            try:
                check_agent_name(agents_dir, entry.name)
                found[entry.name] = self._load_agent(entry.name, Path(entry.path))
            except ConfigError as exc:
                self.errors.append(exc)
            if progress is not None:
                progress(done, len(folders))
        self.__dict__["agents"] = found
        return found

    def _load_agent(self, name: str, path: Path) -> Agent:
        """An agent from its SKILL.md and config.toml, the frontmatter's runtime keys merged
        under config.toml (``llamaherd.compat``)."""
        agent = Agent(name=name, path=path, project=self)
        skill = read_skill(agent.skill_file)
        own = read_toml(agent.config_file) if agent.config_file.exists() else {}
        agent.meta, agent.body = skill.meta, skill.body
        agent.config, agent.origins, shadowed = compat.merge_frontmatter(skill.meta, own)
        notes = skill.notes + compat.frontmatter_notes(agent.origins, shadowed)
        agent.notes = [(str(agent.skill_file), key, message) for key, message in notes]
        return agent

    def agent(self, name: str) -> Agent:
        try:
            return self.agents[name]
        except KeyError:
            # Its folder is there but could not be loaded (unreadable, invalid): say why.
            folder = self.root / "agents" / name
            broken = [e for e in self.errors if Path(e.file).parent == folder]
            if broken:
                raise broken[0] from None
            known = ", ".join(sorted(self.agents)) or "none"
            raise ConfigError(
                str(self.root / "agents"), name, f"no such agent (agents: {known})"
            ) from None

    def relative(self, path: Path) -> str:
        text, root = str(path), str(self.root)
        if text.startswith(root) and text[len(root) : len(root) + 1] == os.sep:
            return text[len(root) + 1 :]  # the common case, without pathlib's parsing
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def shown_name(name: str) -> str:
    """A file name as it can be printed on one line: bytes that are not UTF-8 and characters
    that are not printable as escapes (``bad\\xff``, ``two\\nlines``)."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def check_agent_name(agents_dir: Path, name: str) -> None:
    """Refuse an agent folder whose name is not printable UTF-8 text: the name goes into the
    database, logs, URLs and tables, none of which can carry it (a byte that is not UTF-8
    once ended ``al start`` in a traceback, and live reload on every look)."""
    shown = shown_name(name)
    if shown == name:
        return
    try:
        name.encode()
    except UnicodeEncodeError:
        why = "is not valid UTF-8"
    else:
        why = "holds a character that cannot be printed"
    raise ConfigError(str(agents_dir / shown), "", f"the folder's name {why}: rename the folder")


def find_root(start: Path | None = None) -> Path | None:
    """Walk up from ``start`` (default cwd) to the first dir with config.toml or agents/."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "config.toml").exists() or (candidate / "agents").is_dir():
            return candidate
    return None


def load_project(root: Path | None = None) -> Project:
    """Load the project at ``root`` (or found from cwd) with ``config.toml`` alone; raises
    ConfigError for the root config. ``llamaherd.environments.load_project`` (what the CLI and
    plugins use) adds the layers over it: ``.env.toml`` and the environment's file."""
    if root is None:
        found = find_root()
        if found is None:
            raise ConfigError(
                str(Path.cwd()),
                "",
                "not inside an llamaherd project (no config.toml or agents/); use --project DIR or `al new DIR`",
            )
        root = found
    root = Path(root).resolve()
    config = read_toml(root / "config.toml") if (root / "config.toml").exists() else {}
    return Project(root=root, config=config)
