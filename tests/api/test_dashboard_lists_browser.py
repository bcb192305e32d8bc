"""The dashboard's lists, bulk actions, adding tasks and the task page's answer, in Chromium
as a person uses them, against a real daemon (the fixtures of test_dashboard_browser)."""

from __future__ import annotations

import json
import textwrap
import time
from urllib.parse import parse_qs, urlparse

import pytest

from taskherd.model import TaskState
from taskherd.ops import open_queue
from taskherd.ops import tokens as token_ops
from tests.api.test_daemon_api import _answers, free_port
from tests.api.test_dashboard_browser import browser, log_in, shot, wait_for  # noqa: F401
from tests.fleet import PYTHON, Fleet, agent

ASKS_AND_READS = textwrap.dedent("""
    import sys
    print("about to migrate", flush=True)
    sys.stdout.write("Do you want to proceed? [y/N] ")
    sys.stdout.flush()
    answer = sys.stdin.readline().strip()
    print()
    print(f"TASK_COMPLETE: answered {answer}")
""")


@pytest.fixture
def fleet(tmp_path):
    port = free_port()
    asker = agent(tmp_path, "asker", ASKS_AND_READS)
    node = Fleet(tmp_path, f"""
        [daemon]
        database = "q.db"
        durability = "normal"

        [roles.asker]
        command = ["{PYTHON}", "{asker}"]
        prompt_via = "file"
        on_input = "wait"
        input_timeout = "1s"
        idle_timeout = "60s"

        [roles.broken]
        command = ["false"]
        max_attempts = 1
        backoff = "0s"

        [api]
        listen = "127.0.0.1:{port}"
        """)
    node.url = f"http://127.0.0.1:{port}"
    with open_queue(node.config_path) as queue:
        node.token = token_ops.create_token(queue, "operator", "operator", 0.0).token
    node.up()
    node.wait_until(lambda: _answers(node), what="the API to listen")
    yield node
    node.stop()
    node.close()


def test_an_operator_adds_finds_and_acts_on_many_tasks(browser, fleet):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    def text_of(element_id: str) -> str:
        return browser.find_element(By.ID, element_id).text

    log_in(browser, fleet, fleet.token)

    # Many tasks by JSON Lines: three that will die, two that wait an hour.
    browser.get(fleet.url + "/tasks/new")
    lines = [json.dumps({"role": "broken", "title": f"doomed {n}"}) for n in range(3)]
    lines += [json.dumps({"role": "broken", "title": f"later {n}", "run_after": time.time() + 3600})
              for n in range(2)]
    browser.find_element(By.ID, "import-lines").send_keys("\n".join(lines))
    browser.find_element(By.ID, "import-submit").click()
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#imported, #refused"), 10,
             "the import")
    assert "5 tasks read, 5 added" in browser.find_element(By.TAG_NAME, "body").text

    # One task by the form, whose agent will ask a question.
    browser.get(fleet.url + "/tasks/new")
    Select(browser.find_element(By.ID, "add-role")).select_by_value("asker")
    browser.find_element(By.ID, "add-title").send_keys("migrate the data")
    browser.find_element(By.ID, "add-prompt").send_keys("migrate it, carefully")
    browser.find_element(By.ID, "add-submit").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "task-title"), 10, "its task page")
    assert "migrate the data" in text_of("task-title")
    asked_id = int(browser.current_url.rsplit("/", 1)[1])

    # Its agent waits at a question: the page shows it, and the answer reaches the agent.
    fleet.wait_until(lambda: (runs := fleet.store.runs_of_task(asked_id))
                     and runs[-1].liveness == "waiting_input", timeout=30,
                     what="the agent to wait for input")
    browser.refresh()
    assert "Do you want to proceed? [y/N]" in text_of("question")
    assert "waiting for input" in text_of("liveness")
    shot(browser, "task-waiting-for-input")
    browser.find_element(By.ID, "answer-text").send_keys("y")
    browser.find_element(By.ID, f"answer-{asked_id}").click()
    fleet.wait_until(lambda: fleet.store.get_task(asked_id).state is TaskState.COMPLETED,
                     what="the answered agent to finish")
    assert fleet.store.get_task(asked_id).summary == "answered y"

    # The board's count of dead broken tasks is a link to exactly that list.
    fleet.wait_until(lambda: sum(t.state is TaskState.DEAD
                                 for t in fleet.store.list_tasks(role="broken")) == 3,
                     what="the doomed tasks to die")
    browser.get(fleet.url + "/")
    wait_for(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, 'a[href="/tasks?state=dead&role=broken"]'), 10, "the dead count")
    browser.find_element(By.CSS_SELECTOR, 'a[href="/tasks?state=dead&role=broken"]').click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "total"), 10, "the list")
    assert parse_qs(urlparse(browser.current_url).query) == {"state": ["dead"],
                                                             "role": ["broken"]}
    assert "1–3 of 3 tasks" in text_of("total")
    shot(browser, "task-list")

    # Requeue all that match: the confirmation says how many before anything moves.
    doomed = [t.id for t in fleet.store.list_tasks(state=TaskState.DEAD, role="broken")]
    Select(browser.find_element(By.ID, "bulk-action")).select_by_value("requeue")
    browser.find_element(By.ID, "bulk-all").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "confirm-text"), 10, "the confirmation")
    assert text_of("confirm-text") == "Requeue 3 tasks?"
    assert all(len(fleet.store.runs_of_task(i)) == 1 for i in doomed)
    browser.find_element(By.ID, "confirm-yes").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "bulk-done"), 10, "the result")
    assert text_of("bulk-done") == "Requeue: 3 done."
    fleet.wait_until(lambda: all(len(fleet.store.runs_of_task(i)) == 2 for i in doomed),
                     what="the requeued tasks to run again")

    # Cancel the ticked ones: found by text, one ticked of the two waiting.
    browser.get(fleet.url + "/tasks?q=later&state=ready")
    wait_for(browser, lambda d: "of 2 tasks" in d.find_element(By.ID, "total").text, 10,
             "the two waiting tasks")
    later = sorted(t.id for t in fleet.store.list_tasks(state=TaskState.READY, role="broken"))
    browser.find_element(By.CSS_SELECTOR, f'input[name="task"][value="{later[0]}"]').click()
    Select(browser.find_element(By.ID, "bulk-action")).select_by_value("cancel")
    browser.find_element(By.ID, "bulk-ticked").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "confirm-text"), 10, "the confirmation")
    assert text_of("confirm-text") == "Cancel 1 task?"
    browser.find_element(By.ID, "confirm-yes").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "bulk-done"), 10, "the result")
    assert fleet.store.get_task(later[0]).state is TaskState.CANCELLED
    assert fleet.store.get_task(later[1]).state is TaskState.READY

    # The list stays live and keeps its filter: a new task of the role shows without a
    # reload, one of another role does not.
    browser.get(fleet.url + "/tasks?role=broken&state=ready")
    wait_for(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute(
        "data-live") == "yes", 10, "the event stream to open")
    browser.execute_script("window.notReloaded = true;")
    fleet.add("not this role", role="asker", run_after=time.time() + 3600)
    fleet.add("fresh and waiting", role="broken", run_after=time.time() + 3600)
    wait_for(browser, lambda d: "fresh and waiting" in d.find_element(By.ID, "live").text, 10,
             "the new task in the list")
    assert "not this role" not in browser.find_element(By.ID, "live").text
    assert browser.execute_script("return window.notReloaded === true;")
