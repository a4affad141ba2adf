"""An agent cannot run the scheduler out of memory with ``setenv``.

Every value a run sets is kept in the scheduler (for the model's later bash calls) and masked in
all it stores. So a run may set values of at most 64 KiB each, 500 of them and 256 KiB in all; a
value over a limit is refused with a message naming it, whichever way it was set: the in-sandbox
``setenv`` command (the gateway), or the ``setenv`` function of the model's bash calls. What was
set within the limits stays usable, and later bash calls still start (the environment fits
``execve``). The attack this guards against, 3.5 MB values posted as fast as the gateway takes
them, leaves the scheduler's peak memory far from where it went before (6 GB in 40 s).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llamaherd.session import MAX_ENV_BYTES, MAX_ENV_SETTINGS, MAX_ENV_VALUE
from llamaherd.testing import OfflineProject

pytestmark = pytest.mark.timeout(180)

LIMITS = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
big=$(head -c 100000 /dev/zero | tr '\\0' x)
command setenv BIG "$big"; echo "gateway-big exit=$?"
setenv BIG2 "$big"; echo "shell-big exit=$?"
for i in 1 2 3 4 5; do
  command setenv "MID$i" "$(head -c 60000 /dev/zero | tr '\\0' $i)" && echo "MID$i kept"
done 2>&1
'''}}]

[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
setenv LAST "$(head -c 30000 /dev/zero | tr '\\0' z)"
echo "lengths ${#MID1} ${#MID4} ${MID5:-unset} ${BIG:-unset} ${BIG2:-unset}"
'''}}]

[[turns]]
tool_calls = [{name = "bash", arguments = {command = 'echo "later ${LAST:-unset}"; /bin/true && echo exec-ok'}}]

[[turns]]
text = "done"
"""

# Posts straight to the gateway as the run, as fast as it answers (no client process per call).
FLOOD = r"""
import os, shutil, sys, time
sys.path.insert(0, os.path.dirname(shutil.which("al-status")))
import _alclient as al
codes = {}
huge = "x" * 3_500_000
for i in range(60):
    status, _ = al.request("POST", "/gateway/setenv", {"name": "HUGE", "value": huge + str(i)})
    codes[status] = codes.get(status, 0) + 1
for i in range(1500):
    status, _ = al.request("POST", "/gateway/setenv", {"name": f"V{i}", "value": f"{i:08d}" * 8})
    codes[status] = codes.get(status, 0) + 1
print("codes", sorted(codes.items()))
"""

FLOODER = f"""
[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = '''python3 - <<'EOF'
{FLOOD}
EOF''', timeout = 150}}}}]

[[turns]]
tool_calls = [{{name = "return_value", arguments = {{value = "{{{{ last_result }}}}"}}}}]

[[turns]]
text = "done"
"""


def _project(tmp_path: Path) -> OfflineProject:
    return OfflineProject(tmp_path / "proj", env={"AL_LOAD_PLUGINS": "scripted,host-user"})


def _tool_outputs(project: OfflineProject, agent: str) -> list[str]:
    import json

    events = project.al("logs", agent, "--json", "--full", check=True).stdout
    return [
        str(event["data"].get("output", ""))
        for event in map(json.loads, events.splitlines())
        if event.get("type") == "tool_call" and event["data"].get("tool") == "bash"
    ]


def test_setenv_values_over_the_limits_are_refused_with_the_limit(tmp_path: Path, scheduler):
    project = _project(tmp_path)
    project.add_scripted_agent("setter", "", LIMITS)
    scheduler(project)
    assert project.al("run", "setter", "--no-follow").returncode == 0
    run = project.wait_run(lambda runs: next((r for r in runs if r.state == "done"), None))
    assert run.agent == "setter"

    first, second, third = _tool_outputs(project, "setter")
    assert "gateway-big exit=1" in first
    assert f"one value may have at most {MAX_ENV_VALUE:,} bytes" in first
    assert "shell-big exit=1" in first
    assert f"one value may have at most {MAX_ENV_VALUE} bytes" in first
    for i in (1, 2, 3, 4):
        assert f"MID{i} kept" in first
    assert "MID5 kept" not in first
    assert f"one run may set at most {MAX_ENV_BYTES:,} bytes in all" in first
    # What fitted is set for later calls; what did not is not, and bash still starts.
    assert "lengths 60000 60000 unset unset unset" in second
    assert "setenv LAST: this run's values would reach" in second
    assert "not kept for later calls" in second
    assert "later unset" in third and "exec-ok" in third


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_setenv_flood_leaves_the_scheduler_memory_bounded(tmp_path: Path, scheduler):
    project = _project(tmp_path)
    project.add_scripted_agent("flooder", "timeout = 170", FLOODER)
    started = scheduler(project)
    assert project.al("run", "flooder", "--no-follow").returncode == 0
    run = project.wait_run(
        lambda runs: next((r for r in runs if r.state in ("done", "error")), None), timeout=160
    )
    assert run.state == "done", run
    # Every huge value refused (413, naming the limit); the small ones up to the count limit.
    accepted = MAX_ENV_SETTINGS
    assert run.return_value == f"codes [(200, {accepted}), (413, {60 + 1500 - accepted})]"
    assert _peak_rss_mib(started.proc.pid) < 300
