"""An offline project on core's stand-ins alone (``fakes=True``): a real ``al run`` subprocess
runs the agent's commands through the ``local`` runtime, as the ``fake`` model's script says."""

from __future__ import annotations

from llamaherd.testing import OfflineProject

SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "echo token=$FAKE_TOKEN in $PWD" } }]

[[turns]]
tool_calls = [{ name = "return_value", arguments = { value = "{{ last_result }}" } }]

[[turns]]
text = "Done."
"""


def test_al_run_on_the_stand_ins(tmp_path):
    project = OfflineProject(tmp_path / "proj", creds=tmp_path / "creds", fakes=True)
    assert (project.provider, project.runtime) == ("fake", "local")
    project.add_scripted_agent("greeter", 'credentials = ["fake_token"]\n', SCRIPT)
    project.al("creds", "add", "fake_token", "--from-env", "TOKEN", env={"TOKEN": "s3cr3t-tok"})
    result = project.al("run", "greeter", check=True)
    assert "s3cr3t-tok" not in result.stdout + result.stderr
    store = project.store()
    (run,) = store.runs(agent="greeter")
    assert (run.state, run.exit_code) == ("done", 0)
    assert run.return_value.startswith("token=*** in ")
    assert run.return_value.rstrip().endswith(f"/.al/local-runs/{run.id}")
    store.close()
    assert not (project.root / ".al" / "local-runs" / run.id).exists(), "cleaned up"
