"""The charts page in Chromium: every chart drawn by the vendored uPlot (a canvas, points
for the seeded hour) under the dashboard's CSP, a range switched by its link and kept in the
address, the charts drawn again when the queue changes, and its screenshot for the docs."""

from __future__ import annotations

import os

import pytest

from taskherd.model import NewTask
from tests.api.chart_data import NOW, run_task, seed
from tests.api.test_dashboard_a11y_browser import DOCS_SHOTS, dark
from tests.api.test_dashboard_browser import browser, log_in, wait_for  # noqa: F401
from tests.api_server import served

CHARTS = ("finished", "latency", "depth", "cost")


@pytest.fixture
def fleet(tmp_path):
    with served(tmp_path, now=NOW, clock=lambda: NOW) as api:
        seed(api.queue.store)
        yield api


def drawn(driver, chart: str) -> int:
    """The points uPlot was given for `chart`, once its canvas is in the page (0 before)."""
    return driver.execute_script(
        "const plot = document.getElementById('plot-' + arguments[0]);"
        "return plot && plot.querySelector('canvas') ? Number(plot.dataset.points) : 0;", chart)


def test_every_chart_is_drawn_and_a_range_is_switched_by_its_link(browser, fleet):  # noqa: F811
    from selenium.webdriver.common.by import By

    log_in(browser, fleet, fleet.tokens["read"])
    # Told before any of the page's own scripts run: what the CSP refused, if anything.
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": (
        "window.refused = [];document.addEventListener('securitypolicyviolation',"
        " e => window.refused.push(e.violatedDirective + ' ' + e.blockedURI));")})
    browser.get(fleet.url + "/charts?finished=1h&latency=1h&depth=1h")
    for chart in CHARTS:
        wait_for(browser, lambda d, chart=chart: drawn(d, chart) > 0, 10, f"{chart} drawn")
    assert browser.execute_script("return window.refused") == []
    # The seeded hour: three series of 60 minutes for the tasks finished, as given.
    assert drawn(browser, "finished") == 3 * 60
    assert "7 completed, 1 failed for good (dead)" in browser.find_element(
        By.ID, "chart-finished").text
    assert "$3.2500 + 1 run of unknown cost" in browser.find_element(By.ID, "chart-cost").text
    browser.find_element(By.CSS_SELECTOR, "#chart-finished a[href*='finished=24h']").click()
    wait_for(browser, lambda d: "finished=24h" in d.current_url
             and drawn(d, "finished") == 3 * 96, 10, "the 24 h range drawn")
    # The other charts keep their own choice.
    assert "latency=1h" in browser.current_url and "cost=24h" in browser.current_url
    current = browser.find_element(By.CSS_SELECTOR, "#chart-finished a[aria-current]")
    assert current.text == "24h"


def test_the_charts_are_drawn_again_when_the_queue_changes(browser, fleet):  # noqa: F811
    from selenium.webdriver.common.by import By

    log_in(browser, fleet, fleet.tokens["read"])
    browser.get(fleet.url + "/charts?finished=1h")
    wait_for(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live"),
             10, "the page to go live")
    run_task(fleet.queue.store, "coder", NOW - 20)
    wait_for(browser, lambda d: "8 completed" in d.find_element(By.ID, "chart-finished").text
             and drawn(d, "finished") == 3 * 60, 10, "the new task counted and drawn")


def test_a_page_with_a_wrong_range_says_which(browser, fleet):  # noqa: F811
    from selenium.webdriver.common.by import By

    log_in(browser, fleet, fleet.tokens["read"])
    browser.get(fleet.url + "/charts?cost=1y")
    assert "cost = '1y': expected one of 1h, 24h, 7d" in browser.find_element(
        By.ID, "live").text


def test_the_screenshots_in_docs_are_the_pages_as_they_are(browser, fleet, tmp_path):  # noqa: F811
    """The charts page for docs/screenshots/ (`make screenshots`), as the other pages'."""
    shots = DOCS_SHOTS if os.environ.get("TASKHERD_SCREENSHOTS") == "docs" else tmp_path
    log_in(browser, fleet, fleet.tokens["read"])
    browser.set_window_size(1100, 1400)
    dark(browser, False)
    fleet.queue.store.enqueue(NewTask(role="coder", title="one more"), NOW - 5)
    browser.get(fleet.url + "/charts?finished=1h&latency=1h&depth=1h")
    wait_for(browser, lambda d: all(drawn(d, chart) for chart in CHARTS), 10, "charts drawn")
    path = shots / "charts.png"
    browser.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
