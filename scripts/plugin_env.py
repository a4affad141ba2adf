"""Install one plugin distribution alone, then run its own tests: the ``plugin-<name>`` tox envs.

Installed: core with its ``testing`` extra, the plugin (with its ``test`` extra when it declares
one) and, from this checkout, every llamaherd distribution it depends on; everything else its
pyproject declares comes from the package index as pip resolves it. Nothing else, so a test
that needs an undeclared plugin fails here.

    python scripts/plugin_env.py <name> [pytest args...]
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def distributions() -> dict[str, Path]:
    """Every distribution of this checkout: its name -> its directory."""
    dirs = [
        ROOT / "core",
        *sorted((ROOT / "plugins").iterdir()),
        *sorted((ROOT / "contrib").iterdir()),
    ]
    return {_project(d)["name"]: d for d in dirs if (d / "pyproject.toml").is_file()}


def _project(path: Path) -> dict:
    return tomllib.loads((path / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def local_closure(path: Path, local: dict[str, Path]) -> list[Path]:
    """``path`` and the checkout's distributions it needs, directly or not (its test extra too)."""
    seen: list[Path] = []
    todo = [path]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.append(current)
        project = _project(current)
        needs = list(project.get("dependencies", []))
        if current == path:
            needs += project.get("optional-dependencies", {}).get("test", [])
        todo += [local[_name(r)] for r in needs if _name(r) in local]
    return seen


def plugin_dir(name: str, local: dict[str, Path]) -> Path:
    for path in local.values():
        if path.name == name and path.parent.name in ("plugins", "contrib"):
            return path
    sys.exit(f"plugin_env.py: no plugins/{name} or contrib/{name} in {ROOT}")


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit(__doc__)
    name, pytest_args = argv[0].removeprefix("plugin-"), argv[1:]
    local = distributions()
    path = plugin_dir(name, local)
    editable: list[str] = []
    for dist in local_closure(path, local):
        extra = {path: "[test]", ROOT / "core": "[testing]"}.get(dist, "")
        if extra == "[test]" and "test" not in _project(dist).get("optional-dependencies", {}):
            extra = ""
        editable += ["-e", f"{dist}{extra}"]
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *editable], check=True)
    tests = path / "tests"
    return subprocess.call([sys.executable, "-m", "pytest", str(tests), *pytest_args], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
