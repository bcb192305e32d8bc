"""The dashboard's page for adding tasks: one by a form (its role from the config), or many
by JSON Lines (all or nothing, the wrong line named), both through `ops.tasks` as the CLI's
`task add` and `task import` are."""

from __future__ import annotations

import json
from typing import Any

from taskherd.api.pages import View, h
from taskherd.ops import BadInput

FORM_FIELDS = ("role", "title", "priority", "prompt", "dedup_key", "chain")
MAX_ERRORS_SHOWN = 100


def add_form(view: View) -> str:
    if not view.may_act:
        return '<p class="muted">Your token may read only: adding tasks needs an operator.</p>'
    roles = "".join(f'<option value="{h(name)}">{h(name)}</option>'
                    for name in sorted(view.queue.config.roles))
    priorities = "".join(f'<option value="{n}"{" selected" if n == 2 else ""}>P{n}</option>'
                         for n in range(4))
    csrf = f'<input type="hidden" name="csrf" value="{h(view.csrf)}">'
    return (f'<h2>One task</h2><form method="post" action="/ui/add" id="add" class="stack">'
            f'{csrf}<p><label>role <select name="role" id="add-role" required>{roles}</select>'
            f'</label> <label>priority <select name="priority" id="add-priority">{priorities}'
            f'</select></label></p>'
            f'<p><label>title <input name="title" id="add-title" size="60"></label></p>'
            f'<p><label>prompt<br><textarea name="prompt" id="add-prompt" rows="6" cols="80">'
            f'</textarea></label></p>'
            f'<p><label>dedup key <input name="dedup_key" id="add-dedup"></label></p>'
            f'<p><label>chain (JSON: a list of follow-ups, e.g. '
            f'<code>[{{"role": "qa", "title": "review it"}}]</code>)<br>'
            f'<textarea name="chain" id="add-chain" rows="2" cols="80"></textarea></label></p>'
            f'<p><button class="go" id="add-submit">Add the task</button></p></form>'
            f'<h2>Many tasks (JSON Lines)</h2>'
            f'<form method="post" action="/ui/import" id="import" class="stack">{csrf}'
            f'<p><label>a .jsonl file <input type="file" id="import-file" '
            f'accept=".jsonl,.json,.txt,application/x-ndjson"></label> or paste below, one '
            f'task a line (the keys of <code>taskherd task import</code>); all are added or '
            f'none.</p><p><textarea name="jsonl" id="import-lines" rows="8" cols="80" '
            f'aria-label="tasks as JSON Lines, one a line">'
            f'</textarea></p><p><button class="go" id="import-submit">Add them all</button></p>'
            f'</form>')


def task_data(form: dict[str, str]) -> dict[str, Any]:
    """The task the form describes, as `ops.tasks.add_task` takes it: blank fields left out
    (the role's defaults apply), the priority a number, the chain read as JSON."""
    unknown = sorted(set(form) - set(FORM_FIELDS) - {"csrf"})
    if unknown:
        raise BadInput(f"unknown field {unknown[0]!r} in the form")
    data: dict[str, Any] = {key: form[key].strip() for key in FORM_FIELDS
                            if form.get(key, "").strip()}
    if "priority" in data:
        if data["priority"] not in ("0", "1", "2", "3"):
            raise BadInput(f"priority = {data['priority']!r}: expected 0, 1, 2 or 3")
        data["priority"] = int(data["priority"])
    if "chain" in data:
        try:
            data["chain"] = json.loads(data["chain"])
        except json.JSONDecodeError as error:
            raise BadInput(f"chain: not valid JSON ({error.msg} at character {error.pos})") \
                from None
    if "title" not in data and "prompt" in data:
        data["title"] = data["prompt"].splitlines()[0][:80]
    return data


def imported(result: dict[str, Any]) -> str:
    kept = result["read"] - result["created"]
    same = f" ({kept} already open under the same dedup key)" if kept else ""
    return (f'<p id="imported">{result["read"]} tasks read, {result["created"]} added{same}, '
            f'for {h(", ".join(result["roles"]) or "no role")}.</p>'
            f'<p><a href="/tasks">the task list</a></p>')


def wrong_lines(errors: list[str]) -> str:
    """Every wrong line of a refused import, so that all are fixed in one go."""
    shown = "".join(f"<li>{h(error)}</li>" for error in errors[:MAX_ERRORS_SHOWN])
    more = (f'<p class="muted">and {len(errors) - MAX_ERRORS_SHOWN} more</p>'
            if len(errors) > MAX_ERRORS_SHOWN else "")
    return (f'<p class="error" id="import-refused">No task was added: {len(errors)} '
            f'line{"s are" if len(errors) != 1 else " is"} wrong.</p>'
            f'<ul id="wrong-lines">{shown}</ul>{more}'
            f'<p><a href="/tasks/new">back to the form</a></p>')
