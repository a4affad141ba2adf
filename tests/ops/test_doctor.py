"""`al doctor`: each core check failing and passing, through the real `al`; `--fix` where it acts."""

from __future__ import annotations

import json
import socket
import sqlite3

import pytest

from .conftest import al_with_input, doctor, findings


def test_a_sound_project_passes_with_every_core_check(project):
    project.add_scripted_agent("a")
    code, report = doctor(project)
    assert code == 0, report
    assert report["ok"] is True
    checks = {f["check"] for f in report["findings"]}
    assert {"config", "models", "gateway", "scale", "database", "scheduler"} <= checks
    assert all(f["status"] != "error" for f in report["findings"])


def test_text_report_names_each_check_and_sums_up(project):
    project.add_scripted_agent("a", "bogus = 1\n")
    result = project.al("doctor")
    assert result.returncode == 1
    assert "error   config" in result.stdout
    assert "bogus: unknown key" in result.stdout
    assert "1 error(s)" in result.stdout.splitlines()[-1]


def test_config_errors_are_what_validate_reports(project):
    project.add_scripted_agent("a", 'models = ["nope"]\n')
    code, report = doctor(project)
    assert code == 1
    (error,) = [f for f in findings(report, "config") if f["status"] == "error"]
    assert "no [models.nope] in config.toml" in error["message"]
    assert error["subject"] == "agents/a/config.toml: models[0]"


def test_a_broken_project_config_is_one_error_and_exit_1(project):
    project.config("[models\n")
    code, report = doctor(project)
    assert code == 1
    assert report["findings"][0]["status"] == "error"
    assert "invalid TOML" in report["findings"][0]["message"]


# ----------------------------------------------------------------------------- credentials


@pytest.fixture
def github(fake_service, project):
    """A GitHub API stand-in knowing one good token; agents of ``project`` reach it."""
    from llamaherd.plugins import registry

    if "github_token" not in registry().credential_types:
        pytest.skip("needs the llamaherd-github plugin")

    def user(request):
        if request["headers"].get("authorization") == "token good-token":
            return 200, {"login": "octocat"}
        return 401, {"message": "Bad credentials"}

    service = fake_service({("GET", "/user"): user})
    project.env["AL_GITHUB_API_URL"] = service.url
    return service


def test_a_stored_credential_is_checked_against_its_service(project, github):
    project.add_scripted_agent("a", 'credentials = ["github_token"]\n')
    project.al(
        "creds", "add", "github_token", "--from-env", "T", env={"T": "good-token"}, check=True
    )
    code, report = doctor(project)
    assert code == 0, report
    (found,) = findings(report, "credentials")
    assert found["status"] == "ok"
    assert found["subject"] == "github_token (agents/a)"
    assert "authenticated as octocat" in found["message"]


def test_a_refused_credential_is_an_error_without_its_value(project, github):
    project.add_scripted_agent("a", 'credentials = ["github_token"]\n')
    project.al(
        "creds", "add", "github_token", "--from-env", "T", env={"T": "bad-token"}, check=True
    )
    result = project.al("doctor", "--json")
    assert result.returncode == 1
    assert "bad-token" not in result.stdout + result.stderr
    (found,) = findings(json.loads(result.stdout), "credentials")
    assert found["status"] == "error"
    assert "GitHub refused the token" in found["message"]


def test_a_missing_credential_is_added_by_fix_after_asking(project, github):
    project.add_scripted_agent("a", 'credentials = ["github_token"]\n')
    code, report = doctor(project)
    assert code == 1
    (missing,) = [f for f in report["findings"] if "not found" in f["message"]]
    assert missing["fix"] == "add github_token:default now"
    # --yes does not answer prompts for values: the fix is left to the user.
    skipped = project.al("doctor", "--fix", "--yes")
    assert skipped.returncode == 1 and "needs your input" in skipped.stderr
    fixed = al_with_input(project, "doctor", "--fix", input="y\ngood-token\n")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "fixed: github_token" in fixed.stderr
    assert "authenticated as octocat" in fixed.stdout.split("after fixing:")[1]
    stored = project.creds / "github_token" / "default" / "token"
    assert stored.read_text().strip() == "good-token"


def test_declining_a_fix_changes_nothing(project, github):
    project.add_scripted_agent("a", 'credentials = ["github_token"]\n')
    result = al_with_input(project, "doctor", "--fix", input="n\n")
    assert result.returncode == 1
    assert not (project.creds / "github_token").exists()


# ----------------------------------------------------------------------------- webhooks


def test_unsigned_webhook_sources_are_a_warning(project):
    from llamaherd.plugins import registry

    if "generic" not in registry().webhook_sources:
        pytest.skip("needs the llamaherd-webhooks plugin")
    project.write(
        "config.toml",
        (project.root / "config.toml").read_text()
        + '\n[webhooks.open]\ntype = "generic"\nallowUnsigned = true\n',
    )
    project.add_scripted_agent("a")
    code, report = doctor(project)
    assert code == 0
    (found,) = findings(report, "webhooks")
    assert found["status"] == "warning" and "allowUnsigned" in found["message"]


def test_a_signed_source_needs_its_secret(project):
    from llamaherd.plugins import registry

    if "generic" not in registry().webhook_sources:
        pytest.skip("needs the llamaherd-webhooks plugin")
    project.write(
        "config.toml",
        (project.root / "config.toml").read_text() + '\n[webhooks.hooks]\ntype = "generic"\n',
    )
    project.add_scripted_agent("a")
    code, report = doctor(project)
    assert code == 1
    (found,) = [f for f in report["findings"] if f["check"] == "credentials"]
    assert found["subject"] == "webhook_secret (webhooks.hooks)"
    assert "not found" in found["message"]
    assert findings(report, "webhooks")[0]["status"] == "ok"


# ----------------------------------------------------------------------------- models


def test_a_model_base_url_that_does_not_answer_is_an_error(project, fake_service):
    from llamaherd.plugins import registry

    if "custom" not in registry().providers:
        pytest.skip("needs the llamaherd-openai plugin")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    live = fake_service({}).url + "/v1"
    project.write(
        "config.toml",
        (project.root / "config.toml").read_text()
        + f'\n[models.local]\nprovider = "custom"\nmodel = "m"\nbase_url = "{live}"\n'
        + f'\n[models.gone]\nprovider = "custom"\nmodel = "m"\nbase_url = "{dead}"\n',
    )
    project.add_scripted_agent("a", 'models = ["local", "gone"]\n')
    code, report = doctor(project)
    assert code == 1
    by_subject = {f["subject"]: f for f in findings(report, "models")}
    assert by_subject["models.local"]["status"] == "ok"
    assert "answers" in by_subject["models.local"]["message"]
    assert by_subject["models.gone"]["status"] == "error"
    assert "does not answer" in by_subject["models.gone"]["message"]


# ----------------------------------------------------------------------------- gateway


def test_the_gateway_port_taken_by_another_process_is_an_error(project):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        project.config(f"[gateway]\nport = {port}\n")
        project.add_agent("a", 'models = []\n[runtime]\ntype = "host-user"\n')
        code, report = doctor(project)
    (found,) = findings(report, "gateway")
    assert found["status"] == "error" and "used by another process" in found["message"]
    code, report = doctor(project)
    assert findings(report, "gateway")[0]["status"] == "ok"


def test_the_gateway_port_held_by_our_scheduler_is_fine(project, scheduler):
    project.add_scripted_agent("a")
    running = scheduler(project)
    port = running.url.rsplit(":", 1)[1]
    config = (project.root / "config.toml").read_text().replace("port = 0", f"port = {port}")
    project.write("config.toml", config)
    code, report = doctor(project)
    (found,) = findings(report, "gateway")
    assert found["status"] == "ok" and "this project's scheduler" in found["message"]


# ----------------------------------------------------------------------------- scale


def test_agent_scales_above_the_project_cap_are_warnings(project):
    project.config(
        "scale = 2\n[models.scripted]\nprovider = 'scripted'\nmodel = 's'\n[gateway]\nport = 0\n"
    )
    project.add_scripted_agent("big", "scale = 3\n")
    project.add_scripted_agent("spare", "scale = 0\n")
    code, report = doctor(project)
    assert code == 0, report
    messages = {f["subject"]: f["message"] for f in findings(report, "scale")}
    assert "exceeds the project's scale 2" in messages["agents/big"]
    assert "never runs" in messages["agents/spare"]
    assert "add up to 3" in messages["scale"]


# ----------------------------------------------------------------------------- database


def _stamp(project, version: int) -> None:
    with sqlite3.connect(project.root / ".al" / "work-queue.db") as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))


def test_the_database_is_checked_without_being_migrated(project):
    from llamaherd.store import migrations

    project.add_scripted_agent("a")
    code, report = doctor(project)
    assert "not created yet" in findings(report, "database")[0]["message"]
    assert not (project.root / ".al" / "work-queue.db").exists()
    project.store().close()  # created and migrated
    code, report = doctor(project)
    assert findings(report, "database")[0]["status"] == "ok"
    _stamp(project, migrations.SCHEMA_VERSION - 1)
    code, report = doctor(project)
    (found,) = findings(report, "database")
    assert found["status"] == "warning" and "not migrated yet" in found["message"]
    assert found["fix"] == "migrate it now"
    fixed = project.al("doctor", "--fix", "--yes")
    assert "fixed: database" in fixed.stderr
    code, report = doctor(project)
    assert findings(report, "database")[0]["status"] == "ok"


def test_a_database_newer_than_llamaherd_is_an_error(project):
    from llamaherd.store import migrations

    project.add_scripted_agent("a")
    project.store().close()
    _stamp(project, migrations.SCHEMA_VERSION + 1)
    code, report = doctor(project)
    assert code == 1
    assert "newer than this llamaherd knows" in findings(report, "database")[0]["message"]


def test_an_unreachable_database_server_is_an_error(project):
    project.add_scripted_agent("a")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"postgresql://nobody:secret-pw@127.0.0.1:{port}/none"
    result = project.al("doctor", "--json", env={"AL_DATABASE_URL": url})
    assert result.returncode == 1
    assert "secret-pw" not in result.stdout
    (found,) = findings(json.loads(result.stdout), "database")
    assert found["status"] == "error" and f"127.0.0.1:{port}" in found["message"]


# ----------------------------------------------------------------------------- scheduler


def test_a_scheduler_that_refused_the_config_on_disk_is_a_warning(project, scheduler):
    from llamaherd.testing import wait_until

    project.add_scripted_agent("a")
    scheduler(project)
    code, report = doctor(project)
    assert findings(report, "scheduler")[0]["status"] == "ok"
    project.add_scripted_agent("b", "scale = -1\n")

    def refused() -> dict:
        (found,) = findings(doctor(project)[1], "scheduler")
        return found if found["status"] == "warning" else {}

    found = wait_until(refused, 10, what="the refusal")
    assert "refused the config on disk" in found["message"]
    assert "agents/b/config.toml: scale" in found["message"]


# ----------------------------------------------------------------------------- plugins


def test_a_plugin_check_that_raises_is_one_error(project, registered_plugin):
    from llamaherd import hookimpl
    from llamaherd.doctor import run_checks

    class Broken:
        name = "broken"
        description = "always fails"

        def check(self, project, registry):
            raise RuntimeError("boom")

    class Plugin:
        @hookimpl
        def register_doctor_checks(self, register):
            register(Broken())

    registry = registered_plugin(Plugin(), "broken-doctor")
    project.add_scripted_agent("a")
    results = run_checks(project.load(), registry)
    (broken,) = [r for r in results if r.check == "broken"]
    assert broken.finding.status == "error"
    assert broken.finding.message == "check failed: RuntimeError: boom"
    assert results[0].check == "config"  # core's checks come first
