"""The dashboard in real headless Chromium (Debian's ``chromium``) driven by Playwright, against a
real scheduler process. Screenshots land in ``test-artifacts/``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"
LONG = 20_000  # ms: a whole scripted run, with room for a slow CI machine


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Fails (never skips) when Chromium or Playwright is missing: CI must install both."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"browser tests need Debian's chromium at {CHROMIUM} (apt-get install chromium)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies); fails the test on an uncaught script error or a
    Content-Security-Policy violation."""
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console",
        lambda message: "Content Security Policy" in message.text and errors.append(message.text),
    )
    yield page
    context.close()
    assert not errors, f"script errors on the page: {errors}"


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"dashboard-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000  # a rendered page, not a blank one
    return path


def test_agents_page_follows_a_run_from_active_to_done(local: Any, page: Any) -> None:
    from playwright.sync_api import expect

    run_id = local.queue_run("slow")
    page.goto(local.url + "/")
    row = page.locator('tr[data-agent="slow"]')
    expect(row.locator("td").nth(1)).to_have_text("active")
    expect(row.locator("td").nth(2)).to_have_text("1/1")
    screenshot(page, "agents-active")
    expect(row.locator(f'td.last a[href="/runs/{run_id}"] .badge')).to_have_text(
        "done", timeout=LONG
    )
    expect(row.locator("td").nth(1)).to_have_text("idle")
    assert local.state(run_id) == "done"


def test_run_page_streams_log_lines_live(local: Any, page: Any) -> None:
    from playwright.sync_api import expect

    run_id = local.queue_run("slow")
    page.goto(f"{local.url}/runs/{run_id}")
    page.evaluate("window.sameDocument = true")
    lines = page.locator("#log .out", has_text=re.compile(r"^line \d$"))
    seen = []
    deadline = time.monotonic() + LONG / 1000
    while time.monotonic() < deadline and (not seen or seen[-1] < 6):
        count = lines.count()
        if not seen or count != seen[-1]:
            seen.append(count)
        time.sleep(0.05)
    assert seen[-1] == 6 and seen == sorted(seen) and len(seen) >= 3, f"line counts seen: {seen}"
    expect(lines).to_have_text([f"line {n}" for n in range(1, 7)])
    expect(page.locator("#log-state")).to_have_text("Run ended: done.", timeout=LONG)
    expect(page.locator("#run-state .badge")).to_have_text("done", timeout=LONG)
    expect(page.locator("#run-status")).to_contain_text("<b>half</b> way")  # shown as text
    expect(page.locator("#run-status pre.value")).to_contain_text('"lines": 6')
    assert page.evaluate("window.sameDocument") is True  # arrived live, not by reloading
    screenshot(page, "run-done")


def test_run_and_kill_buttons(local: Any, page: Any) -> None:
    from playwright.sync_api import expect

    before = {run["id"] for run in local.runs("forever")}
    page.goto(f"{local.url}/agents/forever")
    page.get_by_role("button", name="Run now").click()
    expect(page).to_have_url(re.compile(r"/agents/forever\?queued=\d+$"))
    expect(page.locator(".flash")).to_contain_text("Queued as work item")
    row = page.locator("#runs tbody tr").first
    expect(row.locator(".badge")).to_have_text("running", timeout=LONG)
    run_id = row.get_attribute("data-run")
    assert run_id and run_id not in before
    screenshot(page, "agent-running")
    row.locator("a").click()
    expect(page).to_have_url(f"{local.url}/runs/{run_id}")
    page.get_by_role("button", name="Kill").click()
    expect(page.locator("#run-state .badge")).to_have_text("killed", timeout=LONG)
    expect(page.locator("#log-state")).to_have_text("Run ended: killed.", timeout=LONG)
    expect(page.get_by_role("button", name="Kill")).to_have_count(0)
    assert local.state(run_id) == "killed"


def test_a_cross_site_form_cannot_start_a_run(local: Any, page: Any) -> None:
    """A page elsewhere posting to the local dashboard (classic CSRF) is refused."""
    before = len(local.runs("slow"))
    page.goto(local.url + "/")  # the victim has the dashboard open: its session cookie is set
    page.set_content(
        f'<form method="post" action="{local.url}/api/agents/slow/run">'
        '<input name="csrf" value="guess"><button>go</button></form>'
    )
    with page.expect_navigation():
        page.click("button")
    assert "Refused" in page.content()
    assert len(local.runs("slow")) == before


def test_non_local_browser_signs_in_with_the_control_token(remote: Any, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(remote.url + "/agents/slow")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fagents%2Fslow$"))
    screenshot(page, "login")
    page.fill("#token", "not-the-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".flash.error")).to_have_text("wrong token")
    page.fill("#token", remote.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(remote.url + "/agents/slow")
    cookie = next(c for c in page.context.cookies() if c["name"] == "al_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    page.get_by_role("button", name="Run now").click()
    expect(page.locator(".flash")).to_contain_text("Queued as work item")
    page.get_by_role("button", name="sign out").click()
    expect(page).to_have_url(re.compile(r"/login$"))
    page.goto(remote.url + "/")
    expect(page).to_have_url(re.compile(r"/login\?next=%2F$"))
