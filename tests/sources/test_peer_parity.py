"""Every webhook source reads a delivery as Action Llama 0.29.1 does (issue 33, items 6 and 7).

``data/peer_webhooks.json`` holds what Action Llama's own providers
(``dist/webhooks/providers/*.js``, run by ``data/peer_webhooks.mjs``) make of each delivery:
the trigger context, and whether each filter matches. Our source must give every field of that
context the same value (under our name for it, ``FIELD_NAMES``), and our ``[[webhooks]]``
matching must answer each filter the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llamaherd.api import unrouted
from llamaherd.plugins import registry

VECTORS = json.loads((Path(__file__).parent / "data" / "peer_webhooks.json").read_text())
# Action Llama puts each service's scope in `repo` (and Discord's channel in `branch`, Slack's
# in `comment` as "channel:<id>"); ours are named for what they are. None: not compared, with
# the reason.
FIELD_NAMES: dict[str, dict[str, str | None]] = {
    "github": {},
    # `repo` is the alert rule, the organization or the project depending on the resource: we
    # give `project` and `org` for what they are.
    "sentry": {"repo": None},
    "linear": {"repo": "org"},
    "mintlify": {"repo": "project"},
    "slack": {"repo": "team", "comment": "channel"},
    "discord": {"repo": "guild", "branch": "channel"},
    "twitter": {"repo": "user"},
}
# Deliveries the peer drops that are requests of the service's protocol, which a source
# answers itself (``ignore``): the rest of what it drops lacks what its event needs.
ANSWERED = {("github", "ping"), ("slack", "url_verification"), ("discord", "ping")}


def _source(name: str) -> Any:
    found = registry().webhook_sources.get(name)
    if found is None:
        pytest.skip(f"the {name} source is not installed")
    return found


def _parse(vector: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(vector["body"]).encode()
    headers = {k.lower(): v for k, v in vector["headers"].items()}
    return _source(vector["source"]).parse(headers, body)


def _ours(source: str, key: str, value: Any, fields: dict[str, Any]) -> tuple[Any, Any]:
    """(the peer's value, ours) for a field, in the form both can be compared in."""
    name = FIELD_NAMES[source].get(key, key)
    mine = fields.get(name)
    if source == "slack" and key == "comment":  # "channel:C1" / "message:C1": the channel
        value = value.partition(":")[2]
    if value == "":  # the peer's "none" for a scope it always sets
        value = None
    return value, mine


def ids(vector: dict[str, Any]) -> str:
    return f"{vector['source']}-{vector['id']}"


@pytest.mark.parametrize("vector", [v for v in VECTORS if v["context"]], ids=ids)
def test_the_trigger_context_has_the_peers_fields(vector):
    fields = _parse(vector)
    assert unrouted(fields) is None
    different = {}
    for key, value in vector["context"].items():
        if FIELD_NAMES[vector["source"]].get(key, key) is None:
            continue
        if key == "source":
            continue  # the source *name* here ([webhooks.<name>]), added by the route
        peer, mine = _ours(vector["source"], key, value, fields)
        if peer != mine:
            different[key] = (peer, mine)
    assert different == {}


@pytest.mark.parametrize("vector", [v for v in VECTORS if not v["context"]], ids=ids)
def test_what_the_peer_drops_is_acknowledged_and_routed_nowhere(vector):
    """Issue 42 item 2: a delivery the peer's provider drops (its ``parseEvent`` returns null)
    is one our source routes nowhere: answered itself (a ping, a challenge), or incomplete."""
    fields = _parse(vector)
    reason = unrouted(fields)
    if (vector["source"], vector["id"]) in ANSWERED:
        assert fields.get("ignore") is True
    else:
        assert reason is not None and reason.startswith("incomplete payload: no "), reason


@pytest.mark.parametrize("vector", [v for v in VECTORS if v["matches"]], ids=ids)
def test_filters_match_as_in_the_peer(vector):
    from llamaherd_webhooks.matching import entry_matches, filters_of

    source = _source(vector["source"])
    fields = _parse(vector)
    answers = {
        json.dumps(entry): entry_matches(
            {"source": "src", **entry}, "src", fields, filters_of(source)
        )
        for entry, _ in vector["matches"]
    }
    assert answers == {json.dumps(entry): expected for entry, expected in vector["matches"]}


CONFIG = "\n".join(
    f'[webhooks.{name}]\ntype = "{name}"\nallowUnsigned = true\n' for name in FIELD_NAMES
)


def test_a_delivery_over_http_carries_the_peers_fields_in_its_trigger_block(webhook_server):
    """Each delivery Action Llama dispatches, sent to a running server: the queued run's
    ``<webhook-trigger>`` block shows each of the peer's fields (as ``name: value``)."""
    for name in FIELD_NAMES:
        _source(name)
    agents = {
        f"{name}-agent": f'scale = 100\n[[webhooks]]\nsource = "{name}"\n' for name in FIELD_NAMES
    }
    server = webhook_server(CONFIG, agents)
    for vector in (v for v in VECTORS if v["context"]):
        name = vector["source"]
        event = next(iter(vector["headers"].values()), None)
        sent = server.send(name, vector["body"], secret=None, event=event)
        assert sent.status_code in (200, 202), (vector["id"], sent.text)
        run = server.next_run()
        assert run is not None and run.agent == f"{name}-agent", vector["id"]
        block = server.trigger_block(run)
        for key, value in vector["context"].items():
            peer, _ = _ours(name, key, value, {})
            ours = "source" if key == "source" else FIELD_NAMES[name].get(key, key)
            if ours is None or peer in (None, []):
                continue
            shown = peer if key != "source" else name
            text = shown if isinstance(shown, str) else json.dumps(shown)
            assert f"{ours}: {text}" in block, (vector["id"], key)
        assert block[-1].startswith("A webhook event just fired.")


GITHUB_SECRET = "It's a Secret to Everybody"
SIGNED = """
[webhooks.gh]
type = "github"
[webhooks.lin]
type = "linear"
"""
CATCH_ALL = """
[[webhooks]]
source = "gh"
[[webhooks]]
source = "lin"
"""


def test_signed_incomplete_deliveries_are_acknowledged_recorded_and_run_nothing(webhook_server):
    """Issue 42 item 2, over HTTP with valid signatures: a GitHub delivery without
    ``repository``, an ``issues`` one without ``issue``, a Linear one without
    ``organizationId``: 200, no run queued for an agent that takes every delivery, the reason
    in the delivery's record. A complete delivery beside them is queued."""
    from llamaherd_webhooks.receipts import Receipts

    for name in ("github", "linear"):
        _source(name)
    server = webhook_server(
        SIGNED,
        {"everything": CATCH_ALL},
        {
            ("github_webhook_secret", "default"): {"secret": GITHUB_SECRET},
            ("linear_webhook_secret", "default"): {"secret": GITHUB_SECRET},
        },
    )
    repo = {"full_name": "acme/app"}
    sent = [
        ("gh", {"action": "opened", "issue": {"number": 1}}, "issues", "no repository"),
        ("gh", {"action": "opened", "repository": repo}, "issues", "no issue"),
        ("lin", {"action": "create", "type": "Issue", "data": {"title": "x"}}, None,
         "no organizationId"),
    ]  # fmt: skip
    for source, payload, event, reason in sent:
        answer = server.send(source, payload, secret=GITHUB_SECRET, event=event)
        assert answer.status_code == 200, answer.text
        assert answer.json()["matched"] == 0
        assert answer.json()["reason"] == f"incomplete payload: {reason}"
    assert server.depth() == {}
    complete = {"action": "opened", "repository": repo, "issue": {"number": 2}}
    assert server.send("gh", complete, secret=GITHUB_SECRET, event="issues").status_code == 202
    assert server.depth() == {"everything": 1}
    results = [
        (r["source"], r["status"], r["result"]) for r in Receipts(server.engine.store).recent()
    ]
    assert sorted(results) == sorted(
        [("gh", 202, "matched")] + [(s, 200, f"incomplete payload: {r}") for s, _, _, r in sent]
    )


def test_a_github_signature_without_its_prefix_is_refused(webhook_server):
    """Issue 42 item 3: GitHub always sends ``sha256=<hex>``; the bare hex of the right MAC
    is 401, and nothing is queued."""
    _source("github")
    server = webhook_server(
        SIGNED,
        {"everything": CATCH_ALL},
        {("github_webhook_secret", "default"): {"secret": GITHUB_SECRET}},
    )
    complete = {"action": "opened", "repository": {"full_name": "acme/app"}, "issue": {}}
    signed = server.source("gh").request_headers(
        json.dumps(complete).encode(), "issues", "d-1", GITHUB_SECRET
    )
    bare = signed["X-Hub-Signature-256"].removeprefix("sha256=")
    answer = server.send(
        "gh", complete, secret=GITHUB_SECRET, event="issues", headers={"X-Hub-Signature-256": bare}
    )
    assert answer.status_code == 401, answer.text
    assert server.depth() == {}
    assert server.send("gh", complete, secret=GITHUB_SECRET, event="issues").status_code == 202
