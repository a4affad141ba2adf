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
