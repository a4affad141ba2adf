"""The slack source over real HTTP: v0 signatures and their five-minute window, the
url_verification challenge, retries, filters, prompts."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest
from llamaherd_slack.source import SlackSource

from llamaherd.api import unrouted
from llamaherd.testing import fuzz_webhook_source

SECRET = "slack-signing-secret-for-tests"
# Slack's worked example (docs: "Verifying requests from Slack").
DOC_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
DOC_TIMESTAMP = "1531420618"
DOC_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmib"
    b"IGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
DOC_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
# Slack's documented url_verification and app_mention requests.
URL_VERIFICATION = {
    "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
    "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
    "type": "url_verification",
}
APP_MENTION = {
    "token": "XXYYZZ",
    "team_id": "T123ABC456",
    "api_app_id": "A123ABC456",
    "event": {
        "type": "app_mention",
        "user": "U123ABC456",
        "text": "<@U0LAN0Z89> is it everything a river should be?",
        "ts": "1515449522.000016",
        "channel": "C123ABC456",
        "event_ts": "1515449522000016",
    },
    "type": "event_callback",
    "authed_users": ["U0LAN0Z89"],
    "event_id": "Ev123ABC456",
    "event_time": 1515449522000016,
}
REACTION = {
    **APP_MENTION,
    "event": {
        "type": "reaction_added",
        "user": "U024BE7LH",
        "reaction": "thumbsup",
        "item": {"type": "message", "channel": "C0G9QF9GZ", "ts": "1360782400.498405"},
        "event_ts": "1360782804.083113",
    },
}
CONFIG = '[webhooks.slack]\ntype = "slack"\n'
AGENTS = {
    "helper": '[[webhooks]]\nsource = "slack"\nevents = ["app_mention"]\nchannels = ["C123ABC456"]\n',
    "reactor": '[[webhooks]]\nsource = "slack"\nevents = "reaction_added"\nteam_ids = "T123ABC456"\n',
}


@pytest.fixture
def server(webhook_server):
    return webhook_server(CONFIG, AGENTS, {("slack_signing_secret", "default"): {"secret": SECRET}})


def headers_at(body: bytes, when: float, secret: str = SECRET) -> dict[str, str]:
    stamp = str(int(when))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


def test_verifies_slacks_worked_example(tmp_path, monkeypatch):
    clock = tmp_path / "clock"
    clock.write_text(str(int(DOC_TIMESTAMP) + 60))
    monkeypatch.setenv("AL_FAKE_CLOCK_FILE", str(clock))
    headers = {"x-slack-signature": DOC_SIGNATURE, "x-slack-request-timestamp": DOC_TIMESTAMP}
    assert SlackSource().verify(headers, DOC_BODY, [DOC_SECRET])
    assert not SlackSource().verify(headers, DOC_BODY + b"x", [DOC_SECRET])
    clock.write_text(str(int(DOC_TIMESTAMP) + 301))
    assert not SlackSource().verify(headers, DOC_BODY, [DOC_SECRET]), "outside five minutes"


def test_event_fields():
    body = json.dumps(APP_MENTION).encode()
    fields = SlackSource().parse({}, body)
    assert (fields["event"], fields["team"], fields["channel"], fields["sender"]) == (
        "app_mention",
        "T123ABC456",
        "C123ABC456",
        "U123ABC456",
    )
    assert fields["delivery"] == "Ev123ABC456" and fields["body"].startswith("<@U0LAN0Z89>")
    reaction = SlackSource().parse({}, json.dumps(REACTION).encode())
    assert (reaction["title"], reaction["channel"]) == ("thumbsup", "C0G9QF9GZ")


def test_a_slash_command_is_a_bad_request():
    with pytest.raises(ValueError):
        SlackSource().parse({}, DOC_BODY)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{}", "no event_callback (type None)"),
        (b'{"type": "block_actions"}', "no event_callback (type 'block_actions')"),
        (b'{"type": "event_callback"}', "no event"),
    ],
)
def test_what_is_no_event_callback_is_incomplete(body, reason):
    """As Action Llama: acknowledged and routed nowhere (issue 42 item 2)."""
    assert unrouted(SlackSource().parse({}, body)) == f"incomplete payload: {reason}"


def test_url_verification_is_answered_byte_exact_and_nothing_queued(server):
    response = server.send("slack", URL_VERIFICATION, secret=SECRET)
    assert response.status_code == 200
    assert (
        response.content == b'{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}'
    )
    assert response.headers["content-type"] == "application/json"
    assert server.depth() == {} and server.next_run() is None


def test_an_unsigned_url_verification_is_refused(server):
    response = server.send("slack", URL_VERIFICATION, secret=None)
    assert response.status_code == 401 and b"3eZbrw1a" not in response.content


def test_signed_mention_queues_a_run_whose_prompt_has_the_fields(server):
    response = server.send("slack", APP_MENTION, delivery="Ev1", secret=SECRET)
    assert response.status_code == 202, response.text
    assert response.json()["agents"] == ["helper"]
    block = server.trigger_block(server.next_run())
    for line in (
        "source: slack",
        "event: app_mention",
        "channel: C123ABC456",
        "sender: U123ABC456",
        "body: <@U0LAN0Z89> is it everything a river should be?",
        "delivery: Ev1",
    ):
        assert line in block, line


def test_retries_are_duplicates(server):
    first = server.send("slack", APP_MENTION, delivery="Ev9", secret=SECRET)
    retry = server.send(
        "slack",
        APP_MENTION,
        delivery="Ev9",
        secret=SECRET,
        headers={"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"},
    )
    assert first.status_code == 202
    assert retry.status_code == 200 and retry.json()["duplicate"] is True
    assert server.depth() == {"helper": 1}


def test_stale_bad_or_missing_signatures_are_401(server):
    body = json.dumps(APP_MENTION).encode()
    stale = headers_at(body, time.time() - 301)
    response = server.http.post(f"{server.url}/webhooks/slack", data=body, headers=stale)
    assert response.status_code == 401
    future = headers_at(body, time.time() + 301)
    assert (
        server.http.post(f"{server.url}/webhooks/slack", data=body, headers=future).status_code
        == 401
    )
    fresh = headers_at(body, time.time())
    assert (
        server.http.post(f"{server.url}/webhooks/slack", data=body, headers=fresh).status_code
        == 202
    )
    assert server.send("slack", APP_MENTION, secret="wrong").status_code == 401
    assert server.send("slack", APP_MENTION, secret=None).status_code == 401
    assert server.depth() == {"helper": 1}


def test_filters(server):
    elsewhere = json.loads(json.dumps(APP_MENTION))
    elsewhere["event"]["channel"] = "C999"
    assert server.send("slack", elsewhere, secret=SECRET).json()["agents"] == []
    assert server.send("slack", REACTION, secret=SECRET).json()["agents"] == ["reactor"]
    other_team = {**REACTION, "team_id": "T999"}
    assert server.send("slack", other_team, secret=SECRET).json()["agents"] == []


def test_wait_filters_use_slacks_keys(server):
    server.send("slack", APP_MENTION, secret=SECRET)
    run = server.next_run()
    assert server.waits_for(run, {"event": "app_mention", "channel": "C123ABC456"})
    assert server.waits_for(run, {"team_id": "T123ABC456", "user": "U123ABC456"})
    assert not server.waits_for(run, {"channels": ["C999"]})


def test_signature_fuzz(server):
    fuzz_webhook_source(
        server,
        "slack",
        secret=SECRET,
        wrong_secret="not-the-secret",
        header_names=["X-Slack-Signature", "X-Slack-Request-Timestamp", "X-Slack-Retry-Num"],
    )
