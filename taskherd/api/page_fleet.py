"""The dashboard's fleet pages: the nodes and the limits they share, the jobs as a tree, and
one job with its next fires and its history of fires with their tasks. Everything shown is
escaped (`h`); each action is a form POST with the session's CSRF secret."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from taskherd.api.pages import View, h, span, table, when
from taskherd.ops import fleet as fleet_ops
from taskherd.ops import jobs as job_ops

FIRES_SHOWN = 50
NEXT_FIRES = 5


def nodes(view: View) -> str:
    data = fleet_ops.fleet(view.queue, view.now)
    node_rows = [[h(n["name"]), h(n["status"]), when(view, n["started_at"]),
                  when(view, n["last_seen"]), h(n["version"] or "-"),
                  h(", ".join(n["tags"]) or "-"), _agents(n["agents"]),
                  h(n["paused_reason"] or "")] for n in data["nodes"]]
    role_rows = [[h(r["role"]), _slots(r["running"], r["limit"]), h(r["scope"]),
                  h(r["pool"] or "-")] for r in data["roles"]]
    pool_rows = [[h(p["pool"]), _slots(p["running"], p["limit"]), h(p["scope"])]
                 for p in data["pools"]]
    pauses = [[h(p["name"]), when(view, p["since"]), when(view, p["until"]),
               span(p["until"] - view.now), h(p["reason"])]
              for p in data["cooldowns"] + data["budget_pauses"]]
    return ('<section id="nodes"><h2>Nodes</h2>'
            + table(["node", "status", "up since", "last seen", "version", "tags",
                     "agents running", "starts nothing new because"], node_rows,
                    "no node has started")
            + '</section><section id="roles"><h2>Slots by role, across the fleet</h2>'
            + table(["role", "in use", "limit counted", "pool"], role_rows, "no role")
            + '</section><section id="pools"><h2>Pools</h2>'
            + table(["pool", "in use", "scope"], pool_rows, "no pool")
            + '</section><section id="pauses"><h2>Cooldowns and budget pauses</h2>'
            + table(["paused", "since", "until", "left", "reason"], pauses,
                    "nothing is paused") + "</section>")


def _agents(by_role: dict[str, int]) -> str:
    total = sum(by_role.values())
    if not total:
        return '<span class="muted">0</span>'
    return f"{total} (" + ", ".join(f"{h(role)} {n}" for role, n in by_role.items()) + ")"


def _slots(running: int, limit: int | None) -> str:
    return f"{running} of {limit}" if limit is not None else f"{running} (no limit)"


def job_href(name: str) -> str:
    return "/jobs/" + quote(name, safe="")


def jobs(view: View) -> str:
    """Every job with its next fire and last outcome, then the jobs as a tree by parent."""
    rows = []
    for job in job_ops.list_jobs(view.queue, view.now):
        fire = job.get("last_fire") or {}
        rows.append([f'<a href="{h(job_href(job["name"]))}">{h(job["name"])}</a>',
                     "yes" if job["enabled"] else "no",
                     f"<code>{h(_trigger(job['trigger']))}</code>",
                     when(view, job["next_run_at"]), h(fire.get("status", "-")),
                     when(view, fire.get("fired_at")),
                     _job_buttons(view, job) if job.get("synced") else ""])
    tree = "".join(_branch(root) for root in job_ops.job_tree(view.queue))
    return (table(["job", "enabled", "trigger", "next fire", "last outcome", "last fired", ""],
                  rows, "no jobs")
            + (f'<section id="job-tree"><h2>Job tree</h2>{tree}</section>' if tree else ""))


def _branch(node: dict[str, Any]) -> str:
    mark = "" if node["enabled"] else ' <span class="muted">(disabled)</span>'
    orphan = ' <span class="error">(its parent is gone)</span>' if node.get("orphan") else ""
    after = f' <span class="muted">on {h(node["on"])} of its parent</span>' if node.get("on") \
        else ""
    children = "".join(_branch(child) for child in node["children"])
    return (f'<ul><li><a href="{h(job_href(node["name"]))}">{h(node["name"])}</a>'
            f'{after}{mark}{orphan}{children}</li></ul>')


def _trigger(trigger: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in trigger.items() if key != "timezone")


def _job_buttons(view: View, job: dict[str, Any]) -> str:
    if not view.may_act:
        return ""
    toggle = "disable" if job["enabled"] else "enable"
    return " ".join(_job_form(view, job["name"], action) for action in ("run", toggle))


def _job_form(view: View, name: str, action: str) -> str:
    label = {"run": "Run now", "enable": "Enable", "disable": "Disable"}[action]
    return (f'<form class="inline" method="post" action="/ui{h(job_href(name))}/{action}">'
            f'<input type="hidden" name="csrf" value="{h(view.csrf)}">'
            f'<input type="hidden" name="back" value="{h(view.path)}">'
            f'<button aria-label="{h(label)} {h(name)}">{label}</button></form>')


def job(view: View) -> str:
    """One job: its trigger, its next fires, its fires with their tasks, newest first."""
    name = view.params["name"]
    found = job_ops.get_job(view.queue, name, fires=FIRES_SHOWN)
    upcoming = job_ops.next_fire_times(view.queue, name, view.now, NEXT_FIRES) \
        if found["enabled"] else []
    fires = [[when(view, f["scheduled_for"]), when(view, f["fired_at"]), h(f["kind"]),
              h(f["status"]), _task(f["task_id"]),
              span(f["duration"]) if f["duration"] is not None else "-",
              f'<code>{h((f["error"] or f["summary"] or "")[:200])}</code>']
             for f in found["fires"]]
    soon = "".join(f"<li>{when(view, moment)}</li>" for moment in upcoming)
    return (f'<p><code>{h(_trigger(found["trigger"]))}</code> · '
            f'{"enabled" if found["enabled"] else "disabled"} · from {h(found["source"])} '
            f'{_job_buttons(view, found)}</p>'
            f'<section id="next-fires"><h2>Next fires</h2>'
            + (f"<ol>{soon}</ol>" if soon else '<p class="muted">none: the job is disabled '
               'or will not fire again</p>')
            + '</section><section id="fires"><h2>Fires, newest first</h2>'
            + table(["scheduled for", "fired", "kind", "status", "task", "took", "summary"],
                    fires, "it has not fired yet") + "</section>")


def _task(task_id: int | None) -> str:
    return f'<a href="/tasks/{task_id}">#{task_id}</a>' if task_id is not None else "-"
