"""A run whose tools print $GITHUB_TOKEN stores only ``***``: logs, status, return value, errors.

Real parts end to end: the credential store on disk, `al run` in the foreground, the host-user
runtime (as the current user), the scripted model, the SQLite store read back byte for byte.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path

from llamaherd.credentials import CredentialStore

TOKEN = "ghp_e2eRedactionToken0123456789abcdef"
SSH_KEY_LINE = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"

PROJECT = """
[models.scripted]
provider = "scripted"
model = "scripted"
"""

AGENT = f"""
models = ["scripted"]
credentials = ["github_token", "git_ssh"]

[runtime]
type = "host-user"
run_as = "{getpass.getuser()}"
"""

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
    root = tmp_path / "proj"
    (root / "agents" / "leaky").mkdir(parents=True)
    (root / "config.toml").write_text(PROJECT)
    (root / "agents" / "leaky" / "SKILL.md").write_text(
        "---\nname: leaky\ndescription: d\n---\nWork.\n"
    )
    (root / "agents" / "leaky" / "config.toml").write_text(AGENT)
    (root / "agents" / "leaky" / "script.toml").write_text(SCRIPT)
    key = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SSH_KEY_LINE}\n-----END OPENSSH PRIVATE KEY-----"
    CredentialStore(tmp_path / "creds").write("github_token", "default", {"token": TOKEN})
    CredentialStore(tmp_path / "creds").write(
        "git_ssh", "default", {"id_rsa": key, "username": "bot", "email": "bot@example.com"}
    )
    env = {
        **os.environ,
        "AL_CREDENTIALS_DIR": str(tmp_path / "creds"),
        "AL_LOAD_PLUGINS": "scripted,host-user,github",
    }

    def al(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "llamaherd", "--project", str(root), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    run = al("run", "leaky")
    logs = al("logs", "leaky", "--json")
    shown = run.stdout + run.stderr + logs.stdout + logs.stderr
    assert run.returncode == 0, shown
    events = [json.loads(line) for line in logs.stdout.splitlines()]
    outputs = [e["data"]["output"] for e in events if e["type"] == "tool_call"]
    # The tools really printed the values (the commands ran), and only masks were kept.
    assert outputs[0] == "token=*** gh=***\n***\n***"  # two lines of the key, each masked
    assert outputs[2] == "fail ***\n[exit code 3]"
    assert {"text": "using ***"} in [e["data"] for e in events if e["type"] == "status"]
    assert {"value": {"token": "***"}} in [e["data"] for e in events if e["type"] == "return"]
    database = b"".join(p.read_bytes() for p in (root / ".al").glob("work-queue.db*"))
    assert b"***" in database
    for secret in (TOKEN, SSH_KEY_LINE):
        assert secret not in shown
        assert secret.encode() not in database, "the value reached the database"
