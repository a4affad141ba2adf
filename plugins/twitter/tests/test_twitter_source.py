"""The twitter source over real HTTP: the CRC challenge on GET, signed events, filters."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from llamaherd_twitter.source import TwitterSource

from llamaherd.api import unrouted
from llamaherd.testing import fuzz_webhook_source

# The consumer secret and token of X's published CRC examples.
SECRET = "z3ZX4v7mAAUGykl3EcmkqbartmuW8VFOOzCloLx9Q45P0hLrFu"
CRC_TOKEN = "9b4507b3-9040-4669-9ca3-6b94edb50553"
# X's documented Account Activity deliveries.
TWEET = {
    "for_user_id": "2244994945",
    "tweet_create_events": [
        {
            "created_at": "Wed Oct 10 20:19:24 +0000 2018",
            "id_str": "1050118621198921728",
            "text": "To make room for more expression, we will now count all emojis as equal",
            "user": {"id_str": "6253282", "name": "Twitter API", "screen_name": "TwitterAPI"},
        }
    ],
}
DIRECT_MESSAGE = {
    "for_user_id": "4337869213",
    "direct_message_events": [
        {
            "type": "message_create",
            "id": "954491830116155396",
            "created_timestamp": "1516403560557",
            "message_create": {
                "target": {"recipient_id": "4337869213"},
                "sender_id": "3001969357",
                "source_app_id": "13090192",
                "message_data": {"text": "Hello World!", "entities": {}},
            },
        }
    ],
    "apps": {"13090192": {"id": "13090192", "name": "FuriousCamperTestApp1"}},
    "users": {"3001969357": {"id": "3001969357", "screen_name": "jordan_brock"}},
}
FOLLOW = {
    "for_user_id": "2244994945",
    "follow_events": [
        {
            "type": "follow",
            "created_timestamp": "1517588749178",
            "source": {"id": "2244994945", "screen_name": "TwitterDev"},
            "target": {"id": "1436854423", "screen_name": "Furious_Camper"},
        }
    ],
}
CONFIG = '[webhooks.x]\ntype = "twitter"\n'
AGENTS = {
    "replier": '[[webhooks]]\nsource = "x"\nevents = ["tweet_create_events"]\nusers = ["2244994945"]\n',
    "inbox": '[[webhooks]]\nsource = "x"\nevents = "direct_message_events"\nrepos = "4337869213"\n',
}
CREDENTIALS = {
    ("x_twitter_api", "default"): {
        "consumer_key": "ck",
        "consumer_secret": SECRET,
        "bearer_token": "bt",
    }
}


@pytest.fixture
def server(webhook_server):
    return webhook_server(CONFIG, AGENTS, CREDENTIALS)


def mac(message: bytes, secret: str = SECRET) -> str:
    return base64.b64encode(hmac.new(secret.encode(), message, hashlib.sha256).digest()).decode()


def test_crc_is_answered_byte_exact_and_nothing_stored(server):
    response = server.http.get(f"{server.url}/webhooks/x", params={"crc_token": CRC_TOKEN})
    assert response.status_code == 200
    expected = '{"response_token":"sha256=' + mac(CRC_TOKEN.encode()) + '"}'
    assert response.content == expected.encode()
    assert response.headers["content-type"] == "application/json"
    assert server.depth() == {}


@pytest.mark.parametrize(
    "params",
    [{}, {"crc_token": ""}, {"crc_token": '{"for_user_id": "1"}'}, {"crc_token": "x" * 513}],
)
def test_a_get_that_is_no_crc_is_refused(server, params):
    response = server.http.get(f"{server.url}/webhooks/x", params=params)
    assert response.status_code == 400 and "response_token" not in response.text


def test_a_crc_cannot_sign_an_event_body():
    """The CRC is the same HMAC as a POST's signature: it must not answer for a JSON body."""
    body = json.dumps(TWEET)
    assert TwitterSource().answer_get({"crc_token": body}, [SECRET]) is None


def test_crc_without_a_stored_secret_is_401(webhook_server):
    server = webhook_server('[webhooks.x]\ntype = "twitter"\nallowUnsigned = true\n')
    response = server.http.get(f"{server.url}/webhooks/x", params={"crc_token": CRC_TOKEN})
    assert response.status_code == 401


def test_get_on_a_source_without_challenges_is_405(webhook_server):
    server = webhook_server('[webhooks.hooks]\ntype = "generic"\nallowUnsigned = true\n')
    assert server.http.get(f"{server.url}/webhooks/hooks?crc_token=a").status_code == 405


def test_signature_is_base64_behind_sha256():
    body = json.dumps(TWEET).encode()
    sent = TwitterSource().request_headers(body, None, "d", SECRET)
    assert sent["X-Twitter-Webhooks-Signature"] == "sha256=" + mac(body)
    lowered = {"x-twitter-webhooks-signature": "sha256=" + mac(body)}
    assert TwitterSource().verify(lowered, body, [SECRET])
    assert not TwitterSource().verify(lowered, body, ["other"])


def test_fields():
    tweet = TwitterSource().parse({}, json.dumps(TWEET).encode())
    assert (tweet["event"], tweet["action"], tweet["user"], tweet["sender"]) == (
        "tweet_create_events",
        "create",
        "2244994945",
        "TwitterAPI",
    )
    assert tweet["url"] == "https://twitter.com/TwitterAPI/status/1050118621198921728"
    dm = TwitterSource().parse({}, json.dumps(DIRECT_MESSAGE).encode())
    assert (dm["event"], dm["sender"], dm["body"]) == (
        "direct_message_events",
        "3001969357",
        "Hello World!",
    )
    follow = TwitterSource().parse({}, json.dumps(FOLLOW).encode())
    assert follow["title"] == "@TwitterDev followed @Furious_Camper"


@pytest.mark.parametrize("body", [b"[]", b"nope"])
def test_a_body_that_is_no_json_object_is_a_bad_request(body):
    with pytest.raises(ValueError):
        TwitterSource().parse({}, body)


@pytest.mark.parametrize("body", [b"{}", b'{"for_user_id": "1"}'])
def test_a_body_without_events_is_incomplete(body):
    """As Action Llama: acknowledged and routed nowhere (issue 42 item 2)."""
    fields = TwitterSource().parse({}, body)
    assert unrouted(fields) == "incomplete payload: no array of events"


def test_signed_tweet_queues_a_run_whose_prompt_has_the_fields(server):
    response = server.send("x", TWEET, secret=SECRET)
    assert response.status_code == 202, response.text
    assert response.json()["agents"] == ["replier"]
    block = server.trigger_block(server.next_run())
    for line in (
        "source: x",
        "event: tweet_create_events",
        "action: create",
        "url: https://twitter.com/TwitterAPI/status/1050118621198921728",
        "sender: TwitterAPI",
    ):
        assert line in block, line


def test_bad_or_missing_signatures_are_401(server):
    assert server.send("x", TWEET, secret="wrong").status_code == 401
    assert server.send("x", TWEET, secret=None).status_code == 401
    assert server.depth() == {} and server.next_run() is None


def test_the_same_body_twice_is_one_delivery(server):
    assert server.send("x", DIRECT_MESSAGE, secret=SECRET).json()["agents"] == ["inbox"]
    assert server.send("x", DIRECT_MESSAGE, secret=SECRET).json()["duplicate"] is True


def test_filters(server):
    other = {**TWEET, "for_user_id": "1"}
    assert server.send("x", other, secret=SECRET).json()["agents"] == []
    assert server.send("x", FOLLOW, secret=SECRET).json()["agents"] == []


def test_wait_filters_use_twitters_keys(server):
    server.send("x", TWEET, secret=SECRET)
    run = server.next_run()
    assert server.waits_for(run, {"event": "tweet_create_events", "user": "2244994945"})
    assert not server.waits_for(run, {"users": ["1"]})


def test_signature_fuzz(server):
    fuzz_webhook_source(
        server,
        "x",
        secret=SECRET,
        wrong_secret="not-the-secret",
        header_names=["X-Twitter-Webhooks-Signature"],
    )
