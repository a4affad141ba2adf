"""`al run` in the foreground (no scheduler): real processes, host-user as the current user."""

from __future__ import annotations


def openai_model(project, url: str) -> None:
    with (project.root / "config.toml").open("a") as fh:
        fh.write(f'\n[models.fake]\nprovider = "openai"\nmodel = "fake"\nbase_url = "{url}"\n')


def test_manual_run_bash_cd_status_return(project):
    project.add_scripted_agent(
        "worker",
        script="""
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "mkdir -p deep/er && cd deep/er"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo cwd=$(pwd)"}}]
        [[turns]]
        tool_calls = [{name = "set_status", arguments = {text = "checked {{ last_result }}"}},
                      {name = "return_value", arguments = {value = "all good"}}]
        [[turns]]
        text = "Finished."
    """,
    )
    result = project.al("run", "worker")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "/deep/er" in result.stdout
    assert "status" in result.stdout and "checked cwd=" in result.stdout
    assert 'return value: "all good"' in result.stdout
    assert "done (exit 0)" in result.stdout


def test_hooks_pre_failure_ends_with_the_command_output(project):
    project.add_scripted_agent(
        "hooked",
        script='[[turns]]\ntext = "unreached"\n',
        config="""
        [hooks]
        pre = ["echo fine", "echo 'no such repo: acme/x' >&2; exit 4"]
    """,
    )
    result = project.al("run", "hooked")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no such repo: acme/x" in result.stdout
    assert "exited 4" in result.stdout


def test_rate_limited_twice_then_success(project, fake_model, chat_reply):
    model = fake_model(
        [
            (429, {"error": {"type": "rate_limit", "message": "slow down"}}),
            (429, {"error": {"type": "rate_limit", "message": "slow down"}}),
            (200, chat_reply(tool_calls=[("return_value", {"value": "made it"})])),
            (200, chat_reply("done")),
        ]
    )
    openai_model(project, model.url + "/v1")
    project.add_scripted_agent("patient", config='models = ["fake"]\n')
    result = project.al("run", "patient")
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'return value: "made it"' in result.stdout
    assert len(model.requests) == 4
    assert result.stdout.count("provider_error") == 2


def test_three_auth_failures_abort_with_exit_1(project, fake_model, chat_reply):
    model = fake_model([(401, {"error": {"type": "invalid_api_key", "message": "bad key"}})])
    openai_model(project, model.url + "/v1")
    project.add_scripted_agent("locked-out", config='models = ["fake"]\n')
    result = project.al("run", "locked-out")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "3 authentication/permission failures" in result.stdout
    assert len(model.requests) == 3
