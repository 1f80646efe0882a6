"""The console in headless Chromium (Debian's ``chromium``, driven by Playwright): every page
renders with its charts, a routing change goes from replay preview to canary to promotion (and
another is rolled back), the record is searched down to one exchange and its episode, a key is
shown once then revoked, a key's and a team's training use are set, a replica drains, a weight
swap shows its progress, the flywheel's rounds open, and a browser without a session lands on
the login.

Screenshots of each page go to ``$SWITCHYARD_CONSOLE_SHOTS`` when set (``docs/console`` for the
documentation), else to a temporary folder.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    ViewportSize,
    expect,
    sync_playwright,
)

from tests.gateway.console.site import ADMIN_TOKEN, CANDIDATE_VERSION, OPERATOR, Site, wait_recorded
from traffic.store.console_queries import changes
from traffic.store.forgetting import TaintRecord, add_taints

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (make setup)"
)
VIEWPORT: ViewportSize = {"width": 1400, "height": 900}
PAGES = ("overview", "routing", "traffic", "models", "flywheel", "keys", "history")
LATER_SHOTS = ("routing", "history")  # taken once a canary runs, and after the changes


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Browser]:
    """One browser for the module, started after the site (whose seeding runs its own loop)."""
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(site: Site, browser: Browser) -> Iterator[Page]:
    """A logged-in page; fails the test on any script error or failed request."""
    context = browser.new_context(viewport=VIEWPORT, base_url=site.url)
    tab = context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))

    def console_error(msg: ConsoleMessage) -> None:
        # a refusal the page shows (400 invalid change, 403) is the test's to check
        if msg.type == "error" and not re.search(r"(status of|Error Code) 40[03]", msg.text):
            problems.append(f"console: {msg.text}")

    tab.on("console", console_error)
    tab.goto("/ui/overview")
    tab.fill("input[name=operator]", OPERATOR)
    tab.fill("input[name=token]", ADMIN_TOKEN)
    tab.click("button[type=submit]")
    tab.wait_for_url("**/ui/overview")
    yield tab
    context.close()
    assert problems == []


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("SWITCHYARD_CONSOLE_SHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _drawn_charts(tab: Page) -> int:
    drawn: int = tab.locator("canvas[data-drawn='1']").count()
    return drawn


def test_every_page_renders_with_its_charts(page: Page, shots: Path) -> None:
    expected_charts = {"overview": 4, "flywheel": 4}
    for name in PAGES:
        page.goto(f"/ui/{name}")
        assert page.locator(f"nav a[aria-current=page][href='/ui/{name}']").count() == 1
        assert page.locator(".error-box").count() == 0, name
        assert _drawn_charts(page) == expected_charts.get(name, 0), name
        if name not in LATER_SHOTS:
            page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    page.goto("/ui/overview?window=7d&by=decision")
    assert "learned:local" in page.inner_text("#breakdown")
    assert "roll-ups" in page.inner_text("h2")


def test_a_routing_change_is_previewed_then_canaried_then_promoted_or_rolled_back(
    page: Page, site: Site, shots: Path
) -> None:
    live = site.gw.state.routing.policy.version
    page.goto("/ui/routing")
    assert page.inner_text("#live-policy").count("scorer") >= 1
    page.fill("input[name=version]", "v1-c1")
    page.fill("input[name=quality_target]", "0.5")
    page.fill("input[name=exploration_share]", "0.2")
    page.click("#preview-button")
    page.wait_for_selector("#preview-result")
    assert _drawn_charts(page) == 4
    table = page.inner_text("#preview-table")
    assert "overall" in table
    # Beside the replay, the estimate from the logged propensities, with its interval.
    ope = page.inner_text("#off-policy")
    assert "doubly robust" in ope and "[" in ope and "imputes" in ope
    # Evidence of the served weights only: the synthetic record's earlier rounds' are left out.
    weights = page.inner_text("#evidence-weights")
    assert "served weights ft-r" in weights and "replaced weights left out" in weights
    page.screenshot(path=str(shots / "routing-preview.png"), full_page=True)
    page.fill("input[name=share]", "0.25")
    page.click("#apply-canary")
    page.wait_for_url("**/ui/routing")
    canary = site.gw.state.decider.canary
    assert canary is not None and canary.share == 0.25 and canary.routing.version == "v1-c1"
    assert "25.0%" in page.inner_text("#canary")
    # the release's sequential test: no differing verdict yet, so it goes on
    release = page.inner_text("#release-test")
    assert "Next decision: continue" in release and "decided differently" in release
    page.screenshot(path=str(shots / "routing.png"), full_page=True)
    assert "SIGHUP" in page.inner_text("#promote-lifetime")
    page.click("#promote")
    page.wait_for_url("**/ui/routing?promoted=*")
    assert site.gw.state.decider.canary is None
    promoted = site.gw.state.routing.policy.version
    assert promoted != live and promoted.startswith("v1-c1+")
    notice = page.inner_text("#promoted")  # that it is kept, and the YAML to make it the file's
    assert promoted in notice and "restart or SIGHUP reload" in notice and "live release" in notice
    assert "version: v1-c1" in page.inner_text("#promoted-yaml")
    kept = page.locator("#releases tr", has_text="v1-c1").first.inner_text()
    assert "promoted" in kept and OPERATOR in kept and "25.0%" in kept
    learned = site.gw.state.config.routing.learned
    assert learned is not None and learned.quality_target == 0.5
    # a second change, canaried then rolled back: the promoted policy stays live
    page.fill("input[name=version]", "v1-c2")
    page.click("#preview-button")
    page.wait_for_selector("#preview-result")
    page.click("#apply-canary")
    page.wait_for_url("**/ui/routing")
    assert site.gw.state.decider.canary is not None
    page.click("#pause")  # held by hand: no request goes to it, and it says so
    page.wait_for_url("**/ui/routing")
    paused = site.gw.state.decider.canary
    assert paused is not None and paused.paused and "paused" in page.inner_text("#canary-state")
    assert "paused" in page.locator("#releases tr", has_text="v1-c2").first.inner_text()
    page.click("#resume")
    page.wait_for_url("**/ui/routing")
    resumed = site.gw.state.decider.canary
    assert resumed is not None and not resumed.paused and page.locator("#pause").count() == 1
    page.click("#rollback")
    page.wait_for_url("**/ui/routing")
    assert site.gw.state.decider.canary is None and site.gw.state.routing.policy.version == promoted
    history = page.inner_text("#history")
    for action in ("routing.canary", "routing.pause", "routing.resume", "routing.rollback"):
        assert action in history
    recorded = site.gw.call(changes(site.gw.app.state.recorder.backend, action_prefix="routing."))
    assert {c.actor for c in recorded} == {OPERATOR}
    assert [c.action for c in recorded][:6] == [
        "routing.rollback",
        "routing.resume",
        "routing.pause",
        "routing.canary",
        "routing.retire",
        "routing.promote",
    ]
    page.goto("/ui/history")
    page.screenshot(path=str(shots / "history.png"), full_page=True)


def test_an_invalid_routing_change_says_why(page: Page) -> None:
    page.goto("/ui/routing")
    page.fill(
        "textarea[name=rules]", "- name: broken\n  match: {has_tools: true}\n  target: nowhere"
    )
    page.fill("input[name=version]", "v1-bad")
    page.click("#preview-button")
    page.wait_for_selector("#preview .error-box")
    assert "nowhere" in page.inner_text("#preview")


def test_the_record_is_searched_down_to_one_exchange_and_its_episode(
    page: Page, shots: Path
) -> None:
    page.goto("/ui/traffic")
    page.fill("input[name=text]", "live_0")
    page.click("#traffic-filters button[type=submit]")
    page.wait_for_url(re.compile(r".*text=live_0.*"))
    rows = page.locator("#hits tbody tr")
    assert rows.count() == 1 and "live_0" not in page.inner_text("#hits")  # bodies not listed
    rows.first.get_by_role("link", name="open").click()
    page.wait_for_url(re.compile(r".*/ui/traffic/[0-9a-f-]{36}"))
    assert "live_0" in page.inner_text(".conversation")
    assert page.inner_text("#reason")
    page.screenshot(path=str(shots / "exchange.png"), full_page=True)
    page.get_by_text("ep-live-session").first.click()
    page.wait_for_url("**/ui/episodes/ep-live-session")
    assert page.locator("#hits tbody tr").count() == 2


def test_a_key_is_shown_once_then_revoked(page: Page, site: Site) -> None:
    page.goto("/ui/keys")
    page.fill("#key-form input[name=name]", "browser-made")
    page.fill("#key-form input[name=budget_usd]", "5")
    page.click("#create-key")
    plaintext = page.inner_text("#plaintext").strip()
    assert plaintext.startswith("sy-")
    page.goto("/ui/keys")
    assert plaintext not in page.content()
    row = page.locator("#keys tbody tr", has_text="browser-made")
    assert "$5.00" in row.inner_text()
    row.get_by_role("button", name="Revoke").click()
    page.wait_for_url("**/ui/keys")
    assert "revoked" in page.locator("#keys tbody tr", has_text="browser-made").inner_text()


def test_a_keys_training_use_is_shown_and_set_per_key_and_per_team(page: Page, site: Site) -> None:
    def consent() -> str:
        row = page.locator("#keys tbody tr", has_text="consent-made")
        return row.locator("td.consent").inner_text()

    page.goto("/ui/keys")
    page.fill("#key-form input[name=name]", "consent-made")
    page.fill("#key-form input[name=team_id]", "browser-team")
    page.select_option("#key-form select[name=training_use]", "redact")
    page.click("#create-key")
    page.goto("/ui/keys")
    assert "redact" in consent() and "own" in consent()
    row = page.locator("#keys tbody tr", has_text="consent-made")
    row.locator("select[name=training_use]").select_option("inherit")
    row.get_by_role("button", name="Set", exact=True).click()
    page.wait_for_url("**/ui/keys")
    assert "allow" in consent() and "default" in consent()  # the config's auth.training_use
    page.fill("#team-form input[name=team_id]", "browser-team")
    page.select_option("#team-use", "deny")
    page.click("#set-team")
    page.wait_for_url("**/ui/keys")
    assert "deny" in consent() and "team browser-team" in consent()
    assert "deny" in page.locator("#team-table tr", has_text="browser-team").inner_text()
    page.goto("/ui/history?kind=team.")
    assert OPERATOR in page.locator("#changes tr", has_text="browser-team").first.inner_text()
    page.goto("/ui/history?kind=key.")
    assert "key.consent" in page.inner_text("#changes")


def test_a_replica_drains_and_a_weight_swap_shows_its_progress(page: Page, site: Site) -> None:
    pool = site.gw.state.targets.pools()["local"]
    (replica,) = pool.replicas.values()
    page.goto("/ui/models")
    page.get_by_role("button", name="Drain").click()
    page.wait_for_url("**/ui/models")
    assert replica.drained and "drained" in page.inner_text("#swap-status")
    page.get_by_role("button", name="Undrain").click()
    page.wait_for_url("**/ui/models")
    assert not replica.drained
    assert "passed" in page.inner_text("#versions") or "failed" in page.inner_text("#versions")
    page.select_option("#publish-form select[name=version]", CANDIDATE_VERSION)
    page.click("#publish")
    page.wait_for_url("**/ui/models")
    assert page.inner_text("#swap-state") in ("running", "failed")
    # the page polls the swap until the command ends: this checkpoint has no version file
    expect(page.locator("#swap-state")).to_have_text("failed", timeout=90_000)
    assert "switchyard_version.json" in page.inner_text("#swap-job")
    assert not replica.drained  # nothing was drained: the command stopped before
    wait_recorded(site.gw)
    recorded = site.gw.call(changes(site.gw.app.state.recorder.backend, action_prefix="model."))
    assert [c.action for c in recorded][:2] == ["model.publish.end", "model.publish"]
    assert recorded[0].detail["state"] == "failed" and recorded[1].actor == OPERATOR


def test_the_flywheel_rounds_and_their_reports_open(page: Page, shots: Path) -> None:
    page.goto("/ui/flywheel")
    assert page.locator("#round-figures tbody tr").count() == 4
    assert page.locator("#rounds tbody tr").count() == 4
    page.locator("#rounds tbody tr", has_text="failed").get_by_text("report").click()
    page.wait_for_url(re.compile(r".*/rounds/2$"))
    assert "refactor: accept 0.41 < 0.45" in page.inner_text("main")
    assert "gate round 2: failed" in page.inner_text("main")
    page.screenshot(path=str(shots / "flywheel-round.png"), full_page=True)


def test_a_browser_without_a_session_lands_on_the_login(browser: Browser, site: Site) -> None:
    context = browser.new_context(base_url=site.url)
    tab = context.new_page()
    tab.goto("/ui/keys")
    assert tab.url.endswith("/ui/login?next=/ui/keys")
    assert "ide-team-a" not in tab.content()
    tab.fill("input[name=operator]", OPERATOR)
    tab.fill("input[name=token]", "not-the-token")
    tab.click("button[type=submit]")
    assert "Wrong admin token" in tab.inner_text("main")
    context.close()


def test_an_automatic_rollback_shows_in_the_change_log(page: Page, site: Site) -> None:
    """A canary whose answers users reject is rolled back by the release monitor, and the
    Changes page names it: real requests and feedback through the site's gateway."""
    base = site.url
    routing = site.gw.state.config.routing.model_dump(mode="json")
    aliases = {**routing["aliases"], "gpt-4o-mini": "local"}  # live pins it to the frontier
    candidate = {**routing, "version": "v1-auto", "aliases": aliases}
    bearer = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    started = httpx.post(
        base + "/admin/canary", json={"routing": candidate, "share": 0.5}, headers=bearer
    )
    assert started.status_code == 200, started.text
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    shown = ""
    for i in range(400):
        if site.gw.state.decider.canary is None:
            break
        if i == 8:  # the running release on the routing page: each arm with its band
            page.goto("/ui/routing")
            shown = page.inner_text("#release-test")
        answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=30)
        on_candidate = answer.headers["x-switchyard-policy-version"].startswith("v1-auto")
        wait_recorded(site.gw)  # feedback is taken on a recorded inference
        verdict = {
            "inference_id": answer.headers["x-request-id"],
            "kind": "rejected" if on_candidate else "accepted",
        }
        httpx.post(base + "/v1/feedback", json=verdict, timeout=10).raise_for_status()
    assert site.gw.state.decider.canary is None
    assert "candidate" in shown and "live" in shown and "Next decision: continue" in shown
    assert "[" in shown and "verdicts" in shown
    wait_recorded(site.gw)
    page.goto("/ui/routing")  # the release table keeps it, with the test's bounds and counts
    release = page.locator("#releases tr", has_text="v1-auto").first.inner_text()
    assert "rolled_back" in release and "release-monitor" in release and "/" in release
    page.goto("/ui/history")
    row = page.locator("#changes tr", has_text="release-monitor").first
    assert "routing.rollback" in row.inner_text() and "v1-auto" in row.inner_text()


def test_a_release_of_weights_shows_on_the_models_page(page: Page, site: Site) -> None:
    """A release carrying weights: the models page names the candidate's weights, its share and
    the test's next decision, and links to where it is decided."""
    base = site.url
    bearer = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    (url,) = site.gw.state.targets.pools()["local"].replicas
    body = {"target": "local", "replica": url, "weights_version": "ft-release"}
    httpx.post(base + "/admin/replicas/undrain", json=body, headers=bearer).raise_for_status()
    routing = site.gw.state.routing.config.routing.model_dump(mode="json")
    canary = {"routing": {**routing, "version": "v1-weights"}, "share": 0.3}
    canary["weights_version"] = "ft-release"
    httpx.post(base + "/admin/canary", json=canary, headers=bearer).raise_for_status()
    try:
        page.goto("/ui/models")
        shown = page.inner_text("#model-release")
        assert "ft-release" in shown and "30.0%" in shown and "Next decision: continue" in shown
        page.click("#model-release a")
        page.wait_for_url("**/ui/routing*")
        assert "ft-release" in page.inner_text("#canary-state")
    finally:
        httpx.delete(base + "/admin/canary", headers=bearer).raise_for_status()


def test_a_served_checkpoint_that_learned_from_forgotten_records_is_flagged(
    page: Page, site: Site
) -> None:
    """A forget taints what trained on the records (traffic.forget): the models page says the
    served weights need retraining, and marks the version tainted in the registry's table."""
    base = site.url
    bearer = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    pool = site.gw.state.targets.pools()["local"]
    (url,) = pool.replicas
    before = pool.replicas[url].weights_version
    versions = site.gw.call(site.gw.app.state.recorder.backend.list_model_versions())
    served = versions[0].id  # a registry version, served by the one replica
    body = {"target": "local", "replica": url, "weights_version": served}
    httpx.post(base + "/admin/replicas/undrain", json=body, headers=bearer).raise_for_status()
    taint = TaintRecord(model_version_id=served, forget_id="01a25209-d992-77cc-ac92-4d3118b50741")
    site.gw.call(add_taints(site.gw.app.state.recorder.backend, [taint]))
    try:
        page.goto("/ui/models")
        banner = page.inner_text("#tainted-served")
        assert served in banner and "01a25209-d992" in banner and "retrain" in banner
        (row,) = [r for r in page.locator("#versions tbody tr").all_inner_texts()
                  if r.split("\t")[0] == served]  # fmt: skip
        assert "tainted" in row
    finally:
        restore = {**body, "weights_version": before}
        httpx.post(base + "/admin/replicas/undrain", json=restore, headers=bearer)
