"""Environments, Action Llama's way: a project's configuration in three layers.

1. ``config.toml``, committed;
2. ``.env.toml`` beside it, per machine and gitignored: any project key (merged over the first
   layer), ``projectName``, and ``environment = "NAME"``, which binds the project to an
   environment;
3. the environment file ``~/.action-llama/environments/NAME.toml`` (``$AL_ENVIRONMENTS_DIR``
   overrides the directory), outside every project: any project key again, and a ``[server]``
   table when the environment is a deployed server (``llamaherd-deploy`` reads that table; it
   is not project configuration and is left out of the merge).

Which environment: ``-E/--env NAME``, else ``$AL_ENV``, else ``.env.toml``'s ``environment``;
none means only the first two layers. Tables merge key by key, any other value (arrays
included) replaces the one below, as the peer's ``deepMerge`` does. ``projectName`` from
``.env.toml`` wins over both other layers, as in the peer.

An environment with a ``[server]`` is *deployed*: the commands that talk to a scheduler (``al
stat``, ``al run``, ``al stop``, ...) talk to the one running there, through the plugin that
reaches it (hook ``open_control_channel``). One without is a local overlay: the commands act
here, with the merged configuration.
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llamaherd.errors import ConfigError, LlamaherdError

if TYPE_CHECKING:
    from llamaherd.project import Project

ENV_TOML = ".env.toml"  # the peer's per-machine file beside config.toml
ENV_VAR = "AL_ENV"
DIR_VAR = "AL_ENVIRONMENTS_DIR"
# The peer's rule: usable as a cloud resource name ("action-llama-<name>" within 63 characters).
NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
MAX_NAME = 50
SERVER = "server"  # the deployed server's table: the deploy plugin's, not project configuration
ENV_TOML_OWN = ("environment", "projectName")  # .env.toml keys that are not project keys


def environments_dir() -> Path:
    """``$AL_ENVIRONMENTS_DIR``, else ``~/.action-llama/environments`` (the peer's place)."""
    override = os.environ.get(DIR_VAR)
    return (
        Path(override).expanduser() if override else Path.home() / ".action-llama" / "environments"
    )


def check_name(name: str, where: str = "environment") -> str:
    if len(name) > MAX_NAME or not NAME.fullmatch(name):
        raise LlamaherdError(
            f"invalid {where} name {name!r}: expected lowercase letters, digits and '-' "
            f"(not first or last), at most {MAX_NAME} characters"
        )
    return name


def environment_file(name: str) -> Path:
    return environments_dir() / f"{check_name(name)}.toml"


def names() -> list[str]:
    directory = environments_dir()
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.toml") if NAME.fullmatch(p.stem))


QUICK_READ = 1024 * 1024  # bytes of a small regular file read here directly


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's data. ``al stat`` reads .env.toml for its binding on every call: a small
    regular file that parses is read here at once; anything else goes to the project module's
    reader (heavy to import), for its checks and its one-line errors."""
    try:
        if path.is_file() and path.stat().st_size <= QUICK_READ:
            return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        pass
    from llamaherd.project import read_toml as read_project_toml

    return read_project_toml(path)


def read_environment(binding: Binding) -> dict[str, Any]:
    """The environment file's TOML data; a one-line error naming where the name came from
    when there is none."""
    path = environment_file(binding.name)
    if not path.is_file():
        known = ", ".join(names()) or "none yet"
        said = f"{binding.said}: " if binding.said else ""
        raise LlamaherdError(
            f"{said}no environment {binding.name!r} in {path.parent} (known: {known}); "
            f"create it with `al env init {binding.name}` or `al env add {binding.name} --host HOST`"
        )
    return read_toml(path)


def is_deployed(data: dict[str, Any]) -> bool:
    """Whether an environment names a server a scheduler runs on (its ``[server]`` table)."""
    return isinstance(data.get(SERVER), dict)


def is_deployed_file(name: str) -> bool:
    """Whether ``name``'s environment file exists and names a server."""
    path = environment_file(name)
    return path.is_file() and is_deployed(read_toml(path))


def read_env_toml(root: Path) -> dict[str, Any]:
    path = root / ENV_TOML
    return read_toml(path) if path.is_file() else {}


@dataclass(frozen=True)
class Binding:
    """The environment a command uses and where that came from (for error messages)."""

    name: str
    source: str = ""  # "--env", "AL_ENV", ".env.toml", or "" (a command's argument)

    @property
    def said(self) -> str:
        """How the user named it, for the start of an error message."""
        if not self.source:
            return ""
        if self.source == ENV_VAR:
            return f"{ENV_VAR}={self.name}"
        if self.source == ENV_TOML:
            return f'{ENV_TOML}: environment = "{self.name}"'
        return f"{self.source} {self.name}"


def resolve(explicit: str | None, root: Path | None) -> Binding | None:
    """``-E NAME``, else ``$AL_ENV``, else the project's ``.env.toml`` binding; None: local."""
    if explicit:
        return Binding(check_name(explicit), "--env")
    if os.environ.get(ENV_VAR):
        return Binding(check_name(os.environ[ENV_VAR], ENV_VAR), ENV_VAR)
    if root is None:
        return None
    bound = read_env_toml(root).get("environment")
    if bound is None:
        return None
    if not isinstance(bound, str) or not NAME.fullmatch(bound):
        raise ConfigError(
            ENV_TOML, "environment", f"expected an environment name (`al env list`), got {bound!r}"
        )
    return Binding(bound, ENV_TOML)


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: tables merge key by key, other values replace."""
    merged = dict(base)
    for key, value in override.items():
        below = merged.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            merged[key] = deep_merge(below, value)
        else:
            merged[key] = value
    return merged


@dataclass(frozen=True)
class Layer:
    """One layer over ``config.toml``: the file (as errors name it) and the keys it sets."""

    file: str
    data: dict[str, Any]


@dataclass
class Layered:
    """A project's merged configuration, with the layers it came from."""

    config: dict[str, Any]
    binding: Binding | None = None
    layers: list[Layer] = field(default_factory=list)
    env_toml: dict[str, Any] = field(default_factory=dict)

    def origin(self, path: list[Any]) -> str | None:
        """The layer file that set the key at ``path`` (or a table above it), None when it
        comes from ``config.toml``."""
        for layer in reversed(self.layers):
            node: Any = layer.data
            for part in path:
                if not isinstance(node, dict) or part not in node:
                    break
                node = node[part]
                if not isinstance(node, dict):
                    return layer.file  # a value this layer sets, at or above the path
            else:
                return layer.file
        return None


def layered(root: Path, config: dict[str, Any], explicit: str | None = None) -> Layered:
    """``config`` (``config.toml``'s data) with ``.env.toml`` and the environment over it."""
    env_toml = read_env_toml(root)
    binding = resolve(explicit, root)
    result = Layered(dict(config), binding, env_toml=env_toml)
    overrides = {k: v for k, v in env_toml.items() if k not in ENV_TOML_OWN}
    if overrides:
        result.layers.append(Layer(ENV_TOML, overrides))
    if binding is not None:
        data = read_environment(binding)
        result.layers.append(
            Layer(
                str(environment_file(binding.name)), {k: v for k, v in data.items() if k != SERVER}
            )
        )
    if "projectName" in env_toml:  # the peer's rule: .env.toml's name wins over both others
        result.layers.append(Layer(ENV_TOML, {"projectName": env_toml["projectName"]}))
    for layer in result.layers:
        result.config = deep_merge(result.config, layer.data)
    return result


def bind(root: Path, name: str | None) -> Path:
    """Set (or with None, remove) ``environment = "NAME"`` in ``root/.env.toml``, keeping the
    rest of the file (comments included) as it is."""
    path = root / ENV_TOML
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []
    first_table = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")), len(lines))
    lines = [
        line
        for i, line in enumerate(lines)
        if i >= first_table or not re.match(r"\s*environment\s*=", line)
    ]
    if name is not None:
        lines.insert(0, f'environment = "{check_name(name)}"\n')
    staged = path.with_name(ENV_TOML + ".tmp")
    staged.write_text("".join(lines), encoding="utf-8")
    try:
        if path.exists():
            shutil.copymode(path, staged)
        read_toml(staged)  # never leave a file that no longer parses
    except (ConfigError, OSError):
        staged.unlink()
        raise
    os.replace(staged, path)
    return path


def load_project(root: Path | None = None, environment: str | None = None) -> Project:
    """The project at ``root`` (or found from cwd), its config merged with ``.env.toml`` and
    ``environment``'s file (else ``$AL_ENV``'s, else the ``.env.toml`` binding's)."""
    from llamaherd.project import load_project as load_config_toml

    project = load_config_toml(root)
    merged = layered(project.root, project.config, environment)
    project.config, project.layering = merged.config, merged
    return project
