"""A sandboxed agent cannot grow the database without bound: status text, return value, call
context and reasons are capped where they are stored, and the tool's error says the limit."""

from __future__ import annotations

import json

from llamaherd.testing import OfflineProject

BIG = 200_000  # characters: far past each cap, well under any request body limit
LONG_STATUS = "s" * 5_000

SCRIPT = f"""
[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = '''
big() {{ head -c {BIG} /dev/zero | tr '\\0' x; }}
for i in 1 2 3 4 5; do big | al-status; big | al-return; big | al-subagent helper; done 2>&1 \\
  | sort | uniq -c
rlock "res://$(head -c 100000 /dev/zero | tr '\\0' x)" 2>&1 | cut -c1-200  # an argv's limit
'''}}}}]

[[turns]]
tool_calls = [{{name = "set_status", arguments = {{text = "{LONG_STATUS}"}}}}]

[[turns]]
tool_calls = [{{name = "set_status", arguments = {{text = "still fine"}}}}]

[[turns]]
text = "done"
"""


def _database_size(project: OfflineProject) -> int:
    return sum(p.stat().st_size for p in (project.root / ".al").glob("work-queue.db*"))


def test_oversized_status_return_and_call_context_are_refused_with_the_limit(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("grower", "", SCRIPT)
    project.add_scripted_agent("helper", "", '[[turns]]\ntext = "done"\n')
    scheduler(project)
    before = _database_size(project)
    result = project.al("run", "grower")
    assert result.returncode == 0, result.stdout + result.stderr
    events = [
        json.loads(line) for line in project.al("logs", "grower", "--json").stdout.splitlines()
    ]
    outputs = [e["data"]["output"] for e in events if e["type"] == "tool_call"]
    # Each of the five tries of each was refused by the gateway, naming the limit.
    refusals = (
        f"status text is {BIG:,} characters; the limit is 2,000",
        f"the return value (as JSON) is {BIG + 2:,} characters; the limit is 64,000",  # quoted
        f"the call context is {BIG:,} characters; the limit is 64,000",
    )
    assert "the lock uri is 100,006 characters; the limit is 2,000" in outputs[0]
    lines = outputs[0].splitlines()
    for refusal in refusals:
        assert any(line.split()[0] == "5" and refusal in line for line in lines), outputs[0]
    assert f"status text is {len(LONG_STATUS):,} characters; the limit is 2,000" in outputs[1]
    store = project.store()
    try:
        assert store.runs(agent="grower")[0].status == "still fine"
        assert not store.runs(agent="helper")  # no call was made
    finally:
        store.close()
    # 15 x 200 KB tried: the database grew by what the run itself records, not by that.
    assert _database_size(project) - before < 2_000_000
