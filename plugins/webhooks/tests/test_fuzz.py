"""Property tests: whatever the headers and body, never a 5xx and never a queued unsigned request."""

from __future__ import annotations

import hashlib
import hmac
import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HEADER_NAMES = [
    "X-Hub-Signature-256",
    "X-GitHub-Event",
    "X-GitHub-Delivery",
    "X-Hook-Signature",
    "X-Event",
    "X-Delivery-Id",
    "Content-Type",
    "X-Anything",
]
# What an HTTP client can send: no line breaks, no leading whitespace (requests' own rule).
SENDABLE = re.compile(r"^\S[^\r\n]*$|^$")
header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=80
).filter(SENDABLE.match)
signature = st.one_of(
    header_text,
    st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256=" + h),
    st.just("sha256="),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
bodies = st.one_of(
    st.binary(max_size=2048),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {
            "action": st.sampled_from(["opened", "closed"]),
            "repository": st.just({"full_name": "acme/widgets"}),
            "pull_request": st.just({"base": {"ref": "main"}}),
        }
    ).map(lambda v: json.dumps(v).encode()),
)
headers = st.dictionaries(
    st.sampled_from(HEADER_NAMES),
    st.one_of(
        header_text,
        signature,
        st.sampled_from(
            [
                "pull_request",
                "push",
                "ping",
                "application/json",
                "application/x-www-form-urlencoded",
            ]
        ),
    ),
    max_size=6,
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    source=st.sampled_from(["github", "hooks"]),
    headers=headers,
    body=bodies,
    wrong_secret=st.none() | st.text(min_size=1, max_size=10),
)
def test_never_5xx_never_queues_unsigned(server, source, headers, body, wrong_secret):
    if wrong_secret is not None:  # a well-formed signature made with a secret we do not hold
        name = "X-Hub-Signature-256" if source == "github" else "X-Hook-Signature"
        headers[name] = (
            "sha256=" + hmac.new(wrong_secret.encode(), body, hashlib.sha256).hexdigest()
        )
    response = server.http.post(
        f"{server.url}/webhooks/{source}", data=body, headers=headers, timeout=10
    )
    assert response.status_code < 500, response.text
    assert response.status_code in (401, 429)  # 429: this sender's rejections are throttled
    assert server.depth() == {}


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(headers=headers, body=bodies)
def test_signed_garbage_is_never_5xx(server, headers, body):
    headers["X-Hub-Signature-256"] = (
        "sha256=" + hmac.new(server.secret.encode(), body, hashlib.sha256).hexdigest()
    )
    response = server.http.post(
        f"{server.url}/webhooks/github", data=body, headers=headers, timeout=10
    )
    assert response.status_code in (200, 202, 400), response.text
