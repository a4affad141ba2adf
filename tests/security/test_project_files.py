"""Project files that are not regular files, or too large, cannot wedge the scheduler.

A FIFO at ``agents/x/config.toml`` blocked live reload and, through ``/control/stat`` (which
compared the config on disk with the loaded one), every request thread: webhooks timed out and
neither ``al stop`` nor SIGTERM worked. A ``SKILL.md`` linked to ``/dev/zero`` was read into
2.4 GB in 2 s. Now every project file is read only when it is a regular file of at most
``MAX_PROJECT_FILE`` bytes (else an error naming it), and a request thread never reads one.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys

import pytest
import requests

from llamaherd.project import MAX_PROJECT_FILE, load_project, read_project_file
from llamaherd.testing import OfflineProject, wait_until
from llamaherd.types import ConfigError

QUICK = '[[turns]]\ntext = "done"\n'


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda path: os.mkfifo(path), "not a regular file (a FIFO)"),
        (lambda path: path.symlink_to("/dev/zero"), "not a regular file (a character device)"),
        (lambda path: path.mkdir(), "not a regular file (a directory)"),
        (
            lambda path: path.write_bytes(b"#" * (MAX_PROJECT_FILE + 1)),
            f"a project file may have at most {MAX_PROJECT_FILE:,}",
        ),
    ],
    ids=["fifo", "dev-zero", "directory", "too-large"],
)
def test_a_project_file_that_is_no_regular_file_or_too_large_is_refused(tmp_path, make, says):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("good", "", QUICK)
    bad = project.root / "agents" / "bad"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: bad\n---\nWork.\n")
    make(bad / "config.toml")
    with pytest.raises(ConfigError, match=re.escape(says)) as refused:
        read_project_file(bad / "config.toml")
    assert str(bad / "config.toml") in str(refused.value)
    loaded = load_project(project.root)
    assert list(loaded.agents) == ["good"]
    [error] = loaded.errors
    assert says in str(error) and str(bad / "config.toml") in str(error)
    with pytest.raises(ConfigError, match=re.escape(says)):
        loaded.agent("bad")


DIGEST_UNDER_A_MEMORY_LIMIT = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from llamaherd.status import config_digest
print(config_digest(Path(sys.argv[1])))
"""


def test_a_skill_linked_to_dev_zero_is_not_read(tmp_path):
    """What ``al stat`` and the scheduler's watcher compute over the config files: one
    linked to /dev/zero is named, not read (it took 2.4 GB in 2 s; here 1 GB is the cap)."""
    project = OfflineProject(tmp_path / "proj")
    zero = project.root / "agents" / "zero"
    zero.mkdir(parents=True)
    (zero / "SKILL.md").symlink_to("/dev/zero")
    digest = subprocess.run(
        [sys.executable, "-c", DIGEST_UNDER_A_MEMORY_LIMIT, str(project.root)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert digest.returncode == 0, digest.stderr[-2000:]
    assert len(digest.stdout.strip()) == 16


def test_a_fifo_in_the_project_wedges_nothing(tmp_path, scheduler):
    """A FIFO appears as an agent's config.toml under a running scheduler: live reload refuses
    that agent (the log says why), every request is answered meanwhile (more at once than the
    server has threads), a webhook is queued, and SIGTERM stops the scheduler."""
    project = OfflineProject(
        tmp_path / "proj", '[webhooks.open]\ntype = "generic"\nallowUnsigned = true\n'
    )
    project.add_scripted_agent("good", '[[webhooks]]\nsource = "open"\n', QUICK)
    started = scheduler(project)
    assert started.post("/control/pause", {}).status_code == 200
    bad = project.root / "agents" / "bad"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: bad\n---\nWork.\n")
    os.mkfifo(bad / "config.toml")
    wait_until(
        lambda: "not a regular file (a FIFO)" in started.read_log(), 30, what="reload refused it"
    )

    def stat(_: int) -> int:
        return requests.get(
            started.url + "/control/stat", headers=started.http.headers, timeout=10
        ).status_code

    with concurrent.futures.ThreadPoolExecutor(60) as pool:
        assert set(pool.map(stat, range(120))) == {200}
    answer = started.get("/control/stat").json()
    assert answer["scheduler"]["config_current"] is False
    assert any("a FIFO" in error for error in answer["scheduler"]["config_errors"])
    delivered = started.http.post(started.url + "/webhooks/open", json={"n": 1}, timeout=10)
    assert delivered.status_code == 202 and delivered.json()["queued"] == ["good"]
    started.proc.terminate()
    assert started.proc.wait(30) == 0


def _bad_name_agent(project: OfflineProject) -> None:
    """An agent folder named with a byte that is not UTF-8 (``bad\\xff``), otherwise sound."""
    folder = os.path.join(os.fsencode(project.root / "agents"), b"bad\xff")
    os.mkdir(folder)
    good = project.root / "agents" / "good"
    for name in ("SKILL.md", "config.toml"):
        with open(os.path.join(folder, name.encode()), "wb") as fh:
            fh.write((good / name).read_bytes())


BAD_NAME = "agents/bad\\xff: the folder's name is not valid UTF-8: rename the folder"


def test_an_agent_folder_named_in_bytes_that_are_not_utf8_is_refused_in_one_line(
    tmp_path, scheduler
):
    """``al validate`` said ok, ``al start`` died in a traceback, and live reload failed on
    every look while ``al stat`` said "config current"."""
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("good", "", QUICK)
    _bad_name_agent(project)
    checked = project.al("validate")
    assert checked.returncode != 0
    assert BAD_NAME in checked.stdout.splitlines() and "Traceback" not in checked.stderr
    assert "ok  agents/good" in checked.stdout
    started = scheduler(project)  # starts: the folder refused in one line, the rest runs
    assert BAD_NAME in started.read_log() and "Traceback" not in started.read_log()
    project.al("run", "good", check=True)
    assert "live reload failed" not in started.read_log()
    started.proc.terminate()
    assert started.proc.wait(30) == 0


def test_such_a_folder_added_under_a_running_scheduler_shows_in_al_stat(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("good", "", QUICK)
    started = scheduler(project)
    _bad_name_agent(project)
    answer = wait_until(
        lambda: (s := started.get("/control/stat").json()["scheduler"])["config_errors"] and s,
        30,
        what="the reload refused it",
    )
    assert answer["config_current"] is False
    assert answer["config_errors"] == [BAD_NAME]
    shown = project.al("stat")
    assert "config change refused" in shown.stdout and BAD_NAME in shown.stdout
    assert "live reload failed" not in started.read_log()
    project.al("run", "good", check=True)  # the running config goes on
