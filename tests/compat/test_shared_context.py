"""Dynamic context injection (``!`command``` in SKILL.md) and the project's ``shared/`` files at
``/app/static/shared``, as Action Llama documents them, through ``al run`` (issue 33, items 1
and 2): in the host-user runtime (as the current user, and as a separate OS user) and in a
Docker container.

What the model gets is read back from the stored transcript: each marker replaced by its
command's output (trailing whitespace trimmed), a failure by ``[Error: …]``, secrets masked.
"""

from __future__ import annotations

import pwd
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llamaherd.testing import OfflineProject

SECRET = "ghp_injectionsecret0123456789"
SKILL = """\
---
description: reads shared conventions
---
# Dev

## Conventions
!`cat /app/static/shared/conventions.md`

Policy: !`cat /app/static/shared/team/review-policy.md`
Listed: !`ls -A /app/static/shared | tr '\\n' ' '`
From the hook: !`cat staged.txt` and !`echo "$GREETING"`
Failing: !`cat /nonexistent/file`
Token: !`echo "$GITHUB_TOKEN"`
State: !`state off`
Not a marker: `echo plain`
"""
SCRIPT = """
[[turns]]
tool_calls = [
  { name = "bash", arguments = { command = "touch /app/static/shared/new 2>/dev/null; echo write=$?" } },
  { name = "read_file", arguments = { path = "/app/static/shared/conventions.md" } },
]
[[turns]]
text = "done"
"""
HOOKS = """
credentials = ["github_token"]
[hooks]
pre = ["echo from-hook > staged.txt", "setenv GREETING hello-from-setenv"]
"""


def make_project(root: Path, creds: Path, run_as: str | None = None, **kw: Any) -> OfflineProject:
    from llamaherd.credentials import CredentialStore

    CredentialStore(creds).write("github_token", "default", {"token": SECRET})
    project = OfflineProject(root, creds=creds, timeout=300, **kw)
    project.write("shared/conventions.md", "- Tabs, not spaces.\n- Small commits.\n\n")
    project.write("shared/team/review-policy.md", "Two approvals.\n")
    project.write("shared/.draft.md", "not shared\n")
    project.add_scripted_agent("dev", HOOKS, SCRIPT, run_as=run_as)
    project.write("agents/dev/SKILL.md", SKILL)
    return project


def transcript(project: OfflineProject) -> list[dict[str, Any]]:
    store = project.store()
    try:
        (run,) = store.runs(agent="dev")
        assert run.state == "done", run.reason
        return run.transcript
    finally:
        store.close()


def check_run(project: OfflineProject) -> None:
    result = project.al("run", "dev")
    assert result.returncode == 0, result.stdout + result.stderr
    messages = transcript(project)
    system = next(m["content"] for m in messages if m["role"] == "system")
    body = system[system.index("# Dev") :]
    assert body.splitlines() == [
        "# Dev",
        "",
        "## Conventions",
        "- Tabs, not spaces.",
        "- Small commits.",
        "",
        "Policy: Two approvals.",
        "Listed: conventions.md team",
        # The model reads the setenv value; what is stored masks it, as every setenv value.
        "From the hook: from-hook and ***",
        body.splitlines()[9],
        "Token: ***",
        "State: idle",
        "Not a marker: `echo plain`",
    ]
    failing = body.splitlines()[9]
    assert failing.startswith("Failing: [Error: cat: ") and "No such file" in failing
    assert failing.endswith("]")
    assert SECRET not in str(messages)
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert tools[0].startswith("write=") and tools[0] != "write=0"  # read-only
    assert tools[1] == "- Tabs, not spaces.\n- Small commits.\n\n"
    store = project.store()
    try:
        assert store.agent_state("dev") == "idle"  # `state off` in a marker only reads it
    finally:
        store.close()


def test_host_user_as_the_current_user(tmp_path):
    project = make_project(tmp_path / "proj", tmp_path / "creds")
    if project.fakes:
        pytest.skip("needs the scripted provider and the host-user runtime")
    check_run(project)


@pytest.mark.root
def test_host_user_as_a_separate_os_user(tmp_path):
    from llamaherd_host_user.identity import useradd_command

    try:
        pwd.getpwnam("al-test-agent")
    except KeyError:
        subprocess.run(useradd_command("al-test-agent"), check=True, capture_output=True)
    project = make_project(tmp_path / "proj", tmp_path / "creds", run_as="al-test-agent")
    check_run(project)
    # The host keeps no trace: /app is an empty mount point, the run's copy is gone.
    assert not any(Path("/app").iterdir())


@pytest.mark.docker
def test_in_a_docker_container(tmp_path, docker):
    project = make_project(tmp_path / "proj", tmp_path / "creds")
    config = project.root / "agents/dev/config.toml"
    config.write_text(
        re.sub(r"(?m)^runtime = .*$", 'runtime = { type = "container" }', config.read_text())
    )
    check_run(project)


PEER_CASES = """\
Use `echo hello` for examples.
Date: !`echo 2026-01-01`
Result: !`printf 'hello\\n\\n'`
A: !`echo one` B: !`echo two`
Value: !`printf '%s' "$AL_AGENT"`
!`printf '%s %s' foo bar`
Output: !`exit 1`
!`this-command-does-not-exist-xyz`
!`exit 3` and !`echo ok`
!`python3 -c "import sys; sys.stderr.write('x' * 600); sys.exit(1)"`
Big: !`python3 -c "print('y' * 70000)"`
"""


def test_the_peers_cases(tmp_path):
    """Action Llama's own context-injection tests (test/agents/context-injection.test.ts), run
    in a real sandbox; plus the bound on one command's output."""
    project = OfflineProject(tmp_path / "proj", timeout=120)
    if project.fakes:
        pytest.skip("needs the scripted provider and the host-user runtime")
    project.add_scripted_agent("peer", script='[[turns]]\ntext = "done"\n')
    project.write("agents/peer/SKILL.md", "# Peer\n\n" + PEER_CASES)
    result = project.al("run", "peer")
    assert result.returncode == 0, result.stdout + result.stderr
    store = project.store()
    (run,) = store.runs(agent="peer")
    system = next(m["content"] for m in run.transcript if m["role"] == "system")
    lines = system[system.index("# Peer") :].splitlines()[2:]
    assert lines[:6] == [
        "Use `echo hello` for examples.",
        "Date: 2026-01-01",
        "Result: hello",
        "A: one B: two",
        "Value: peer",
        "foo bar",
    ]
    assert lines[6] == "Output: [Error: Command failed with exit code 1]"
    assert lines[7].startswith("[Error: ") and "not found" in lines[7]
    assert lines[8] == "[Error: Command failed with exit code 3] and ok"
    assert lines[9] == "[Error: " + "x" * 500 + "]"
    big = "\n".join(lines[10:])
    assert big.startswith("Big: yyy") and "characters truncated" in big
    assert len(big) <= 64_000 + len("Big: ")
    events = [e for e in store.events(run.id) if e["type"] == "context"]
    assert [e["data"]["command"] for e in events][:2] == ["echo 2026-01-01", "printf 'hello\\n\\n'"]
    assert events[6]["data"]["exit_code"] == 1


def test_a_link_out_of_the_project_is_left_out_with_a_warning(tmp_path):
    project = make_project(tmp_path / "proj", tmp_path / "creds")
    (project.root / "shared" / "hosts").symlink_to("/etc/hosts")
    (project.root / "shared" / "rules.md").symlink_to(project.root / "agents/dev/SKILL.md")
    result = project.al("validate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "warning: shared/: hosts links outside the project: left out of every run" in (
        result.stdout + result.stderr
    )
    assert "rules.md" not in result.stdout + result.stderr  # inside the project: staged


def test_al_prompt_lists_the_context_commands_a_run_would_run(tmp_path):
    """Issue 42 item 14: ``al prompt`` claims the exact prompts; the markers it cannot run (they
    run in the run's sandbox at its start) are listed after them, each as written, and said to
    be replaced by their output."""
    project = make_project(tmp_path / "proj", tmp_path / "creds")
    shown = project.al("prompt", "dev", check=True).stdout
    section = shown[shown.index("=== context commands ===") :].splitlines()
    assert section[1].startswith("8 !`command` marker(s) in the body above: each runs in the run")
    assert section[2:] == [
        "  !`cat /app/static/shared/conventions.md`",
        "  !`cat /app/static/shared/team/review-policy.md`",
        "  !`ls -A /app/static/shared | tr '\\n' ' '`",
        "  !`cat staged.txt`",
        '  !`echo "$GREETING"`',
        "  !`cat /nonexistent/file`",
        '  !`echo "$GITHUB_TOKEN"`',
        "  !`state off`",
    ]
