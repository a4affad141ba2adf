"""Every store write a run causes is charged to its write budget (``llamaherd.write_budget``):
lock rows, agent calls, agent state changes and the transcript (model text, tool-call arguments,
tool output) as well as events and statuses. A run flooding any of them, from 8 threads at
once through its own gateway, or a model endpoint answering 400 KB per turn, grows ``.al`` by
less than ``DOCUMENTED_AL_GROWTH`` and gets exactly one ``write_budget`` notice; from a second
after the notice until the flood ends (at least ``AFTER_BUDGET`` seconds) ``.al`` grows by
less than 1 MiB.

A flood goes on for ``AFTER_BUDGET`` seconds past the notice, then stops, not after the
issue's 30 s: a longer flood adds nothing but time once ``.al`` has stopped growing, which the
test checks. The full 30 s, measured by hand, is in docs/security.md. (The status, return and
setenv flood is ``test_run_flood.py``.)
"""

from __future__ import annotations

import json
import time
from collections import deque
from pathlib import Path

import pytest

from llamaherd.session import ARGUMENTS_CUT, TRANSCRIPT_CUT
from llamaherd.testing import ModelServer, OfflineProject, chat_reply, wait_until
from llamaherd.write_budget import CUT_RESERVE, MAX_RUN_BYTES

from .flooding import Growth, notice_at, watch_run
from .test_setenv_limits import _peak_rss_mib

pytestmark = pytest.mark.timeout(300)

FLOOD_SECONDS = 90  # at most: a flood stops AFTER_BUDGET seconds after the budget's notice
THREADS = 8

# The run's own client (as al-status uses), from THREADS threads, until STOP exists; RESULT
# gets the answers counted by "<path> <HTTP status> <error>", and when the flood ended.
FLOOD = r"""
import json, os, shutil, sys, threading, time
sys.path.insert(0, os.path.dirname(shutil.which("al-status")))
import _alclient as al
codes, lock = {}, threading.Lock()
end = time.monotonic() + SECONDS
pad = "x" * 1980  # with the rest, just under the 2,000 characters a uri or reason may have
context = "c" * 63_980  # likewise, a call's context (64,000)

def worker(i):
    while time.monotonic() < end and not os.path.exists("STOP"):
        BODY
        status, answer = al.request("POST", "PATH", body)
        key = f"PATH {status} {answer.get('error', '')[:100]}".strip()
        with lock:
            codes[key] = codes.get(key, 0) + 1
        i += THREADS

threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
for t in threads: t.start()
for t in threads: t.join()
open("RESULT", "w").write(json.dumps({"codes": codes, "ended": time.time()}))
"""

FLOODS = {
    # distinct 2,000-character URIs: a new lock row each
    "locks": ("/gateway/lock", 'body = {"uri": f"lock://{i:09d}/{pad}"}'),
    # 64,000-character contexts, to an agent whose queue takes them all
    "calls": ("/gateway/call", 'body = {"agent": "worker", "context": f"{i} {context}"}'),
    # its own agent's state, with a 2,000-character reason: an agent event each
    "states": ("/gateway/state", 'body = {"state": "idle", "reason": f"{i} {pad}"}'),
}


def _flooder(kind: str, result: Path, seconds: float) -> str:
    path, body = FLOODS[kind]
    script = FLOOD.replace("BODY", body).replace("PATH", path).replace("RESULT", str(result))
    script = script.replace("STOP", str(result.with_name("stop")))
    script = script.replace("SECONDS", str(seconds)).replace("THREADS", str(THREADS))
    return f"""
[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = '''python3 - <<'EOF'
{script}
EOF''', timeout = 200}}}}]

[[turns]]
text = "done"
"""


def _flood_project(
    tmp_path: Path, kind: str, result: Path, worker: str, seconds: float = FLOOD_SECONDS
) -> OfflineProject:
    project = OfflineProject(tmp_path / "proj", env={"AL_LOAD_PLUGINS": "scripted,host-user"})
    project.add_scripted_agent("flooder", "timeout = 220", _flooder(kind, result, seconds))
    # Called, never run (its one run waits in its hook); its queue takes every call.
    project.add_scripted_agent("worker", f"{worker}\n[hooks]\npre = ['sleep 600']", "")
    return project


@pytest.mark.parametrize("kind", sorted(FLOODS))
def test_a_gateway_flood_is_charged_to_the_runs_write_budget(tmp_path: Path, scheduler, kind: str):
    result = tmp_path / "result"
    project = _flood_project(tmp_path, kind, result, "maxWorkQueueSize = 100000")
    started = scheduler(project)
    state = project.root / ".al"
    wait_until(lambda: (state / "work-queue.db").exists(), 10)
    growth = Growth(state)
    run = watch_run(project, "flooder", growth, result.with_name("stop"))
    assert run.state == "done", run.reason
    flood = json.loads(result.read_text())
    codes = flood["codes"]
    grown = growth.check(notice_at(project, run.id), flood["ended"])
    peak = _peak_rss_mib(started.proc.pid)
    print(f"[{kind}] {sum(codes.values())} requests: {codes}; "
          f".al grew {grown / 2**20:.1f} MiB; scheduler peak RSS {peak:.0f} MiB")  # fmt: skip
    assert peak < 300, peak
    path = FLOODS[kind][0]
    assert codes.get(f"{path} 200"), codes  # the flood wrote, then:
    store = project.store()
    try:
        if kind == "states":  # the state is still set, without its agent event
            history = store.agent_events("flooder", limit=100_000)
            assert 0 < len([e for e in history if e["type"] == "state"]) < codes[f"{path} 200"]
            assert store.agent_state("flooder") == "idle"
        else:  # refused, with the reason
            refused = [key for key in codes if key.startswith(f"{path} 409 ")]
            assert refused and all("as much as one run may" in key for key in refused), codes
    finally:
        store.close()


def test_a_call_into_a_full_queue_is_refused_and_stores_nothing(tmp_path: Path, scheduler):
    """A full queue drops its oldest item for a new trigger; a call into one is refused
    instead: it stores nothing (neither the call nor its context), so a flood of them neither
    pushes other triggers out nor fills ``.al``, and costs the run none of its budget."""
    result = tmp_path / "result"
    project = _flood_project(tmp_path, "calls", result, "maxWorkQueueSize = 3", seconds=3)
    scheduler(project)
    run = watch_run(project, "flooder", Growth(project.root / ".al"), tmp_path / "unused")
    assert run.state == "done", run.reason
    codes = json.loads(result.read_text())["codes"]
    full = [key for key in codes if key.startswith("/gateway/call 409 ")]
    assert full and all("queue is full" in key for key in full), codes
    store = project.store()
    try:
        # Three wait in the worker's queue (and the worker's one run may have taken one).
        made = codes["/gateway/call 200"]
        assert made in (3, 4), codes
        assert len(store.call_ids(run.id)) == made
        assert store.queue_depth("worker")["worker"] == 3
        assert not [e for e in store.agent_events("worker", 1000) if e["type"] == "dropped"]
        assert not [e for e in store.events(run.id) if e["type"] == "write_budget"]
    finally:
        store.close()


# ------------------------------------------------------------------ a model that writes a lot

TURN_TEXT = 400_000  # characters a turn: half text, half a write_file call's content
MODEL_TURNS = 40


def _loud(server: ModelServer) -> None:
    """Make ``server`` an endpoint answering ``TURN_TEXT`` characters a turn for
    ``MODEL_TURNS`` turns (a write of half of it, the other half as text), then "done",
    keeping only the last request (a run without a budget sends it all again every turn)."""
    server.requests = deque(maxlen=1)  # type: ignore[assignment]
    half = TURN_TEXT // 2
    for turn in range(1, MODEL_TURNS + 1):
        write = ("write", {"path": f"out{turn % 3}.txt", "content": f"{turn} " + "w" * half})
        server.reply(200, chat_reply(f"turn {turn} " + "t" * half, [write]))
    server.reply(200, chat_reply("done"))


def test_a_model_answering_400_kb_a_turn_is_charged_and_cut(
    tmp_path: Path, scheduler, model_server: ModelServer
):
    _loud(model_server)
    project = OfflineProject(
        tmp_path / "proj", env={"AL_LOAD_PLUGINS": "scripted,host-user,openai"}
    )
    with (project.root / "config.toml").open("a") as fh:
        fh.write(
            f'\n[models.loud]\nprovider = "openai"\nmodel = "m"\nbase_url = "{model_server.url}/v1"\n'
        )
    project.add_scripted_agent("talker", 'models = ["loud"]\ntimeout = 280')
    started = scheduler(project)
    state = project.root / ".al"
    wait_until(lambda: (state / "work-queue.db").exists(), 10)
    growth = Growth(state)
    assert project.al("run", "talker", "--no-follow").returncode == 0
    wait_until(
        lambda: growth.sample() or not model_server.replies, 250, interval=0.2,
        what="every turn asked for",
    )  # fmt: skip
    asked = time.time()  # (its last checkpoints, while this test reads it, grow the WAL)
    run = project.wait_run(
        lambda runs: next((r for r in runs if r.state != "running"), None), timeout=30
    )
    growth.sample()
    # Past the budget the transcript still takes the cut messages, up to CUT_RESERVE (which
    # counts them twice, as the database holds them, and so does its write-ahead log).
    grown = growth.check(notice_at(project, run.id), asked, 2 * CUT_RESERVE)
    peak = _peak_rss_mib(started.proc.pid)
    print(f"[model] {MODEL_TURNS} turns of {TURN_TEXT:,} characters: .al grew "
          f"{grown / 2**20:.1f} MiB; scheduler peak RSS {peak:.0f} MiB")  # fmt: skip
    assert run.state == "done", run.reason
    assert peak < 200, peak
    assistant = [m for m in run.transcript if m.get("role") == "assistant"]
    assert assistant[0]["content"].endswith("t" * 1000), "what fits the budget is kept whole"
    last = assistant[-2]  # the last long turn (the final one says "done")
    assert last["content"].endswith(f"[{TRANSCRIPT_CUT}]") and len(last["content"]) < 2_200
    [call] = last["tool_calls"]
    assert list(call["arguments"]) == [ARGUMENTS_CUT], "its arguments are kept cut too"
    assert len(call["arguments"][ARGUMENTS_CUT]) < 2_200
    # What the model was sent last: the turns that fit, then the cut ones.
    [request] = model_server.requests
    assert len(json.dumps(request["body"])) < MAX_RUN_BYTES
