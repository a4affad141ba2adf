"""A lone UTF-16 surrogate, or a number JSON cannot carry, never breaks a listing.

JSON may carry ``"\\ud800"``: Python decodes it into text that no UTF-8 encoder takes, so one in
an agent's status, a webhook body or a model's reply was stored, and then ``/control/runs``,
``/api/runs``, ``/runs/<id>``, ``/api/agents/<a>`` answered 500 and ``al runs`` and ``al logs``
failed until the run left the list. Now text is cleaned where it comes in (the gateway, the
control API, webhooks, model replies: each lone surrogate becomes U+FFFD), and what the store
holds from before is cleaned as it is read, so every page, endpoint and command shows it.

``NaN``, ``Infinity`` and ``1e999`` (issue 40, item 7) did the same from a return value or a
signed webhook body: Python's parser takes them, its encoder writes them back, and strict
readers (the JSON answers, the CLI) refuse them. They become null where they come in, and
stored ones are read as null.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import requests

from llamaherd.testing import OfflineProject, chat_reply, wait_until

LONE = re.compile("[\ud800-\udfff]")
QUICK = '[[turns]]\ntext = "done"\n'
HOOKS = '\n[webhooks.hooks]\ntype = "generic"\nallowUnsigned = true\n'
# Posts to the gateway as the run (its own client, as al-status does), with lone surrogates.
ODD_CALLS = r"""python3 - <<'EOF'
import os, shutil, sys
sys.path.insert(0, os.path.dirname(shutil.which("al-status")))
import _alclient as al
print(al.request("POST", "/gateway/status", {"text": "a\ud800b"}))
print(al.request("POST", "/gateway/return", {"value": {"k\udfff": "v\udc80"}}))
EOF"""


def _lone_surrogates(value: Any) -> list[str]:
    if isinstance(value, str):
        return LONE.findall(value)
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _lone_surrogates(k) + _lone_surrogates(v)]
    if isinstance(value, list):
        return [s for item in value for s in _lone_surrogates(item)]
    return []


def _strict_json(text: str) -> Any:
    """``text`` as JSON that strict readers take (no NaN or Infinity)."""

    def refuse(token: str) -> None:
        raise AssertionError(f"{token} in a JSON answer")

    return json.loads(text, parse_constant=refuse)


def _answers(project: OfflineProject, sched: Any, run_id: str, agent: str) -> None:
    """Every listed endpoint, page and command answers (JSON that strict readers take)."""
    for path in (
        "/control/stat", "/control/runs", f"/control/runs/{run_id}",
        f"/control/runs/{run_id}/events", "/api/runs", f"/api/runs/{run_id}",
        f"/api/runs/{run_id}/events", "/api/agents", f"/api/agents/{agent}",
        "/", "/runs", f"/runs/{run_id}", f"/agents/{agent}",
    ):  # fmt: skip
        answer = sched.get(path)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
        answer.content.decode("utf-8")  # valid UTF-8
        if path.startswith(("/control", "/api")):
            assert not _lone_surrogates(_strict_json(answer.text)), path
    for args in (
        ("runs",), ("runs", "--json"), ("logs", agent), ("logs", run_id),
        ("logs", agent, "--json", "--full"), ("stat",),
    ):  # fmt: skip
        result = project.al(*args)
        assert result.returncode == 0, (args, result.stderr[-2000:])
        assert "Traceback" not in result.stderr


def _listings(project: OfflineProject, sched: Any, run_id: str, agent: str) -> None:
    """Every listed endpoint, page and command answers, and shows U+FFFD where the odd
    character was."""
    _answers(project, sched, run_id, agent)
    logs = project.al("logs", agent, "--json", "--full").stdout
    assert "\ufffd" in "".join(json.dumps(json.loads(line)) for line in logs.splitlines()) or (
        "\\ufffd" in logs
    )


@pytest.fixture
def odd_project(tmp_path: Path) -> OfflineProject:
    return OfflineProject(tmp_path / "proj", HOOKS)


def _stored_as_before(
    project: OfflineProject, scheduler: Any, events: list[tuple[str, str]], value: str, trigger: str
) -> tuple[Any, Any]:
    """A scheduler of ``project`` and a finished run of its agent ``odd`` to which the store
    was then given ``events`` (type, data), ``value`` as its return value and ``trigger``, as
    JSON texts an older version wrote."""
    project.add_scripted_agent("odd", "", QUICK)
    sched = scheduler(project)
    assert sched.post("/control/run", {"agent": "odd"}).status_code == 202
    run = project.wait_run(lambda runs: next((r for r in runs if r.state == "done"), None))
    db = sqlite3.connect(project.root / ".al" / "work-queue.db", timeout=30)
    with db:
        for kind, data in events:
            db.execute(
                'INSERT INTO run_events (run_id, "at", "type", data) VALUES (?, ?, ?, ?)',
                (run.id, run.finished_at, kind, data),
            )
        db.execute(
            "UPDATE runs SET return_value = ?, trigger = ? WHERE id = ?", (value, trigger, run.id)
        )
    db.close()
    return sched, run


def test_what_is_stored_from_before_is_shown(odd_project: OfflineProject, scheduler):
    """Lone surrogates put straight into the store (as an older version wrote them, JSON
    escapes in its text): every listing answers."""
    events = [("status", '{"text": "a\\ud800b"}'), ("assistant", '{"text": "x\\udfff", "turn": 1}')]
    trigger = '{"kind": "manual", "payload": {"p": "\\udbff"}, "prompt": "", "source": null}'
    sched, run = _stored_as_before(
        odd_project, scheduler, events, '{"k\\udc80": "v\\ud800"}', trigger
    )
    _listings(odd_project, sched, run.id, "odd")


def test_odd_text_is_cleaned_where_it_comes_in(
    odd_project: OfflineProject, scheduler, model_server
):
    """Through a signed-off path each: a webhook body, the model's reply (text and tool-call
    arguments), and the gateway (status, return value). Nothing stored holds a lone
    surrogate; each became U+FFFD."""
    project = odd_project
    with (project.root / "config.toml").open("a") as fh:
        fh.write(
            f'\n[models.fake]\nprovider = "openai"\nmodel = "m"\nbase_url = "{model_server.url}/v1"\n'
        )
    project.add_scripted_agent("odd", 'models = ["fake"]\n[[webhooks]]\nsource = "hooks"\n')
    model_server.reply(200, chat_reply("thinking \ud800", [("bash", {"command": ODD_CALLS})]))
    model_server.reply(200, chat_reply("done \udc80"))
    sched = scheduler(project)
    body = b'{"event": "deploy", "note": "x\\ud800y"}'
    sent = sched.http.post(f"{sched.url}/webhooks/hooks", data=body, timeout=10)
    assert sent.status_code == 202, sent.text
    run = project.wait_run(
        lambda runs: next((r for r in runs if r.state in ("done", "error")), None), timeout=60
    )
    assert run.state == "done", run.reason
    assert run.status == "a\ufffdb"
    assert run.return_value == {"k\ufffd": "v\ufffd"}
    assert "x\ufffdy" in json.dumps(run.trigger, ensure_ascii=False), run.trigger
    db = sqlite3.connect(f"file:{project.root / '.al' / 'work-queue.db'}?mode=ro", uri=True)
    try:
        stored = [
            json.loads(text)
            for query in (
                "SELECT data FROM run_events",
                "SELECT transcript FROM runs WHERE transcript IS NOT NULL",
                "SELECT return_value FROM runs WHERE return_value IS NOT NULL",
                "SELECT trigger FROM runs",
                "SELECT payload FROM work_items",
            )
            for (text,) in db.execute(query)
        ]
    finally:
        db.close()
    assert stored and not _lone_surrogates(stored)
    texts = json.dumps(stored)
    assert "thinking \\ufffd" in texts and "done \\ufffd" in texts
    wait_until(lambda: sched.get("/control/stat").status_code == 200, 10)
    _listings(project, sched, run.id, "odd")


# ------------------------------------------------------------------ numbers JSON cannot carry
SIGNED = '\n[webhooks.signed]\ntype = "generic"\ncredential = "ci"\n'
SECRET = "odd-numbers-secret"
ODD_NUMBERS = b'{"nan": NaN, "inf": -Infinity, "big": 1e999, "ok": 1.5}'
# Posts a return value as the run, its JSON text as written (no encoder would write 1e999).
RETURN_ODD_NUMBERS = f"""python3 - <<'EOF'
import os, urllib.request
request = urllib.request.Request(
    os.environ["AL_GATEWAY_URL"] + "/gateway/return",
    data=b'{{"value": {ODD_NUMBERS.decode()}}}',
    headers={{"Authorization": "Bearer " + os.environ["AL_RUN_TOKEN"],
             "X-AL-Run-Id": os.environ["AL_RUN_ID"], "Content-Type": "application/json"}},
)
print("return", urllib.request.urlopen(request).status)
EOF"""
NUMBERS_SCRIPT = f"""
[[turns]]
tool_calls = [{{name = "return_value", arguments = {{value = {{x = nan, y = -inf}}}}}}]

[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = '''{RETURN_ODD_NUMBERS}'''}}}}]

[[turns]]
text = "done"
"""
NULLED = {"nan": None, "inf": None, "big": None, "ok": 1.5}


def test_numbers_json_cannot_carry_become_null_where_they_come_in(tmp_path: Path, scheduler):
    """NaN, -Infinity and 1e999 in a model's tool call, in a return value through the gateway
    and in a signed webhook body: each stored as null, and every listing answers."""
    creds = tmp_path / "creds"
    project = OfflineProject(tmp_path / "proj", SIGNED, creds=creds)
    project.write("../creds/webhook_secret/ci/secret", SECRET)
    project.add_scripted_agent("odd", "", NUMBERS_SCRIPT)
    project.add_scripted_agent("hooked", '[[webhooks]]\nsource = "signed"\n', QUICK)
    sched = scheduler(project)
    body = b'{"event": "deploy", "numbers": ' + ODD_NUMBERS + b"}"
    signature = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-Signature-256": f"sha256={signature}", "Content-Type": "application/json"}
    sent = requests.post(f"{sched.url}/webhooks/signed", data=body, headers=headers, timeout=10)
    assert sent.status_code == 202, sent.text
    assert sched.post("/control/run", {"agent": "odd"}).status_code == 202
    runs = project.wait_run(
        lambda runs: len([r for r in runs if r.state in ("done", "error")]) == 2 and runs,
        timeout=60,
    )
    by_agent = {run.agent: run for run in runs}
    assert by_agent["odd"].state == "done", by_agent["odd"].reason
    assert by_agent["odd"].return_value == NULLED
    assert by_agent["hooked"].trigger["payload"]["payload"]["numbers"] == NULLED
    tool_calls = [
        e["data"]
        for e in sched.get(f"/control/runs/{by_agent['odd'].id}/events").json()["events"]
        if e["type"] == "tool_call" and e["data"].get("tool") == "return_value"
    ]
    assert tool_calls and tool_calls[0]["arguments"]["value"] == {"x": None, "y": None}
    for run in runs:
        _answers(project, sched, run.id, run.agent)


def test_numbers_stored_from_before_are_read_as_null(odd_project: OfflineProject, scheduler):
    """NaN and Infinity written straight into the store (as Python's encoder wrote them):
    every listing answers, showing null."""
    trigger = '{"kind": "manual", "payload": {"p": Infinity}, "prompt": "", "source": null}'
    events = [("status", '{"text": "s", "n": NaN}')]
    sched, run = _stored_as_before(
        odd_project, scheduler, events, '{"x": NaN, "y": -Infinity}', trigger
    )
    _answers(odd_project, sched, run.id, "odd")
    assert sched.get(f"/control/runs/{run.id}").json()["return_value"] == {"x": None, "y": None}
