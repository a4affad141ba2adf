"""The webhook secret is read once and again only when it changes (issue 18, item 15): a
delivery costs no read of the credential's files, and a rotated secret is used at once."""

from __future__ import annotations

import sys
import threading

from llamaherd.api import CredentialStore

OPENED: list[str] = []
WATCHING = threading.Event()


def _audit(event: str, args: tuple) -> None:
    if event == "open" and WATCHING.is_set() and isinstance(args[0], str | bytes):
        OPENED.append(str(args[0]))


sys.addaudithook(_audit)  # cannot be removed: it records only while WATCHING is set


def test_deliveries_do_not_read_the_secret_file_again(server):
    secret_file = str(CredentialStore().path("webhook_secret", "ci") / "secret")
    assert server.send("hooks", {"env": "prod"}, event="deploy").status_code == 202
    OPENED.clear()
    WATCHING.set()
    try:
        for _ in range(20):
            assert server.send("hooks", {"env": "prod"}, event="deploy").status_code == 202
    finally:
        WATCHING.clear()
    assert secret_file not in OPENED


def test_a_rotated_secret_is_used_by_the_next_delivery(server):
    assert server.send("hooks", {"env": "prod"}, event="deploy").status_code == 202
    CredentialStore().write("webhook_secret", "ci", {"secret": "rotated"})
    old = server.send("hooks", {"env": "prod"}, event="deploy")
    assert old.status_code == 401
    new = server.send("hooks", {"env": "prod"}, event="deploy", secret="rotated")
    assert new.status_code == 202, new.text
    CredentialStore().remove("webhook_secret", "ci")
    assert (
        server.send("hooks", {"env": "prod"}, event="deploy", secret="rotated").status_code == 401
    )
