"""The dashboard password: a salted scrypt verifier kept private, refused when it may have been
copied, guessing throttled per client (429 with Retry-After) and logged, and signing out ends
a session server-side (a copy of its cookies proves nothing afterwards)."""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from llamaherd_dashboard import password
from llamaherd_dashboard.password import SignInThrottle, make_verifier, matches

from llamaherd.testing import OfflineProject, SchedulerProcess

from .conftest import PASSWORD, Dashboard, make_project
from .test_http import browser, page_csrf


def al(project: OfflineProject, *args: str, stdin: str | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "llamaherd", "--project", str(project.root), *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_verifier_is_salted_scrypt_and_private(tmp_path: Path):
    project = OfflineProject(tmp_path / "proj")
    os.umask(0o022)
    written = al(project, "dashboard", "password", "--stdin", stdin="a long passphrase\n")
    assert written.returncode == 0, written.stderr
    path = project.root / ".al" / "dashboard-password"
    verifier = path.read_text().strip()
    assert verifier.startswith("$scrypt$ln=15,r=8,p=1$")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "a long passphrase" not in verifier
    assert hashlib.sha256(b"a long passphrase").hexdigest() not in verifier
    assert matches(verifier, "a long passphrase") and not matches(verifier, "a long passphrasE")
    assert make_verifier("a long passphrase") != verifier, "a fresh salt each time"
    short = al(project, "dashboard", "password", "--stdin", stdin="short\n")
    assert short.returncode == 2 and "at least 10 characters" in short.stderr
    no_terminal = al(project, "dashboard", "password", stdin="a long passphrase\n")
    assert no_terminal.returncode == 2 and "--stdin" in no_terminal.stderr


def test_the_old_unsalted_key_is_refused_naming_the_command(tmp_path: Path):
    project = OfflineProject(tmp_path / "proj")
    digest = hashlib.sha256(b"password1").hexdigest()
    with (project.root / "config.toml").open("a") as fh:
        fh.write(f'\n[dashboard]\npassword_sha256 = "{digest}"\n')
    checked = al(project, "validate")
    assert checked.returncode != 0
    assert "dashboard.password_sha256" in checked.stdout + checked.stderr
    assert "al dashboard password" in checked.stdout + checked.stderr
    started = al(project, "start")
    assert started.returncode != 0 and "the project config has errors" in started.stderr


@pytest.mark.parametrize("how", ["readable", "made-private-at-start"])
def test_a_verifier_others_could_read_refuses_the_start_until_replaced(tmp_path: Path, how: str):
    project = OfflineProject(tmp_path / "proj")
    assert al(project, "dashboard", "password", "--stdin", stdin=f"{PASSWORD}\n").returncode == 0
    verifier = project.root / ".al" / "dashboard-password"
    verifier.chmod(0o644)
    if how == "made-private-at-start":  # .al/ open too: the start's check makes both private
        (project.root / ".al").chmod(0o755)
    for _ in range(2):  # moved aside at the first refusal: the second start refuses too
        refused = al(project, "start")
        assert refused.returncode != 0
        assert "verifier was readable by other users" in refused.stderr, refused.stderr
        assert "al dashboard password" in refused.stderr
    assert not verifier.exists() and verifier.with_name("dashboard-password.exposed").exists()
    assert al(project, "dashboard", "password", "--stdin", stdin=f"{PASSWORD}!\n").returncode == 0
    assert not verifier.with_name("dashboard-password.exposed").exists()
    sched = SchedulerProcess(project)
    try:
        assert sched.get("/control/stat").status_code == 200
    finally:
        sched.stop()


def _wait(throttle: SignInThrottle, address: str) -> int:
    """Seconds ``address`` must wait; a try that may go on is counted wrong."""
    with throttle.attempt(address) as attempt:
        if not attempt.wait:
            attempt.failed()
        return attempt.wait


def test_throttle_allows_again_after_the_window():
    now = [0.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    for _ in range(password.MAX_FAILURES):
        assert _wait(throttle, "10.0.0.1") == 0
    assert _wait(throttle, "10.0.0.1") == int(password.WINDOW) + 1
    assert _wait(throttle, "10.0.0.2") == 0, "per client"
    now[0] = 30.0
    assert 0 < _wait(throttle, "10.0.0.1") <= 31
    now[0] = password.WINDOW + 0.5
    with throttle.attempt("10.0.0.1") as attempt:
        assert attempt.wait == 0
        attempt.failed()
    with throttle.attempt("10.0.0.1") as attempt:
        attempt.succeeded()
    assert _wait(throttle, "10.0.0.1") == 0


def test_loopback_is_one_client_and_an_ipv6_host_its_64():
    assert {password.client_key(a) for a in ("127.0.0.1", "127.9.9.9", "::1")} == {"loopback"}
    assert password.client_key("::ffff:127.0.0.2") == "loopback"
    assert password.client_key("2001:db8::1") == password.client_key("2001:db8::ffff:2")
    assert password.client_key("2001:db8::1") != password.client_key("2001:db8:0:1::1")
    assert password.client_key("10.0.0.1") != password.client_key("10.0.0.2")
    throttle = SignInThrottle(clock=lambda: 0.0)
    for n in range(password.MAX_FAILURES):
        assert _wait(throttle, f"127.0.{n}.1") == 0
    assert _wait(throttle, "127.200.0.9") > 0 and _wait(throttle, "::1") > 0


def test_tries_being_checked_count_and_all_clients_have_a_limit_together():
    now = [0.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    with contextlib.ExitStack() as checking:  # five tries of one client, none answered yet
        for _ in range(password.MAX_FAILURES):
            assert checking.enter_context(throttle.attempt("10.0.0.1")).wait == 0
        assert throttle.attempt("10.0.0.1").__enter__().wait > 0
    # Many clients, each under its own limit: all of them together reach theirs.
    for n in range(password.MAX_FAILURES_ALL):
        assert _wait(throttle, f"10.1.{n}.1") == 0, n
    assert _wait(throttle, "10.2.0.1") == int(password.WINDOW) + 1, "anyone waits now"
    now[0] = password.WINDOW + 0.5
    assert _wait(throttle, "10.2.0.1") == 0


@pytest.fixture
def own(tmp_path: Path) -> Iterator[Dashboard]:
    """A dashboard of its own (the throttle test blocks its client for a minute)."""
    dash = Dashboard(make_project(tmp_path / "proj"))
    yield dash
    dash.stop()


def test_guessing_is_answered_429_and_logged_without_the_guess(own: Dashboard):
    with browser(own, signed_in=False) as client:
        csrf = page_csrf(client, "/login")
        answers = [
            client.post("/login", data={"csrf": csrf, "token": f"guess-{n}-secretish"})
            for n in range(password.MAX_FAILURES + 3)
        ]
        codes = [a.status_code for a in answers]
        assert codes == [401] * password.MAX_FAILURES + [429] * 3, codes
        assert 0 < int(answers[-1].headers["retry-after"]) <= int(password.WINDOW) + 1
        # The right password waits too: the limit is on the client, before any check.
        right = client.post("/login", data={"csrf": csrf, "token": PASSWORD})
        assert right.status_code == 429
    log = own.sched.read_log()
    assert log.count("dashboard: wrong sign-in from 127.0.0.1") == password.MAX_FAILURES
    assert "guess-" not in log and PASSWORD not in log


def test_concurrent_guesses_get_no_more_tries_than_sequential_ones(own: Dashboard):
    """50 wrong passwords at once: those past the limit are refused (429) before any check,
    as if they had come one after another; the right password is refused while it lasts."""
    with browser(own, signed_in=False) as client:
        csrf = page_csrf(client, "/login")
        cookies = dict(client.cookies)

    def guess(n: int) -> int:
        with httpx.Client(base_url=own.url, timeout=30, cookies=cookies) as one:
            return one.post("/login", data={"csrf": csrf, "token": f"guess-{n}"}).status_code

    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        codes = collections.Counter(pool.map(guess, range(50)))
    assert codes[401] <= password.MAX_FAILURES and codes[429] >= 50 - password.MAX_FAILURES
    assert set(codes) <= {401, 429}, codes
    with httpx.Client(base_url=own.url, timeout=30, cookies=cookies) as one:
        right = one.post("/login", data={"csrf": csrf, "token": PASSWORD})
    assert right.status_code == 429 and int(right.headers["retry-after"]) > 0


@pytest.fixture
def bound(tmp_path: Path) -> Iterator[Dashboard]:
    """A dashboard of its own on 127.0.0.2, which clients from any loopback address may use."""
    dash = Dashboard(make_project(tmp_path / "proj", bind="127.0.0.2"))
    yield dash
    dash.stop()


def test_guesses_from_ever_new_loopback_addresses_are_one_client(bound: Dashboard):
    """200 wrong passwords, each from another address of 127/8 (8 at a time): 429 after the
    limit, and the right password from 127.9.9.9 is refused while it lasts."""

    with browser(bound, signed_in=False) as client:
        csrf = page_csrf(client, "/login")
        cookies = dict(client.cookies)

    def post(source: str, token: str) -> httpx.Response:
        transport = httpx.HTTPTransport(local_address=source)
        with httpx.Client(
            base_url=bound.url, timeout=10, transport=transport, cookies=cookies
        ) as one:
            return one.post("/login", data={"csrf": csrf, "token": token})

    def guess(n: int) -> int:
        return post(f"127.1.{n // 250}.{n % 250 + 1}", f"guess-{n}").status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = collections.Counter(pool.map(guess, range(200)))
    assert codes == {401: password.MAX_FAILURES, 429: 200 - password.MAX_FAILURES}, codes
    right = post("127.9.9.9", PASSWORD)
    assert right.status_code == 429, right.text
    log = bound.sched.read_log()
    assert log.count("dashboard: wrong sign-in from 127.1.") == password.MAX_FAILURES


def test_sign_out_ends_the_session_server_side(local: Any):
    with browser(local, signed_in=False) as client:
        csrf = page_csrf(client, "/login")
        assert client.post("/login", data={"csrf": csrf, "token": PASSWORD}).status_code == 303
        assert client.get("/api/agents").status_code == 200
        copied = dict(client.cookies)
        csrf = page_csrf(client)
        assert client.post("/logout", data={"csrf": csrf}).status_code == 303
    with httpx.Client(base_url=local.url, timeout=10, cookies=copied) as stolen:
        assert stolen.get("/api/agents").status_code == 401
        assert stolen.get("/").status_code == 303
