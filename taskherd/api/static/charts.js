// taskherd's charts page: draws each chart's numbers (the JSON the server put in the page,
// `<script type="application/json" data-chart>`) with uPlot, vendored beside this file.
// Colours are read from the page's legend (style.css .c0-.c5), so dark mode and the
// palette live in one place. live.js changes the page's fragment when the queue changes and
// says so ("live:updated"): the charts are drawn again from the new numbers. The tables beside stay the text version.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var drawn = [];

  function colour(node, property) {
    return node ? getComputedStyle(node)[property] : "#1d2330";
  }

  function points(values) {
    var n = 0;
    values.forEach(function (series) {
      series.forEach(function (value) { if (value !== null) { n += 1; } });
    });
    return n;
  }

  function drawOne(node) {
    var data = JSON.parse(node.textContent);
    var target = document.getElementById("plot-" + data.chart);
    var swatches = document.querySelectorAll("#legend-" + data.chart + " .mark");
    if (!target) { return; }
    var ink = colour(document.body, "color");
    var grid = colour(document.querySelector("th"), "borderTopColor") || "#dde1e8";
    var series = [{}].concat(data.series.map(function (one, i) {
      return {label: one.name, stroke: colour(swatches[i], "color"), width: 2,
              points: {size: 4}};
    }));
    var values = [data.times].concat(data.series.map(function (one) { return one.values; }));
    var axis = {stroke: ink, grid: {stroke: grid, width: 1}, ticks: {stroke: grid}};
    var options = {
      width: Math.max(320, Math.min(target.clientWidth || 900, 1100)), height: 220,
      series: series, legend: {show: false}, cursor: {show: false},
      scales: {x: {time: true}},
      axes: [axis, Object.assign({}, axis, {label: data.unit || "tasks", labelSize: 20})]
    };
    drawn.push(new uPlot(options, values, target));
    target.setAttribute("data-points", String(points(values.slice(1))));
  }

  function draw() {
    drawn.forEach(function (plot) { plot.destroy(); });
    drawn = [];
    if (typeof uPlot === "undefined") { return; }
    document.querySelectorAll("script[type='application/json'][data-chart]").forEach(drawOne);
    document.body.setAttribute("data-charts", String(drawn.length));
  }

  draw();
  if (live) {
    // live.js tells when it has changed the fragment (which also takes out what uPlot
    // drew into it, being no part of the page the server sent).
    live.addEventListener("live:updated", draw);
  }
  if (window.matchMedia) {
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", draw);
  }
  var resizing = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(draw, 200);
  });
})();
