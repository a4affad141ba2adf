"""Filters of [[webhooks]] entries and wait_for_trigger filters."""

from __future__ import annotations

import pytest
from llamaherd_webhooks.matching import entry_matches, lookup, normalise_filter
from llamaherd_webhooks.sources import GenericSource
from llamaherd_webhooks.trigger import WebhooksTrigger, entry_schema, make_event

from llamaherd.api import TriggerEvent, WebhookFilter

FILTERS = GenericSource.filters

FIELDS = {
    "event": "pull_request",
    "action": "opened",
    "repo": "Acme/Widgets",
    "org": "acme",
    "branch": "main",
    "labels": ["bug", "triage"],
    "assignees": ["bob"],
    "author": "alice",
    "conclusion": None,
    "number": 7,
    "payload": {
        "pull_request": {"draft": False, "base": {"ref": "main"}, "labels": [{"name": "bug"}]}
    },
}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"source": "gh"}, True),
        ({"source": "other"}, False),
        ({"source": "gh", "events": ["pull_request"]}, True),
        ({"source": "gh", "events": ["pull_request.opened"]}, True),
        ({"source": "gh", "events": ["pull_request.closed"]}, False),
        ({"source": "gh", "events": ["push", "issues"]}, False),
        ({"source": "gh", "actions": ["opened", "reopened"]}, True),
        ({"source": "gh", "actions": ["closed"]}, False),
        ({"source": "gh", "repos": ["acme/widgets"]}, True),  # case-insensitive
        ({"source": "gh", "repos": ["acme/*"]}, True),
        ({"source": "gh", "repos": ["acme/gadgets"]}, False),
        ({"source": "gh", "orgs": ["ACME"]}, True),
        ({"source": "gh", "branches": ["main"]}, True),
        ({"source": "gh", "branches": ["release/*"]}, False),
        ({"source": "gh", "labels": ["security", "bug"]}, True),
        ({"source": "gh", "labels": ["security"]}, False),
        ({"source": "gh", "assignee": "bob"}, True),
        ({"source": "gh", "author": ["carol"]}, False),
        # As in Action Llama: an event without a conclusion passes a conclusions filter.
        ({"source": "gh", "conclusions": ["failure"]}, True),
        (
            {"source": "gh", "conclusions": ["failure"], "match": {"pull_request.draft": True}},
            False,
        ),
        ({"source": "gh", "match": {"pull_request.draft": False}}, True),
        ({"source": "gh", "match": {"pull_request.draft": True}}, False),
        ({"source": "gh", "match": {"pull_request.base.ref": ["main", "develop"]}}, True),
        ({"source": "gh", "match": {"pull_request.labels.0.name": "bug"}}, True),
        ({"source": "gh", "match": {"pull_request.missing": "x"}}, False),
        (
            {"source": "gh", "actions": ["opened"], "repos": ["acme/widgets"], "branches": ["dev"]},
            False,
        ),
        ({"source": "gh", "channels": ["C1"]}, False),  # not a filter of this source's type
    ],
)
def test_entry_filters(entry, expected):
    assert entry_matches(entry, "gh", FIELDS, FILTERS) is expected


CHAT = {
    "channels": WebhookFilter("channel", "Channel IDs."),
    "commands": WebhookFilter("command", "Commands.", skip_when_absent=True),
    "teams": WebhookFilter("team", "Teams.", fold=True, glob=True),
}


@pytest.mark.parametrize(
    ("entry", "fields", "expected"),
    [
        ({"channels": "C1"}, {"channel": "C1"}, True),
        ({"channels": ["C2", "C1"]}, {"channel": "C1"}, True),
        ({"channels": "C2"}, {"channel": "C1"}, False),
        ({"channels": "C1"}, {}, False),  # absent: no match
        ({"commands": "deploy"}, {}, True),  # absent, and the filter skips it
        ({"commands": "deploy"}, {"command": "deploy"}, True),
        ({"commands": "deploy"}, {"command": "status"}, False),
        ({"teams": "ACME-*"}, {"team": "acme-eu"}, True),
        ({"repos": "acme/*"}, {"repo": "acme/x"}, False),  # a key this type lacks
    ],
)
def test_a_source_types_own_filters(entry, fields, expected):
    assert entry_matches({"source": "chat", **entry}, "chat", fields, CHAT) is expected


def test_singular_spellings_follow_the_source_types_keys():
    assert normalise_filter(
        {"channel": 1, "branch": 2, "event": 3, "number": 4}, {**CHAT, **FILTERS}
    ) == {"channels": 1, "branches": 2, "events": 3, "number": 4}


class ChatSource(GenericSource):
    name = "chat"
    filters = CHAT


def test_entry_schema_has_every_installed_types_keys():
    schema = entry_schema({"generic": GenericSource(), "chat": ChatSource()})
    properties = schema["properties"]
    assert {"source", "events", "match", "repos", "channels", "commands"} <= set(properties)
    assert properties["channels"]["description"] == "chat: Channel IDs."
    assert properties["repos"]["description"].startswith("generic: Repository full names")
    assert schema["additionalProperties"] is False


def test_lookup_paths():
    data = {"a": {"b": [{"c": 1}]}}
    assert lookup(data, "a.b.0.c") == 1
    assert lookup(data, "a.b.1.c") is not None and lookup(data, "a.b.1.c") != 1
    assert lookup(data, "a.x") is lookup(data, "a.b.9")


def test_wait_filter_matches_webhook_events_with_singular_keys():
    trigger = WebhooksTrigger()
    trigger.sources = {"generic": GenericSource(), "chat": ChatSource()}
    event = make_event("agent", "gh", "generic", FIELDS)
    assert trigger.matches({"source": "gh", "event": "pull_request", "repo": "acme/widgets"}, event)
    assert trigger.matches({"events": ["pull_request"]}, event)  # any source
    assert not trigger.matches({"event": "push"}, event)
    assert trigger.matches({"type": "webhooks", "event": "pull_request", "number": 7}, event)
    assert not trigger.matches({"type": "webhooks", "number": 8}, event)
    assert trigger.matches({"type": "webhooks", "payload.pull_request.draft": False}, event)
    assert not trigger.matches({}, TriggerEvent(agent="a", kind="agent"))
    chat = make_event("agent", "room", "chat", {"event": "message", "channel": "C1"})
    assert trigger.matches({"channel": "C1"}, chat)
    assert not trigger.matches({"channel": "C2"}, chat)
    assert not trigger.matches({"channel": "C1"}, event), "a key the event's type lacks"


def test_event_payload_and_dedupe_key():
    event = make_event("reviewer", "gh", "github", {**FIELDS, "delivery": "d-1"})
    assert event.kind == "webhook" and event.source == "gh"
    assert event.payload["source"] == "gh" and event.payload["payload"] == FIELDS["payload"]
    assert event.payload["source_type"] == "github"
    assert event.dedupe_key == "gh:d-1:reviewer"
