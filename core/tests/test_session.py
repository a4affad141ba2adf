"""The runner and session in one process: real store, real HTTP gateway, and core's stand-ins
for the edges (llamaherd.testing_fakes): the ``fake`` model replaying script.toml and the
``local`` runtime running commands as the current user."""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from llamaherd.testing import wait_until
from llamaherd.types import TriggerEvent

CONFIG = """
[models.scripted]
provider = "fake"
model = "scripted"
"""


@pytest.fixture
def engine(tmp_project, monkeypatch, tmp_path, fakes):
    from llamaherd.engine import Engine

    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "creds"))
    monkeypatch.setenv("AL_RETRY_BASE_DELAY", "0.01")
    tmp_project.config(CONFIG)
    eng = Engine(tmp_project.load())
    eng.serve(port=0)
    eng.tmp_project = tmp_project
    try:
        yield eng
    finally:
        eng.close()


def add_agent(engine: Any, name: str, script: str, config: str = "") -> Any:
    """An agent of the local runtime with this script.toml; reloads the project's agents."""
    project = engine.tmp_project
    path = project.add_agent(
        name,
        'models = ["scripted"]\n' + textwrap.dedent(config) + '\n[runtime]\ntype = "local"\n',
    )
    (path / "script.toml").write_text(textwrap.dedent(script))
    engine.project.__dict__.pop("agents", None)  # cached_property: rescan
    return engine.project.agent(name)


def run(engine: Any, agent: str, kind: str = "manual", payload: dict | None = None) -> Any:
    trigger = {"kind": kind, "payload": payload or {}, "prompt": "", "source": None}
    row = engine.store.create_run(agent, kind, trigger=trigger)
    return engine.runner.run(row)


def tool_results(engine: Any, run_id: str) -> list[str]:
    transcript = engine.store.get_run(run_id).transcript
    return [m["content"] for m in transcript if m.get("role") == "tool"]


def test_manual_run_bash_cwd_status_return(engine):
    add_agent(
        engine,
        "worker",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "mkdir -p sub && cd sub && echo hi > f"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "pwd; cat f; setenv GREETING 'hello there'"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo \\"$GREETING\\"; exit 3"}}]
        [[turns]]
        tool_calls = [
          {name = "set_status", arguments = {text = "working on it"}},
          {name = "return_value", arguments = {value = {answer = 42}}},
        ]
        [[turns]]
        text = "All done."
    """,
    )
    final = run(engine, "worker")
    assert (final.state, final.exit_code, final.reason) == ("done", 0, None)
    assert final.status == "working on it"
    assert final.return_value == {"answer": 42}
    results = tool_results(engine, final.id)
    assert results[1].splitlines()[0].endswith(f"/{final.id}/sub")
    assert results[1].splitlines()[1] == "hi"
    # The value was printed; a setenv value is masked in what is stored (the model read it).
    assert results[2] == "***\n[exit code 3]"
    types = [e["type"] for e in engine.store.events(final.id)]
    assert "model_call" in types and "tool_call" in types


def test_sandbox_commands_reach_the_gateway(engine):
    add_agent(
        engine,
        "cli",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "al-status 'from the shell' && al-return '{\\"n\\": 1}' && rlock res://a && rlock-heartbeat res://a"}}]
        [[turns]]
        text = "ok"
    """,
    )
    final = run(engine, "cli")
    assert final.state == "done", final.reason
    assert final.status == "from the shell"
    assert final.return_value == {"n": 1}
    out = tool_results(engine, final.id)[0].splitlines()
    assert json.loads(out[0]) == {"ok": True}
    assert json.loads(out[2])["ok"] is True


def test_hooks_pre_failure_ends_the_run_with_its_output(engine):
    add_agent(
        engine,
        "hooked",
        """
        [[turns]]
        text = "never reached"
    """,
        config="""
        [hooks]
        pre = ["echo preparing", "echo broken-step >&2; exit 7"]
    """,
    )
    final = run(engine, "hooked")
    assert (final.state, final.exit_code) == ("error", 1)
    assert "exit 7" in final.reason and "exited 7" in final.reason
    assert "broken-step" in final.reason


LOOPER = """
    [[turns]]
    tool_calls = [{name = "bash", arguments = {command = "true"}}]
    loop = true
"""


def test_safety_cap_ends_in_error(engine, monkeypatch):
    monkeypatch.setattr("llamaherd.prompts.SAFETY_MAX_TURNS", 3)  # no maxTurns of its own
    add_agent(engine, "looper", LOOPER)
    final = run(engine, "looper")
    assert final.state == "error"
    assert "maxTurns (3)" in final.reason


def test_own_max_turns_suspends_the_run(engine):
    add_agent(engine, "looper", LOOPER, config="maxTurns = 3\n")
    final = run(engine, "looper")
    assert (final.state, final.wait_filter["type"]) == ("waiting", "suspension")
    assert engine.store.agent_state("looper") == "suspended"
    engine.runner.kill(final.id)


def test_tool_output_auth_failures_abort(engine):
    add_agent(
        engine,
        "denied",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo 'HTTP/1.1 401 Unauthorized'; exit 1"}}]
        loop = true
    """,
    )
    final = run(engine, "denied")
    assert (final.state, final.exit_code) == ("error", 1)
    assert "3 authentication/permission failures" in final.reason


def test_timeout_kills_the_run(engine):
    add_agent(
        engine,
        "sleepy",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "sleep 31.25 & sleep 31.5"}}]
        [[turns]]
        text = "late"
    """,
        config="timeout = 1\n",
    )
    final = run(engine, "sleepy")
    assert (final.state, final.exit_code) == ("timeout", 124)
    leftover = subprocess.run(["pgrep", "-f", "sleep 31.25"], capture_output=True, text=True)
    assert leftover.stdout == ""  # the whole tree, background child included


def test_secrets_are_redacted(engine, tmp_path):
    from llamaherd.credentials import CredentialStore

    CredentialStore().write("fake_token", "default", {"token": "ghp_supersecretvalue123"})
    add_agent(
        engine,
        "leaky",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo token=$FAKE_TOKEN"}},
                      {name = "set_status", arguments = {text = "{{ last_result }}"}}]
        [[turns]]
        text = "done"
    """,
        config='credentials = ["fake_token"]\n',
    )
    final = run(engine, "leaky")
    assert final.state == "done", final.reason
    assert tool_results(engine, final.id)[0] == "token=***"
    dump = json.dumps([final.transcript, engine.store.events(final.id)])
    assert "ghp_supersecretvalue123" not in dump


def test_setenv_from_a_hook_reaches_the_model_bash(engine):
    add_agent(
        engine,
        "envy",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo from=$FROM_HOOK; env | grep -c AL_RUN_TOKEN=."}}]
        [[turns]]
        text = "done"
    """,
        config="[hooks]\npre = [\"setenv FROM_HOOK 'hook value'\"]\n",
    )
    final = run(engine, "envy")
    assert final.state == "done", final.reason
    # The hook's value reached the model's bash; it is masked in what is stored.
    assert tool_results(engine, final.id)[0] == "from=***\n1"


def test_scheduled_run_reruns_up_to_max_reruns(engine):
    add_agent(
        engine,
        "batch",
        """
        [[turns]]
        tool_calls = [{name = "rerun", arguments = {}}]
        [[turns]]
        text = "more to do"
    """,
        config="maxReruns = 1\n",
    )
    first = run(engine, "batch", kind="scheduled")
    assert first.state == "done" and first.rerun_requested
    claimed = engine.claim()
    assert claimed is not None and claimed[0].kind == "scheduled"
    second = engine.runner.run(claimed[1])
    assert (second.state, second.rerun_count) == ("done", 1)
    assert engine.claim() is None  # maxReruns reached
    manual = run(engine, "batch")
    assert manual.rerun_requested and engine.claim() is None  # only scheduled runs rerun


# ------------------------------------------------------------------ calls, locks, waits


@contextmanager
def dispatching(engine: Any) -> Iterator[None]:
    """Claim and start queued work in the background, as the scheduler's dispatcher does."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            engine.dispatch()
            engine.wakeup.wait(0.05)
            engine.wakeup.clear()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        for worker in list(engine.threads.values()):
            worker.join(10)


def claim_and_run(engine: Any) -> Any:
    claimed = engine.claim()
    assert claimed is not None, "nothing claimable"
    return engine.runner.run(claimed[1])


def test_call_agent_and_check_call(engine):
    add_agent(
        engine,
        "caller",
        """
        [[turns]]
        tool_calls = [{name = "call_agent", arguments = {agent = "callee", context = "add 2 and 3"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "al-subagent-wait 1 20"}}]
        [[turns]]
        tool_calls = [{name = "check_call", arguments = {call_id = 1}}]
        [[turns]]
        tool_calls = [{name = "return_value", arguments = {value = "{{ last_result }}"}}]
        [[turns]]
        text = "done"
    """,
    )
    add_agent(
        engine,
        "callee",
        """
        [[turns]]
        tool_calls = [{name = "return_value", arguments = {value = "five ({{ payload.context }})"}}]
        [[turns]]
        text = "done"
    """,
    )
    with dispatching(engine):
        final = run(engine, "caller")
    assert final.state == "done", final.reason
    checked = json.loads(final.return_value)
    assert checked["state"] == "done"
    assert checked["return_value"] == "five (add 2 and 3)"
    callee = engine.store.runs(agent="callee")[0]
    assert (callee.caller_run, callee.call_depth) == (final.id, 1)
    prompt = callee.transcript[2]["content"]
    assert "<skill-subagent>" in prompt and "add 2 and 3" in prompt


def test_call_refusals(engine):
    add_agent(
        engine,
        "selfish",
        """
        [[turns]]
        tool_calls = [{name = "call_agent", arguments = {agent = "selfish", context = "x"}},
                      {name = "call_agent", arguments = {agent = "nobody", context = "x"}},
                      {name = "check_call", arguments = {call_id = 99}}]
        [[turns]]
        text = "done"
    """,
    )
    final = run(engine, "selfish")
    results = [json.loads(r) for r in tool_results(engine, final.id)]
    assert "cannot call itself" in results[0]["error"]
    assert "no agent 'nobody'" in results[1]["error"]
    assert "no call 99" in results[2]["error"]


def test_call_depth_limit_names_the_chain(engine):
    engine.project.config["maxCallDepth"] = 1
    for name, target in (("a", "b"), ("b", "c"), ("c", "a")):
        add_agent(
            engine,
            name,
            f"""
            [[turns]]
            tool_calls = [{{name = "call_agent", arguments = {{agent = "{target}", context = "go"}}}}]
            [[turns]]
            tool_calls = [{{name = "return_value", arguments = {{value = "{{{{ last_result }}}}"}}}}]
            [[turns]]
            text = "done"
        """,
        )
    first = run(engine, "a")
    assert json.loads(first.return_value)["ok"] is True
    second = claim_and_run(engine)
    assert second.agent == "b"
    refused = json.loads(second.return_value)
    assert refused["ok"] is False
    assert "maxCallDepth (1): a -> b -> c" in refused["error"]


def test_lock_contention_between_hook_and_model(engine):
    add_agent(
        engine,
        "holder",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "sleep 2"}}]
        [[turns]]
        text = "done"
    """,
        config='[hooks]\npre = ["rlock res://shared"]\n',
    )
    add_agent(
        engine,
        "other",
        """
        [[turns]]
        tool_calls = [{name = "acquire_lock", arguments = {uri = "res://shared"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "runlock res://shared; echo rc=$?; AL_RUN_ID={{ payload.holder }} runlock res://shared; echo rc=$?"}}]
        [[turns]]
        text = "done"
    """,
    )
    holder_thread = threading.Thread(target=run, args=(engine, "holder"))
    holder_thread.start()
    lock = wait_until(lambda: engine.store.locks(), timeout=10, interval=0.02)
    holder_id = lock[0].get("run_id") or lock[0].get("holder")
    other = run(engine, "other", payload={"holder": holder_id})
    holder_thread.join(20)
    results = tool_results(engine, other.id)
    acquired = json.loads(results[0])
    assert acquired["ok"] is False and acquired["holder"] == holder_id
    lines = results[1].splitlines()
    assert json.loads(lines[0])["holder"] == holder_id and lines[1] == "rc=1"
    assert "does not belong" in json.loads(lines[2])["error"] and lines[3] == "rc=1"
    assert engine.store.locks() == []  # released when the holder ended
    assert engine.store.get_run(holder_id).state == "done"


WAITER = """
    [[turns]]
    tool_calls = [{name = "wait_for_trigger", arguments = {filter = {type = "agent", from = "pinger"}, timeout = "%s"}}]
    [[turns]]
    tool_calls = [{name = "return_value", arguments = {value = "{{ last_result }}"}}]
    [[turns]]
    text = "done"
"""


def test_wait_resumed_by_agent_trigger(engine):
    add_agent(engine, "waiter", WAITER % "30s")
    parked = run(engine, "waiter")
    assert parked.state == "waiting" and parked.wait_filter["from"] == "pinger"
    assert engine.runner.active() == set()
    miss = engine.emit(TriggerEvent("waiter", "agent", {"caller_agent": "stranger"}))
    assert miss.resumed == []
    engine.store.clear_queue("waiter")
    hit = engine.emit(
        TriggerEvent("waiter", "agent", {"caller_agent": "pinger", "context": "wake"})
    )
    assert hit.resumed == [parked.id]
    final = claim_and_run(engine)
    assert final.id == parked.id and final.state == "done", final.reason
    assert json.loads(final.return_value)["payload"]["context"] == "wake"


def test_wait_times_out_with_an_error_result(engine):
    add_agent(engine, "waiter", WAITER % "1s")
    parked = run(engine, "waiter")
    assert parked.state == "waiting"
    engine.runner.expire_wait(engine.store.get_run(parked.id))
    final = claim_and_run(engine)
    assert final.state == "done", final.reason
    assert "timed out" in final.return_value


def test_kill_while_waiting(engine):
    add_agent(engine, "waiter", WAITER % "30m")
    parked = run(engine, "waiter")
    assert engine.runner.kill(parked.id) is True
    final = engine.store.get_run(parked.id)
    assert (final.state, final.exit_code) == ("killed", 137)


def test_wait_filters_match_by_trigger_type():
    from llamaherd.plugins import registry
    from llamaherd.waits import filter_matches

    reg = registry()
    call = TriggerEvent("w", "agent", {"caller_agent": "planner", "context": "PR 12 merged"})
    assert filter_matches(reg, {"type": "agent", "from": "planner"}, call)
    assert filter_matches(reg, {"type": "agent", "context": "merged"}, call)
    assert not filter_matches(reg, {"type": "agent", "from": "other"}, call)
    assert not filter_matches(reg, {"type": "webhooks"}, call)
    manual = TriggerEvent("w", "manual", {"ticket": {"id": 7}})
    assert filter_matches(reg, {"type": "manual", "ticket.id": 7}, manual)
    assert filter_matches(reg, {"type": "manual", "ticket.id": [6, 7]}, manual)
    assert not filter_matches(reg, {"type": "manual", "ticket.id": 8}, manual)
    if "webhooks" in reg.trigger_types:
        hook = TriggerEvent("w", "webhook", {"event": "push", "repo": "acme/app"}, source="gh")
        assert filter_matches(reg, {"type": "webhook", "event": "push"}, hook)
        assert not filter_matches(reg, {"type": "webhooks", "event": "issues"}, hook)


def test_gateway_authenticates_each_run(engine):
    import requests

    add_agent(
        engine,
        "peer",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo $AL_RUN_ID > id; echo $AL_RUN_TOKEN > tok; sleep 2"}}]
        [[turns]]
        text = "done"
    """,
    )
    thread = threading.Thread(target=run, args=(engine, "peer"))
    thread.start()
    row = wait_until(
        lambda: next((r for r in engine.store.runs(agent="peer") if r.sandbox), None),
        timeout=10,
        interval=0.02,
    )
    workdir = row.sandbox["workdir"]
    run_id = wait_until(lambda: _read(f"{workdir}/id"), timeout=10, interval=0.02)
    token = wait_until(lambda: _read(f"{workdir}/tok"), timeout=10, interval=0.02)
    url = engine.gateway_url + "/gateway/status"

    def post(headers: dict[str, str]) -> requests.Response:
        return requests.post(url, json={"text": "hi"}, headers=headers, timeout=10)

    assert post({"X-AL-Run-Id": run_id}).status_code == 401
    wrong = post({"X-AL-Run-Id": run_id, "Authorization": "Bearer " + token[:-2] + "xx"})
    assert wrong.status_code == 403
    other = engine.store.create_run("peer", "manual")
    forged = post({"X-AL-Run-Id": other.id, "Authorization": f"Bearer {token}"})
    assert forged.status_code == 403
    ok = post({"X-AL-Run-Id": run_id, "Authorization": f"Bearer {token}"})
    assert ok.json() == {"ok": True}
    thread.join(20)
    late = post({"X-AL-Run-Id": run_id, "Authorization": f"Bearer {token}"})
    assert late.status_code == 409 and "done" in late.json()["error"]
    engine.store.transition(other.id, "killed")


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def test_al_wait_blocks_a_script_until_a_trigger(engine):
    from llamaherd.waits import SCRIPT_WAITS

    add_agent(
        engine,
        "scripter",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "al-wait '{\\"type\\": \\"agent\\", \\"from\\": \\"pinger\\"}' 20"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "al-wait '{\\"type\\": \\"agent\\"}' 1s; echo rc=$?"}}]
        [[turns]]
        text = "done"
    """,
    )
    thread = threading.Thread(target=run, args=(engine, "scripter"))
    thread.start()
    wait_until(lambda: SCRIPT_WAITS._waits, timeout=10, interval=0.02)
    result = engine.emit(TriggerEvent("scripter", "agent", {"caller_agent": "pinger", "n": 5}))
    thread.join(30)
    final = engine.store.runs(agent="scripter")[0]
    assert final.state == "done", final.reason
    assert result.queued is None and result.resumed == [final.id]
    woke, timed_out = tool_results(engine, final.id)
    assert json.loads(woke)["trigger"]["payload"]["n"] == 5
    assert "no trigger matching" in timed_out and timed_out.endswith("rc=1")


def test_missing_runtime_is_a_clear_error(engine):
    engine.tmp_project.add_agent("nowhere", 'models = ["scripted"]\n[runtime]\ntype = "moon"\n')
    engine.project.__dict__.pop("agents", None)
    final = run(engine, "nowhere")
    assert (final.state, final.exit_code) == ("error", 1)
    assert "runtime.type: runtime 'moon' is not installed" in final.reason
    assert [e["type"] for e in engine.store.events(final.id)][-2:] == ["run_error", "state"]


# ------------------------------------------------------------------------------ usage and cost

TWO_TURNS = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = "echo one"}}]
[[turns]]
text = "Finished."
"""


def model_calls(engine: Any, run_id: str) -> list[dict[str, Any]]:
    return [e["data"] for e in engine.store.events(run_id) if e["type"] == "model_call"]


def test_the_transcript_keeps_the_runs_tokens_and_cost(engine):
    engine.project.config["models"]["scripted"]["pricing"] = {"input": 1000.0, "output": 2000.0}
    add_agent(engine, "priced", TWO_TURNS)
    final = run(engine, "priced")
    assert final.state == "done"
    calls = model_calls(engine, final.id)
    assert len(calls) == 2
    for call in calls:
        expected = (call["input_tokens"] * 1000.0 + call["output_tokens"] * 2000.0) / 1e6
        assert call["cost_usd"] == pytest.approx(expected) and call["cost_usd"] > 0
    meta = engine.store.get_run(final.id).transcript[0]
    assert meta["role"] == "meta"
    assert meta["input_tokens"] == sum(c["input_tokens"] for c in calls)
    assert meta["output_tokens"] == sum(c["output_tokens"] for c in calls)
    assert meta["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in calls))
    assert (meta["unpriced_turns"], meta["cached_input_tokens"]) == (0, 0)


def test_an_offline_model_costs_nothing(engine):
    add_agent(engine, "free", TWO_TURNS)
    final = run(engine, "free")
    assert [c["cost_usd"] for c in model_calls(engine, final.id)] == [0.0, 0.0]
    meta = engine.store.get_run(final.id).transcript[0]
    assert (meta["cost_usd"], meta["unpriced_turns"]) == (0.0, 0)


class SigningProvider:
    """A model whose replies carry opaque provider_data (as thinking blocks and thought
    signatures do) that must come back with its assistant turn; unpriced."""

    name = "signing"
    description = "test"
    schema: dict[str, Any] = {}
    credential_type = None
    seen: list[Any] = []

    def complete(self, messages, tools, model, options):
        from llamaherd.types import Reply, ToolCall, Usage

        assistant = [m for m in messages if m.role == "assistant"]
        self.seen.append([m.provider_data for m in assistant])
        if not assistant:
            call = ToolCall("c1", "bash", {"command": "true"})
            return Reply("", [call], Usage(7, 3), provider_data={"signing": {"sig": "s-1"}})
        return Reply("done", usage=Usage(9, 1))


class SigningPlugin:
    from llamaherd import hookimpl

    @hookimpl
    def register_providers(self, register):
        register(SigningProvider())


def test_provider_data_goes_back_with_its_turn_and_unpriced_turns_are_counted(
    engine, registered_plugin
):
    engine.registry = registered_plugin(SigningPlugin(), "signing-test")
    engine.project.config["models"]["signed"] = {"provider": "signing", "model": "m"}
    SigningProvider.seen = []
    add_agent(engine, "signer", "").config["models"] = ["signed"]
    final = run(engine, "signer")
    assert final.state == "done", final.reason
    assert SigningProvider.seen == [[], [{"signing": {"sig": "s-1"}}]]
    meta = engine.store.get_run(final.id).transcript[0]
    assert (meta["cost_usd"], meta["unpriced_turns"], meta["input_tokens"]) == (0, 2, 16)
    assert [c["cost_usd"] for c in model_calls(engine, final.id)] == [None, None]
