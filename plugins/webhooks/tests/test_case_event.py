"""How the webhooks trigger takes part in agent tests (``al test``, ``al record``): a test
case's delivery becomes the event a real delivery gives, and a stored run's event is written
back as the case that gives it again."""

from __future__ import annotations

import pytest

from llamaherd.api import LlamaherdError

BODY = {"event": "build", "action": "failed", "repo": "acme/site", "branch": "main"}


@pytest.fixture
def agent(tmp_project):
    tmp_project.config('[webhooks.ci]\ntype = "generic"\nallowUnsigned = true\n')
    tmp_project.add_agent(
        "fixer", 'webhooks = [{ source = "ci", events = ["build"], actions = ["failed"] }]\n'
    )
    return tmp_project.load().agent("fixer")


def trigger_type():
    from llamaherd.plugins import registry

    return registry().trigger_types["webhooks"]


def test_a_cases_delivery_gives_the_event_a_real_one_does(agent):
    spec = {"kind": "webhook", "source": "ci", "delivery": "d-7", "payload": BODY}
    event = trigger_type().case_event(agent, spec)
    assert (event.agent, event.kind, event.source) == ("fixer", "webhook", "ci")
    fields = event.payload
    assert fields["delivery"] == "d-7" and fields["action"] == "failed"
    assert fields["payload"] == BODY
    # Written back from the run's stored trigger, the case gives the same event again.
    stored = {"kind": "webhook", "payload": event.payload, "source": event.source, "prompt": ""}
    written = trigger_type().case_trigger(stored)
    assert written == {
        "kind": "webhook",
        "source": "ci",
        "event": "build",
        "delivery": "d-7",
        "payload": BODY,
    }
    assert trigger_type().case_event(agent, written).payload == event.payload


def test_a_delivery_the_agents_filters_refuse_is_an_error(agent):
    spec = {"kind": "webhook", "source": "ci", "payload": {**BODY, "action": "passed"}}
    with pytest.raises(LlamaherdError, match="matches none of fixer's"):
        trigger_type().case_event(agent, spec)
    with pytest.raises(LlamaherdError, match="no \\[\\[webhooks\\]\\] entry from source 'github'"):
        trigger_type().case_event(agent, {**spec, "source": "github"})
