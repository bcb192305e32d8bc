"""The dashboard's pages for what agents and people say: messages (an address's unread and
sent, a thread, a form to send), memory (a scope's entries, searched), and the delivery
aliases with each one's deliveries and a retry button for those that failed. Everything
shown is escaped (`h`); each action is a form POST with the session's CSRF secret."""

from __future__ import annotations

from typing import Any

from taskherd.api.pages import View, h, table, when
from taskherd.ops import delivery as delivery_ops
from taskherd.ops import memory as memory_ops
from taskherd.ops import messages as message_ops

SHOWN = 50
MEMORY_HITS = 20
PRIORITIES = {0: "normal", 1: "high", 2: "urgent"}


def _query(view: View, key: str) -> str:
    return next((value for name, value in view.query if name == key), "").strip()


def _csrf(view: View) -> str:
    return (f'<input type="hidden" name="csrf" value="{h(view.csrf)}">'
            f'<input type="hidden" name="back" value="{h(view.path)}">')


def messages(view: View) -> str:
    """Pick an address (a role or task:ID): its unread messages and those it sent; a thread
    by a message's id; and, for those who may act, a form to send one."""
    address, thread_id = _query(view, "address"), _query(view, "thread")
    found = (f'<form method="get" action="/messages" class="filter">'
             f'<label>address (a role or task:ID) <input name="address" value="{h(address)}">'
             f'</label> <label>or a thread, by a message id <input name="thread" '
             f'value="{h(thread_id)}" inputmode="numeric" size="8"></label> '
             f'<button>Show</button></form>')
    if thread_id:
        if not thread_id.isdigit():
            found += f'<p class="error">thread {h(thread_id)}: expected a message id</p>'
        else:
            found += ('<section id="thread"><h2>Thread</h2>'
                      + _messages(view, message_ops.thread(view.queue, int(thread_id)))
                      + "</section>")
    if address:
        unread = message_ops.inbox(view.queue, address, view.now, limit=SHOWN)
        sent = message_ops.outbox(view.queue, address, limit=SHOWN)
        found += (f'<section id="inbox"><h2>Unread, to {h(address)}</h2>'
                  + _messages(view, unread) + f'</section><section id="sent"><h2>Sent by '
                  f'{h(address)}</h2>' + _messages(view, sent) + "</section>")
    return found + (_send_form(view, address) if view.may_act else "")


def _messages(view: View, found: list[Any]) -> str:
    rows = [[f'<a href="/messages?thread={m.thread}">{m.id}</a>', when(view, m.created_at),
             h(m.sender), h(m.recipient), h(PRIORITIES.get(m.priority, m.priority)),
             f"<code>{h(m.body[:500])}</code>", "yes" if m.read_at else "no"]
            for m in found]
    return table(["id", "sent", "from", "to", "priority", "text", "read"], rows,
                 "no message")


def _send_form(view: View, to: str) -> str:
    options = "".join(f'<option value="{n}">{name}</option>' for n, name in PRIORITIES.items())
    return (f'<section id="send"><h2>Send a message</h2>'
            f'<form method="post" action="/ui/messages" class="stack">{_csrf(view)}'
            f'<p><label>to (a role, task:ID or @all) <input name="to" id="send-to" '
            f'value="{h(to)}" required></label> <label>priority <select name="priority">'
            f'{options}</select></label></p><p><textarea name="body" id="send-body" rows="4" '
            f'cols="80" aria-label="the message" required></textarea></p>'
            f'<p><button class="go" id="send-submit">Send</button></p></form></section>')


def memory(view: View) -> str:
    """A scope's entries, newest first, or those that match the search best first."""
    scope, words = _query(view, "scope"), _query(view, "q")
    scopes = sorted({*view.queue.config.roles, memory_ops.SHARED})
    options = "".join(f'<option{" selected" if name == scope else ""}>{h(name)}</option>'
                      for name in scopes)
    found = (f'<form method="get" action="/memory" class="filter"><label>scope '
             f'<select name="scope"><option value="">all</option>{options}</select></label> '
             f'<label>search <input name="q" value="{h(words)}"></label> <button>Show</button>'
             f'</form>')
    if words:
        if not scope:
            return found + '<p class="error">choose a scope to search in</p>'
        entries = memory_ops.search(view.queue, scope, words, limit=MEMORY_HITS)
    else:
        entries = memory_ops.list_memories(view.queue, scope or None, limit=SHOWN)
    rows = [[str(m.id), h(m.scope), h(m.section or "-"), h(m.source), when(view, m.created_at),
             f"<code>{h(m.text[:500])}</code>"] for m in entries]
    return found + table(["id", "scope", "section", "source", "added", "text"], rows,
                         "nothing found" if words else "no memory yet")


def delivery(view: View) -> str:
    """Each alias, its target without secrets, its deliveries by state, and its latest
    deliveries; a failed one has a retry button."""
    counts = {row["alias"]: row for row in delivery_ops.status(view.queue)["aliases"]}
    sections = []
    for alias in delivery_ops.list_aliases(view.queue):
        tally = counts.get(alias.name, {})
        latest = delivery_ops.deliveries_of(view.queue, alias.name, limit=SHOWN // 2)
        rows = [[str(d.id), h(d.event), f'<a href="/tasks/{d.task_id}">#{d.task_id}</a>'
                 if d.task_id else "-", h(d.state), str(d.attempts), when(view, d.created_at),
                 f"<code>{h((d.last_error or '')[:300])}</code>", _retry(view, d)]
                for d in latest]
        sections.append(
            f'<section class="alias"><h2>@{h(alias.name)}</h2><p>{h(alias.channel)} '
            f'<code>{h(alias.target)}</code> · {tally.get("pending", 0)} pending, '
            f'{tally.get("sent", 0)} sent, {tally.get("failed", 0)} failed</p>'
            + table(["id", "event", "task", "state", "attempts", "made", "last error", ""],
                    rows, "nothing delivered yet") + "</section>")
    return "".join(sections) or '<p class="muted">no delivery alias</p>'


def _retry(view: View, found: Any) -> str:
    if found.state != "failed" or not view.may_act:
        return ""
    return (f'<form class="inline" method="post" action="/ui/deliveries/{found.id}/retry">'
            f'{_csrf(view)}<button aria-label="Retry delivery {found.id}">Retry</button>'
            f'</form>')
