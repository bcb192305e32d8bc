"""The dashboard's charts page: the four charts of `ops.charts`, each over the range its own
switch chose (`?finished=1h&cost=7d`: the address holds every choice, so a view is a
bookmark). Each chart's numbers travel in the page as JSON (a `<script type=
"application/json">`, data the CSP lets through, never run); `static/charts.js` draws them
with the vendored uPlot. Without JavaScript, and for a screen reader, each chart is also a
sentence and a table of its non-empty buckets.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from taskherd.api.pages import View, h, table
from taskherd.ops import charts as chart_ops
from taskherd.policy.costs import cost_text
from taskherd.policy.timefmt import zone_named

# The dashboard's own keys in a page's address, not choices of a chart.
PAGE_KEYS = ("fragment", "seen")
RANGE_WORDS = {"1h": "the last hour", "24h": "the last 24 hours", "7d": "the last 7 days"}
BUCKET_WORDS = {60: "per minute", 900: "per 15 minutes", 3600: "per hour"}
SERIES_SHOWN = 6  # the palette's colours (style.css .c0-.c5); more roles share them in turn
# Series whose colour says what they are (green done, red failed…); others take the next.
COLOURS = {"completed": 1, "dead": 3, "cancelled": 2, "p50": 0, "p95": 2}


def charts(view: View) -> str:
    chosen = chart_ops.ranges_asked(view.query, ignored=PAGE_KEYS)
    return "".join(_section(view, chart_ops.chart(view.queue, name, chosen[name], view.now),
                            chosen) for name in chart_ops.CHARTS)


def _section(view: View, data: dict[str, Any], chosen: dict[str, str]) -> str:
    name = data["chart"]
    about = f"{BUCKET_WORDS[data['bucket_seconds']]}, over {RANGE_WORDS[data['range']]}"
    said = SUMMARIES[name](data)
    legend = " ".join(
        f'<span class="swatch"><span class="mark c{COLOURS.get(series["name"], i) % SERIES_SHOWN}">'
        f'</span>{h(series["name"])}</span>' for i, series in enumerate(data["series"]))
    return (f'<section class="chart" id="chart-{name}" aria-labelledby="title-{name}">'
            f'<h2 id="title-{name}">{h(data["title"])} <span class="muted">{h(about)}</span>'
            f'</h2>{_switch(name, chosen)}'
            f'<p class="summary">{h(said)}</p>'
            f'<div class="plot" id="plot-{name}" role="img" '
            f'aria-label="{h(data["title"])}, {h(about)}: {h(said)}"></div>'
            f'<p class="legend" id="legend-{name}">{legend or "nothing to draw"}</p>'
            f'<script type="application/json" data-chart="{name}">{_json(data)}</script>'
            f'<details><summary>{h(data["title"])} as a table</summary>'
            f'{TABLES[name](view, data)}</details></section>')


def _switch(name: str, chosen: dict[str, str]) -> str:
    links = []
    for range_name in chart_ops.RANGES:
        address = "?" + urlencode({**chosen, name: range_name})
        current = ' aria-current="true" class="here"' if chosen[name] == range_name else ""
        links.append(f'<a href="{h(address)}"{current}>{range_name}</a>')
    return f'<nav class="ranges" aria-label="range of {h(name)}">{"".join(links)}</nav>'


def _json(data: dict[str, Any]) -> str:
    # `<` escaped: a role named `</script>` must not end the script element early.
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


def _moment(view: View, at: float) -> str:
    zone = zone_named(view.queue.config.daemon.timezone)
    local = datetime.fromtimestamp(at, zone) if zone else datetime.fromtimestamp(at).astimezone()
    return f'<time datetime="{local.isoformat()}">{local.strftime("%m-%d %H:%M %Z")}</time>'


def _rows(view: View, data: dict[str, Any], columns: list[list[Any]],
          shown: Any = str) -> list[list[str]]:
    """One row a bucket that holds any value, its start first."""
    rows = []
    for i, at in enumerate(data["times"]):
        values = [column[i] for column in columns]
        if any(value not in (None, 0, 0.0) for value in values):
            rows.append([_moment(view, at)] + [h("-" if v is None else shown(v)) for v in values])
    return rows


def _finished_summary(data: dict[str, Any]) -> str:
    totals = data["totals"]
    return (f"{totals['completed']} completed, {totals['dead']} failed for good (dead), "
            f"{totals['cancelled']} cancelled")


def _finished_table(view: View, data: dict[str, Any]) -> str:
    return table(["from", *[s["name"] for s in data["series"]]],
                 _rows(view, data, [s["values"] for s in data["series"]]), "no task finished")


def _seconds(value: float | None) -> str:
    return "-" if value is None else (f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s")


def _latency_summary(data: dict[str, Any]) -> str:
    runs, overall = sum(data["runs"]), data["overall"]
    if not runs:
        return "no task's first run started"
    return (f"{runs} first run{'' if runs == 1 else 's'} started: p50 "
            f"{_seconds(overall['p50'])}, p95 {_seconds(overall['p95'])} from ready to exec")


def _latency_table(view: View, data: dict[str, Any]) -> str:
    p50, p95 = (s["values"] for s in data["series"])
    rows = []
    for i, at in enumerate(data["times"]):
        if data["runs"][i]:
            rows.append([_moment(view, at), str(data["runs"][i]), h(_seconds(p50[i])),
                         h(_seconds(p95[i]))])
    return table(["from", "first runs started", "p50", "p95"], rows, "no run started")


def _depth_summary(data: dict[str, Any]) -> str:
    latest = [(series["name"], series["values"][i], running["values"][i])
              for series, running in zip(data["series"], data["running"], strict=True)
              for i in [_last_sampled(series["values"])] if i is not None]
    if not latest:
        return "no sample yet: the daemon samples the queue once a minute"
    return "latest: " + ", ".join(f"{role} {ready} ready, {held} running"
                                  for role, ready, held in latest)


def _last_sampled(values: list[int | None]) -> int | None:
    return next((i for i in range(len(values) - 1, -1, -1) if values[i] is not None), None)


def _depth_table(view: View, data: dict[str, Any]) -> str:
    columns, headers = [], ["from"]
    for series, running in zip(data["series"], data["running"], strict=True):
        columns += [series["values"], running["values"]]
        headers += [f"{series['name']} ready", f"{series['name']} running"]
    rows = []
    for i, at in enumerate(data["times"]):
        if data["samples"][i]:
            rows.append([_moment(view, at)] + [h("-" if c[i] is None else c[i]) for c in columns])
    return table(headers, rows, "no sample in this range")


def _cost_summary(data: dict[str, Any]) -> str:
    if not data["by_outcome"]:
        return "no run ended"
    dollars = sum(row["cost_usd"] for row in data["by_outcome"])
    unknown = sum(row["unpriced_runs"] for row in data["by_outcome"])
    runs = sum(row["runs"] for row in data["by_outcome"])
    return f"{runs} runs ended: {cost_text(dollars, unknown)}"


def _cost_table(view: View, data: dict[str, Any]) -> str:
    totals = table(["role", "outcome", "runs", "cost"],
                   [[h(row["role"]), h(row["outcome"]), str(row["runs"]),
                     h(cost_text(row["cost_usd"], row["unpriced_runs"]))]
                    for row in data["by_outcome"]], "no run ended")
    columns = []
    for series, unknown in zip(data["series"], data["unpriced"], strict=True):
        columns.append([(dollars, n) for dollars, n in zip(series["values"], unknown["values"],
                                                             strict=True)])
    rows = []
    for i, at in enumerate(data["times"]):
        cells = [column[i] for column in columns]
        if any(dollars or n for dollars, n in cells):
            rows.append([_moment(view, at)] + [h(cost_text(dollars, n)) for dollars, n in cells])
    return totals + table(["from", *[s["name"] for s in data["series"]]], rows,
                          "no bucket with a cost")


SUMMARIES = {"finished": _finished_summary, "latency": _latency_summary,
             "depth": _depth_summary, "cost": _cost_summary}
TABLES = {"finished": _finished_table, "latency": _latency_table, "depth": _depth_table,
          "cost": _cost_table}
