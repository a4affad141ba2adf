"""Secrets never reach the stored transcript or the run events, and the run still resumes.

A scripted model does what a leaky one would: it sets a value with ``setenv``, copies a
credential into a variable, writes the token into a file and says it in its text, then waits.
The database holds neither value, byte for byte; after the wait the variables are still set:
from the scheduler's memory, or, after a restart, the credential's from the credential store
(a plain setenv value is lost then, and the model is told so).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llamaherd.credentials import CredentialStore
from llamaherd.testing import OfflineProject

TOKEN = "ghp_transcriptRedaction0123456789abcd"
SESSION_KEY = "sk-session-0123456789abcdef"

WAITER = f"""
[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = "setenv SESSION_KEY {SESSION_KEY}"}}}}]

[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = 'setenv GH "$GITHUB_TOKEN"; echo set'}}}}]

[[turns]]
text = "I will keep {TOKEN} and {SESSION_KEY} safe"
tool_calls = [{{name = "write_file", arguments = {{path = "notes.txt", content = "{TOKEN} {SESSION_KEY}"}}}}]

[[turns]]
tool_calls = [{{name = "wait_for_trigger", arguments = {{filter = {{type = "agent", from = "pinger"}}, timeout = "120s"}}}}]

[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = '''
[ "$GH" = "$GITHUB_TOKEN" ] && echo gh=same; echo key=${{SESSION_KEY:-unset}} notes=$(wc -c < notes.txt)
'''}}}}]

[[turns]]
tool_calls = [{{name = "return_value", arguments = {{value = "{{{{ last_result }}}}"}}}}]

[[turns]]
text = "done"
"""
PINGER = """
[[turns]]
tool_calls = [{name = "call_agent", arguments = {agent = "waiter", context = "wake up"}}]

[[turns]]
text = "pinged"
"""


def _database(project: OfflineProject) -> bytes:
    return b"".join(p.read_bytes() for p in (project.root / ".al").glob("work-queue.db*"))


def _one(runs, agent, state):
    return next((r for r in runs if r.agent == agent and r.state == state), None)


@pytest.mark.parametrize("restart", [False, True], ids=["same-scheduler", "after-restart"])
def test_secrets_are_masked_before_they_are_stored_and_the_run_resumes(
    tmp_path: Path, scheduler, restart: bool
):
    project = OfflineProject(
        tmp_path / "proj",
        env={"AL_LOAD_PLUGINS": "scripted,host-user,github"},
        creds=tmp_path / "creds",
    )
    project.add_scripted_agent("waiter", 'credentials = ["github_token"]\n', WAITER)
    project.add_scripted_agent("pinger", "", PINGER)
    CredentialStore(project.creds).write("github_token", "default", {"token": TOKEN})
    first = scheduler(project)
    assert project.al("run", "waiter", "--no-follow").returncode == 0
    waiting = project.wait_run(lambda runs: _one(runs, "waiter", "waiting"))
    database = _database(project)
    assert b"GH" in database and b"SESSION_KEY" in database  # the names are there, not values
    for secret in (TOKEN, SESSION_KEY):
        assert secret.encode() not in database, f"{secret} reached the database"
    if restart:
        first.kill9()
        scheduler(project)

    assert project.al("run", "pinger").returncode == 0
    done = project.wait_run(lambda runs: _one(runs, "waiter", "done"), timeout=60)
    assert done.id == waiting.id
    # The file really holds both values; the credential's variable came back.
    notes = len(f"{TOKEN} {SESSION_KEY}")
    kept = "***" if not restart else "unset"  # a plain setenv value does not survive a restart
    assert done.return_value == f"gh=same\nkey={kept} notes={notes}"
    events = project.al("logs", "waiter", "--json").stdout
    assert ('"env_lost"' in events) is restart
    database = _database(project)
    for secret in (TOKEN, SESSION_KEY):
        assert secret.encode() not in database, f"{secret} reached the database"
        assert secret not in events
