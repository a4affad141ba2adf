"""The scheduler always says what it runs: a refused config is judged again when what it lacked
appears (a credential, a `touch`), `al run` never silently runs a version other than the one on
disk, a plugin installed after the start is reported, and a trigger that fails to start is
shown in `al stat`, `al doctor` and the dashboard."""

from __future__ import annotations

import json
import os

from llamaherd.testing import fake_distribution, wait_until

WITHIN = 30.0

DOORBELL = """
from llamaherd import hookimpl


class Doorbell:
    name = "doorbell"
    description = "rings"
    schema = {"doorbell": {"type": "string"}}

    def start(self, ctx):
        if FAIL:
            raise RuntimeError("no bell wired")

    def stop(self):
        pass


@hookimpl
def register_trigger_types(register):
    register(Doorbell())
"""


def status(project) -> dict:
    result = project.al("stat", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["scheduler"]


def _needs_credential(project, ref: str) -> str:
    """Agent ``beta``'s config on disk made to need credential ``ref``; the good text."""
    config = project.root / "agents/beta/config.toml"
    good = config.read_text()
    config.write_text(f'credentials = ["{ref}"]\n' + good)
    return good


def test_a_refused_agent_is_judged_again_when_its_credential_is_added(project, scheduler):
    project.add_scripted_agent("alpha")
    project.add_scripted_agent("beta")
    running = scheduler(project)
    _needs_credential(project, "webhook_secret:ci")
    wait_until(lambda: status(project)["config_errors"], WITHIN, what="the refusal")
    assert status(project)["kept"] == ["beta"]

    # `al run` does not silently run the last good version: it refuses, or says so.
    refused = project.al("run", "beta")
    assert refused.returncode == 2
    assert "refused the config on disk for beta" in refused.stderr
    assert "webhook_secret:ci not found" in refused.stderr and "--last-good" in refused.stderr
    last_good = project.al("run", "beta", "--last-good")
    assert last_good.returncode == 0, last_good.stderr
    assert "note: running the last good config of beta" in last_good.stderr
    assert project.al("run", "alpha").returncode == 0  # another agent is not concerned

    added = project.al(
        "creds", "add", "webhook_secret:ci", "--from-env", "secret=SECRET", env={"SECRET": "s3"}
    )
    assert added.returncode == 0, added.stderr
    wait_until(lambda: not status(project)["config_errors"], WITHIN, what="the re-check")
    assert status(project)["config_current"] is True and status(project)["kept"] == []
    assert project.al("run", "beta").returncode == 0
    assert "config reloaded" in running.read_log()


def test_touch_asks_for_a_new_look(project, scheduler, tmp_path):
    project.add_scripted_agent("beta")
    # The credential's field links to a file kept elsewhere (as users do with ~/.ssh), which
    # does not exist yet: the credential is missing.
    instance = project.creds / "webhook_secret" / "late"
    instance.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (instance / "secret").symlink_to(elsewhere / "secret")
    scheduler(project)
    _needs_credential(project, "webhook_secret:late")
    wait_until(lambda: status(project)["config_errors"], WITHIN, what="the refusal")
    # It appears where the scheduler does not look: nothing it watches changed.
    (elsewhere / "secret").write_text("s3")
    assert status(project)["config_errors"]

    os.utime(project.root / "agents/beta/config.toml")  # touch
    wait_until(lambda: not status(project)["config_errors"], WITHIN, what="the re-check")


def test_a_plugin_installed_after_the_start_is_reported(project, scheduler, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    project.env["PYTHONPATH"] = str(site)
    project.add_scripted_agent("beta")
    running = scheduler(project)
    fake_distribution(
        site, "llamaherd-doorbell", "doorbell", "llamaherd_doorbell", "FAIL = False\n" + DOORBELL
    )
    restart = "restart the scheduler (`al stop && al start`)"
    wait_until(
        lambda: any("installed after start (doorbell)" in p for p in status(project)["problems"]),
        WITHIN,
        what="the new plugin noticed",
    )
    assert restart in project.al("stat").stdout
    assert f"plugins installed after start (doorbell): {restart}" in running.read_log()

    # The config using the new plugin's key is valid for `al validate` (it loads the plugin)
    # but refused by the running scheduler (it did not): both say why and what to do.
    config = project.root / "agents/beta/config.toml"
    config.write_text('doorbell = "front"\n' + config.read_text())
    wait_until(lambda: status(project)["config_errors"], WITHIN, what="the refusal")
    [refusal] = status(project)["config_errors"]
    assert "doorbell" in refusal and restart in refusal
    validated = project.al("validate")
    assert validated.returncode == 0, validated.stdout
    assert "plugin(s) doorbell installed after it started: restart it" in validated.stdout
    assert "refused the config on disk" in validated.stdout


def test_a_trigger_that_fails_to_start_is_shown(project, scheduler, tmp_path):
    site = tmp_path / "site"
    fake_distribution(
        site, "llamaherd-doorbell", "doorbell", "llamaherd_doorbell", "FAIL = True\n" + DOORBELL
    )
    project.env["PYTHONPATH"] = str(site)
    project.add_scripted_agent("beta", 'doorbell = "front"\n')
    running = scheduler(project)
    problem = "trigger type doorbell failed to start: no bell wired"
    assert status(project)["problems"] == [problem]
    shown = project.al("stat").stdout
    assert "1 problem(s)" in shown and problem in shown
    doctor = project.al("doctor", "--json")
    assert doctor.returncode == 1
    found = json.loads(doctor.stdout)["findings"]
    assert {"status": "error", "message": problem} in [
        {"status": f["status"], "message": f["message"]} for f in found if f["check"] == "scheduler"
    ]
    page = running.get("/")
    if page.status_code != 404:  # the dashboard plugin is installed
        assert "The scheduler has problems" in page.text and problem in page.text
