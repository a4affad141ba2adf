"""pytest plugin with fixtures for llamaherd's tests and for third-party plugin authors.

Enable with ``-p llamaherd.testing`` (llamaherd's own pytest config does). Fixtures:

- ``tmp_project``: a throwaway project directory with helpers to write its config and agents;
- ``registered_plugin``: registers a plugin object in the process-wide manager and always
  unregisters it afterwards;
- ``al``: runs the real ``al`` command in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

AL = Path(sys.executable).with_name("al")


class TmpProject:
    """A project directory under pytest's ``tmp_path``."""

    def __init__(self, root: Path):
        self.root = root
        (root / "agents").mkdir(parents=True, exist_ok=True)

    def write(self, relative: str, text: str) -> Path:
        """Write ``text`` (dedented) to a file of the project; return its path."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    def config(self, text: str) -> Path:
        """Write the project ``config.toml``."""
        return self.write("config.toml", text)

    def add_agent(
        self,
        name: str,
        config: str | None = "",
        *,
        description: str = "A test agent.",
        body: str = "Do the thing.",
        skill: str | None = None,
    ) -> Path:
        """Create ``agents/<name>/`` with a SKILL.md (``skill`` verbatim, or built from
        name/description/body) and a config.toml (``config``; None writes none)."""
        skill_text = (
            skill
            if skill is not None
            else f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"
        )
        self.write(f"agents/{name}/SKILL.md", skill_text)
        if config is not None:
            self.write(f"agents/{name}/config.toml", config)
        return self.root / "agents" / name

    def load(self) -> Any:
        """A fresh :class:`llamaherd.project.Project` of this directory."""
        from llamaherd.project import load_project

        return load_project(self.root)


@pytest.fixture
def tmp_project(tmp_path: Path) -> TmpProject:
    """An empty project (``agents/`` only) in a temporary directory."""
    return TmpProject(tmp_path / "project")


@pytest.fixture
def registered_plugin() -> Iterator[Callable[..., Any]]:
    """``registered_plugin(obj, name="test-plugin")`` registers ``obj`` (a module or an object
    with ``@hookimpl`` methods) with the process-wide manager; it is unregistered at teardown
    even when the test fails."""
    from llamaherd.plugins import get_manager

    names: list[str] = []

    def register(plugin: Any, name: str = "test-plugin") -> Any:
        get_manager().register(plugin, name)
        names.append(name)
        return get_manager().registry()

    try:
        yield register
    finally:
        for name in reversed(names):
            get_manager().unregister(name)


@pytest.fixture
def al(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``al(*args, cwd=None, env=None, input=None, timeout=60)`` runs this environment's ``al``.

    The credential store defaults to an empty directory under ``tmp_path`` so tests never read
    or write the user's; ``env`` entries are added to (or, with value None, removed from) the
    current environment.
    """

    def run(
        *args: str,
        cwd: Path | str | None = None,
        env: dict[str, str | None] | None = None,
        input: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        environ = {**os.environ, "AL_CREDENTIALS_DIR": str(tmp_path / "credentials")}
        for key, value in (env or {}).items():
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value
        return subprocess.run(
            [str(AL), *args],
            cwd=cwd,
            env=environ,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
