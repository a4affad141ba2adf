"""The plugin API's boundary holds: plugins import only ``llamaherd.api`` (and ``hookimpl``),
core's import graph has no cycle, and registration refuses objects that do not conform."""

from __future__ import annotations

import ast
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamaherd import api, types
from llamaherd.plugins import PluginManager, nonconformance

from .test_cli import fake_distribution, no_traceback

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "src"
PLUGIN_SOURCES = sorted(
    path
    for pattern in ("plugins/*/src/**/*.py", "contrib/*/src/**/*.py")
    for path in ROOT.glob(pattern)
)
# What a plugin may take from ``llamaherd`` itself (the rest comes from ``llamaherd.api``).
PACKAGE_NAMES = {"hookimpl", "__version__"}


def _imports(tree: ast.AST, *, runtime_only: bool) -> Iterator[tuple[int, str, list[str]]]:
    """(line, module, names) of every import, those inside functions included; with
    ``runtime_only``, imports under ``if TYPE_CHECKING:`` are skipped (they never execute)."""

    def walk(node: ast.AST) -> Iterator[ast.AST]:
        for child in ast.iter_child_nodes(node):
            if (
                runtime_only
                and isinstance(child, ast.If)
                and "TYPE_CHECKING" in ast.unparse(child.test)
            ):
                continue
            yield child
            yield from walk(child)

    for node in walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [alias.name for alias in node.names]


def _own_package(path: Path) -> str:
    return path.relative_to(path.parents[len(path.parts) - path.parts.index("src") - 2]).parts[0]


@pytest.mark.parametrize("path", PLUGIN_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugins_import_only_the_public_api(path: Path) -> None:
    own = _own_package(path)
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for line, module, names in _imports(tree, runtime_only=False):
        top = module.split(".")[0]
        if module == "llamaherd":
            if set(names) - PACKAGE_NAMES:
                bad.append(f"{line}: from llamaherd import {', '.join(names)}")
        elif top == "llamaherd" and module != "llamaherd.api":
            bad.append(f"{line}: {module} (use llamaherd.api)")
        elif top.startswith("llamaherd_") and top != own:
            bad.append(f"{line}: {module} (another plugin: declare what you need through hooks)")
        elif module == "llamaherd.api" and set(names) - set(api.__all__):
            bad.append(f"{line}: llamaherd.api has no {sorted(set(names) - set(api.__all__))}")
    assert not bad, f"{path.relative_to(ROOT)} imports outside the public API:\n" + "\n".join(bad)


def _core_graph() -> dict[str, set[str]]:
    modules = {}
    for path in (CORE / "llamaherd").rglob("*.py"):
        parts = list(path.relative_to(CORE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for _, module, names in _imports(ast.parse(path.read_text()), runtime_only=True):
            candidates = [f"{module}.{n}" for n in names] + [module]
            target = next((c for c in candidates if c in modules), None)
            if target and target != name and target != "llamaherd":
                deps.add(target)
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a path of modules, or [] when it has none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        for dep in sorted(graph[node]):
            found = visit(dep, [*path, node])
            if found:
                return found
        done.add(node)
        return []

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return []


def test_core_import_graph_has_no_cycle() -> None:
    graph = _core_graph()
    assert "llamaherd.engine" in graph and graph["llamaherd.scheduler"]
    cycle = _cycle(graph)
    assert not cycle, "import cycle in core: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_api_names_match_its_type_checking_imports_and_resolve() -> None:
    tree = ast.parse(Path(api.__file__).read_text())
    guarded = next(n for n in tree.body if isinstance(n, ast.If))
    typed = {(a.asname or a.name) for node in guarded.body for a in node.names}
    public = set(api.__all__) - {"hookimpl", "__version__"}
    assert typed == public, "llamaherd/api.py: _SOURCES and the TYPE_CHECKING imports differ"
    for name in sorted(public):
        assert getattr(api, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        api.Nope  # noqa: B018


# --------------------------------------------------------------------------- registration checks


class _Incomplete:
    """A credential type that forgot ``fields`` and ``context``."""

    name = "half_done"
    description = "an incomplete credential type"

    def env(self, values, path):
        return {}


class _Complete(_Incomplete):
    fields = [types.CredentialField("token")]

    def context(self, values):
        return ""


def test_nonconformance_names_what_is_missing_or_wrong() -> None:
    assert nonconformance(_Complete(), types.CredentialType) is None
    assert nonconformance(_Incomplete(), types.CredentialType) == (
        "CredentialType 'half_done' lacks `fields`"
    )
    nameless = type("Nameless", (), {})()
    assert "Nameless has no valid `name`" in nonconformance(nameless, types.CredentialType)
    wrong = _Complete()
    wrong.fields = ["token"]  # strings, not CredentialField
    assert "`fields` should be" in nonconformance(wrong, types.CredentialType)
    wrong_optional = _Complete()
    wrong_optional.sandbox = "no"
    assert "optional `sandbox` should be bool" in nonconformance(
        wrong_optional, types.CredentialType
    )


def test_a_refused_object_does_not_stop_the_rest_of_its_hook() -> None:
    from llamaherd import hookimpl

    class Plugin:
        @hookimpl
        def register_credential_types(self, register):
            register(object())  # no name at all
            register(_Incomplete())
            register(_Complete())

    manager = PluginManager(load_entrypoints=False)
    manager.register(Plugin(), "half")
    registry = manager.registry()
    assert list(registry.credential_types)[-1] == "half_done"
    assert isinstance(registry.credential_types["half_done"], _Complete)
    assert len(manager.info["half"].refused) == 2


INCOMPLETE_PLUGIN = """
from llamaherd import hookimpl


class HalfDone:
    name = "half_done"
    description = "forgot its fields and context()"

    def env(self, values, path):
        return {}


@hookimpl
def register_credential_types(register):
    register(HalfDone())
"""


def test_al_refuses_an_incomplete_plugin_object_with_one_warning(al, tmp_path, tmp_project):
    site = tmp_path / "site"
    fake_distribution(site, "llamaherd-half", "half", "llamaherd_half", INCOMPLETE_PLUGIN)
    env = {"PYTHONPATH": str(site)}
    warning = (
        "warning: credential type from plugin 'half' refused: "
        "CredentialType 'half_done' lacks `fields`"
    )
    listed = al("plugins", env=env)
    no_traceback(listed)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.splitlines().count(warning) == 1
    assert "REFUSED" in listed.stdout
    rows = {row["name"]: row for row in json.loads(al("plugins", "--json", env=env).stdout)}
    assert rows["half"]["registers"] == [] and len(rows["half"]["refused"]) == 1
    # Afterwards every command treats the type as absent: one line, never a traceback.
    tmp_project.add_agent("bot", 'credentials = ["half_done"]\n')
    for args in (["creds", "add", "half_done"], ["prompt", "bot"], ["creds", "types"]):
        result = al("--project", str(tmp_project.root), *args, env=env, input="x\n")
        no_traceback(result)
        assert result.stderr.splitlines().count(warning) == 1, (args, result.stderr)
    added = al("--project", str(tmp_project.root), "creds", "add", "half_done", env=env)
    assert added.returncode == 2 and "unknown credential type 'half_done'" in added.stderr


def test_no_traceback_helper_sees_one() -> None:
    crashed = subprocess.CompletedProcess([], 1, "", "Traceback (most recent call last):\n")
    with pytest.raises(AssertionError):
        no_traceback(crashed)
