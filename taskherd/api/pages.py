"""The dashboard's pages as HTML: each reads through `taskherd.ops` and returns the page's
live part (the fragment `live.js` swaps in); `layout` wraps it in the frame.

Everything shown is escaped (`h`): task titles, prompts and agent output are text written by
others, and must never become markup in an operator's browser.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from taskherd.model import TaskState
from taskherd.ops import Queue, tasks
from taskherd.ops import board as board_ops
from taskherd.ops import cooldowns as cooldown_ops
from taskherd.ops import runs as run_ops
from taskherd.policy.costs import cost_text
from taskherd.policy.timefmt import zone_named
from taskherd.store.tokens import ApiToken

TITLES = {"/": "Board", "/tasks": "Tasks", "/tasks/new": "Add tasks", "/dead": "Dead letters",
          "/review": "Needs review", "/blocked": "Blocked", "/jobs": "Jobs", "/nodes": "Nodes",
          "/messages": "Messages", "/memory": "Memory", "/delivery": "Delivery",
          "/cooldowns": "Cooldowns", "/cost": "Cost", "/charts": "Charts"}
# Pages that need more than style.css and live.js: their stylesheets and scripts (served
# from static/ like the rest: the CSP lets nothing else in).
ASSETS = {"/charts": (("uPlot.min.css",), ("uPlot.iife.min.js", "charts.js"))}
LIST_LIMIT = 200
ICON = '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'


def task_id_in(text: str) -> int:
    """A task id from a page's address; -1 (no such task, answered as one) for anything but
    digits, so a wrong id reads as a missing task, never as a server error."""
    return int(text) if text.isdigit() else -1


def h(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


@dataclass
class View:
    queue: Queue
    now: float
    token: ApiToken
    csrf: str
    may_act: bool
    path: str
    params: dict[str, str] = field(default_factory=dict)
    query: tuple[tuple[str, str], ...] = ()  # the address's query string (a list's filter)


def when(view: View, moment: float | None) -> str:
    """A moment in the fleet's zone ([daemon] timezone, else the machine's), the zone named,
    and how long ago (or how soon) it is."""
    if moment is None:
        return "-"
    zone = zone_named(view.queue.config.daemon.timezone)
    local = (datetime.fromtimestamp(moment, zone) if zone
             else datetime.fromtimestamp(moment).astimezone())
    return (f'<time datetime="{local.isoformat(timespec="seconds")}">'
            f'{local.strftime("%Y-%m-%d %H:%M:%S %Z")}</time> '
            f'<span class="ago">({relative(moment - view.now)})</span>')


def relative(delta: float) -> str:
    """`delta` seconds from now in words: "3 min ago", "in 2 h", "now"."""
    seconds = abs(delta)
    if seconds < 1:
        return "now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            amount = f"{int(seconds // size)} {unit}"
            break
    else:
        amount = f"{int(seconds)} s"
    return f"{amount} ago" if delta < 0 else f"in {amount}"


def span(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def layout(view: View, title: str, body: str) -> str:
    links = "".join(f'<a href="{path}" class="{"here" if path == view.path else ""}">{name}</a>'
                    for path, name in TITLES.items())
    styles, scripts = ASSETS.get(view.path, ((), ()))
    extra_styles = "".join(f'<link rel="stylesheet" href="/static/{name}">' for name in styles)
    extra_scripts = "".join(f'<script src="/static/{name}"></script>' for name in scripts)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{h(title)} · taskherd</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
{extra_styles}<link rel="stylesheet" href="/static/style.css">{ICON}</head>
<body><a class="skip" href="#live">Skip to the page</a><header><strong>taskherd</strong>
<nav aria-label="pages">{links}</nav>
<span class="who">{h(view.token.name)} ({h(view.token.scope)})</span>
<form class="inline" method="post" action="/logout"><input type="hidden" name="csrf"
 value="{h(view.csrf)}"><button>Log out</button></form></header>
<div class="page"><h1>{h(title)}</h1><main id="live"{_stream(view)}>{body}</main>
{_log_panel(view)}</div>
<script src="/static/live.js"></script>{extra_scripts}</body></html>"""


def _stream(view: View) -> str:
    """The board's own event stream (it carries the board): live.js fetches nothing there."""
    return ' data-stream="/board/events"' if view.path == "/" else ""


def login_page(error: str = "") -> str:
    shown = f'<p class="error">{h(error)}</p>' if error else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Log in · taskherd</title>
<link rel="stylesheet" href="/static/style.css">{ICON}</head>
<body><main class="login"><h1>taskherd</h1>{shown}
<form method="post" action="/login"><p><label for="token">API token</label></p>
<p><input id="token" name="token" type="password" autocomplete="off" autofocus></p>
<p><button type="submit" id="login">Log in</button></p></form>
<p class="muted">Make one with <code>taskherd token create --name me --scope operator</code>.
</p></main></body></html>"""


def table(headers: list[str], rows: list[list[str]], empty: str = "none") -> str:
    if not rows:
        return f'<p class="muted">{h(empty)}</p>'
    head = "".join(f"<th>{h(name)}</th>" for name in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def button(view: View, task_id: int, action: str, css: str = "") -> str:
    if not view.may_act:
        return ""
    reason = ('<input type="hidden" name="reason" value="rejected on the dashboard">'
              if action == "reject" else "")
    return (f'<form class="inline" method="post" action="/ui/tasks/{task_id}/{action}">'
            f'<input type="hidden" name="csrf" value="{h(view.csrf)}">'
            f'<input type="hidden" name="back" value="{h(view.path)}">{reason}'
            f'<button class="{css}" id="{action}-{task_id}">{action.capitalize()}</button></form>')


def list_href(**given: str | int | None) -> str:
    """The address of the task list filtered by `given` (the board's counts link here)."""
    shown = {key: str(value) for key, value in given.items() if value not in (None, "")}
    return "/tasks" + (f"?{urlencode(shown)}" if shown else "")


def task_link(task: Any) -> str:
    return f'<a href="/tasks/{task.id}">#{task.id} {h(task.title)}</a>'


def state(value: str) -> str:
    return f'<span class="state-{h(value)}">{h(value)}</span>'


# -- the pages ----------------------------------------------------------------------------


def board(view: View) -> str:
    """Counts by state and role, the P0 tasks waiting, the agents running. Every read is
    through an index and every list bounded, so the page costs the same at a million tasks."""
    by_role, totals = board_ops.state_counts(view.queue)
    states = [s.value for s in TaskState]
    rows = [[h(role)] + [_count(counts[s], s, role) for s in states]
            for role, counts in by_role.items()]
    rows.append(["<strong>all</strong>"] + [_count(totals[s], s) for s in states])
    counts = table(["role", *states], rows, "the queue is empty")
    limit = board_ops.BOARD_ROWS
    waiting = board_ops.p0_waits(view.queue, view.now, limit)
    waits = table(["task", "state", "why it waits"],
                  [[task_link(row["task"]), state(row["task"].state.value), h(row["waits_for"])]
                   for row in waiting], "no P0 task is waiting")
    if any(sum(row["task"].state is s for row in waiting) >= limit
           for s in (TaskState.READY, TaskState.PENDING)):
        waits += (f'<p class="muted">The first {limit} ready and the first {limit} pending '
                  f'are shown.</p>')
    running, running_count = board_ops.running_agents(view.queue, view.now, limit)
    agents = table(["run", "task", "role", "node", "elapsed", "last line"],
                   [[str(row["run"].id), task_link(row["task"]), h(row["run"].role),
                     h(row["run"].node), span(row["elapsed"]),
                     f'<code>{h(row["last_line"][:200])}</code>'] for row in running],
                   "no agent is running")
    if running_count > len(running):
        agents += (f'<p class="muted">{len(running)} of {running_count} running agents are '
                   f'shown, the longest running first.</p>')
    paused = "".join(f'<p class="error">Node {h(node["name"])} starts nothing new since '
                     f'{when(view, node["since"])}: {h(node["reason"])}</p>'
                     for node in board_ops.paused_nodes(view.queue, view.now))
    paused += "".join(f'<p class="error">Runtime {h(down["runtime"])}: endpoint down since '
                      f'{when(view, down["since"])} ({h(down["reason"])}); its tasks wait, no '
                      f'strike{_next_probe(view, down)}</p>'
                      for down in board_ops.endpoints_down(view.queue, view.now))
    return (f'<section id="paused">{paused}</section>' if paused else "") + (
            f'<section id="counts"><h2>Tasks by state and role</h2>{counts}</section>'
            f'<section id="p0"><h2>P0 waiting</h2>{waits}</section>'
            f'<section id="running"><h2>Running agents</h2>{agents}</section>')


def _next_probe(view: View, down: dict) -> str:
    return ", a probe is asking it" if down["probing"] else \
        f", next probe {when(view, down['next_probe'])}"


def _count(value: int, state_name: str, role: str | None = None) -> str:
    """A count, linked to the list of the tasks it counts."""
    if not value:
        return '<span class="muted">0</span>'
    return f'<a href="{h(list_href(state=state_name, role=role))}" class="n">{value}</a>'


def _branch(node: dict[str, Any], current: int) -> str:
    task = node["task"]
    label = f"<strong>#{task.id} {h(task.title)}</strong>" if task.id == current \
        else task_link(task)
    children = "".join(_branch(child, current) for child in node["children"])
    return f"<ul><li>{label} {state(task.state.value)}{children}</li></ul>"


def _log_panel(view: View) -> str:
    """A task page's live log: its latest run's, outside the part that is swapped on events
    (the log grows by itself, line by line)."""
    if not view.path.startswith("/tasks/") or not view.params.get("task_id", "").isdigit():
        return ""
    try:
        runs = tasks.runs_of_task(view.queue, int(view.params["task_id"]))
    except Exception:  # noqa: BLE001 - the page itself says the task is missing
        return ""
    if not runs:
        return '<h2>Log</h2><p class="muted">no run yet: reload when one starts</p>'
    return f'<h2>Log of run {runs[-1].id}</h2><pre id="log" data-run="{runs[-1].id}"></pre>'


def _state_list(view: View, wanted: TaskState, actions: list[str], extra: str,
                empty: str) -> str:
    found = tasks.list_tasks(view.queue, state=wanted, limit=LIST_LIMIT)
    rows = [[task_link(task), h(task.role), f"P{int(task.priority)}", when(view, task.updated_at),
             f"<code>{h(getattr(task, extra) or '')}</code>",
             " ".join(button(view, task.id, action) for action in actions)] for task in found]
    return table(["task", "role", "priority", "since", extra.replace("_", " "), ""], rows, empty)


def dead(view: View) -> str:
    return _state_list(view, TaskState.DEAD, ["requeue"], "last_error", "no dead task")


def review(view: View) -> str:
    return _state_list(view, TaskState.NEEDS_REVIEW, ["approve", "reject"], "summary",
                       "nothing waits for review")


def blocked(view: View) -> str:
    return _state_list(view, TaskState.BLOCKED, ["unblock"], "reason", "no blocked task")


def cooldowns(view: View) -> str:
    rows = [[h(c.runtime), when(view, c.until), span(c.until - view.now), h(c.reason)]
            for c in cooldown_ops.active_cooldowns(view.queue, view.now)]
    return table(["runtime", "until", "left", "reason"], rows, "no runtime is cooling down")


def cost(view: View) -> str:
    """Cost per role per day as stacked bars (an inline SVG: no chart library). The bars are
    the known dollars; each cell names the runs of unknown cost beside them, never $0."""
    data = run_ops.cost_by_role_and_day(view.queue, view.now)
    days, roles, unpriced = data["days"], data["roles"], data["unpriced"]
    totals = [sum(values[i] for values in roles.values()) for i in range(len(days))]
    top = max(totals, default=0) or 1.0
    colours = ["#1f5fbf", "#1d7a3a", "#9a6a00", "#a12a2a", "#6a3fb0", "#0f7c86"]
    width, height, bar = 60 * len(days), 220, 40
    shapes = []
    for i, day in enumerate(days):
        base = height - 20
        for n, (role, values) in enumerate(roles.items()):
            size = values[i] / top * (height - 40)
            if size:
                shapes.append(f'<rect x="{i * 60 + 10}" y="{base - size:.1f}" width="{bar}" '
                              f'height="{size:.1f}" fill="{colours[n % len(colours)]}">'
                              f'<title>{h(role)} {h(day)}: ${values[i]:.4f}</title></rect>')
                base -= size
        shapes.append(f'<text x="{i * 60 + 30}" y="{height - 5}" font-size="10" '
                      f'text-anchor="middle">{h(day[5:])}</text>')
    legend = " ".join(f'<span class="c{n % len(colours)}">■ {h(role)}</span>'
                      for n, role in enumerate(roles))
    rows = [[h(role)] + [h(cost_text(value, unknown))
                         for value, unknown in zip(values, unpriced[role], strict=True)]
            + [h(cost_text(sum(values), sum(unpriced[role])))] for role, values in roles.items()]
    return (f'<svg id="cost-chart" width="{width}" height="{height}" role="img" '
            f'aria-label="cost per role per day">{"".join(shapes)}</svg>'
            f'<p>{legend or "no spend in these days"}</p>'
            + table(["role", *[day[5:] for day in days], "total"], rows, "no runs ended"))

