"""A sandboxed agent cannot grow the database without bound: status text, return value, call
context and reasons are capped where they are stored, and the tool's error says the limit. A
body far past a cap is refused by the gateway before it is read (413, naming the bytes its route
takes: the cap's worth of UTF-8)."""

from __future__ import annotations

import json

from llamaherd.testing import OfflineProject

LONG_STATUS = "s" * 5_000
# (command, characters past its cap but within its route's body, characters past the route's).
TRIES = [
    ("al-status", 5_000, 200_000),
    ("al-return", 65_000, 200_000),
    ("al-subagent helper", 100_000, 300_000),
]
TRY_ALL = "; ".join(f"over {near} | {cmd}; over {far} | {cmd}" for cmd, near, far in TRIES)

SCRIPT = f"""
[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = '''
over() {{ head -c $1 /dev/zero | tr '\\0' x; }}
for i in 1 2 3 4 5; do {TRY_ALL}; done 2>&1 | sort | uniq -c
rlock "res://$(over 5000)" 2>&1 | cut -c1-200
rlock "res://$(over 100000)" 2>&1 | cut -c1-200
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
        "status text is 5,000 characters; the limit is 2,000",
        "the return value (as JSON) is 65,002 characters; the limit is 64,000",  # quoted
        "the call context is 100,000 characters; the limit is 64,000",
        "request body larger than 10048 bytes (the most /gateway/status takes)",
        "request body larger than 66048 bytes (the most /gateway/return takes)",
        "request body larger than 258048 bytes (the most /gateway/call takes)",
    )
    assert "the lock uri is 5,006 characters; the limit is 2,000" in outputs[0]
    assert "request body larger than 10048 bytes (the most /gateway/lock takes)" in outputs[0]
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
    # 30 bodies of 5 to 300 KB tried: the database grew by what the run records, not by them.
    assert _database_size(project) - before < 2_000_000
