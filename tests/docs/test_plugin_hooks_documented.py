"""Every hookspec has a section in docs/plugin-hooks.md whose arguments match the spec's."""

from __future__ import annotations

import inspect
import re

import pytest

from llamaherd import hookspecs

from .conftest import DOCS

HEADING = re.compile(r"^## (\w+)\(([^)]*)\)\s*$", re.MULTILINE)


def specs() -> dict[str, list[str]]:
    """Hook name -> argument names, for every function marked with ``@hookspec``."""
    return {
        name: list(inspect.signature(func).parameters)
        for name, func in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(func, "llamaherd_spec")
    }


def documented() -> dict[str, list[str]]:
    text = (DOCS / "plugin-hooks.md").read_text()
    return {
        name: [a.strip() for a in args.split(",") if a.strip()]
        for name, args in HEADING.findall(text)
    }


def test_hookspecs_are_found() -> None:
    assert "register_trigger_types" in specs()


@pytest.mark.parametrize("hook", sorted(specs()))
def test_hook_is_documented(hook: str) -> None:
    docs = documented()
    assert hook in docs, f"docs/plugin-hooks.md has no '## {hook}(...)' section"
    assert docs[hook] == specs()[hook], (
        f"docs/plugin-hooks.md documents {hook}({', '.join(docs[hook])}); "
        f"the spec takes ({', '.join(specs()[hook])})"
    )


def test_no_section_for_a_hook_that_does_not_exist() -> None:
    assert sorted(set(documented()) - set(specs())) == []
