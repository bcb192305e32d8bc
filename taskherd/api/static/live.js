// taskherd's dashboard: live without reloading. Committed changes arrive on the event stream
// (/v1/events), gathered by the server into at most one message every MIN_GAP_MS; the page
// then fetches its own fragment and swaps it in. A busy fleet commits hundreds of changes a
// second, so they are taken together: the first change after a quiet spell shows within
// GATHER_MS (under a second), then the page fetches at most once every MIN_GAP_MS, never
// two fetches at once, and not at all while the tab is hidden (it catches up when shown).
// Each open page thus costs the daemon's host one message and one fragment every two
// seconds at most, whatever the rate of events. A task page also follows its run's log.
// No framework, no build: this file is all the JavaScript there is.
(function () {
  "use strict";
  // The server tells every open page of a change at the same instant: each page waits its
  // own fraction of a second before fetching, so twenty pages on the fleet's host do not
  // render at once and take the cores from the agents' dispatch together.
  var GATHER_MS = 150 + Math.floor(Math.random() * 700);
  // Two seconds, not one: twenty dashboards open on the fleet's host while a thousand tasks
  // ran took a third of a core in the browsers at one refresh a second, and the agents'
  // ready → exec tail grew with it (bench/api.py part d). The first change after a quiet
  // spell still shows at once (the server tells it without waiting).
  var MIN_GAP_MS = 2000;
  // An agent's output is no event: while the page shows agents running, it is fetched again
  // this often, so their last lines move (the board's fragment is shared by every viewer).
  var RUNNING_MS = 5000;
  var runningTimer = null;
  var live = document.getElementById("live");
  var timer = null;      // a fetch is scheduled
  var fetching = false;  // a fetch is under way
  var stale = false;     // a change arrived that the page does not show yet
  var lastStart = 0;
  var seen = 0;          // the number of the last change told: the board fetched must show it
  var shown = null;      // the fragment last put in (null: the page as it was loaded)

  function schedule() {
    stale = true;
    if (timer !== null || fetching || document.hidden) { return; }
    var wait = Math.max(GATHER_MS, lastStart + MIN_GAP_MS - Date.now());
    timer = setTimeout(refresh, wait);
  }

  function refresh() {
    timer = null;
    stale = false;
    fetching = true;
    lastStart = Date.now();
    // The query string is the list's filter: the fragment fetched is of the same list.
    var query = location.search ? location.search + "&" : "?";
    fetch(location.pathname + query + "fragment=1&seen=" + seen, {credentials: "same-origin"})
      .then(function (response) {
        if (response.status === 401) { location.href = "/login"; return null; }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== undefined && choosing()) {
          stale = true;  // held while a person ticks tasks or types: swapped when done
        } else if (html !== null && html !== undefined) {
          show(html);
        }
      }, function () { stale = true; })
      .then(function () {
        fetching = false;
        if (stale) { schedule(); }
      });
  }

  function show(html) {
    if (html !== shown) {
      shown = html;
      morph(live, html);
      // What draws into the fragment (the charts) draws again from its new content.
      live.dispatchEvent(new CustomEvent("live:updated"));
    }
    document.body.setAttribute("data-refreshed", String(Date.now()));
    followRunning();
  }

  // The fragment fetched is put in by changing only what differs from the page shown (a
  // count, a row added): replacing the whole of it made the browser lay out and paint the
  // whole page again every second, which, twenty dashboards open on the fleet's host, cost
  // its cores more than the server's work (bench/api.py part d). An unchanged fragment
  // changes nothing at all.
  function morph(target, html) {
    var parsed = document.createElement("template");
    parsed.innerHTML = html;
    patch(target, parsed.content);
  }

  function patch(have, want) {
    var wanted = want.childNodes;
    for (var i = 0; i < wanted.length; i++) {
      var w = wanted[i];
      var h = have.childNodes[i];
      if (!h) {
        have.appendChild(w.cloneNode(true));
      } else if (h.nodeType !== w.nodeType || h.nodeName !== w.nodeName) {
        have.replaceChild(w.cloneNode(true), h);
      } else if (h.nodeType === Node.ELEMENT_NODE) {
        attributes(h, w);
        patch(h, w);
      } else if (h.nodeValue !== w.nodeValue) {
        h.nodeValue = w.nodeValue;
      }
    }
    while (have.childNodes.length > wanted.length) { have.removeChild(have.lastChild); }
  }

  function attributes(have, want) {
    var i;
    for (i = have.attributes.length - 1; i >= 0; i--) {
      var name = have.attributes[i].name;
      if (!want.hasAttribute(name)) { have.removeAttribute(name); }
    }
    for (i = 0; i < want.attributes.length; i++) {
      var wanted = want.attributes[i];
      if (have.getAttribute(wanted.name) !== wanted.value) {
        have.setAttribute(wanted.name, wanted.value);
      }
    }
    // A form field's value is a property, not its attribute, once a person typed in it.
    if ((have.tagName === "INPUT" || have.tagName === "TEXTAREA") && have.value !== want.value) {
      have.value = want.value;
    }
    if (have.tagName === "INPUT" && have.checked !== want.checked) { have.checked = want.checked; }
  }

  function choosing() {
    return live.querySelector("input[type=checkbox]:checked") !== null ||
      (document.activeElement !== null && live.contains(document.activeElement) &&
       /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName));
  }

  function followRunning() {
    if (runningTimer !== null || !live.querySelector("#running tbody tr")) { return; }
    runningTimer = setTimeout(function () { runningTimer = null; schedule(); }, RUNNING_MS);
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && stale) { schedule(); }
  });

  if (live) {
    // gather: the server tells at most one "changed" every MIN_GAP_MS, whatever the rate of
    // events. The board has a stream of its own that carries its fragment (data-stream): a
    // fetch cost a browser more than the rest of a refresh together.
    var events = new EventSource(live.dataset.stream ||
                                 "/v1/events?gather=" + MIN_GAP_MS / 1000);
    events.addEventListener("hello", function () {
      seen = 0;  // a server started again counts its changes from 0
      document.body.setAttribute("data-live", "yes");
    });
    followRunning();
    events.addEventListener("changed", function (message) {
      seen = Math.max(seen, JSON.parse(message.data).seq);
      schedule();
    });
    events.addEventListener("board", function (message) {
      var board = JSON.parse(message.data);
      seen = Math.max(seen, board.seq);
      if (timer !== null || fetching || choosing()) {
        schedule();  // a fetch planned or under way shows it; a person choosing is not moved
      } else {
        stale = false;
        show(board.html);
      }
    });
    events.addEventListener("logout", function () { location.href = "/login"; });
  }

  // The add page's JSON Lines file is read here into the form's text, sent as a plain form.
  var file = document.getElementById("import-file");
  if (file) {
    file.addEventListener("change", function () {
      if (!file.files.length) { return; }
      file.files[0].text().then(function (text) {
        document.getElementById("import-lines").value = text;
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
