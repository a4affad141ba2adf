"""A run that floods the scheduler at full speed, with the two writes it may make most of:
``setenv`` values (3.5 MB ones, which once took the scheduler to 6 GB, and small ones past the
count limit) and status updates of the longest length allowed (2,000 characters; 3,000 of them
once grew ``.al`` by 20 MB in 10 s).

The scheduler's memory stays under 300 MB and ``.al`` grows by less than the documented
per-run budget (``DOCUMENTED_AL_GROWTH``, docs/security.md). The attack goes on until
``AFTER_BUDGET`` seconds after the budget's notice, not for the issue's 30 s: from then on the
database does not grow, which the test checks (by less than 1 MiB from a second after the
notice until the flood ends), so a longer flood adds nothing but time. The run ends ``done``;
its status still shows the latest update; ``al logs`` shows the one notice; a later tool
output is kept cut.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamaherd.session import OUTPUT_CUT
from llamaherd.testing import OfflineProject, wait_until
from llamaherd.write_budget import OUTPUT_OVER_BUDGET

from .flooding import Growth, notice_at, watch_run
from .test_setenv_limits import _peak_rss_mib

pytestmark = pytest.mark.timeout(240)

FLOOD_SECONDS = 120  # at most: it stops AFTER_BUDGET seconds after the budget's notice

FLOOD = r"""
import json, os, shutil, sys, time
sys.path.insert(0, os.path.dirname(shutil.which("al-status")))
import _alclient as al
codes = {}
huge = "x" * 3_500_000
text = "s" * 1980
value = "r" * 63_000
end = time.monotonic() + SECONDS
i = 0
last = ""
while time.monotonic() < end and not os.path.exists("STOP"):
    i += 1
    if i % 40 == 0:
        kind, status = "setenv-huge", al.request("POST", "/gateway/setenv", {"name": f"H{i % 7}", "value": huge + str(i)})[0]
    elif i % 3 == 0:
        kind, status = "setenv", al.request("POST", "/gateway/setenv", {"name": f"V{i}", "value": f"{i:08d}" * 8})[0]
    elif i % 3 == 1:
        kind, status = "return", al.request("POST", "/gateway/return", {"value": f"{i} {value}"})[0]
    else:
        last = f"{i:06d}"
        kind, status = "status", al.request("POST", "/gateway/status", {"text": f"{last} {text}"})[0]
    codes[f"{kind} {status}"] = codes.get(f"{kind} {status}", 0) + 1
print(json.dumps({"requests": i, "codes": codes, "last": last, "ended": time.time()}))
"""

FLOODER = f"""
[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = '''python3 - <<'EOF'
{FLOOD}
EOF''', timeout = 200}}}}]

[[turns]]
tool_calls = [{{name = "return_value", arguments = {{value = "{{{{ last_result }}}}"}}}}]

[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = "head -c 20000 /dev/zero | tr '\\\\0' y"}}}}]

[[turns]]
text = "done"
"""


def test_a_flood_of_setenv_and_status_leaves_the_scheduler_and_al_bounded(
    tmp_path: Path, scheduler
):
    stop = tmp_path / "stop"
    project = OfflineProject(tmp_path / "proj", env={"AL_LOAD_PLUGINS": "scripted,host-user"})
    script = FLOODER.replace("STOP", str(stop)).replace("SECONDS", str(FLOOD_SECONDS))
    project.add_scripted_agent("flooder", "timeout = 220", script)
    started = scheduler(project)
    state = project.root / ".al"
    wait_until(lambda: (state / "work-queue.db").exists(), 10)
    growth = Growth(state)
    run = watch_run(project, "flooder", growth, stop)
    assert run.state == "done", run.reason
    assert run.return_value.startswith("{"), run.return_value[:2000]
    flood = json.loads(run.return_value)
    grown = growth.check(notice_at(project, run.id), flood["ended"])
    peak = _peak_rss_mib(started.proc.pid)
    print(f"[flood] {flood['requests']} requests: {flood['codes']}; "
          f".al grew {grown / 2**20:.1f} MiB; scheduler peak RSS {peak:.0f} MiB")  # fmt: skip

    assert peak < 300, peak
    codes = flood["codes"]
    assert codes["setenv-huge 413"] > 0 and codes["setenv 200"] > 0
    # Every status and return value is taken, past the budget too (without history then).
    assert {key for key in codes if key.startswith(("status", "return"))} == {
        "status 200",
        "return 200",
    }, codes

    store = project.store()
    try:
        assert store.get_run(run.id).status.startswith(flood["last"]), "the latest update"
        transcript_tool = [m for m in store.get_run(run.id).transcript if m.get("role") == "tool"]
        assert OUTPUT_CUT in transcript_tool[-1]["content"]
        assert len(transcript_tool[-1]["content"]) <= OUTPUT_OVER_BUDGET + len(OUTPUT_CUT) + 10
    finally:
        store.close()
    logs = project.al("logs", "flooder", "--grep", "write_budget").stdout
    assert "as much as one run may" in logs
