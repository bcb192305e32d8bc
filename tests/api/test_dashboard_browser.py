"""The dashboard in a real browser: Debian's Chromium, driven through its chromedriver by
Selenium, against a real daemon serving the API. Screenshots of every page are written to
test-artifacts/screenshots/ (kept by CI as the run's artefacts)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from taskherd.ops import open_queue
from taskherd.ops import tokens as token_ops
from tests.api.test_daemon_api import _answers, free_port
from tests.fleet import PYTHON, Fleet, agent

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--window-size=1280,900")

# Prints a line every 0.2 s until the test lets it finish (a file appears).
TALKER = """\
import os, sys, time
stop = sys.argv[1]
for n in range(1, 3000):
    print(f"working, line {n}", flush=True)
    if os.path.exists(stop):
        break
    time.sleep(0.2)
print("TASK_COMPLETE: talked enough", flush=True)
"""


@pytest.fixture
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver are missing: .ci/run installs them")
        pytest.skip("chromium and chromium-driver are not installed (apt-get install chromium "
                    "chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def fleet(tmp_path):
    port = free_port()
    talker = agent(tmp_path, "talker", TALKER)
    stop = tmp_path / "stop-talking"
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        durability = "normal"
        max_concurrent = 4

        [roles.talker]
        command = ["{PYTHON}", "{talker}", "{stop}"]

        [roles.reviewed]
        command = ["{PYTHON}", "-c", "print('TASK_COMPLETE: done, please look')"]
        review = true

        [roles.broken]
        command = ["false"]
        max_attempts = 1
        backoff = "0s"

        [roles.idle]
        command = ["true"]
        max_concurrent = 1

        [api]
        listen = "127.0.0.1:{port}"
        """)
    node.url = f"http://127.0.0.1:{port}"
    node.stop_file = stop
    with open_queue(node.config_path) as queue:
        node.token = token_ops.create_token(queue, "operator", "operator", 0.0).token
    node.up()
    node.wait_until(lambda: _answers(node), what="the API to listen")
    yield node
    stop.touch()
    node.stop()
    node.close()


def shot(driver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def wait_for(driver, condition, timeout: float, what: str):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The board re-renders as the fleet changes: an element found a moment ago may be gone
    # by the time its text is read, and the next poll finds its successor.
    return WebDriverWait(driver, timeout, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: condition(d), message=f"waited {timeout}s for {what}")


def log_in(driver, fleet, token: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(fleet.url + "/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()
    # The click only starts the form's submission: wait for its answer (the board, or the
    # login page again with its error), or the next get races the redirect and loses.
    WebDriverWait(driver, 10).until(
        lambda d: d.find_elements(By.ID, "live") or d.find_elements(By.CLASS_NAME, "error"))


def test_an_operator_watches_and_acts_on_the_fleet(browser, fleet):
    from selenium.webdriver.common.by import By

    # A wrong token is refused, and the login page says so.
    log_in(browser, fleet, "thk_not-a-real-token")
    assert "not valid" in browser.find_element(By.CLASS_NAME, "error").text
    assert browser.get_cookie("taskherd_session") is None
    shot(browser, "login-refused")

    log_in(browser, fleet, fleet.token)
    wait_for(browser, lambda d: d.find_elements(By.ID, "counts"), 10, "the board")
    cookie = browser.get_cookie("taskherd_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    wait_for(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute(
        "data-live") == "yes", 10, "the event stream to open")

    # A task added by the CLI appears on the board within 2 s, without a reload.
    browser.execute_script("window.notReloaded = true;")
    fleet.cli("task", "add", "watch me talk", "--role", "talker", "--priority", "P0")
    wait_for(browser, lambda d: "watch me talk" in d.find_element(By.ID, "live").text, 2.0,
             "the CLI's task on the board")
    assert browser.execute_script("return window.notReloaded === true;")
    # The board came on its own stream: the page fetched no fragment for it.
    assert browser.execute_script(
        "return performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('fragment=')).length;") == 0
    wait_for(browser, lambda d: "working, line" in d.find_element(By.ID, "running").text, 20,
             "the running agent's last line")
    shot(browser, "board")

    # Its page shows its log growing.
    [task] = [t for t in fleet.store.list_tasks() if t.title == "watch me talk"]
    browser.get(f"{fleet.url}/tasks/{task.id}")
    log = wait_for(browser, lambda d: d.find_elements(By.ID, "log"), 20, "the log panel")[0]
    wait_for(browser, lambda d: "working, line" in log.text, 20, "the first lines")
    seen = log.text.count("\n")
    wait_for(browser, lambda d: log.text.count("\n") >= seen + 3, 20, "the log to grow")
    browser.execute_script("arguments[0].scrollIntoView();", log)
    shot(browser, "task")
    fleet.stop_file.touch()
    wait_for(browser, lambda d: log.get_attribute("data-ended") == "yes", 30, "the run's end")
    assert "TASK_COMPLETE: talked enough" in log.text

    # A needs_review task is approved and leaves the review list.
    reviewed = fleet.add("check my work", role="reviewed")
    fleet.wait_until(lambda: fleet.store.get_task(reviewed.id).state.value == "needs_review",
                     what="the review")
    browser.get(fleet.url + "/review")
    shot(browser, "review")
    browser.find_element(By.ID, f"approve-{reviewed.id}").click()
    wait_for(browser, lambda d: "check my work" not in d.find_element(By.ID, "live").text, 10,
             "the approved task to leave the list")
    assert fleet.store.get_task(reviewed.id).state.value == "completed"

    # A dead task is requeued from the dead-letter set.
    dead = fleet.add("always fails", role="broken")
    fleet.wait_until(lambda: fleet.store.get_task(dead.id).state.value == "dead",
                     what="the task to die")
    browser.get(fleet.url + "/dead")
    shot(browser, "dead")
    browser.find_element(By.ID, f"requeue-{dead.id}").click()
    fleet.wait_until(lambda: fleet.store.runs_of_task(dead.id)[1:] or None,
                     what="the requeued task to run again")

    for page in ("blocked", "jobs", "cooldowns", "cost"):
        browser.get(f"{fleet.url}/{page}")
        assert browser.find_element(By.TAG_NAME, "h1").text
        shot(browser, page)
    assert all((SHOTS / f"{name}.png").stat().st_size > 1000
               for name in ("board", "task", "review", "dead", "cost"))


def test_a_read_token_sees_but_has_no_actions(browser, fleet):
    from selenium.webdriver.common.by import By

    with open_queue(fleet.config_path) as queue:
        reader = token_ops.create_token(queue, "viewer", "read", time.time()).token
    reviewed = fleet.add("look only", role="reviewed")
    fleet.wait_until(lambda: fleet.store.get_task(reviewed.id).state.value == "needs_review",
                     what="the review")
    log_in(browser, fleet, reader)
    browser.get(fleet.url + "/review")
    assert "look only" in browser.find_element(By.ID, "live").text
    assert not browser.find_elements(By.ID, f"approve-{reviewed.id}")
