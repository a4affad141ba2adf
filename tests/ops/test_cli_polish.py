"""CLI habits of a mature tool, through real scheduler processes: `al run --no-follow` prints
the run id, a queued `al run` says why and Ctrl-C withdraws it (unless --detach), `al stop`
says what it waits for, `al start --detach` shows why it failed, run ids are never cut,
`--payload -` reads stdin, and shell completion offers agents and runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from llamaherd.testing import wait_until

HELLO = '[[turns]]\ntext = "hello"\n'
SLEEPER = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = "sleep 4"}}]
[[turns]]
text = "rested"
"""


def _al_process(project, *args: str, stderr_path) -> subprocess.Popen:
    """``al ARGS`` in the background, its stderr to ``stderr_path``, its stdout next to it."""
    with open(stderr_path, "w") as err, open(f"{stderr_path}.out", "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "llamaherd", "--project", str(project.root), *args],
            stdout=out,
            stderr=err,
            env={**os.environ, **project.env, "PYTHONUNBUFFERED": "1"},
            # Ctrl-C as a terminal delivers it, even when pytest itself was started in the
            # background of a script (which ignores SIGINT, and children inherit that).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def test_no_follow_prints_the_run_id_for_al_logs(project, scheduler):
    project.add_scripted_agent("worker", script=HELLO)
    scheduler(project)
    queued = project.al("run", "worker", "--no-follow", check=True)
    run_id = queued.stdout.strip()
    assert run_id.startswith("worker-") and f"al logs {run_id} -f" in queued.stderr
    followed = project.al("logs", run_id, "-f", check=True)
    assert f"run {run_id} done (exit 0)" in followed.stdout


def test_a_queued_run_says_why_and_ctrl_c_withdraws_it_unless_detach(project, scheduler, tmp_path):
    project.add_scripted_agent("worker", script=HELLO)
    scheduler(project)
    project.al("pause", "worker", check=True)
    store = project.store()
    for detach in (False, True):
        err = tmp_path / f"run-{detach}.err"
        process = _al_process(project, "run", "worker", *(["--detach"] * detach), stderr_path=err)
        wait_until(
            lambda err=err: (
                "queued: runs of worker are paused (`al resume worker`)" in err.read_text()
            ),
            what="the queued run's reason",
        )
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 130
        depth = store.queue_depth("worker")["worker"]
        assert depth == (1 if detach else 0), err.read_text()
    assert store.runs(agent="worker") == []
    project.al("resume", "worker", check=True)
    project.wait_run(lambda runs: [r for r in runs if r.agent == "worker" and r.state == "done"])


def test_a_foreground_run_of_a_paused_agent_says_so_and_ctrl_c_withdraws_it(project, tmp_path):
    project.add_scripted_agent("worker", script=HELLO)
    project.al("pause", "worker", check=True)
    err = tmp_path / "run.err"
    process = _al_process(project, "run", "worker", stderr_path=err)
    wait_until(lambda: "queued: runs of worker are paused" in err.read_text(), what="the reason")
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 130 and "withdrawn" in err.read_text()
    assert project.store().queue_depth("worker")["worker"] == 0


def test_ctrl_c_kills_a_started_run_it_follows(project, scheduler, tmp_path):
    project.add_scripted_agent("sleeper", script=SLEEPER)
    scheduler(project)
    process = _al_process(project, "run", "sleeper", stderr_path=tmp_path / "run.err")
    running = project.wait_run(lambda runs: [r for r in runs if r.state == "running"])[0]
    wait_until(lambda: "started" in (tmp_path / "run.err.out").read_text(), what="following")
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 130
    assert f"run {running.id} killed" in (tmp_path / "run.err").read_text()
    project.wait_run(lambda runs: [r for r in runs if r.id == running.id and r.state == "killed"])


def test_stop_says_what_it_waits_for(project, scheduler, tmp_path):
    release = tmp_path / "release"
    holder = f"until [ -e {release} ]; do sleep 0.05; done"  # runs until the test lets it end
    script = f'[[turns]]\ntool_calls = [{{name = "bash", arguments = {{command = "{holder}"}}}}]\n'
    project.add_scripted_agent("holder", script=script + '[[turns]]\ntext = "released"\n')
    scheduler(project)
    run_id = project.al("run", "holder", "--no-follow", check=True).stdout.strip()
    project.wait_run(lambda runs: [r for r in runs if r.id == run_id and r.state == "running"])
    err = tmp_path / "stop.err"
    stopping = _al_process(project, "stop", stderr_path=err)
    said = f"waiting for 1 active run(s) to end: {run_id}"
    wait_until(lambda: said in err.read_text() or stopping.poll() is not None, what="the stop")
    assert said in err.read_text(), err.read_text()
    release.touch()
    assert stopping.wait(60) == 0, err.read_text()
    assert "stopped" in (tmp_path / "stop.err.out").read_text()


def test_start_detach_failure_shows_the_cause_and_exits_1(project):
    project.add_scripted_agent("worker", script=HELLO)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = project.al("start", "--detach", "--port", str(port))
    assert result.returncode == 1
    assert f"127.0.0.1:{port}" in result.stderr and "in use" in result.stderr.lower()


def test_runs_never_cut_ids_and_payload_from_stdin(project):
    project.add_scripted_agent(
        "echoer",
        script='[[turns]]\ntool_calls = [{name = "return_value", arguments = '
        '{value = "{{ payload.word }}"}}]\n[[turns]]\ntext = "ok"\n',
    )
    result = subprocess.run(
        [sys.executable, "-m", "llamaherd", "--project", str(project.root), "run", "echoer"]
        + ["--payload", "-"],
        input=json.dumps({"word": "from-stdin"}),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **project.env},
    )
    assert result.returncode == 0 and 'return value: "from-stdin"' in result.stdout, result.stderr
    run_id = project.store().runs(agent="echoer")[0].id
    narrow = project.al("runs", env={"COLUMNS": "30"}, check=True).stdout
    assert run_id in narrow


def test_shell_completion_of_agents_and_runs(project):
    project.add_scripted_agent("worker", script=HELLO)
    project.add_scripted_agent("watcher", script=HELLO)
    project.al("run", "worker", check=True)
    run_id = project.store().runs(agent="worker")[0].id

    def complete(line: str) -> list[str]:
        """What bash completion offers for the last word of ``line`` (al -p DIR CMD WORD)."""
        env = {"_AL_COMPLETE": "bash_complete", "COMP_WORDS": line, "COMP_CWORD": "4"}
        out = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "al")],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **project.env, **env},
        ).stdout
        return sorted(row.split(",", 1)[1] for row in out.splitlines())

    root = str(project.root)
    assert complete(f"al -p {root} run w") == ["watcher", "worker"]
    assert complete(f"al -p {root} logs worker-") == [run_id]
    assert complete(f"al -p {root} stats wa") == ["watcher"]
