"""How to install a first-party distribution here, said as a command that works as written.

The distributions are not on a package index yet, so ``pip install llamaherd-docker`` fails on
a fresh machine. What works depends on where this ``llamaherd`` came from, which
``installed_from`` finds out once:

- a checkout (an editable install, or ``pip install ./core``): ``pip install
  <checkout>/plugins/docker``;
- a wheelhouse (``tox -e wheels`` builds ``dist/wheelhouse``; ``llamaherd`` installed from a
  wheel file in it): ``pip install --no-index --find-links <wheelhouse> llamaherd-docker``;
- an index (or anywhere else): ``pip install llamaherd-docker``, the name it will be published
  under.

``al validate``, ``al plugins`` and every other hint naming a plugin to install print
``install_command(dist)``; ``al plugins`` also lists the distributions the source holds that
are not installed (``available``).
"""

from __future__ import annotations

import functools
import json
import shlex
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

CORE = "llamaherd"
# Where a checkout keeps each kind of distribution: first-party plugins, then the examples.
PLUGIN_DIRS = ("plugins", "contrib")


@dataclass(frozen=True)
class Source:
    """Where ``llamaherd`` was installed from: ``checkout`` (``path``: its root),
    ``wheelhouse`` (``path``: the directory of wheels) or ``index`` (``path`` None)."""

    kind: str
    path: Path | None = None


def _checkout(path: Path) -> Path | None:
    """The checkout whose ``core/`` is ``path`` (or holds it), else None."""
    for root in (path.parent, path):
        if (root / "core" / "pyproject.toml").is_file() and (root / "plugins").is_dir():
            return root
    return None


@functools.cache
def installed_from() -> Source:
    """Where this ``llamaherd`` came from: the source tree it runs from (an editable install),
    else what its ``direct_url.json`` (PEP 610) records: a directory (a checkout's ``core``)
    or a wheel file (in a wheelhouse); else an index."""
    import llamaherd

    running = _checkout(Path(llamaherd.__file__).resolve().parents[2])
    if running is not None:
        return Source("checkout", running)
    try:
        recorded = metadata.distribution(CORE).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        recorded = None
    try:
        direct = json.loads(recorded or "{}")
    except ValueError:
        direct = {}
    url = urlparse(str(direct.get("url", "")))
    if url.scheme != "file":
        return Source("index")
    path = Path(unquote(url.path))
    if "dir_info" in direct and (checkout := _checkout(path)) is not None:
        return Source("checkout", checkout)
    if path.suffix == ".whl":
        return Source("wheelhouse", path.parent)
    return Source("index")


@functools.cache
def checkout_distributions(root: Path) -> dict[str, Path]:
    """The distributions a checkout holds, by name: ``plugins/*`` and ``contrib/*``."""
    found = {}
    for kind in PLUGIN_DIRS:
        for project in sorted((root / kind).glob("*/pyproject.toml")):
            try:
                name = tomllib.loads(project.read_text())["project"]["name"]
            except (OSError, tomllib.TOMLDecodeError, KeyError):
                continue
            found[str(name)] = project.parent
    return found


def _wheel_name(wheel: Path) -> str:
    """The distribution a wheel file holds (``llamaherd_docker-0.1.0-...`` is
    ``llamaherd-docker``)."""
    return wheel.name.split("-", 1)[0].replace("_", "-").lower()


def available() -> dict[str, str]:
    """The first-party distributions where this ``llamaherd`` came from (its checkout's, its
    wheelhouse's), by name, each with the command that installs it."""
    source = installed_from()
    if source.kind == "checkout" and source.path is not None:
        names = list(checkout_distributions(source.path))
    elif source.kind == "wheelhouse" and source.path is not None:
        wheels = sorted(source.path.glob("llamaherd*.whl"))
        names = [_wheel_name(w) for w in wheels if _wheel_name(w).startswith("llamaherd-")]
    else:
        names = []
    return {name: install_command(name) for name in names}


def install_command(dist: str, extra: str | None = None) -> str:
    """The command that installs ``dist`` (with its ``extra``) here, as written."""
    source = installed_from()
    suffix = f"[{extra}]" if extra else ""
    if source.kind == "checkout" and source.path is not None:
        found = {CORE: source.path / "core", **checkout_distributions(source.path)}
        if dist in found:
            return f"pip install {shlex.quote(str(found[dist]) + suffix)}"
    requirement = shlex.quote(dist + suffix)
    if source.kind == "wheelhouse" and source.path is not None:
        return f"pip install --no-index --find-links {shlex.quote(str(source.path))} {requirement}"
    return f"pip install {requirement}"


def needs(dist: str) -> str:
    """``needs the <dist> plugin (<its install command>)``: how every hint says it."""
    return f"needs the {dist} plugin ({install_command(dist)})"
