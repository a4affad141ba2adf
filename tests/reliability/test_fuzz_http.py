"""Fuzz the HTTP endpoints of a real scheduler process: never a 5xx, never a side effect
without the right credentials.

plugins/webhooks/tests/test_fuzz.py already fuzzes the github source and a generic source with a
custom header against an in-process engine; this extends to a real ``al start`` process: the
generic source with its default headers, an ``allowUnsigned`` source, the control API (bad
tokens, bad bodies, bad query strings, with and without the right token) and the gateway API
(bad run ids, tokens, bodies). The scheduler is paused, so anything queued stays visible.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re

import pytest
import requests
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from llamaherd.testing import OfflineProject

SEED = int(os.environ.get("AL_RELIABILITY_SEED", 20261202))
EXAMPLES = int(os.environ.get("AL_FUZZ_EXAMPLES", 120))
SECRET = "fuzz-secret"
SETTINGS = """
[webhooks.generic]
type = "generic"
credential = "fz"

[webhooks.open]
type = "generic"
allowUnsigned = true
"""
QUICK = '[[turns]]\ntext = "done"\n'

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# What an HTTP client can send in a header: no line breaks, no leading whitespace.
SENDABLE = re.compile(r"^\S[^\r\n]*$|^$")
header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=60
).filter(SENDABLE.match)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=15,
)
bodies = st.one_of(
    st.binary(max_size=1024),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(
        st.sampled_from(["agent", "payload", "count", "target", "uri", "text", "value", "name",
                         "filter", "timeout", "context", "event", "tag"]),
        json_values,
        max_size=4,
    ).map(lambda v: json.dumps(v).encode()),
)  # fmt: skip
header_names = st.sampled_from([
    "X-Signature-256", "X-Delivery-Id", "X-Event", "Content-Type", "Content-Encoding",
    "Authorization", "X-AL-Run-Id", "Cookie", "Transfer-Encoding-X", "X-Anything",
])  # fmt: skip
headers = st.dictionaries(
    header_names,
    st.one_of(
        header_text,
        st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256=" + h),
        st.sampled_from(
            ["Bearer ", "Bearer x", "bearer", "application/json", "gzip", "al_token=x"]
        ),
    ),
    max_size=5,
)


class Target:
    """The scheduler under fuzz, and what it must never change."""

    def __init__(self, project: OfflineProject, sched) -> None:
        self.project, self.sched = project, sched
        self.url = sched.url
        self.http = requests.Session()
        self.store = project.store()

    def depth(self) -> dict[str, int]:
        return {k: v for k, v in self.store.queue_depth().items() if v}

    def request(self, method: str, path: str, **kw):
        response = self.http.request(method, self.url + path, timeout=30, **kw)
        assert response.status_code < 500, (method, path, response.status_code, response.text[:300])
        return response


@pytest.fixture
def target(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj", SETTINGS)
    project.add_scripted_agent("target", "", QUICK)
    with open(project.root / "agents" / "target" / "config.toml", "a") as config:
        config.write('\n[[webhooks]]\nsource = "generic"\n\n[[webhooks]]\nsource = "open"\n')
    env = {"AL_CREDENTIALS_DIR": str(tmp_path / "credentials")}
    project.al("creds", "add", "webhook_secret:fz", "--from-env", "secret=S",
               env={**env, "S": SECRET}, check=True)  # fmt: skip
    sched = scheduler(project, env)
    project.al("pause", check=True)
    return Target(project, sched)


@seed(SEED)
@FUZZ
@given(
    headers=headers,
    body=bodies,
    wrong_secret=st.none() | st.text(min_size=1, max_size=10).filter(lambda s: s != SECRET),
)
def test_generic_source_never_5xx_never_queues_unsigned(target, headers, body, wrong_secret):
    if wrong_secret is not None:
        headers["X-Signature-256"] = (
            "sha256=" + hmac.new(wrong_secret.encode(), body, hashlib.sha256).hexdigest()
        )
    before = target.depth()
    response = target.request("POST", "/webhooks/generic", data=body, headers=headers)
    assert response.status_code in (401, 429), response.text  # 429: rejections throttled
    assert target.depth() == before


@seed(SEED + 1)
@FUZZ
@given(headers=headers, body=bodies, signed=st.booleans())
def test_open_and_signed_deliveries_never_5xx(target, headers, body, signed):
    source = "generic" if signed else "open"
    if signed:
        headers["X-Signature-256"] = (
            "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        )
    before = sum(target.depth().values())
    response = target.request("POST", f"/webhooks/{source}", data=body, headers=headers)
    # 429: more than REJECTS_PER_MINUTE bad bodies from this client (on a quick machine the
    # examples' rejections come within a minute).
    assert response.status_code in (200, 202, 400, 429), response.text
    queued = sum(target.depth().values()) - before
    if response.status_code == 202:
        assert queued in (0, 1) and isinstance(json.loads(body), dict)
    else:
        assert queued == 0, response.text


CONTROL = [
    ("POST", "/control/run"), ("POST", "/control/kill"), ("POST", "/control/pause"),
    ("POST", "/control/resume"), ("GET", "/control/runs"), ("GET", "/control/stat"),
    ("GET", "/control/health"), ("GET", "/control/runs/{id}"), ("GET", "/control/runs/{id}/events"),
]  # fmt: skip
GATEWAY = [
    ("POST", "/gateway/status"), ("POST", "/gateway/return"), ("POST", "/gateway/rerun"),
    ("POST", "/gateway/call"), ("GET", "/gateway/call/{id}"), ("POST", "/gateway/lock"),
    ("POST", "/gateway/unlock"), ("POST", "/gateway/lock-heartbeat"), ("POST", "/gateway/setenv"),
    ("POST", "/gateway/wait"),
]  # fmt: skip
path_text = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20)
queries = st.dictionaries(
    st.sampled_from(["agent", "limit", "after", "x"]), header_text, max_size=3
)


@seed(SEED + 2)
@FUZZ
@given(
    endpoint=st.sampled_from(CONTROL),
    token=st.none() | header_text,
    body=bodies,
    query=queries,
    ident=path_text,
)
def test_control_api_with_bad_tokens_never_5xx_and_changes_nothing(
    target, endpoint, token, body, query, ident
):
    method, path = endpoint
    sent = {} if token is None else {"Authorization": f"Bearer {token}"}
    before = (target.depth(), target.store.paused())
    path = path.replace("{id}", requests.utils.quote(ident, safe="") or "x")
    response = target.request(method, path, data=body, headers=sent, params=query)
    if method == "POST":
        assert response.status_code == 401, response.text
    assert (target.depth(), target.store.paused()) == before


@seed(SEED + 3)
@FUZZ
@given(endpoint=st.sampled_from(CONTROL), body=bodies, query=queries, ident=path_text)
def test_control_api_with_the_token_never_5xx(target, endpoint, body, query, ident):
    """Bad bodies and query strings from an authorised client: 4xx, never a crash."""
    method, path = endpoint
    path = path.replace("{id}", requests.utils.quote(ident, safe="") or "x")
    sent = {"Authorization": f"Bearer {target.sched.token}"}
    target.request(method, path, data=body, headers=sent, params=query)
    if path in ("/control/resume",):
        target.request("POST", "/control/pause", json={}, headers=sent)  # keep the queue still


@seed(SEED + 4)
@FUZZ
@given(
    endpoint=st.sampled_from(GATEWAY),
    run_id=st.none() | header_text,
    token=st.none() | header_text,
    body=bodies,
    ident=path_text,
)
def test_gateway_with_bad_credentials_never_5xx(target, endpoint, run_id, token, body, ident):
    method, path = endpoint
    sent = {}
    if run_id is not None:
        sent["X-AL-Run-Id"] = run_id
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    before = (target.depth(), target.store.locks())
    path = path.replace("{id}", requests.utils.quote(ident, safe="") or "1")
    response = target.request(method, path, data=body, headers=sent)
    assert response.status_code in (400, 401, 403, 404, 405, 409), response.text
    assert (target.depth(), target.store.locks()) == before


@seed(SEED + 5)
@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]), path=path_text, body=bodies
)
def test_unknown_paths_and_methods_never_5xx(target, method, path, body):
    target.request(method, "/" + path.lstrip("/"), data=body)


BAD_INPUT = [
    ("GET", "/control/runs?limit=", None),
    ("GET", "/control/runs?limit=many", None),
    ("GET", "/control/runs/x/events?after=later", None),
    ("POST", "/control/run", {"agent": "target", "count": "two"}),
    ("POST", "/control/run", {"agent": "target", "count": None}),
    ("POST", "/control/run", {"agent": "target", "payload": [1, 2]}),
    ("POST", "/control/run", {"agent": "target", "payload": "text"}),
    ("POST", "/control/run", {"agent": ["target"]}),
    ("POST", "/control/kill", {"target": None}),
    ("POST", "/control/pause", {"agent": [None]}),
    ("POST", "/control/resume", {"agent": {"a": 1}}),
]


def test_control_api_bad_input_is_a_4xx(target):
    """Found by the fuzz above: each of these must be a clear 4xx (and queue nothing), not a
    500 or a queued run. One scheduler for all cases; every failing case is listed."""
    sent = {"Authorization": f"Bearer {target.sched.token}"}
    wrong = []
    for method, path, body in BAD_INPUT:
        before = target.depth()
        # A fresh connection each: the server closes one after answering 500.
        response = requests.request(method, target.url + path, json=body, headers=sent, timeout=30)
        ok = 400 <= response.status_code < 500 and "error" in response.json()
        if not ok or target.depth() != before:
            wrong.append(
                f"{method} {path} {json.dumps(body)} -> {response.status_code} {response.text[:80]}"
            )
        requests.post(target.url + "/control/pause", json={}, headers=sent, timeout=30)
    assert not wrong, "\n".join(wrong)
