"""The discord source over real HTTP: Ed25519 signatures, PING, deferred responses, filters."""

from __future__ import annotations

import json
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from llamaherd_discord.source import DiscordSource

from llamaherd.api import unrouted
from llamaherd.testing import fuzz_webhook_source


def key_pair() -> tuple[str, str]:
    """(private seed hex, public key hex): a test application's keys."""
    private = Ed25519PrivateKey.generate()
    seed = private.private_bytes_raw().hex()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    return seed, public


PRIVATE, PUBLIC = key_pair()
OTHER_PRIVATE, _ = key_pair()
# Discord's documented example interaction (an application command).
COMMAND = {
    "type": 2,
    "token": "A_UNIQUE_TOKEN",
    "member": {
        "user": {
            "id": "53908232506183680",
            "username": "Mason",
            "avatar": "a_d5efa99b3eeaa7dd43acca82f5692432",
            "discriminator": "1337",
            "public_flags": 131141,
        },
        "roles": ["539082325061836999"],
        "permissions": "2147483647",
        "joined_at": "2017-03-13T19:19:14.040000+00:00",
    },
    "id": "786008729715212338",
    "guild_id": "290926798626357999",
    "app_permissions": "442368",
    "guild_locale": "en-US",
    "locale": "en-US",
    "data": {
        "options": [{"type": 3, "name": "cardname", "value": "The Gitrog Monster"}],
        "type": 1,
        "name": "cardsearch",
        "id": "771825006014889984",
    },
    "channel_id": "645027906669510667",
}
BUTTON = {
    "type": 3,
    "token": "ANOTHER_TOKEN",
    "id": "846462639134605312",
    "guild_id": "290926798626357999",
    "channel_id": "645027906669510667",
    "member": {"user": {"id": "1", "username": "Mason"}},
    "data": {"custom_id": "approve_deploy", "component_type": 2},
}
CONFIG = '[webhooks.discord]\ntype = "discord"\n'
AGENTS = {
    "cards": '[[webhooks]]\nsource = "discord"\ncommands = ["cardsearch"]\nguilds = ["290926798626357999"]\n',
    "buttons": '[[webhooks]]\nsource = "discord"\nevents = ["message_component"]\n',
}
CREDENTIALS = {
    ("discord_bot", "default"): {"application_id": "1", "public_key": PUBLIC, "bot_token": "t"}
}


@pytest.fixture
def server(webhook_server):
    return webhook_server(CONFIG, AGENTS, CREDENTIALS)


def signed(body: bytes, when: float, private: str = PRIVATE) -> dict[str, str]:
    stamp = str(int(when))
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(private))
    return {
        "X-Signature-Timestamp": stamp,
        "X-Signature-Ed25519": key.sign(stamp.encode() + body).hex(),
    }


def test_verifies_with_the_public_key_only():
    body = json.dumps(COMMAND).encode()
    headers = {k.lower(): v for k, v in signed(body, time.time()).items()}
    assert DiscordSource().verify(headers, body, [PUBLIC])
    assert DiscordSource().verify(headers, body, ["not hex", "00" * 32, PUBLIC]), "key rotation"
    assert not DiscordSource().verify(headers, body + b" ", [PUBLIC])
    assert not DiscordSource().verify(headers, body, [])
    other = {k.lower(): v for k, v in signed(body, time.time(), OTHER_PRIVATE).items()}
    assert not DiscordSource().verify(other, body, [PUBLIC])


def test_command_fields():
    fields = DiscordSource().parse({}, json.dumps(COMMAND).encode())
    assert (fields["event"], fields["command"], fields["guild"], fields["channel"]) == (
        "application_command",
        "cardsearch",
        "290926798626357999",
        "645027906669510667",
    )
    assert (fields["sender"], fields["body"], fields["delivery"]) == (
        "Mason",
        "cardname: The Gitrog Monster",
        "786008729715212338",
    )


@pytest.mark.parametrize("body", [b"", b"[]"])
def test_what_is_no_json_object_is_a_bad_request(body):
    with pytest.raises(ValueError):
        DiscordSource().parse({}, body)


@pytest.mark.parametrize("body", [b"{}", b'{"type": 9}', b'{"type": true}', b'{"type": "2"}'])
def test_an_interaction_of_no_known_type_is_incomplete(body):
    """As Action Llama: acknowledged and routed nowhere (issue 42 item 2)."""
    reason = unrouted(DiscordSource().parse({}, body))
    assert reason is not None and reason.startswith("incomplete payload: no interaction type")


def test_ping_is_answered_pong_byte_exact(server):
    response = server.send("discord", {"type": 1}, secret=PRIVATE)
    assert response.status_code == 200
    assert response.content == b'{"type":1}'
    assert response.headers["content-type"] == "application/json"
    assert server.depth() == {}


def test_bad_missing_and_stale_signatures_are_401(server):
    assert server.send("discord", {"type": 1}, secret=OTHER_PRIVATE).status_code == 401
    assert server.send("discord", {"type": 1}, secret=None).status_code == 401
    body = json.dumps(COMMAND).encode()
    stale = signed(body, time.time() - 301)
    assert (
        server.http.post(f"{server.url}/webhooks/discord", data=body, headers=stale).status_code
        == 401
    )
    assert server.depth() == {} and server.next_run() is None


def test_command_is_deferred_within_three_seconds_and_queued(server):
    started = time.monotonic()
    response = server.send("discord", COMMAND, delivery="786008729715212338", secret=PRIVATE)
    assert time.monotonic() - started < 3
    assert response.status_code == 200 and response.content == b'{"type":5}'
    run = server.next_run()
    assert run.agent == "cards"
    block = server.trigger_block(run)
    for line in (
        "source: discord",
        "event: application_command",
        "action: cardsearch",
        "channel: 645027906669510667",
        "title: cardsearch",
        "sender: Mason",
        "body: cardname: The Gitrog Monster",
        "delivery: 786008729715212338",
    ):
        assert line in block, line
    assert '  "token": "A_UNIQUE_TOKEN",' in block, "the run needs the token to answer"


def test_a_button_click_is_a_deferred_update(server):
    response = server.send("discord", BUTTON, secret=PRIVATE)
    assert response.content == b'{"type":6}'
    # `commands` does not filter a click (it has no command), as in Action Llama: cards gets it.
    assert server.depth() == {"buttons": 1, "cards": 1}


def test_an_interaction_no_agent_takes_gets_an_ephemeral_answer(server):
    other = {**COMMAND, "data": {**COMMAND["data"], "name": "weather"}}
    response = server.send("discord", other, secret=PRIVATE)
    assert response.status_code == 200
    assert response.json() == {
        "type": 4,
        "data": {"content": "/weather is not handled by any agent right now.", "flags": 64},
    }
    assert server.depth() == {}


def test_autocomplete_is_answered_without_choices(server):
    complete = {**COMMAND, "type": 4}
    assert server.send("discord", complete, secret=PRIVATE).content == (
        b'{"type":8,"data":{"choices":[]}}'
    )


def test_filters(server):
    elsewhere = {**COMMAND, "guild_id": "1"}
    assert server.send("discord", elsewhere, secret=PRIVATE).json()["type"] == 4
    dm = {k: v for k, v in COMMAND.items() if k != "channel_id"}
    assert server.send("discord", dm, secret=PRIVATE).json() == {"type": 5}, "no channel: passes"
    assert server.depth() == {"cards": 1}


def test_wait_filters_use_discords_keys(server):
    server.send("discord", COMMAND, secret=PRIVATE)
    run = server.next_run()
    assert server.waits_for(run, {"command": "cardsearch", "guild": "290926798626357999"})
    assert not server.waits_for(run, {"commands": ["weather"]})


def test_signature_fuzz(server):
    fuzz_webhook_source(
        server,
        "discord",
        secret=PRIVATE,
        wrong_secret=OTHER_PRIVATE,
        header_names=["X-Signature-Ed25519", "X-Signature-Timestamp"],
    )
