"""The dashboard in real headless Chromium (Debian's ``chromium``) driven by Playwright, against a
real scheduler process with 3 agents and 20 runs (and more). Each page is checked live (no reload) and
photographed: into the temporary directory, or with ``AL_UPDATE_SCREENSHOTS=1`` into ``docs/img/``
for ``docs/dashboard.md`` (so a test run leaves the checkout as it was).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llamaherd.testing_services import chromium_path

pytestmark = pytest.mark.browser

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
IMAGES = (
    Path(__file__).resolve().parents[3] / "docs" / "img"
    if os.environ.get("AL_UPDATE_SCREENSHOTS")
    else Path(tempfile.gettempdir()) / "llamaherd-dashboard-screenshots"
)
LONG = 20_000  # ms: a whole scripted run, with room for a slow CI machine
BACKGROUND_RUNS = 20  # finished runs of `secret` before the tests begin


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Chromium driven by Playwright (each test here is marked ``browser``: skipped where
    either is missing, failed under AL_REQUIRE_SERVICES=1, as in CI)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(chromium_path()), args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def project(local: Any) -> Any:
    """The local scheduler with a history: ``BACKGROUND_RUNS`` finished runs of ``secret``."""
    local.queue_many("secret", BACKGROUND_RUNS)
    local.wait_for(
        lambda: sum(r["state"] == "done" for r in local.runs("secret")) >= BACKGROUND_RUNS,
        timeout=120,
    )
    return local


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies); fails the test on an uncaught script error or a
    Content-Security-Policy violation."""
    context = chromium.new_context(viewport={"width": 1360, "height": 900})
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


def sign_in(page: Any, dash: Any, path: str = "/") -> None:
    from playwright.sync_api import expect

    page.goto(dash.url + path)
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill("#token", dash.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(dash.url + path)


def screenshot(page: Any, name: str) -> Path:
    IMAGES.mkdir(parents=True, exist_ok=True)
    path = IMAGES / f"dashboard-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000  # a rendered page, not a blank one
    return path


def same_document(page: Any) -> None:
    """Mark the document: ``still_same`` tells whether what followed arrived live."""
    page.evaluate("window.sameDocument = true")


def still_same(page: Any) -> bool:
    return page.evaluate("window.sameDocument") is True


def test_overview_pause_resume_and_state_changes_act(project: Any, page: Any) -> None:
    from playwright.sync_api import expect

    sign_in(page, project)
    same_document(page)
    rows = page.locator("#agents tbody tr")
    expect(rows).to_have_count(3)
    secret = page.locator('tr[data-agent="secret"]')
    expect(secret.locator("td").nth(7).locator("path")).to_have_count(1)
    assert re.fullmatch(r"\d+%", secret.locator("td").nth(8).inner_text())
    expect(page.locator("#sched-state")).to_have_text("up")

    page.get_by_role("button", name="Pause all").click()
    expect(page.locator("#sched-state")).to_have_text("paused", timeout=LONG)
    expect(secret.locator(".badge").first).to_have_text("paused")
    page.get_by_role("button", name="Resume all").click()
    expect(page.locator("#sched-state")).to_have_text("up", timeout=LONG)

    forever = page.locator('tr[data-agent="forever"]')
    forever.locator("select").select_option("hibernate")
    expect(forever.locator(".badge").first).to_have_text("hibernate", timeout=LONG)
    assert project.get("/api/agents/forever").json()["status"]["stored_state"] == "hibernate"
    forever.locator("select").select_option("idle")
    expect(forever.locator(".badge").first).to_have_text("idle", timeout=LONG)
    assert still_same(page)

    page.fill(".filter input[name=q]", "sec")
    page.press(".filter input[name=q]", "Enter")
    expect(rows).to_have_count(1)
    page.goto(project.url + "/?sort=-runs")
    expect(rows.first).to_have_attribute("data-agent", "secret")


def test_run_page_streams_the_conversation_live(project: Any, page: Any) -> None:
    from playwright.sync_api import expect

    sign_in(page, project)
    run_id = project.queue_run("slow")
    page.goto(f"{project.url}/runs/{run_id}")
    same_document(page)
    lines = page.locator("#log pre.out", has_text=re.compile(r"^line \d$"))
    seen = []
    deadline = time.monotonic() + LONG / 1000
    while time.monotonic() < deadline and (not seen or seen[-1] < 6):
        count = lines.count()
        if not seen or count != seen[-1]:
            seen.append(count)
        time.sleep(0.05)
    assert seen[-1] == 6 and seen == sorted(seen) and len(seen) >= 3, f"line counts seen: {seen}"
    expect(page.locator("#log-state")).to_have_text("Run ended: done.", timeout=LONG)
    expect(page.locator("#run-state .badge")).to_have_text("done", timeout=LONG)
    expect(page.locator("#run-status")).to_contain_text("<b>half</b> way")  # shown as text
    expect(page.locator("#run-status pre.value")).to_contain_text('"lines": 6')
    expect(page.locator("#log .turn").first).to_contain_text("turn 1")
    expect(page.locator("#log .turn").first).to_contain_text(" in / ")
    page.locator("#log details.tool").first.locator("summary").click()
    expect(page.locator("#log details.tool").first.locator("pre.out")).to_be_visible()
    assert still_same(page)  # arrived live, not by reloading
    screenshot(page, "run")


def test_kill_acts_on_a_live_run(project: Any, page: Any) -> None:
    from playwright.sync_api import expect

    sign_in(page, project, "/agents/forever")
    before = {run["id"] for run in project.runs("forever")}
    page.get_by_role("button", name="Run now").click()
    expect(page).to_have_url(re.compile(r"/agents/forever\?queued=\d+$"))
    row = page.locator("#runs tbody tr").first
    expect(row.locator(".badge")).to_have_text("running", timeout=LONG)
    run_id = row.get_attribute("data-run")
    assert run_id and run_id not in before
    row.locator("a").first.click()
    expect(page).to_have_url(f"{project.url}/runs/{run_id}")
    page.get_by_role("button", name="Kill").click()
    expect(page.locator("#run-state .badge")).to_have_text("killed", timeout=LONG)
    expect(page.locator("#log-state")).to_have_text("Run ended: killed.", timeout=LONG)
    expect(page.get_by_role("button", name="Kill")).to_have_count(0)
    expect(page.locator("#run-status")).to_contain_text("No return value")
    assert project.state(run_id) == "killed"


def test_agent_page_shows_every_trigger_and_the_queue(project: Any, page: Any) -> None:
    from playwright.sync_api import expect

    sign_in(page, project, "/agents/slow")
    triggers = page.locator("#triggers li")
    expect(triggers.filter(has_text="schedule")).to_contain_text("0 3 * * *")
    expect(triggers.filter(has_text="webhook")).to_contain_text("events=push")
    expect(triggers.filter(has_text="manual")).to_have_count(1)
    page.goto(project.url + "/agents/secret")
    expect(page.locator("#triggers li").filter(has_text="every")).to_contain_text("6h")
    assert page.locator("#chart-duration rect").count() >= BACKGROUND_RUNS
    screenshot(page, "agent")

    # Paused, a queued run stays queued: it is listed, and Remove takes it out.
    page.get_by_role("button", name="Pause all").click()
    expect(page.locator("#sched-state")).to_have_text("paused", timeout=LONG)
    page.get_by_role("button", name="Run now").click()
    item = page.locator("#queued tr[data-item]")
    expect(item).to_have_count(1, timeout=LONG)
    item.get_by_role("button", name="Remove").click()
    expect(page.locator("#queued")).to_contain_text("Nothing queued.", timeout=LONG)
    page.get_by_role("button", name="Resume all").click()
    expect(page.locator("#sched-state")).to_have_text("up", timeout=LONG)
    assert project.get("/api/agents/secret").json()["status"]["queued"] == 0


def test_runs_page_filters_pages_and_updates_live(project: Any, page: Any) -> None:
    from playwright.sync_api import expect

    sign_in(page, project, "/runs")
    rows = page.locator("#runs tbody tr[data-run]")
    assert rows.count() >= 20
    screenshot(page, "runs")
    page.select_option("select[name=agent]", "secret")
    page.select_option("select[name=state]", "done")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"agent=secret.*state=done"))
    assert rows.count() >= BACKGROUND_RUNS
    for cell in rows.locator("td:nth-child(2)").all_inner_texts():
        assert cell == "secret"
    page.fill("input[name=q]", "no-such-run-anywhere")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#runs tbody")).to_contain_text("No runs.")

    page.goto(project.url + "/runs?agent=slow")
    same_document(page)
    before = rows.count()
    run_id = project.queue_run("slow")
    expect(rows.first).to_have_attribute("data-run", run_id, timeout=LONG)
    assert rows.count() == before + 1 and still_same(page)
    project.wait_for(lambda: project.state(run_id) == "done")


def test_deliveries_page_replays_a_delivery(project: Any, page: Any) -> None:
    from playwright.sync_api import expect

    answer = project.deliver("push", {"ref": "main"}).json()
    assert answer["agents"] == ["slow"]
    project.wait_for(
        lambda: (
            project.runs("slow")[0]["trigger_kind"] == "webhook"
            and project.runs("slow")[0]["state"] == "done"
        )
    )
    rejected = project.deliver("push", {"ref": "x"}, raw=b"{not json").status_code
    assert rejected == 400
    sign_in(page, project, "/deliveries")
    rows = page.locator("#deliveries tbody tr[data-delivery]")
    expect(rows.filter(has_text="matched").first).to_contain_text("slow")
    dead = page.locator("#dead-letters tbody tr[data-delivery]")
    expect(dead.first).to_contain_text("400")
    expect(dead.get_by_role("button", name="Replay")).to_have_count(0)  # never verified
    screenshot(page, "deliveries")
    webhook_runs = sum(r["trigger_kind"] == "webhook" for r in project.runs("slow"))
    matched = rows.filter(has_text="matched").first
    matched.get_by_role("button", name="Replay").click()
    expect(page.locator(".flash")).to_contain_text("was replayed")
    expect(rows.first.locator("code")).to_have_text(re.compile(r"^replay-\d+-"))
    project.wait_for(
        lambda: sum(r["trigger_kind"] == "webhook" for r in project.runs("slow")) > webhook_runs
    )


def test_a_paused_agent_says_so_and_is_resumed_from_its_page(project: Any, page: Any) -> None:
    from playwright.sync_api import expect

    project.sched.project.al("pause", "forever", check=True)  # as an operator would
    sign_in(page, project, "/agents/forever")
    expect(page.locator("#agent-state .badge")).to_have_text("paused")
    expect(page.locator("#agent-state select")).to_have_value("paused")  # the state control
    expect(page.locator("#paused-note")).to_contain_text("Run now queues a run that starts on")
    run_now = page.get_by_role("button", name="Run now")
    expect(run_now).to_have_attribute("title", re.compile("starts when runs are resumed"))
    run_now.click()
    expect(page).to_have_url(re.compile(r"/agents/forever\?queued=\d+$"))
    expect(page.locator("p.flash").last).to_contain_text("it starts when runs are resumed")
    expect(page.locator("#queued tr[data-item]")).to_have_count(1)

    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#agent-state .badge")).to_have_text("active", timeout=LONG)
    expect(page.locator("#paused-note")).to_be_empty()
    assert project.get("/api/agents/forever").json()["paused"] == {"agent": False, "all": False}
    run_id = page.locator("#runs tbody tr").first.get_attribute("data-run")
    project.kill(run_id)


def test_an_agent_paused_with_al_pause_is_resumed_from_the_overview_menu(
    project: Any, page: Any
) -> None:
    """Issue 42 item 8: the overview's state menu of an agent paused from the CLI shows
    ``paused``; choosing ``idle`` resumes it (the page says so) and the run queued meanwhile
    starts and ends."""
    import httpx
    from playwright.sync_api import expect

    project.sched.project.al("pause", "secret", check=True)
    before = {r["id"] for r in project.runs("secret")}
    queued = httpx.post(f"{project.url}/api/agents/secret/run", headers=project.bearer, timeout=10)
    assert queued.status_code == 202 and "it starts on resume" in queued.json()["note"]
    sign_in(page, project)
    row = page.locator('tr[data-agent="secret"]')
    expect(row.locator(".badge").first).to_have_text("paused")
    expect(row.locator("select")).to_have_value("paused")
    assert project.get("/api/agents/secret").json()["paused"]["agent"] is True

    row.locator("select").select_option("idle")
    expect(page.locator("#alert")).to_have_text("secret resumed: queued runs start")
    expect(row.locator(".badge").first).not_to_have_text("paused", timeout=LONG)
    assert project.get("/api/agents/secret").json()["paused"] == {"agent": False, "all": False}
    project.wait_for(
        lambda: [
            r for r in project.runs("secret") if r["id"] not in before and r["state"] == "done"
        ],
        timeout=LONG / 1000,
    )


def test_charts_have_axes_and_units(project: Any, page: Any) -> None:
    from playwright.sync_api import expect

    sign_in(page, project, "/agents/secret")
    duration = page.locator("#chart-duration")
    expect(duration.locator("figcaption")).to_contain_text("(seconds per run)")
    expect(duration.locator(".y-axis .top")).to_have_text(re.compile(r"^\d+\.\ds$|^\d+m \d+s$"))
    expect(duration.locator(".y-axis span").last).to_have_text("0")
    expect(duration.locator(".x-axis")).to_contain_text(
        re.compile(r"oldest.*the last \d+ runs.*newest")
    )
    expect(page.locator("#chart-cost figcaption")).to_contain_text("(USD per run)")


def test_a_delivery_links_its_matched_agents_to_their_runs(project: Any, page: Any) -> None:
    from playwright.sync_api import expect

    before = {run["id"] for run in project.runs("slow")}
    answer = project.deliver("push", {"ref": "linked"}).json()
    run_id = project.wait_for(
        lambda: next(
            (
                run["id"]
                for run in project.runs("slow")
                if run["id"] not in before and run["trigger_kind"] == "webhook"
            ),
            None,
        )
    )
    project.wait_for(lambda: project.state(run_id) == "done")
    sign_in(page, project, "/deliveries")
    row = page.locator("#deliveries tbody tr[data-delivery]").filter(has_text=answer["delivery"])
    link = row.get_by_role("link", name="slow")
    expect(link).to_have_attribute("href", f"/runs/{run_id}")
    link.click()
    expect(page).to_have_url(f"{project.url}/runs/{run_id}")


@pytest.mark.parametrize("path", ["/", "/agents/slow", "/runs", "/deliveries", "a finished run"])
def test_at_390_px_nothing_overflows_and_the_header_stays_readable(
    project: Any, chromium: Any, path: str
) -> None:
    from playwright.sync_api import expect

    if path == "a finished run":  # its page has the Save as test and Replay forms
        path = "/runs/" + next(r["id"] for r in project.runs("secret") if r["state"] == "done")
    context = chromium.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        sign_in(page, project, path)
        expect(page.locator("#sched-state")).to_be_visible()
        widths = page.evaluate(
            """() => ({
                page: document.documentElement.scrollWidth,
                header: Math.max(...[...document.querySelectorAll('header.top *')]
                    .filter((el) => el.getClientRects().length)
                    .map((el) => el.getBoundingClientRect().right)),
                smallest: Math.min(...[...document.querySelectorAll('header.top *')]
                    .filter((el) => el.getClientRects().length && el.textContent.trim())
                    .map((el) => parseFloat(getComputedStyle(el).fontSize))),
            })"""
        )
        assert widths["page"] <= 390, f"{path}: the page is {widths['page']} px wide"
        assert widths["header"] <= 390, f"{path}: the header reaches {widths['header']} px"
        assert widths["smallest"] >= 12, f"{path}: header text at {widths['smallest']} px"
        if path == "/agents/slow":
            screenshot(page, "narrow")
    finally:
        context.close()


def test_overview_with_history_and_a_live_run(project: Any, page: Any) -> None:
    """Last of the local ones, so every agent has a history: the overview's picture."""
    from playwright.sync_api import expect

    run_id = project.queue_run("forever")
    sign_in(page, project)
    row = page.locator('tr[data-agent="forever"]')
    expect(row.locator("td").nth(3)).to_have_text("1/1", timeout=LONG)
    screenshot(page, "overview")
    project.kill(run_id)
    expect(row.locator("td").nth(3)).to_have_text("0/1", timeout=LONG)


def test_a_cross_site_form_cannot_start_a_run(project: Any, page: Any) -> None:
    """A page elsewhere posting to the dashboard (classic CSRF) is refused, signed in or not."""
    before = len(project.runs("slow"))
    sign_in(page, project)
    page.set_content(
        f'<form method="post" action="{project.url}/api/agents/slow/run">'
        '<input name="csrf" value="guess"><button>go</button></form>'
    )
    with page.expect_navigation():
        page.click("button")
    assert "Refused" in page.content()
    assert len(project.runs("slow")) == before


def test_non_local_browser_signs_in_with_the_control_token(remote: Any, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(remote.url + "/agents/slow")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fagents%2Fslow$"))
    screenshot(page, "login")
    page.fill("#token", "not-the-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".flash.error")).to_have_text("wrong token or password")
    page.fill("#token", remote.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(remote.url + "/agents/slow")
    cookie = next(c for c in page.context.cookies() if c["name"] == "al_auth")
    assert cookie["httpOnly"] and remote.token not in cookie["value"]
    page.get_by_role("button", name="Run now").click()
    expect(page.locator(".flash")).to_contain_text("Queued as work item")
    page.get_by_role("button", name="sign out").click()
    expect(page).to_have_url(re.compile(r"/login$"))
    page.goto(remote.url + "/")
    expect(page).to_have_url(re.compile(r"/login\?next=%2F$"))
