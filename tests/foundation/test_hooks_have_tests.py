"""Every hookspec is implemented by at least one plugin a test registers: a hook no test
implements is a documented promise nothing checks."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

from llamaherd import hookspecs

ROOT = Path(__file__).resolve().parents[2]
TEST_DIRS = [ROOT / "core" / "tests", ROOT / "tests", *ROOT.glob("plugins/*/tests")]
TEST_DIRS += [*ROOT.glob("contrib/*/tests")]
IN_SOURCE = re.compile(r"@hookimpl\b[^\n]*\n\s*(?:async\s+)?def\s+(\w+)")


def specs() -> set[str]:
    return {
        name
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, "llamaherd_spec")
    }


def _is_hookimpl(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name == "hookimpl"


def _hookimpls(tree: ast.AST) -> Iterator[str]:
    """Names of ``@hookimpl`` functions in ``tree``, and in the source code its strings hold
    (plugins a test installs as a fake distribution)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if any(_is_hookimpl(d) for d in node.decorator_list):
                yield node.name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield from IN_SOURCE.findall(node.value)


def implemented_in_tests() -> dict[str, list[str]]:
    """Hook name -> the test files holding a ``@hookimpl`` function of that name."""
    found: dict[str, list[str]] = {}
    for directory in TEST_DIRS:
        for path in directory.rglob("*.py"):
            for name in _hookimpls(ast.parse(path.read_text(encoding="utf-8"))):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_there_are_hookspecs_to_check():
    assert {"run_started", "run_finished", "register_routes"} <= specs()


def test_every_hookspec_has_a_test_implementing_it():
    untested = sorted(specs() - set(implemented_in_tests()))
    assert untested == [], f"hookspecs no test plugin implements: {', '.join(untested)}"
