"""The model key stays with the scheduler: a run under a separate OS user cannot read it."""

from __future__ import annotations

import pwd
import subprocess

import pytest

AGENT_USER = "al-test-agent"
KEY = "sk-e2e-model-key-0123456789"


def ensure_user(name: str) -> None:
    from llamaherd_host_user.identity import useradd_command

    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(useradd_command(name), check=True, capture_output=True)


@pytest.mark.root
def test_model_key_is_not_readable_from_the_sandbox(project, fake_model, chat_reply):
    ensure_user(AGENT_USER)
    # The key is assembled inside the shell and given to grep on a pipe, so no command line
    # (bash -c, grep) carries it: only a real leak can match.
    head, tail = KEY[:10], KEY[10:]
    pat = f"<(printf %s%s {head} {tail})"
    probe = (
        f"env | grep -c -F -f {pat}; "
        f"grep -l -s -F -f {pat} /proc/[0-9]*/environ /proc/[0-9]*/cmdline | wc -l; "
        f"grep -r -l -s -F -f {pat} $HOME $AL_CREDENTIALS_PATH /tmp/al-runs {project.creds}"
        " | wc -l; "
        f"cat {project.creds}/openai_key/default/token 2>/dev/null | grep -c -F -f {pat}; "
        "id -un; true"
    )
    model = fake_model(
        [
            (200, chat_reply(tool_calls=[("bash", {"command": probe})])),
            (200, chat_reply("done")),
        ]
    )
    project.creds.mkdir(mode=0o700)
    (project.creds / "openai_key" / "default").mkdir(parents=True, mode=0o700)
    (project.creds / "openai_key" / "default" / "token").write_text(KEY + "\n")
    with (project.root / "config.toml").open("a") as fh:
        fh.write(
            f'\n[models.fake]\nprovider = "openai"\nmodel = "m"\nbase_url = "{model.url}/v1"\n'
        )
    project.add_scripted_agent("prober", config='models = ["fake"]\n', run_as=AGENT_USER)
    result = project.al("run", "prober")
    assert result.returncode == 0, result.stdout + result.stderr
    assert model.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    tool_result = next(m for m in model.requests[1]["body"]["messages"] if m["role"] == "tool")
    assert tool_result["content"].split() == ["0", "0", "0", "0", AGENT_USER]
    assert KEY not in result.stdout
