"""The dashboard's messages, memory and delivery pages over HTTP: an address's unread and
sent messages and a thread, a message sent from the page as `taskherd msg send` sends it,
memory listed and searched, each alias's deliveries with a failed one retried; all escaped,
each action behind the session's CSRF secret and an acting scope."""

from __future__ import annotations

import time

import pytest

from taskherd.ops import delivery as delivery_ops
from taskherd.ops import memory as memory_ops
from taskherd.ops import messages as message_ops
from tests.api.test_dashboard_fleet import csrf_of
from tests.api.test_dashboard_pages import logged_in
from tests.api_server import served


@pytest.fixture
def api(tmp_path):
    with served(tmp_path) as running:
        yield running


def test_messages_are_read_by_address_and_thread_and_sent_from_the_page(api):
    queue, now = api.queue, time.time()
    [first] = message_ops.send(queue, message_ops.person(), "coder", "<b>fix</b> the build", now)
    client = logged_in(api)
    page = client.get("/messages?address=coder").text
    inbox = page[page.index('id="inbox"'):page.index('id="sent"')]
    assert "&lt;b&gt;fix&lt;/b&gt; the build" in inbox and "<b>fix" not in page
    answer = client.post("/ui/messages", data={"csrf": csrf_of(page), "to": "qa",
                                               "body": "please look", "priority": "2"},
                         follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/messages?address=qa"
    [sent] = queue.store.unread_messages("qa", time.time())
    assert (sent.body, sent.priority, sent.sender) == ("please look", 2, first.sender)
    assert "please look" in client.get("/messages?address=qa").text
    assert "fix</b>" not in client.get(f"/messages?thread={first.id}").text
    assert "the build" in client.get(f"/messages?thread={first.id}").text
    bad = client.post("/ui/messages", data={"csrf": csrf_of(page), "to": "nobody",
                                            "body": "x"})
    assert bad.status_code == 422 and "nobody" in bad.text
    assert client.post("/ui/messages", data={"csrf": "wrong", "to": "qa",
                                             "body": "y"}).status_code == 403
    assert len(queue.store.unread_messages("qa", time.time())) == 1  # neither was sent


def test_memory_is_listed_and_searched_by_scope(api):
    queue, now = api.queue, time.time()
    memory_ops.add(queue, "coder", "run <make lint> before committing", now)
    memory_ops.add(queue, "qa", "the staging database resets at noon", now)
    client = logged_in(api, "read")
    everything = client.get("/memory").text
    assert "run &lt;make lint&gt; before committing" in everything and "staging" in everything
    found = client.get("/memory?scope=coder&q=lint").text
    assert "make lint" in found and "staging" not in found
    assert "choose a scope" in client.get("/memory?q=lint").text


def test_a_failed_delivery_is_retried_from_its_aliass_list(api, tmp_path):
    queue, now = api.queue, time.time()
    delivery_ops.add_alias(queue, "ops", "file", str(tmp_path / "events.jsonl"), now)
    queue.store.pause_budget("coder", now + 60, "spent", ["ops"], now)  # one delivery to @ops
    [due] = queue.store.list_deliveries(alias="ops")
    queue.store.delivery_failed(due.id, "disk <full>", None)
    client = logged_in(api)
    page = client.get("/delivery").text
    assert "@ops" in page and "disk &lt;full&gt;" in page and "1 failed" in page
    assert client.post(f"/ui/deliveries/{due.id}/retry",
                       data={"csrf": "wrong"}).status_code == 403
    assert queue.store.get_delivery(due.id).state == "failed"
    answer = client.post(f"/ui/deliveries/{due.id}/retry",
                         data={"csrf": csrf_of(page), "back": "/delivery"},
                         follow_redirects=False)
    assert answer.status_code == 303 and queue.store.get_delivery(due.id).state == "pending"
    again = client.post(f"/ui/deliveries/{due.id}/retry", data={"csrf": csrf_of(page)})
    assert again.status_code == 409 and "not failed" in again.text
    reader = logged_in(api, "read")
    assert "Retry" not in reader.get("/delivery").text
