"""Another local user who makes the runs' base in /tmp first (``/tmp/al-runs`` after a reboot,
or ``/tmp/al-runs-<uid>``) no longer stops every host-user run: the runs go to a private base
nobody can make in advance, which the next run and the orphan sweep find again.

Each case runs in a mount namespace of its own with a fresh /tmp, so the squatter can take the
real names without disturbing anything else on the machine; the squatter is a real OS user."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from pathlib import Path

import pytest

from .conftest import AGENT_USER, OTHER_USER

pytestmark = pytest.mark.root

# Runs in the namespace, as the scheduler's user: a project in the fresh /tmp and three runs
# of its agent through `al run` (the first makes the private base, the next ones reuse it).
# Cgroups are the machine's: an orphan sweep elsewhere (another test's), which cannot see this
# /tmp, would take these runs' cgroups for strays, so the cgroup hierarchy is unmounted here and
# the runs are contained by process (the runtime's fallback); no sweep runs here either.
SCENARIO = """
import glob, json, os, pathlib, sys
from llamaherd.testing import OfflineProject

os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # for `al` below
project = OfflineProject(pathlib.Path("/tmp/project"))
project.add_scripted_agent("worker", "", '''
[[turns]]
tool_calls = [{name = "bash", arguments = {command = 'id -un; pwd; al-return "$(pwd)"'}}]
[[turns]]
text = "done"
''', run_as=sys.argv[1])
out = {"codes": [], "output": []}
for _ in range(3):
    done = project.al("run", "worker")
    out["codes"].append(done.returncode)
    out["output"].append(done.stdout + done.stderr)
store = project.store()
out["runs"] = [(r.state, r.return_value) for r in store.runs(agent="worker")]
out["agent_state"] = store.agent_state("worker")
store.close()
out["bases"] = sorted(glob.glob("/tmp/al-runs*"))
print(json.dumps(out))
"""


def _in_a_fresh_tmp(squat: str, squatter: str, scheduler_user: str, agent: str) -> dict:
    """Run ``SCENARIO`` as ``scheduler_user`` in a mount namespace with an empty /tmp where
    ``squatter`` made ``squat`` first (world-writable, as a hostile user would)."""
    site = sysconfig.get_paths()["purelib"]
    python = sys.executable
    env_path = "/usr/bin:/bin:/usr/sbin:/sbin"
    if scheduler_user != "root":
        # The venv lives under /root: the system interpreter (the same version) with its packages.
        python = "/usr/bin/python3"
    code = f"import site; site.addsitedir({site!r})\n" + textwrap.dedent(SCENARIO)
    shell = textwrap.dedent(f"""\
        set -e
        mount -t tmpfs -o mode=1777 tmpfs /tmp
        findmnt -rn -t cgroup2 -o TARGET | while read -r m; do umount -l "$m"; done
        runuser -u {squatter} -- mkdir -m 0777 {squat}
        exec runuser -u {scheduler_user} -- env PATH={env_path} HOME=/tmp AL_NO_ENTRYPOINTS= \\
            {python} -c "$0" {agent}
        """)
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", shell, code],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _can_unshare() -> None:
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespaces here: {probe.stderr.decode().strip()}")


def _each_run_in(found: dict, base: str) -> None:
    """Every run is done, its working dir in ``base`` (the one private base)."""
    assert [state for state, _ in found["runs"]] == ["done"] * 3, found
    assert all(str(cwd).startswith(f"{base}/worker-") for _, cwd in found["runs"]), found


def test_runs_go_on_when_another_user_made_tmp_al_runs_first(agent_users):
    _can_unshare()
    found = _in_a_fresh_tmp("/tmp/al-runs", OTHER_USER, "root", AGENT_USER)
    assert found["codes"] == [0, 0, 0], found["output"]
    assert found["agent_state"] != "error"
    [squatted, private] = found["bases"]
    assert squatted == "/tmp/al-runs" and private.startswith("/tmp/al-runs-0-")
    _each_run_in(found, private)


def test_a_nonroot_scheduler_goes_on_when_its_base_was_taken(agent_users):
    _can_unshare()
    uid = pwd.getpwnam(AGENT_USER).pw_uid
    found = _in_a_fresh_tmp(f"/tmp/al-runs-{uid}", OTHER_USER, AGENT_USER, AGENT_USER)
    assert found["codes"] == [0, 0, 0], found["output"]
    [squatted, private] = found["bases"]
    assert squatted == f"/tmp/al-runs-{uid}" and private.startswith(f"/tmp/al-runs-{uid}-")
    _each_run_in(found, private)


def test_the_orphan_sweep_looks_through_the_private_bases_too(runtime, make_agent):
    """A private base (made while /tmp/al-runs was another user's) keeps what a crashed
    scheduler left there: the next start's sweep finds it by its owner, as it finds
    /tmp/al-runs."""
    from llamaherd_host_user.layout import Layout, run_bases

    project = make_agent().project
    base = Path(tempfile.mkdtemp(prefix=f"al-runs-{os.geteuid()}-", dir="/tmp"))
    try:
        base.chmod(0o711)
        left = Layout(base, "worker-left-behind")
        left.private.mkdir()
        left.workdir.mkdir()
        left.write_owner(project=str(project.root))
        assert base in run_bases()
        assert runtime.cleanup_orphans(set(), project) == 1
        assert not left.private.exists() and not left.workdir.exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_base_of_another_user_is_never_one_of_ours(agent_users):
    """Only directories the scheduler's user owns are bases: a squatter's look-alike name (or
    a link) is passed over, never used or swept."""
    from llamaherd_host_user.layout import run_bases

    squatter = pwd.getpwnam(OTHER_USER)
    fake = Path(tempfile.mkdtemp(prefix=f"al-runs-{os.geteuid()}-", dir="/tmp"))
    link = Path(f"{fake}-link")
    try:
        os.chown(fake, squatter.pw_uid, squatter.pw_gid)
        link.symlink_to(fake)
        assert fake not in run_bases() and link not in run_bases()
    finally:
        link.unlink(missing_ok=True)
        shutil.rmtree(fake, ignore_errors=True)
