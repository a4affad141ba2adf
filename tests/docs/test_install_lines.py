"""Every ``pip install`` line the project shows works as written on a fresh machine (issue 42
item 6): each one of README.md, docs/, the plugins' and examples' READMEs, and each command
``al validate``, ``al plugins`` and the scaffold's comments print, run in a new virtual
environment, offline, as a user of the checkout or of the wheelhouse runs it.

Offline means pip sees no index but a stand-in for PyPI: the wheels of every third-party
distribution this checkout needs (repacked from this environment's installs, so nothing is
downloaded), and none of ours, since none is published. A line runs in a directory that looks
like the checkout (``core``, ``plugins``, ``contrib``, ``requirements.txt``) with a
``dist/wheelhouse`` built by ``scripts/wheelhouse.py`` (what ``tox -e wheels`` runs) from the
stand-in. One stand-in and one wheelhouse per test session, shared by the workers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamaherd import testing_wheels

from .conftest import DOCS, ROOT

# Where the lines are: the pages a user reads.
PAGES = [
    ROOT / "README.md",
    *sorted(DOCS.glob("*.md")),
    *sorted(ROOT.glob("plugins/*/README.md")),
    *sorted(ROOT.glob("contrib/*/README.md")),
]
COMMAND = re.compile(r"(?:\S*/)?pip install [^#`;&|)\n]*")
# A line that installs one of our distributions (the rest install tools, from PyPI).
OURS = re.compile(r"llamaherd|\./core|\./plugins|\./contrib|requirements\.txt|wheelhouse")
# What a line may install that is not ours: tox and its uv plugin, the README's first step.
THIRD_PARTY = {"pip install tox-uv"}
CHECKOUT_PARTS = ("core", "plugins", "contrib", "requirements.txt")
BUILD_TOOLS = ("hatchling", "editables")


# --------------------------------------------------------------------------- the lines


def commands_in(text: str) -> list[str]:
    """The ``pip install`` commands of a page: in code blocks and in code spans (which may
    wrap), as far as a comment, a shell operator or the span's end; a placeholder (``…``,
    ``<...>``) makes a template, not a command, and is left out."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    indented = re.findall(r"^(?: {4}|\t)(.*)$", prose, re.MULTILINE)
    # A span opens with a run of backticks and closes with a run as long (CommonMark).
    spans = [" ".join(s.split()) for _, s in re.findall(r"(`+)(.+?)(?<!`)\1(?!`)", prose, re.S)]
    found = []
    for piece in [*blocks, *indented, *spans]:
        for command in COMMAND.findall(piece):
            command = " ".join(command.split())
            if "…" not in command and "<" not in command:
                found.append(command.removeprefix("$ "))
    return found


def documented() -> list[str]:
    found = [c for page in PAGES for c in commands_in(page.read_text())]
    return list(dict.fromkeys(found))


def test_every_documented_pip_install_is_ours_or_a_known_tool() -> None:
    """A new line installing something else than our distributions is seen, not skipped."""
    lines = documented()
    assert len(lines) >= 5
    assert [c for c in lines if not OURS.search(c) and c not in THIRD_PARTY] == []


# --------------------------------------------------------------------------- the stand-ins


def first_party() -> list[str]:
    """Core and every first-party plugin, by distribution name."""
    projects = [ROOT / "core/pyproject.toml", *sorted(ROOT.glob("plugins/*/pyproject.toml"))]
    return [tomllib.loads(p.read_text())["project"]["name"] for p in projects]


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every worker of this session shares."""
    root = tmp_path_factory.getbasetemp().parent / "install-lines"
    root.mkdir(exist_ok=True)
    return root


@contextlib.contextmanager
def building(directory: Path) -> Iterator[bool]:
    """Under a lock all workers take: whether ``directory`` is still to be built (then it is
    marked built once the block ends without an error)."""
    with open(directory.parent / f".{directory.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = directory.parent / f".{directory.name}.done"
        if done.exists():
            yield False
            return
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        yield True
        done.touch()


def offline_env(index: Path) -> dict[str, str]:
    """pip with no index but ``index`` (a directory of wheels), no user or site config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL"))}
    return {
        **env,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(index),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
    }


@pytest.fixture(scope="session")
def stand_in(shared: Path) -> Path:
    """The stand-in for PyPI: wheels of the third-party distributions (none of ours)."""
    wheels = shared / "pypi"
    with building(wheels) as needed:
        if needed:
            extras = {"llamaherd": {"postgres"}}
            testing_wheels.build(wheels, [*first_party(), *BUILD_TOOLS], extras, ours=False)
    return wheels


@pytest.fixture(scope="session")
def checkout(shared: Path, stand_in: Path) -> Path:
    """A directory laid out as the checkout (its parts linked), with ``dist/wheelhouse`` as
    ``tox -e wheels`` builds it (from the stand-in, offline)."""
    mirror = shared / "checkout"
    with building(mirror) as needed:
        if needed:
            for part in CHECKOUT_PARTS:
                (mirror / part).symlink_to(ROOT / part)
            wheelhouse = mirror / "dist" / "wheelhouse"
            script = [sys.executable, str(ROOT / "scripts" / "wheelhouse.py"), str(wheelhouse)]
            built = subprocess.run(
                script, env=offline_env(stand_in), capture_output=True, text=True, timeout=600
            )
            assert built.returncode == 0, built.stdout + built.stderr
    return mirror


# --------------------------------------------------------------------------- a fresh machine


class Machine:
    """A new virtual environment; commands run in the checkout's stand-in, pip offline. With
    uv on PATH, ``pip`` there is ``uv pip`` (the same command line, installed in seconds, its
    builds cached for the session), else pip itself."""

    def __init__(self, path: Path, checkout: Path, index: Path, cache: Path):
        self.path, self.checkout = path, checkout
        env = offline_env(index)
        uv = shutil.which("uv")
        bins = [path / "bin"]
        if uv:
            subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(path)],
                           check=True, capture_output=True, env=env)  # fmt: skip
            shim = path.parent / "shim"
            shim.mkdir()
            (shim / "pip").write_text(f'#!/bin/sh\nexec {shlex.quote(uv)} pip "$@"\n')
            (shim / "pip").chmod(0o755)
            bins.insert(0, shim)
            env |= {"UV_OFFLINE": "1", "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(index)}
            env |= {"UV_CACHE_DIR": str(cache), "UV_NO_PROGRESS": "1"}
        else:
            subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, env=env)
        self.env = {
            **env,
            "PATH": os.pathsep.join([*map(str, bins), os.environ["PATH"]]),
            "VIRTUAL_ENV": str(path),
        }

    def run(self, command: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=cwd or self.checkout,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    def installed(self) -> set[str]:
        listed = self.run("pip list --format=json")
        assert listed.returncode == 0, listed.stderr
        return {row["name"].lower() for row in json.loads(listed.stdout)}


@pytest.fixture
def machine(tmp_path: Path, checkout: Path, stand_in: Path, shared: Path) -> Machine:
    """A fresh machine: a new virtual environment, the checkout, no network."""
    return Machine(tmp_path / "venv", checkout, stand_in, shared / "uv-cache")


def names_in(command: str) -> set[str]:
    """Our distributions a command installs: checkout directories, our names, wheel files of
    ours, and every ``-e`` line of a requirements file."""
    tokens = shlex.split(command)[2:]
    found = set()
    for before, token in zip(["", *tokens], tokens, strict=False):
        path = token.split("[")[0]
        if before == "-r":
            lines = (ROOT / path).read_text().splitlines()
            found |= {_name_of(ROOT / ln.split()[-1]) for ln in lines if ln.startswith("-e ")}
        elif token.startswith("-") or before in ("--find-links", "-f", "-c"):
            continue
        elif (ROOT / path / "pyproject.toml").is_file():
            found.add(_name_of(ROOT / path))
        elif path.endswith(".whl"):
            found.add(Path(path).name.split("-")[0].replace("_", "-"))
        elif re.fullmatch(r"llamaherd(-[\w-]+)?", path):
            found.add(path)
    return found


def _name_of(directory: Path) -> str:
    return str(tomllib.loads((directory / "pyproject.toml").read_text())["project"]["name"])


def installs_core(command: str) -> bool:
    return bool(
        re.search(r"\./core|requirements\.txt|llamaherd-\[0-9\]|llamaherd(?![-\w])", command)
    )


@pytest.mark.parametrize("command", [c for c in documented() if OURS.search(c)])
def test_a_documented_line_installs_as_written(command, machine):
    """The line runs as written in a new environment (after ``pip install ./core`` when it
    installs a plugin: it says so beside it), and what it names is installed."""
    if not installs_core(command):
        first = machine.run("pip install ./core")
        assert first.returncode == 0, first.stdout + first.stderr
    done = machine.run(command)
    assert done.returncode == 0, f"$ {command}\n{done.stdout}{done.stderr}"
    assert names_in(command) <= machine.installed()
    if installs_core(command):
        assert machine.run("al --version").returncode == 0


def _agent_configs(project: Path) -> list[str]:
    return [p.read_text() for p in sorted(project.glob("agents/*/config.toml"))]


@pytest.mark.parametrize("source", ["checkout", "wheelhouse"])
def test_what_al_says_to_install_installs_as_written(source, tmp_path, checkout, machine):
    """Installed from the checkout or from the wheelhouse, a project that needs the cron,
    Docker and Anthropic plugins: ``al plugins`` lists them as available and the scaffold and
    ``al validate`` give each one's command; run as written, each installs its plugin."""
    first = (
        "pip install ./core"
        if source == "checkout"
        else "pip install dist/wheelhouse/llamaherd-[0-9]*.whl"
    )
    installed = machine.run(first)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    made = machine.run("al new proj --no-interactive", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    project = tmp_path / "proj"
    scaffold = [(project / "config.toml").read_text(), *_agent_configs(project)]
    (project / "agents/hello/config.toml").write_text(
        'models = ["scripted"]\nschedule = "*/30 * * * *"\n'  # cron, and the default runtime
    )
    with (project / "config.toml").open("a") as fh:
        fh.write('\n[models.sonnet]\nprovider = "anthropic"\nmodel = "claude-sonnet-4-5"\n')
    listed = machine.run("al plugins").stdout
    wanted = {"llamaherd-cron", "llamaherd-docker", "llamaherd-anthropic"}
    assert all(name in listed for name in wanted), listed
    said = machine.run("al validate", cwd=project)
    texts = [said.stdout + said.stderr, *scaffold]
    hints = list(dict.fromkeys(c.strip() for t in texts for c in COMMAND.findall(t)))
    assert {name for hint in hints for name in wanted if name.split("-")[1] in hint} == wanted
    where = str(checkout if source == "checkout" else checkout / "dist" / "wheelhouse")
    for hint in hints:
        assert where in hint, hint  # the command names where llamaherd came from
        done = machine.run(hint, cwd=tmp_path)  # anywhere: the command says where
        assert done.returncode == 0, f"$ {hint}\n{done.stdout}{done.stderr}"
    assert wanted <= machine.installed()
    after = machine.run("al validate", cwd=project)
    assert "needs the" not in after.stdout + after.stderr, after.stdout + after.stderr
