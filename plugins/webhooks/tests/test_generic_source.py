"""The generic HMAC source."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from llamaherd_webhooks.sources import GenericSource as HmacSource

from llamaherd.api import body_digest

BODY = json.dumps({"event": "deploy", "action": "done", "repo": "acme/site"}).encode()


def signature(body: bytes, secret: str = "s3cret") -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    "value", [signature(BODY), "sha256=" + signature(BODY), signature(BODY).upper()]
)
def test_accepts_prefixed_or_bare_hex(value):
    assert HmacSource().verify({"x-signature-256": value}, BODY, ["s3cret"])


def test_configured_header_names():
    source = HmacSource().configured(
        {
            "signatureHeader": "X-Hook-Sig",
            "deliveryHeader": "X-Id",
            "eventHeader": "X-Kind",
            "type": "generic",
        }
    )
    headers = {"x-hook-sig": signature(BODY), "x-id": "42", "x-kind": "ship"}
    assert source.verify(headers, BODY, ["s3cret"])
    assert not HmacSource().verify(headers, BODY, ["s3cret"])  # the original is unchanged
    fields = source.parse(headers, BODY)
    assert (fields["event"], fields["delivery"], fields["action"], fields["repo"]) == (
        "ship",
        "42",
        "done",
        "acme/site",
    )


def test_event_from_payload_and_delivery_from_body_hash():
    fields = HmacSource().parse({}, BODY)
    assert fields["event"] == "deploy"
    assert fields["delivery"] == body_digest(BODY)


def test_wrong_secret_or_body_fails():
    assert not HmacSource().verify({"x-signature-256": signature(BODY)}, BODY, ["other"])
    assert not HmacSource().verify({"x-signature-256": signature(BODY)}, BODY + b" ", ["s3cret"])


def test_request_headers_round_trip():
    source = HmacSource()
    sent = {
        k.lower(): v for k, v in source.request_headers(BODY, "deploy", "d-9", "s3cret").items()
    }
    assert source.verify(sent, BODY, ["s3cret"])
    assert source.parse(sent, BODY)["delivery"] == "d-9"


# ------------------------------------------------------------------ signed timestamps (item 14)
STAMPED = """
[webhooks.ci]
type = "generic"
credential = "ci"
timestampHeader = "X-Timestamp"
timestampTolerance = 120
"""


@pytest.fixture
def stamped(webhook_server):
    return webhook_server(
        STAMPED,
        agents={"builder": '[[webhooks]]\nsource = "ci"\n'},
        credentials={("webhook_secret", "ci"): {"secret": "s3cret"}},
    )


def stamped_headers(delivery: str, stamp: int, body: bytes = BODY) -> dict[str, str]:
    """What a sender following the documented scheme sends."""
    message = f"{delivery}.{stamp}.".encode() + body
    return {
        "Content-Type": "application/json",
        "X-Delivery-Id": delivery,
        "X-Timestamp": str(stamp),
        "X-Signature-256": "sha256=" + signature(message),
    }


def post(server, headers, body=BODY):
    return server.http.post(f"{server.url}/webhooks/ci", data=body, headers=headers, timeout=10)


def test_a_stamped_delivery_is_taken_once(stamped):
    import time

    headers = stamped_headers("d-1", int(time.time()))
    assert post(stamped, headers).status_code == 202
    assert post(stamped, headers).json()["duplicate"] is True  # replayed as is: a duplicate
    assert stamped.depth() == {"builder": 1}
    assert stamped.send("ci", {"event": "x"}, secret="s3cret").status_code == 202  # our sender


def test_a_replay_under_a_new_delivery_id_is_refused(stamped):
    import time

    headers = stamped_headers("d-1", int(time.time()))
    assert post(stamped, headers).status_code == 202
    assert post(stamped, {**headers, "X-Delivery-Id": "d-2"}).status_code == 401
    assert (
        post(stamped, {k: v for k, v in headers.items() if k != "X-Delivery-Id"}).status_code == 401
    )
    assert stamped.depth() == {"builder": 1}


@pytest.mark.parametrize("offset", [-121, 121, None])
def test_a_stale_or_missing_timestamp_is_refused(stamped, offset):
    import time

    stamp = int(time.time()) + (offset or 0)
    headers = stamped_headers("d-old", stamp)
    if offset is None:
        del headers["X-Timestamp"]
    response = post(stamped, headers)
    assert response.status_code == 401, response.text
    assert stamped.depth() == {}


def test_the_timestamp_is_part_of_what_is_signed():
    import time

    source = HmacSource().configured({"timestampHeader": "X-Timestamp"})
    now = int(time.time())
    headers = {k.lower(): v for k, v in stamped_headers("d", now).items()}
    assert source.verify(headers, BODY, ["s3cret"])
    assert not source.verify({**headers, "x-timestamp": str(now - 1)}, BODY, ["s3cret"])
    assert not HmacSource().verify(headers, BODY, ["s3cret"])  # the plain scheme signs the body
