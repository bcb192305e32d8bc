// taskherd's dashboard: live without reloading. Every committed change arrives on the event
// stream (/v1/events); the page then fetches its own fragment once (changes close together
// are taken as one) and swaps it in. A task page also follows its run's log. No framework,
// no build: this file is all the JavaScript there is.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var pending = null;

  function refresh() {
    pending = null;
    fetch(location.pathname + "?fragment=1", {credentials: "same-origin"})
      .then(function (response) {
        if (response.status === 401) { location.href = "/login"; return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== undefined) {
          live.innerHTML = html;
          document.body.setAttribute("data-refreshed", String(Date.now()));
        }
      });
  }

  if (live) {
    var events = new EventSource("/v1/events");
    events.addEventListener("hello", function () {
      document.body.setAttribute("data-live", "yes");
    });
    events.onmessage = function () {};
    ["task_added", "task_changed", "run_started", "run_ended", "job_fired", "job_changed",
     "cooldown_set", "cooldown_cleared"].forEach(function (kind) {
      events.addEventListener(kind, function () {
        if (pending === null) { pending = setTimeout(refresh, 150); }
      });
    });
  }

  var log = document.getElementById("log");
  if (log && log.dataset.run) {
    var stream = new EventSource("/v1/runs/" + log.dataset.run + "/log/stream?lines=200");
    stream.addEventListener("log", function (message) {
      log.textContent += JSON.parse(message.data).text;
      log.scrollTop = log.scrollHeight;
    });
    stream.addEventListener("end", function () {
      log.setAttribute("data-ended", "yes");
      stream.close();
    });
  }
})();
