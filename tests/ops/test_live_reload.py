"""Live reload: a running `al start` applies edits of agents/ and config.toml without a restart,
and refuses an invalid one (the last good config keeps running, the error in the log and in
`al stat`)."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from llamaherd.testing import wait_until

RELOAD_WITHIN = 30.0  # generous for a loaded machine (bench/reload_latency.py: ~0.1 s)


@pytest.fixture
def herd(cron_project):
    cron_project.add_scripted_agent("first", 'every = "1h"\n')
    return cron_project


def stat(project) -> dict:
    result = project.al("stat", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def runs_of(project, agent: str, kind: str | None = None) -> list:
    return [
        r
        for r in project.store().runs(agent=agent, limit=100)
        if kind is None or r.trigger_kind == kind
    ]


def reloaded(running, agents: set[str]) -> bool:
    names = {row["agent"] for row in running.get("/control/stat").json()["agents"]}
    return names == agents


def test_a_new_agent_runs_and_its_schedule_fires_within_5s(herd, scheduler):
    running = scheduler(herd)
    written = time.time()
    herd.add_scripted_agent("second", 'every = "2s"\n')
    fired = wait_until(lambda: runs_of(herd, "second", "scheduled"), 30, what="a scheduled run")
    assert fired[-1].created_at - written < 5.0  # the first fire, by the scheduler's clock
    result = herd.al("run", "second", "hello")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "config reloaded: added second" in running.read_log()
    status = stat(herd)["scheduler"]
    assert status["config_current"] is True and status["config_errors"] == []
    assert status["reloaded_at"] > status["since"]


def test_a_broken_edit_is_refused_and_the_last_good_config_keeps_running(herd, scheduler):
    running = scheduler(herd)
    good = (herd.root / "agents/first/config.toml").read_text()
    herd.write("agents/first/config.toml", good.replace('"1h"', '"banana"'))
    wait_until(lambda: stat(herd)["scheduler"]["config_errors"], RELOAD_WITHIN, what="refusal")
    status = stat(herd)["scheduler"]
    assert status["config_current"] is False
    assert any("agents/first/config.toml" in e and "every" in e for e in status["config_errors"])
    text = herd.al("stat").stdout
    assert "config change refused" in text and "banana" in text
    assert "config change refused: agents/first/config.toml" in running.read_log()
    served = running.get("/control/stat").json()["scheduler"]
    assert served["config_errors"] == status["config_errors"]
    page = running.get("/")
    if page.status_code != 404:  # the dashboard plugin is installed
        assert "Config change refused" in page.text and "banana" in page.text
    # The last good version still runs, on the control API (the on-disk config is invalid, so
    # `al run` itself would refuse to start it).
    assert running.post("/control/run", {"agent": "first"}).status_code == 202
    wait_until(lambda: runs_of(herd, "first", "manual"), 30, what="a manual run")

    herd.write("agents/first/config.toml", good)
    wait_until(lambda: stat(herd)["scheduler"]["config_current"], RELOAD_WITHIN, what="fixed")
    assert stat(herd)["scheduler"]["config_errors"] == []


def test_a_broken_project_config_refuses_the_whole_change(herd, scheduler):
    running = scheduler(herd)
    config = (herd.root / "config.toml").read_text()
    herd.add_scripted_agent("second")
    wait_until(lambda: reloaded(running, {"first", "second"}), RELOAD_WITHIN, what="reload")
    shutil.rmtree(herd.root / "agents/second")
    herd.write("config.toml", config + "\n[gateway\n")

    # `al stat` cannot read an invalid config.toml either: the control API tells.
    def refused() -> list[str]:
        return running.get("/control/stat").json()["scheduler"]["config_errors"]

    wait_until(refused, RELOAD_WITHIN, what="refusal")
    assert "config.toml" in refused()[0] and "invalid TOML" in refused()[0]
    assert reloaded(running, {"first", "second"})  # the removal waits for a valid config too
    herd.write("config.toml", config)
    wait_until(lambda: reloaded(running, {"first"}), RELOAD_WITHIN, what="the removal")


def test_a_removed_agent_takes_no_triggers_and_keeps_its_queue(herd, scheduler):
    running = scheduler(herd)
    herd.add_scripted_agent("second")
    wait_until(lambda: reloaded(running, {"first", "second"}), RELOAD_WITHIN, what="reload")
    assert herd.al("pause", "second").returncode == 0
    assert running.post("/control/run", {"agent": "second"}).status_code == 202
    shutil.rmtree(herd.root / "agents/second")
    wait_until(lambda: reloaded(running, {"first"}), RELOAD_WITHIN, what="the removal")
    refused = running.post("/control/run", {"agent": "second"})
    assert refused.status_code >= 400 and "second" in refused.text
    assert herd.store().queue_depth().get("second") == 1
    assert "removed (queue kept) second" in running.read_log()


def test_a_changed_schedule_applies_to_the_next_tick(herd, scheduler):
    scheduler(herd)
    assert not runs_of(herd, "first", "scheduled")
    good = (herd.root / "agents/first/config.toml").read_text()
    herd.write("agents/first/config.toml", good.replace('"1h"', '"2s"'))
    wait_until(lambda: runs_of(herd, "first", "scheduled"), RELOAD_WITHIN, what="the new schedule")


def test_with_a_poll_period_set_it_polls(herd, scheduler):
    """The fallback (no inotify; or chosen, for a network file system): a look every
    ``AL_RELOAD_POLL_SECONDS``."""
    running = scheduler(herd, env={"AL_RELOAD_POLL_SECONDS": "1"})
    herd.add_scripted_agent("second")
    # At once, before the next look: `al run` of an agent the scheduler does not know yet
    # makes it look.
    assert herd.al("run", "second").returncode == 0
    herd.add_scripted_agent("third")
    wait_until(
        lambda: reloaded(running, {"first", "second", "third"}), RELOAD_WITHIN, what="reload"
    )
    assert "live reload looks at the config every 1s (AL_RELOAD_POLL_SECONDS)" in (
        running.read_log()
    )


def test_webhook_sources_and_filters_apply_to_the_next_delivery(herd, scheduler):
    from llamaherd.plugins import registry

    if "webhooks" not in registry().trigger_types:
        pytest.skip("needs the llamaherd-webhooks plugin")
    config = (herd.root / "config.toml").read_text()
    running = scheduler(herd)

    def deliver(source: str, event: str) -> list[str]:
        body = json.dumps({"event": event, "n": time.monotonic_ns()})
        answer = running.http.post(f"{running.url}/webhooks/{source}", data=body, timeout=10)
        assert answer.status_code == 202, answer.text
        return answer.json()["agents"]

    herd.write(
        "config.toml", config + '\n[webhooks.open]\ntype = "generic"\nallowUnsigned = true\n'
    )
    herd.add_scripted_agent("hooked", '[[webhooks]]\nsource = "open"\nevents = ["ping"]\n')
    wait_until(lambda: reloaded(running, {"first", "hooked"}), RELOAD_WITHIN, what="reload")
    assert deliver("open", "ping") == ["hooked"]
    herd.add_scripted_agent("hooked", '[[webhooks]]\nsource = "open"\nevents = ["push"]\n')
    wait_until(lambda: deliver("open", "ping") == [], RELOAD_WITHIN, what="the new filter")
    assert deliver("open", "push") == ["hooked"]


def test_the_gateway_port_applies_at_the_next_start_only(herd, scheduler):
    running = scheduler(herd)
    config = (herd.root / "config.toml").read_text()
    herd.write("config.toml", config.replace("port = 0", "port = 1"))
    wait_until(
        lambda: "[gateway] port changed: it applies at the next `al start`" in running.read_log(),
        RELOAD_WITHIN,
        what="the warning",
    )
    assert running.get("/control/health").json()["scheduler"]["url"] == running.url
    assert stat(herd)["scheduler"]["config_errors"] == []


def test_inotify_sees_a_folder_written_at_once_and_never_the_state_dir(tmp_path):
    """A new agent folder is watched as soon as its creation is read, and the reload reads it
    after that, so what was written into it before is read too and what comes after is an
    event of its own; the scheduler's own writes under `.al/` are never watched (they would
    wake an idle scheduler)."""
    import select

    from llamaherd.reload import Inotify

    (tmp_path / "agents").mkdir()
    (tmp_path / ".al").mkdir()
    inotify = Inotify(tmp_path)
    try:
        (tmp_path / ".al" / "heartbeat").write_text("1")
        assert select.select([inotify.fd], [], [], 0)[0] == []
        (tmp_path / "agents" / "new").mkdir()
        (tmp_path / "agents" / "new" / "SKILL.md").write_text("---\n---\nHi.\n")
        assert inotify.read()
        (tmp_path / "agents" / "new" / "config.toml").write_text("scale = 2\n")
        assert inotify.read()
        (tmp_path / "agents" / "new" / "notes").mkdir()
        (tmp_path / "agents" / "new" / "notes" / "deep.md").write_text("x")
        inotify.read()
        (tmp_path / "agents" / "new" / "notes" / "deep.md").write_text("y")
        assert not inotify.read()  # below an agent folder's own files: not config
    finally:
        inotify.close()


def test_the_watcher_calls_back_after_an_edit_and_closes(tmp_path):
    import threading

    from llamaherd.reload import ConfigWatcher

    (tmp_path / "agents").mkdir()
    looks = []
    watcher = ConfigWatcher(tmp_path, lambda: looks.append(1), threading.Event()).start()
    try:
        (tmp_path / "config.toml").write_text("scale = 1\n")
        wait_until(lambda: looks, 10, 0.01, what="a look after the edit")
    finally:
        watcher.close()
    assert not watcher._thread.is_alive()


def test_a_reload_that_fails_outright_is_shown_as_refused_until_one_succeeds(
    offline_project, monkeypatch
):
    """What no config file can cause any more (a folder name that is not UTF-8 made every
    look raise while `al stat` said "config current"), injected where a reload judges the
    files: the failure is a refusal in `al stat` (scheduler.json), and the next good look
    clears it."""
    from llamaherd import scheduler as module

    offline_project.add_scripted_agent("first", "", '[[turns]]\ntext = "done"\n')
    running = module.Scheduler(offline_project.load())
    running.read_agents()  # what its start reads before live reload looks (nothing runs)
    try:
        judged = module.candidate

        def fails(*args, **kwargs):
            raise RuntimeError("the look failed")

        monkeypatch.setattr(module, "candidate", fails)
        offline_project.add_scripted_agent("second", "", '[[turns]]\ntext = "done"\n')
        running.reload()
        failure = ["live reload failed: RuntimeError: the look failed"]
        assert running.identity()["config_errors"] == failure
        info = json.loads((offline_project.root / ".al/scheduler.json").read_text())
        assert info["config_errors"] == failure and info["refused_all"] is True
        monkeypatch.setattr(module, "candidate", judged)
        offline_project.write("agents/second/SKILL.md", "---\nname: second\n---\nHello.\n")
        running.reload()
        assert running.identity()["config_errors"] == []
        assert sorted(running.project.agents) == ["first", "second"]
    finally:
        running.lock.release()
        running.close()
