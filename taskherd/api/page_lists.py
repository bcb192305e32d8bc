"""The dashboard's lists of tasks: any filter in the address (bookmarkable), sorted, paged
with the total, and the bulk actions on what is ticked or on all that match.

Everything shown is escaped (`h`); the filter's values come from the address, written by
anyone who sends a link, so they are escaped in the form and the links as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlencode

from taskherd.api.app import ApiError
from taskherd.api.pages import View, h, list_href, state, table, when
from taskherd.model import TaskState
from taskherd.ops import BadInput, Queue, task_lists
from taskherd.ops.task_lists import ListQuery
from taskherd.store.task_lists import SORTS

BULK_LABELS = {"requeue": "Requeue", "cancel": "Cancel", "approve": "Approve",
               "unblock": "Unblock"}


def parsed(queue: Queue, query: Iterable[tuple[str, str]]) -> ListQuery:
    """The list the address asks for; a wrong filter is a bad request (400), said why."""
    try:
        return task_lists.parse_query(queue, query)
    except BadInput as error:
        raise ApiError(400, f"this list cannot be shown: {error}") from None


def task_list(view: View) -> str:
    asked = parsed(view.queue, view.query)
    found = task_lists.find(view.queue, asked)
    rows = [[_tick(view, task.id), f'<a href="/tasks/{task.id}">#{task.id}</a>', h(task.title),
             state(task.state.value), h(task.role), f"P{int(task.priority)}",
             when(view, task.created_at), when(view, task.finished_at)]
            for task in found["tasks"]]
    headers = ["", "id", "title", "state", "role", "priority", "created", "finished"]
    listed = table(headers, rows, "no task matches")
    return (_filter_form(view, asked) + f'<p id="total">{_total_text(asked, found)}</p>'
            + _bulk_form(view, asked, listed, found["total"]) + _pages(asked, found))


def _total_text(asked: ListQuery, found: dict) -> str:
    first = (asked.page - 1) * asked.per_page + 1
    shown = len(found["tasks"])
    total = f"{found['total']:,}" if found["total_exact"] else f"more than {found['total']:,}"
    if not shown:
        return f"{total} tasks match"
    return f"{first:,}–{first + shown - 1:,} of {total} tasks"


def _tick(view: View, task_id: int) -> str:
    if not view.may_act:
        return ""
    return (f'<input type="checkbox" name="task" value="{task_id}" form="bulk" '
            f'aria-label="choose task {task_id}">')


def _filter_form(view: View, asked: ListQuery) -> str:
    given = dict(asked.given)
    states = "".join(f'<option value="{s.value}"{_chosen(given.get("state") == s.value)}>'
                     f'{s.value}</option>' for s in TaskState)
    roles = "".join(f'<option value="{h(name)}"{_chosen(given.get("role") == name)}>'
                    f'{h(name)}</option>' for name in sorted(view.queue.config.roles))
    priorities = "".join(f'<option value="{n}"{_chosen(given.get("priority") == str(n))}>P{n}'
                         f'</option>' for n in range(4))
    sorts = "".join(f'<option value="{name}"{_chosen(asked.sort == name)}>{name}</option>'
                    for name in SORTS)

    def field(key: str, label: str, kind: str = "text") -> str:
        return (f'<label>{label} <input type="{kind}" name="{key}" id="f-{key}" '
                f'value="{h(given.get(key, ""))}"></label> ')

    return (f'<form method="get" action="/tasks" id="filter" class="filter">'
            f'<label>state <select name="state" id="f-state"><option value="">any</option>'
            f'{states}</select></label> '
            f'<label>role <select name="role" id="f-role"><option value="">any</option>{roles}'
            f'</select></label> '
            f'<label>priority <select name="priority" id="f-priority"><option value="">any'
            f'</option>{priorities}</select></label> '
            + field("q", "text, or #id", "search") + field("node", "node") + field("job", "job")
            + field("finished_from", "finished from", "datetime-local")
            + field("finished_to", "to", "datetime-local")
            + f'<label>sort <select name="sort" id="f-sort">{sorts}</select></label> '
            f'<button type="submit" id="apply">Show</button> <a href="/tasks">clear</a>'
            + (' · <a href="/tasks/new" id="add-tasks">add tasks</a>' if view.may_act else "")
            + '</form>')


def _chosen(yes: bool) -> str:
    return " selected" if yes else ""


def _bulk_form(view: View, asked: ListQuery, listed: str, total: int) -> str:
    """The table inside the bulk form: tick tasks and act on them, or on all that match (the
    server then asks how many, and what, before doing it)."""
    if not view.may_act or not total:
        return listed
    actions = "".join(f'<option value="{name}">{label}</option>'
                      for name, label in BULK_LABELS.items())
    return (f'<form method="post" action="/ui/bulk" id="bulk">'
            f'<input type="hidden" name="csrf" value="{h(view.csrf)}">'
            f'<input type="hidden" name="filter" value="{h(urlencode(asked.given))}">'
            f'<label>action <select name="action" id="bulk-action">{actions}</select></label> '
            f'<button name="scope" value="ticked" id="bulk-ticked">… the ticked tasks</button> '
            f'<button name="scope" value="all" id="bulk-all">… all {total:,} that match'
            f'</button></form>{listed}')


def _pages(asked: ListQuery, found: dict) -> str:
    links = []
    base = dict(asked.given) | ({"sort": asked.sort} if asked.sort != "newest" else {}) | (
        {"per_page": str(asked.per_page)} if asked.per_page != 50 else {})
    if asked.page > 1:
        links.append(f'<a href="{h(list_href(**base, page=asked.page - 1))}" id="prev" '
                     f'rel="prev">← previous</a>')
    links.append(f'<span>page {asked.page}</span>')
    if found["more"]:
        links.append(f'<a href="{h(list_href(**base, page=asked.page + 1))}" id="next" '
                     f'rel="next">next →</a>')
    return f'<nav class="pages">{" ".join(links)}</nav>'


def bulk_confirmation(view: View, action: str, ids: list[int], back: str) -> str:
    """What a bulk action will do, said before it is done: how many tasks, which ones."""
    shown = ", ".join(f'<a href="/tasks/{task_id}">#{task_id}</a>' for task_id in ids[:50])
    more = f" and {len(ids) - 50:,} more" if len(ids) > 50 else ""
    kept = "".join(f'<input type="hidden" name="task" value="{task_id}">' for task_id in ids)
    reason = ('<p><label>reason <input name="reason" id="bulk-reason" '
              'value="cancelled on the dashboard"></label></p>' if action == "cancel" else "")
    return (f'<p id="confirm-text">{h(BULK_LABELS[action])} {len(ids):,} '
            f'task{"s" if len(ids) != 1 else ""}?</p><p>{shown}{more}</p>'
            f'<form method="post" action="/ui/bulk" id="confirm">'
            f'<input type="hidden" name="csrf" value="{h(view.csrf)}">'
            f'<input type="hidden" name="action" value="{h(action)}">'
            f'<input type="hidden" name="scope" value="ticked">'
            f'<input type="hidden" name="confirmed" value="yes">'
            f'<input type="hidden" name="back" value="{h(back)}">{kept}{reason}'
            f'<button class="go" id="confirm-yes">{h(BULK_LABELS[action])} {len(ids):,}</button>'
            f' <a href="{h(back)}" id="confirm-no">back, do nothing</a></form>')


def bulk_result(action: str, result: dict, back: str) -> str:
    refused = "".join(f'<li><a href="/tasks/{task_id}">#{task_id}</a>: {h(why)}</li>'
                      for task_id, why in result["refused"])
    return (f'<p id="bulk-done">{h(BULK_LABELS[action])}: {len(result["done"]):,} done'
            + (f', {len(result["refused"]):,} refused:</p><ul id="bulk-refused">{refused}</ul>'
               if refused else ".</p>")
            + f'<p><a href="{h(back)}" id="bulk-back">back to the list</a></p>')
