"""A run whose tools print $GITHUB_TOKEN stores only ``***``: logs, status, return value, errors.

Real parts end to end: the credential store on disk, `al run` in the foreground, the host-user
runtime (as the current user), the scripted model, the SQLite store read back byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

from llamaherd.credentials import CredentialStore
from llamaherd.testing import OfflineProject

TOKEN = "ghp_e2eRedactionToken0123456789abcdef"
SSH_KEY_LINE = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"

# Every way a value can leave the sandbox: tool output, status, return value, a failing command.
SCRIPT = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
echo token=$GITHUB_TOKEN gh=$GH_TOKEN
head -2 "$AL_CREDENTIALS_PATH/git_ssh/default/id_rsa"
'''}}]

[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
al-status "using $GITHUB_TOKEN" && al-return "{\\"token\\": \\"$GITHUB_TOKEN\\"}"
'''}}]

[[turns]]
tool_calls = [{name = "bash", arguments = {command = "echo fail $GITHUB_TOKEN >&2; exit 3"}}]

[[turns]]
text = "done: {{ last_result }}"
"""


def test_tool_echoing_the_token_stores_only_mask(tmp_path: Path):
    project = OfflineProject(
        tmp_path / "proj",
        env={"AL_LOAD_PLUGINS": "scripted,host-user,github"},
        creds=tmp_path / "creds",
    )
    project.add_scripted_agent("leaky", 'credentials = ["github_token", "git_ssh"]\n', SCRIPT)
    key = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SSH_KEY_LINE}\n-----END OPENSSH PRIVATE KEY-----"
    CredentialStore(project.creds).write("github_token", "default", {"token": TOKEN})
    CredentialStore(project.creds).write(
        "git_ssh", "default", {"id_rsa": key, "username": "bot", "email": "bot@example.com"}
    )

    run = project.al("run", "leaky")
    logs = project.al("logs", "leaky", "--json")
    shown = run.stdout + run.stderr + logs.stdout + logs.stderr
    assert run.returncode == 0, shown
    events = [json.loads(line) for line in logs.stdout.splitlines()]
    outputs = [e["data"]["output"] for e in events if e["type"] == "tool_call"]
    # The tools really printed the values (the commands ran), and only masks were kept.
    assert outputs[0] == "token=*** gh=***\n***\n***"  # two lines of the key, each masked
    assert outputs[2] == "fail ***\n[exit code 3]"
    assert {"text": "using ***"} in [e["data"] for e in events if e["type"] == "status"]
    assert {"value": {"token": "***"}} in [e["data"] for e in events if e["type"] == "return"]
    database = b"".join(p.read_bytes() for p in (project.root / ".al").glob("work-queue.db*"))
    assert b"***" in database
    for secret in (TOKEN, SSH_KEY_LINE):
        assert secret not in shown
        assert secret.encode() not in database, "the value reached the database"
