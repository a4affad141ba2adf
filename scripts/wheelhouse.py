"""Build a wheelhouse: a wheel of every distribution of this checkout (``core`` and
``plugins/*``) and of everything they need (the ``postgres`` extra, and ``hatchling`` to build
this checkout's distributions from source), so that a machine without the checkout or without
network installs with:

    pip install --no-index --find-links dist/wheelhouse dist/wheelhouse/llamaherd-[0-9]*.whl \
        llamaherd-docker

(core from its wheel file: its ``direct_url.json`` then names the wheelhouse, and ``al`` says
``pip install --no-index --find-links <wheelhouse> llamaherd-...`` for a plugin it lacks).
``tox -e wheels`` runs it (into ``dist/wheelhouse``); the package index pip is configured with
(PyPI by default; ``PIP_NO_INDEX``/``PIP_FIND_LINKS`` for another wheelhouse) provides what is
not in this checkout.

    python scripts/wheelhouse.py [OUT_DIR]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What a checkout's distribution needs to be built from source (build-system.requires), and
# installed editable (requirements.txt's -e lines).
BUILD_REQUIRES = ("hatchling", "editables")


def projects() -> list[Path]:
    """Core and every first-party plugin: the distributions a wheelhouse holds."""
    plugins = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))
    return [ROOT / "core", *plugins]


def build(out: Path) -> list[Path]:
    """Wheels of ``projects()`` and of their requirements into ``out``; the wheels there."""
    out.mkdir(parents=True, exist_ok=True)
    sources = [str(p) for p in projects()]
    sources[0] += "[postgres]"
    # Built with the hatchling of this environment (tox installs it): one build environment,
    # not one per distribution.
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation"]
    subprocess.run([*command, "--wheel-dir", str(out), *sources, *BUILD_REQUIRES], check=True)
    return sorted(out.glob("*.whl"))


def main(argv: list[str]) -> None:
    out = Path(argv[0]).resolve() if argv else ROOT / "dist" / "wheelhouse"
    wheels = build(out)
    shown = out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out
    core = next(w for w in wheels if w.name.startswith("llamaherd-"))
    print(f"{len(wheels)} wheels in {shown}; install core and the plugins you need, offline:")
    print(f"  pip install --no-index --find-links {shown} {shown / core.name} llamaherd-docker ...")


if __name__ == "__main__":
    main(sys.argv[1:])
