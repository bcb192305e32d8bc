"""Every dashboard page in Chromium under axe-core's rules (no serious or critical
violation, light and dark), a page worked from the keyboard alone, dark mode following the
system's choice, and the screenshots in docs/screenshots/ made from the pages as they are."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from taskherd.model import NewTask
from taskherd.ops import delivery as delivery_ops
from taskherd.ops import memory as memory_ops
from taskherd.ops import messages as message_ops
from taskherd.policy.admission import ClaimRequest
from taskherd.services.scheduler import Scheduler
from tests.api.test_dashboard_browser import browser, log_in, wait_for  # noqa: F401
from tests.api.test_dashboard_fleet import FLEET_CONFIG
from tests.api_server import served

REPO = Path(__file__).resolve().parents[2]
AXE = REPO / ".axe-core" / "node_modules" / "axe-core" / "axe.min.js"
DOCS_SHOTS = REPO / "docs" / "screenshots"
PAGES = ("/", "/tasks", "/tasks/new", "/tasks/1", "/dead", "/review", "/blocked", "/jobs",
         "/jobs/nightly", "/nodes", "/cooldowns", "/cost", "/messages?address=qa", "/memory",
         "/delivery", "/charts")
SHOWN = {"/": "board", "/nodes": "nodes", "/jobs": "jobs", "/jobs/nightly": "job",
         "/tasks": "tasks", "/messages?address=qa": "messages", "/delivery": "delivery"}
BAD = ("serious", "critical")


@pytest.fixture
def axe() -> str:
    if not AXE.exists():
        if os.environ.get("CI"):
            pytest.fail("axe-core is missing: .ci/run installs it (.ci/install-axe)")
        subprocess.run(["bash", str(REPO / ".ci" / "install-axe")], check=True,
                       stdout=subprocess.DEVNULL)
    return AXE.read_text()


@pytest.fixture
def fleet(tmp_path):
    with served(tmp_path, FLEET_CONFIG) as api:
        store, now = api.queue.store, time.time()
        Scheduler(api.queue.config, api.queue.store).sync_config(now=now)
        store.node_up("n1", host="h", pid=1, version="1.0", lease=60.0, roles=["qa"],
                      tags=["gpu"], now=now)
        store.enqueue_many([NewTask(role="qa", title=f"check {n}") for n in range(3)], now)
        claim = store.claim(ClaimRequest("n1", now, 3600, roles=["qa"]))
        store.mark_spawned(claim.run.id, now, 3600, pid=None, pid_started_at=None,
                           log_path=None)
        store.set_cooldown("claude", now + 600, "rate limited", now)
        message_ops.send(api.queue, message_ops.person(), "qa", "look at check 1", now)
        memory_ops.add(api.queue, "qa", "the staging database resets at noon", now)
        delivery_ops.add_alias(api.queue, "ops", "file", str(tmp_path / "out.jsonl"), now)
        store.pause_budget("qa", now + 60, "qa spent its day", ["ops"], now)
        yield api


def violations(driver, axe_source: str) -> list[str]:
    driver.execute_script(axe_source)
    found = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document).then(r => done(JSON.stringify(r.violations)),"
        " e => done(JSON.stringify([{id: 'axe failed: ' + e, impact: 'critical', nodes: []}])));")
    return [f"{v['id']} ({v['impact']}): {v.get('help', '')} at "
            f"{[n['target'] for n in v['nodes']][:3]}"
            for v in json.loads(found) if v["impact"] in BAD]


def dark(driver, on: bool) -> None:
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
        {"name": "prefers-color-scheme", "value": "dark" if on else "light"}]})


def test_every_page_passes_axe_core_in_light_and_dark(browser, fleet, axe):  # noqa: F811
    browser.set_script_timeout(30)
    browser.get(fleet.url + "/login")
    found = {"/login": violations(browser, axe)}
    log_in(browser, fleet, fleet.tokens["operator"])
    for scheme in (False, True):
        dark(browser, scheme)
        for page in PAGES:
            browser.get(fleet.url + page)
            found[f"{page} {'dark' if scheme else 'light'}"] = violations(browser, axe)
    assert {page: bad for page, bad in found.items() if bad} == {}


def body_background(driver) -> tuple[int, ...] | None:
    """The page's background as (red, green, blue), once style.css applies to it: under a
    loaded machine the script can run before the sheet's rules are in (the body is then
    transparent, rgba(0, 0, 0, 0))."""
    colour = driver.execute_script(
        "const sheet = [...document.styleSheets].find(s => (s.href || '')"
        ".endsWith('/static/style.css'));"
        "return sheet && sheet.cssRules.length ? getComputedStyle(document.body)"
        ".backgroundColor : null;")
    if colour is None:
        return None
    parts = tuple(int(float(part)) for part in re.findall(r"[\d.]+", colour))
    return parts[:3] if len(parts) == 3 or parts[3:] == (1,) else None


def test_dark_mode_follows_the_system(browser, fleet):  # noqa: F811
    log_in(browser, fleet, fleet.tokens["read"])
    dark(browser, False)
    browser.get(fleet.url + "/nodes")
    light = wait_for(browser, body_background, 10, "the light page's background")
    dark(browser, True)
    browser.get(fleet.url + "/nodes")
    shade = wait_for(browser, body_background, 10, "the dark page's background")
    assert light != shade
    assert sum(light) > 3 * 192, light  # light indeed
    assert sum(shade) < 3 * 64, shade  # dark indeed
    icon = browser.execute_script(
        "return document.querySelector('link[rel=icon]').href")
    assert icon.endswith("/static/favicon.svg")


def test_a_job_is_disabled_with_the_keyboard_alone(browser, fleet):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    log_in(browser, fleet, fleet.tokens["operator"])
    browser.get(fleet.url + "/jobs")
    ActionChains(browser).send_keys(Keys.TAB).perform()
    active = browser.switch_to.active_element
    assert active.text == "Skip to the page"  # the first stop skips the header's links
    for _ in range(40):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if browser.switch_to.active_element.get_attribute("aria-label") == "Disable nightly":
            break
    else:
        pytest.fail("Tab never reached the Disable button of job nightly")
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    wait_for(browser, lambda d: not fleet.queue.store.get_job("nightly").enabled, 10,
             "the job to be disabled")


def test_the_screenshots_in_docs_are_the_pages_as_they_are(browser, fleet, tmp_path):  # noqa: F811
    """Small PNGs of the main pages. `make screenshots` (TASKHERD_SCREENSHOTS=docs) writes
    them into docs/screenshots/, which the README and operating.md show; any other run
    makes them in a temporary folder, so a test run leaves the checkout as it was."""
    shots = DOCS_SHOTS if os.environ.get("TASKHERD_SCREENSHOTS") == "docs" else tmp_path
    log_in(browser, fleet, fleet.tokens["operator"])
    browser.set_window_size(1100, 700)
    dark(browser, False)
    shots.mkdir(parents=True, exist_ok=True)
    for page, name in SHOWN.items():
        browser.get(fleet.url + page)
        path = shots / f"{name}.png"
        browser.save_screenshot(str(path))
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_jobs_page_shows_its_new_fire_without_a_reload(browser, fleet):  # noqa: F811
    from selenium.webdriver.common.by import By

    from taskherd.ops import jobs as job_ops

    log_in(browser, fleet, fleet.tokens["read"])
    browser.get(fleet.url + "/jobs/nightly")
    wait_for(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live"),
             10, "the page to go live")
    assert "it has not fired yet" in browser.find_element(By.ID, "fires").text
    job_ops.run_job_now(fleet.queue, "nightly", time.time())
    Scheduler(fleet.queue.config, fleet.queue.store).run_once(time.time() + 1)
    [fire] = fleet.queue.store.list_fires(job="nightly", limit=10)
    wait_for(browser, lambda d: f"#{fire.task_id}" in d.find_element(By.ID, "fires").text, 10,
             "the fire's task on the page")
