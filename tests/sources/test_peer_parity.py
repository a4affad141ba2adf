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
# Deliveries Action Llama drops without a word that we receive (and match by their filters): a
# GitHub event without a repository (organization and app events), a Linear one without an
# organization id, a Mintlify one without an action.
WE_RECEIVE = {("github", "no-repository"), ("linear", "no-organization"), ("mintlify", "no-action")}


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
    assert not fields.get("ignore")
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
def test_what_the_peer_drops(vector):
    if (vector["source"], vector["id"]) in WE_RECEIVE:
        assert not _parse(vector).get("ignore")
        return
    try:
        fields = _parse(vector)
    except ValueError:
        return  # refused as a bad request
    assert fields.get("ignore") is True


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
