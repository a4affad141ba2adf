"""docs/writing-agents.md's table of the language skills' tools says each tool as the model
calls it: its argument names (``name?`` for an optional one) are those of the tool's schema
(issue 42 item 18: ``call_agent(target_agent, context)``, not ``agent``)."""

from __future__ import annotations

import re

from llamaherd.plugins import registry

from .conftest import DOCS

ROW = re.compile(r"^\| `(\w+)\(([^)]*)\)` \|(.*)$", re.MULTILINE)


def documented() -> dict[str, tuple[list[str], str]]:
    """Each tool of the table: (its arguments as written, the rest of its row)."""
    text = (DOCS / "writing-agents.md").read_text()
    return {
        name: ([a.strip() for a in args.split(",") if a.strip()], rest)
        for name, args, rest in ROW.findall(text)
    }


def test_every_tool_is_documented_with_its_argument_names() -> None:
    tools = {
        tool.name: tool
        for skill in registry().language_skills.values()
        if skill.__class__.__module__.startswith("llamaherd.skills")
        for tool in skill.tools
    }
    table = documented()
    assert set(tools) <= set(table), "a core skill's tool missing from the table"
    for name, tool in tools.items():
        args, schema = table[name][0], tool.parameters
        required = [a for a in args if not a.endswith("?")]
        optional = [a.removesuffix("?") for a in args if a.endswith("?")]
        assert (sorted(required), sorted(optional)) == (
            sorted(schema.get("required", [])),
            sorted(set(schema["properties"]) - set(schema.get("required", []))),
        ), name


def test_check_calls_answer_names_the_peers_status_and_our_state() -> None:
    _, answer = documented()["check_call"]
    assert '"status": "pending"' in answer and '"state": "pending"' in answer
    for status in ("running", "completed", "error"):
        assert f"`{status}`" in answer
