"""`al test -n N` runs cases at once, each in a sandbox of its own; a Docker agent's cases run
in containers (its real runtime)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "pwd" } }]
[[turns]]
text = "done"
"""
CASE = """
[trigger]
kind = "manual"
prompt = "case {n}"
[model]
live = true   # the scripted model: offline
[expect]
state = "done"
max_turns = 2
"""


def test_cases_run_in_parallel_each_in_its_own_sandbox(project, tmp_path):
    log = tmp_path / "starts.log"
    # Each hook notes its run and sandbox, then waits until four runs have started: were the
    # cases not run four at a time, the first would give up after 30 s and fail its case.
    hook = (
        f'echo "$AL_RUN_ID $(pwd)" >> {log}; i=0; '
        f'while [ "$(wc -l < {log})" -lt 4 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; '
        f'[ "$(wc -l < {log})" -ge 4 ]'
    )
    project.add_scripted_agent("worker", f"[hooks]\npre = [{json.dumps(hook)}]\n", SCRIPT)
    for n in range(20):
        project.write(f"agents/worker/tests/case-{n:02}.toml", CASE.format(n=n))

    tested = project.al("test", "-n", "4", "--json", timeout=180)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    found = json.loads(tested.stdout)
    assert found["passed"] == 20 and found["failed"] == found["errors"] == 0
    lines = [line.split() for line in log.read_text().splitlines()]
    assert len({run for run, _ in lines}) == 20, "one run per case"
    assert len({workdir for _, workdir in lines}) == 20, "one sandbox per case"
    assert not list((project.root / ".al" / "tests").iterdir()), "the private stores are gone"


def test_a_case_with_no_file_to_read_is_a_collection_error(project):
    project.add_scripted_agent("worker", "", SCRIPT)
    project.write(
        "agents/worker/tests/typo.toml", '[trigger]\nkind = "manual"\n[expect]\nstat = "done"\n'
    )
    tested = project.al("test", "worker")
    assert tested.returncode == 2, tested.stdout + tested.stderr
    assert 'agents/worker/tests/typo.toml: expect.stat: unknown key (did you mean "state"?)' in (
        tested.stderr
    )
    assert project.al("test", "-k", "nothing-matches").returncode == 5


@pytest.mark.parametrize(
    "misuse",
    [["--update", "--live"], ["--update", "--repeat", "2"], ["-n", "0"], ["nobody"]],
)
def test_a_misused_al_test_exits_2(project, misuse):
    from click.testing import CliRunner

    from llamaherd.cli import AppContext, ErrorHandlingGroup
    from llamaherd.commands.testing import test_command

    # A group of its own holding `al test` alone: loading every command here would write the
    # environment's command manifest from this process.
    group = ErrorHandlingGroup()
    group.add_command(test_command)
    project.add_scripted_agent("worker", "", SCRIPT)
    used = CliRunner().invoke(group, ["test", *misuse], obj=AppContext(project.root))
    assert used.exit_code == 2, used.output


DOCKER_IMAGE = "local/debian-python:bookworm"
AL = Path(sys.executable).with_name("al")


def _set_up_docker() -> None:
    """``al setup docker``: the al-agent image agents build on."""
    built = subprocess.run(
        [str(AL), "setup", "docker", "--base-image", DOCKER_IMAGE],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr


@pytest.mark.docker
def test_a_docker_agents_cases_run_in_containers(project):
    _set_up_docker()
    project.add_agent(
        "boxed",
        'models = ["scripted"]\nruntime = { type = "container" }\n'
        '[hooks]\npre = ["test -f /.dockerenv && echo in-a-container"]\n',
    )
    project.write("agents/boxed/script.toml", SCRIPT)
    for n in range(2):
        project.write(
            f"agents/boxed/tests/case-{n}.toml",
            CASE.format(n=n)
            + '[[expect.commands]]\ncommand = { glob = "test -f /.dockerenv*" }\n'
            + 'output = { contains = "in-a-container" }\n'
            + '[[expect.commands]]\ncommand = "pwd"\noutput = "/tmp/work"\n',
        )
    tested = project.al("test", "boxed", "-n", "2", "--json", timeout=300)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert json.loads(tested.stdout)["passed"] == 2


def test_repeat_reports_each_cases_pass_rate_and_spend(project):
    with (project.root / "config.toml").open("a") as fh:
        fh.write("\n[models.scripted.pricing]\ninput = 3.0\noutput = 15.0\n")
    project.add_scripted_agent(
        "flaky",
        "",
        """
        [[turns]]
        tool_calls = [{ name = "bash", arguments = { command = "test $((RANDOM % 2)) = 0 && echo heads || echo tails" } }]
        [[turns]]
        tool_calls = [{ name = "return_value", arguments = { value = "{{ last_result }}" } }]
        [[turns]]
        text = "flipped"
        """,
    )
    project.write(
        "agents/flaky/tests/coin.toml",
        '[trigger]\nkind = "manual"\n[model]\nlive = true\n[expect]\nreturn = "heads"\n',
    )
    project.write(
        "agents/flaky/tests/steady.toml",
        '[trigger]\nkind = "manual"\n[model]\nlive = true\n[expect]\nmax_turns = 3\n',
    )
    tested = project.al("test", "--live", "--repeat", "6", "-n", "3", "--json")
    assert tested.returncode in (0, 1), tested.stdout + tested.stderr
    rows = {row["id"]: row for row in json.loads(tested.stdout)["repeat"]}
    coin = rows["flaky/coin"]
    assert coin["runs"] == 6 and coin["pass_rate"] == coin["passed"] / 6
    assert coin["turns"] == 3.0 and coin["tokens"] > 0
    assert coin["cost_usd"] > 0 and coin["total_cost_usd"] == pytest.approx(6 * coin["cost_usd"])
    assert rows["flaky/steady"]["pass_rate"] == 1.0
    table = project.al("test", "flaky", "-k", "steady", "--live", "--repeat", "2")
    assert table.returncode == 0, table.stdout + table.stderr
    assert "flaky/steady" in table.stdout and "2/2" in table.stdout and "100%" in table.stdout


def _alive_with(text: str) -> list[int]:
    """Processes whose command line holds ``text`` (zombies left out)."""
    from llamaherd.processes import pid_alive

    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if entry.name.isdigit() and text.encode() in cmdline and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize(("workers", "cancel"), [(1, "ctrl-c"), (3, "ctrl-c"), (3, "sigterm")])
def test_ctrl_c_ends_the_runs_going_on_and_their_sandboxes(project, tmp_path, workers, cancel):
    """Ctrl-C (SIGINT to al test's process group, as a terminal sends it) or SIGTERM to al test
    alone (a cancelled CI job): the runs going on end with their sandboxes."""
    import os
    import signal

    from llamaherd.processes import pid_alive
    from llamaherd.testing import wait_until

    log = tmp_path / "sleepers.log"
    # A process left in the background, deaf to Ctrl-C as a container's are (not in al's
    # process group): only the sandbox's end ends it.
    hook = f"trap '' INT; sleep 300 & echo $! $(pwd) >> {log}; wait # {tmp_path}"
    project.add_scripted_agent("sleeper", f"[hooks]\npre = [{json.dumps(hook)}]\n", SCRIPT)
    for n in range(4):
        project.write(f"agents/sleeper/tests/case-{n}.toml", CASE.format(n=n))
    started = subprocess.Popen(
        [sys.executable, "-m", "llamaherd", "--project", str(project.root), "test"]
        + ["-n", str(workers)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **project.env},
        # Its own process group, which Ctrl-C in a terminal signals as a whole; SIGINT not
        # ignored even when pytest was started in the background of a script.
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_until(
            lambda: log.exists() and len(log.read_text().splitlines()) == workers,
            timeout=60,
            what=f"{workers} cases in their pre hooks",
        )
        sleepers = [int(line.split()[0]) for line in log.read_text().splitlines()]
        sandboxes = [Path(line.split()[1]) for line in log.read_text().splitlines()]
        assert all(path.is_dir() for path in sandboxes)
        if cancel == "ctrl-c":
            os.killpg(started.pid, signal.SIGINT)
        else:
            started.terminate()
        out, err = started.communicate(timeout=60)
    finally:
        if started.poll() is None:
            os.killpg(started.pid, signal.SIGKILL)
    assert started.returncode == 130, out + err
    assert "al test interrupted" in err and "Traceback" not in err, err
    wait_until(
        lambda: not [pid for pid in sleepers if pid_alive(pid)], what="the sandboxes' processes end"
    )
    assert not _alive_with(str(project.root)), "al test and its workers are gone"
    assert not _alive_with(str(tmp_path)), "nothing of a sandbox is left"
    assert not [path for path in sandboxes if path.exists()], "the sandboxes are removed"
    assert not list((project.root / ".al" / "tests").iterdir()), "the private stores are gone"
    assert len(log.read_text().splitlines()) == workers, "no case started after Ctrl-C"


def _outcomes(found: dict) -> list[dict]:
    """What each case did and how it was judged, without what differs from run to run."""
    return [
        {
            "id": case["id"],
            "outcome": case["outcome"],
            "failures": case["failures"],
            "notes": case["notes"],
            "model": case["model"],
            "return_value": case["run"]["return_value"],
            "turns": case["run"]["turns"],
        }
        for case in found["cases"]
    ]


def test_worker_processes_judge_every_case_as_one_process_does(project):
    """Replayed turns, a cassette that no longer matches, a failed expectation, a passing
    case: `-n 3` (worker processes) reports each exactly as `-n 1`."""
    script = SCRIPT.replace(
        'text = "done"',
        'tool_calls = [{ name = "return_value", arguments = { value = 7 } }]\n[[turns]]\ntext = "done"',
    )
    project.add_scripted_agent("worker", "", script)
    replayed = '[trigger]\nkind = "manual"\nprompt = "case {n}"\n[expect]\nstate = "done"\nreturn = {ret}\n'
    for n in range(4):
        project.write(f"agents/worker/tests/case-{n}.toml", replayed.format(n=n, ret=7))
    project.write("agents/worker/tests/wrong.toml", replayed.format(n="w", ret=8))
    project.write("agents/worker/tests/stale.toml", replayed.format(n="s", ret=7))
    recorded = project.al("test", "--update")  # the cassettes, from the scripted model
    assert recorded.returncode == 1 and "5 passed, 1 failed" in recorded.stdout, recorded.stdout
    project.write("agents/worker/tests/stale.toml", replayed.format(n="changed", ret=7))

    serial = project.al("test", "--json")
    parallel = project.al("test", "-n", "3", "--json")
    assert serial.returncode == parallel.returncode == 1, serial.stderr + parallel.stderr
    one, three = json.loads(serial.stdout), json.loads(parallel.stdout)
    assert (one["passed"], one["failed"]) == (4, 2)
    assert _outcomes(three) == _outcomes(one)
    stale = next(c for c in three["cases"] if c["case"] == "stale")
    assert (
        stale["failures"][0]["where"] == "cassette" and "turn 1" in stale["failures"][0]["message"]
    )
    assert all(
        c["model"]["turns"][:1] == ["cassette"] for c in three["cases"] if c["case"] != "stale"
    )


@pytest.mark.docker
def test_worker_processes_build_a_docker_agents_image_once(project):
    import time
    import uuid

    _set_up_docker()
    name = f"imaged{uuid.uuid4().hex[:8]}"
    project.add_agent(name, 'models = ["scripted"]\nruntime = { type = "container" }\n')
    # A build of its own (nothing cached) that takes long enough for the workers to meet.
    project.write(
        f"agents/{name}/Dockerfile", f"FROM al-agent\nRUN sleep 2 && echo {name} > /tmp/built\n"
    )
    project.write(f"agents/{name}/script.toml", SCRIPT)
    for n in range(3):
        project.write(f"agents/{name}/tests/case-{n}.toml", CASE.format(n=n))
    since = time.time()
    tested = project.al("test", name, "-n", "3", "--json", timeout=300)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert json.loads(tested.stdout)["passed"] == 3
    events = subprocess.run(
        ["docker", "events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}"]
        + ["--filter", "type=image", "--filter", "event=tag"]
        + ["--format", "{{.Actor.Attributes.name}}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    tags = [line for line in events.stdout.splitlines() if name in line]
    assert len(tags) == 1, f"the image was built {len(tags)} times: {tags}"
