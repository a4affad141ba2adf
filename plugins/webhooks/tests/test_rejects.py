"""Unauthenticated requests cannot fill the database (issue 18, item 6): a rejected delivery
keeps only a cut of its body and a few headers, each sender's rejections are recorded at a
bounded rate (then answered 429), and each source's dead letters are bounded in number and age.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
from llamaherd_webhooks import receipts as receipts_module
from llamaherd_webhooks.ingest import REJECTED_BODY_KEPT, REJECTED_VALUE_KEPT
from llamaherd_webhooks.receipts import TABLES, Receipts
from llamaherd_webhooks.throttle import REJECTS_PER_MINUTE, RejectThrottle

from llamaherd.store import Store

FLOOD = 200


def dead_letters(server) -> list[dict]:
    return Receipts(server.engine.store).recent(limit=100_000, dead_letters=True)


def test_a_flood_of_unsigned_deliveries_leaves_a_bounded_trace(server):
    """The issue's reproduction, bounded: unsigned 4 KB deliveries with a large header."""
    body = json.dumps({"pad": "x" * 4000}).encode()
    headers = {"Content-Type": "application/json", "X-Hook-Signature": "sha256=00", "X-Junk": "j" * 8000,
               "X-Event": "e" * 1000}  # fmt: skip
    # A clock that stands still: no token refills however long the flood takes on a busy machine.
    server.engine.app.state.webhook_rejects = RejectThrottle(clock=lambda: 0.0)
    answers = []
    with requests.Session() as http:
        for n in range(FLOOD):
            response = http.post(f"{server.url}/webhooks/hooks", data=body, headers=headers)
            answers.append(response.status_code)
            if n == FLOOD // 2:  # the genuine sender, from the same address, mid-flood
                genuine = server.send("hooks", {"env": "prod"}, event="deploy")
                assert genuine.status_code == 202, genuine.text
    assert answers[:REJECTS_PER_MINUTE] == [401] * REJECTS_PER_MINUTE
    assert set(answers[REJECTS_PER_MINUTE:]) == {429}
    assert "too many rejected deliveries" in response.json()["error"]

    dead = dead_letters(server)
    assert len(dead) == REJECTS_PER_MINUTE
    for letter in dead:
        assert len(letter["body"]) == REJECTED_BODY_KEPT
        assert "body cut to" in letter["result"]
        assert set(letter["headers"]) <= {"content-type", "content-length", "user-agent", "x-event"}
        assert all(len(value) <= REJECTED_VALUE_KEPT for value in letter["headers"].values())
    assert server.depth() == {"deployer": 1}


def test_a_verified_but_malformed_delivery_is_never_throttled(server):
    server.engine.app.state.webhook_rejects = RejectThrottle(per_minute=1)
    for _ in range(5):
        response = server.send("hooks", None, body=b"not json", event="deploy")
        assert response.status_code == 400, response.text
    assert len(dead_letters(server)) == 5


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    opened = Store.open(database_url, tables=[TABLES])
    yield opened
    opened.close()


def test_dead_letters_are_bounded_per_source(store, monkeypatch):
    monkeypatch.setattr(receipts_module, "MAX_DEAD_LETTERS", 20)
    monkeypatch.setattr(receipts_module, "TRIM_EVERY", 1)
    receipts = Receipts(store)
    for n in range(50):
        receipts.record("open", None, {}, b"x", 401, f"forged {n}", [])
    receipts.record("open", "kept", {}, b"{}", 202, "matched", ["a"])  # receipts stay
    receipts.record("other", None, {}, b"x", 401, "forged", [])
    dead = receipts.recent(limit=1000, dead_letters=True)
    mine = [d["result"] for d in dead if d["source"] == "open"]
    assert mine == [f"forged {n}" for n in range(49, 29, -1)]  # the newest 20
    assert [d["source"] for d in dead].count("other") == 1
    assert receipts.seen("open", "kept")


def test_dead_letters_expire_before_the_history(database_url, monkeypatch):
    now = [1_700_000_000.0]
    opened = Store.open(database_url, tables=[TABLES], clock=lambda: now[0])
    try:
        receipts = Receipts(opened)
        receipts.record("open", None, {}, b"x", 401, "old forgery", [])
        receipts.record("open", "old", {}, b"{}", 202, "matched", [])
        now[0] += (receipts_module.DEAD_LETTER_DAYS + 1) * 86400
        receipts.record("open", None, {}, b"x", 401, "new forgery", [])
        assert receipts.trim("open") == 1
        assert [d["result"] for d in receipts.recent(dead_letters=True)] == ["new forgery"]
        assert receipts.seen("open", "old")
    finally:
        opened.close()


def test_the_throttle_refills_at_its_rate():
    now = [0.0]
    throttle = RejectThrottle(per_minute=2, clock=lambda: now[0])
    assert throttle.allow("s", "a") and throttle.allow("s", "a")
    assert not throttle.allow("s", "a")
    assert throttle.allow("s", "b")  # another sender has its own share
    assert throttle.take_suppressed("s") == 1 and throttle.take_suppressed("s") == 0
    now[0] += 30
    assert throttle.allow("s", "a") and not throttle.allow("s", "a")
