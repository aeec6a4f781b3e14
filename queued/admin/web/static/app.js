// queued dashboard: confirmations with their numbers, select-all, local times on hover, and the
// overview's live graph. Loaded from this origin only (the Content-Security-Policy allows no
// inline script); the pages work without it, less the confirmations and the live graph.
"use strict";

(function () {
  function fmt(n) { return Number(n).toLocaleString("en-US"); }

  // --- confirmations: a button with data-confirm asks before its form is sent ---------------
  // Its question carries the number of jobs it acts on: counted now from the form's ticked rows
  // (data-selected), or asked of the server at the moment of the click (data-count: a whole
  // set, every match of a search, a queue, a task's errors), as {n} (and any other {name} of
  // the server's answer). The server counts on a copy of the set that it keeps for the answer;
  // the form sends that copy's token and the number back, and the action acts on at most the
  // jobs counted (a job that arrives while the question is read is left).
  // A name in the question has its braces doubled (filters.in_question): only the question's
  // own {n} is filled, in one pass (a queue named {n} read "Delete all 2 jobs of queue 2?").
  function ask(button, doc) {
    var text = button.dataset.confirm;
    return window.confirm(text.replace(/\{\{|\}\}|\{(\w+)\}/g, function (whole, name) {
      if (!name) return whole.charAt(0);
      return doc !== null && name in doc ? fmt(doc[name]) : whole;
    }));
  }

  function carry(form, name, value) {
    var input = form.querySelector('input[type="hidden"][name="' + name + '"]');
    if (!input) {
      input = document.createElement("input");
      input.type = "hidden";
      input.name = name;
      form.appendChild(input);
    }
    input.value = String(value);
  }

  function resubmit(button, doc) {
    if (doc.token) {
      carry(button.form, "snapshot", doc.token);
      carry(button.form, "counted", doc.count);
    }
    button.dataset.asked = "1";
    button.form.requestSubmit(button);
  }

  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (!button || !button.dataset.confirm) return;
    if (button.dataset.asked) { delete button.dataset.asked; return; }
    if (button.dataset.selected) {
      var n = button.form.querySelectorAll('tbody input[type="checkbox"]:checked').length;
      if (n === 0) {
        event.preventDefault();
        window.alert("Tick the jobs to act on first.");
      } else if (!ask(button, { n: n })) {
        event.preventDefault();
      }
      return;
    }
    if (button.dataset.count) {
      event.preventDefault();
      // (the page's token: this count keeps a copy of the set, a write no other site may ask for)
      var token = button.form.querySelector('input[name="csrf_token"]');
      fetch(button.dataset.count, {
        headers: { accept: "application/json", "x-csrf-token": token ? token.value : "" },
        cache: "no-store" })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.json();
        })
        .then(function (doc) {
          doc.n = doc.count;
          if (ask(button, doc)) resubmit(button, doc);
        })
        .catch(function (e) { window.alert("Could not count the jobs: " + e.message); });
      return;
    }
    if (!ask(button, null)) event.preventDefault();
  });

  // --- select all rows of a table ----------------------------------------------------------------
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.classList || !box.classList.contains("select-all")) return;
    var table = box.closest("table");
    table.querySelectorAll('tbody input[type="checkbox"]').forEach(function (b) {
      b.checked = box.checked;
    });
  });

  // --- times: UTC on the page, the browser's local time on hover -----------------------------
  function localTime(date) {
    return date.toLocaleString(undefined, {
      year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
      second: "2-digit", timeZoneName: "short"
    });
  }

  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var date = new Date(el.getAttribute("datetime"));
    if (isNaN(date.getTime())) return;
    var utc = el.getAttribute("title");  // a relative time ("3m ago") has its UTC time there
    el.setAttribute("title", (utc ? utc + "\n" : "") + "your time: " + localTime(date));
  });

  // --- a search's number of matches, counted after the page is shown --------------------------
  var matches = document.getElementById("match-count");
  if (matches && matches.dataset.count) {
    fetch(matches.dataset.count, { headers: { accept: "application/json" }, cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (doc) {
        matches.textContent = fmt(doc.count) + (doc.count === 1 ? " match" : " matches") +
          " in " + fmt(doc.size) + " jobs";
        matches.dataset.total = String(doc.count);
      })
      .catch(function (e) { matches.textContent = "could not count the matches: " + e.message; });
  }

  // --- the live graph ------------------------------------------------------------------------
  var svg = document.getElementById("live");
  if (!svg) return;

  // The plot area inside the SVG's 800 x 220 (templates/overview.html draws the axes there).
  var POINTS = 60, LEFT = 56, RIGHT = 788, TOP = 12, BASE = 186;
  var url = svg.dataset.stats;
  var interval = parseFloat(svg.dataset.interval) || 2;
  var paused = false, timer = null, last = null;
  var series = { processed: [], failed: [] };
  var status = document.getElementById("live-status");
  var pauseButton = document.getElementById("live-pause");
  var intervalSelect = document.getElementById("live-interval");

  function latency(s) {
    if (s === 0) return "0 ms";
    if (s < 0.001) return (s * 1000).toFixed(2) + " ms";
    if (s < 0.01) return (s * 1000).toFixed(1) + " ms";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return s.toFixed(1) + " s";
    return Math.floor(s / 60) + "m " + Math.round(s % 60) + "s";
  }

  // 0 and round steps (1, 2 or 5 times a power of ten) up to at least peak (charts.py's rule).
  function niceTicks(peak) {
    if (peak <= 0) return [0, 1];
    var raw = peak / 5, power = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * power; })
      .filter(function (s) { return s >= raw; })[0];
    if (peak >= 5) step = Math.max(step, 1);
    var ticks = [], count = Math.ceil(peak / step - 1e-9);
    for (var i = 0; i <= count; i++) ticks.push(i * step);
    return ticks;
  }

  function label(v) { return Number(v.toPrecision(6)).toLocaleString("en-US"); }

  function drawYAxis(ticks) {
    var top = ticks[ticks.length - 1];
    var labels = svg.querySelectorAll(".y-label"), lines = svg.querySelectorAll(".y-grid");
    labels.forEach(function (el, i) {
      var shown = i < ticks.length;
      var y = BASE - (BASE - TOP) * (shown ? ticks[i] : 0) / top;
      el.textContent = shown ? label(ticks[i]) : "";
      el.setAttribute("y", (y + 4).toFixed(1));
      lines[i].setAttribute("y1", y.toFixed(1));
      lines[i].setAttribute("y2", y.toFixed(1));
      lines[i].setAttribute("visibility", shown ? "visible" : "hidden");
    });
    return top;
  }

  // Labels at round numbers of seconds ago (0 is "now"), as many as fit.
  function drawXAxis() {
    var span = (POINTS - 1) * interval;
    var ticks = niceTicks(span).filter(function (t) { return t <= span; });
    svg.querySelectorAll(".x-label").forEach(function (el, i) {
      var shown = i < ticks.length;
      el.textContent = shown ? (ticks[i] === 0 ? "now" : "-" + label(ticks[i]) + " s") : "";
      if (shown) el.setAttribute("x", (RIGHT - (RIGHT - LEFT) * ticks[i] / span).toFixed(1));
      el.setAttribute("text-anchor", i === 0 ? "end" : "middle");
    });
  }

  function draw() {
    var peak = 0;
    ["processed", "failed"].forEach(function (k) {
      series[k].forEach(function (v) { if (v > peak) peak = v; });
    });
    var top = drawYAxis(niceTicks(peak));
    ["processed", "failed"].forEach(function (k) {
      var values = series[k], step = (RIGHT - LEFT) / (POINTS - 1), start = POINTS - values.length;
      var points = values.map(function (v, i) {
        return (LEFT + (start + i) * step).toFixed(1) + "," + (BASE - (BASE - TOP) * v / top).toFixed(1);
      });
      svg.querySelector("polyline." + k).setAttribute("points", points.join(" "));
      var max = values.length ? Math.max.apply(null, values) : 0;
      svg.dataset["max" + k.charAt(0).toUpperCase() + k.slice(1)] = String(max);
    });
    document.getElementById("live-peak").textContent = "peak " + peak.toFixed(1) + "/s";
  }

  function update(doc) {
    ["processed", "failed", "busy", "processes", "enqueued", "scheduled", "retries", "dead"]
      .forEach(function (k) {
        var el = document.getElementById("stat-" + k);
        if (!el) return;
        el.textContent = fmt(doc[k]);
        el.parentNode.classList.toggle("nonzero", doc[k] > 0);
      });
    document.getElementById("stat-default_latency").textContent = latency(doc.default_latency);
    if (last) {
      var dt = Math.max(doc.time - last.time, 0.001);
      ["processed", "failed"].forEach(function (k) {
        series[k].push(Math.max(doc[k] - last[k], 0) / dt);
        if (series[k].length > POINTS) series[k].shift();
      });
      draw();
    }
    last = doc;
    svg.dataset.polls = String(Number(svg.dataset.polls) + 1);
    document.getElementById("live-time").textContent = doc.server_utc_time;
  }

  function poll() {
    timer = null;
    fetch(url, { headers: { accept: "application/json" }, cache: "no-store" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (doc) { update(doc); status.textContent = "live"; })
      .catch(function (e) { status.textContent = "cannot reach the dashboard: " + e.message; })
      .then(function () { if (!paused) timer = setTimeout(poll, interval * 1000); });
  }

  pauseButton.addEventListener("click", function () {
    paused = !paused;
    pauseButton.textContent = paused ? "Resume" : "Pause";
    status.textContent = paused ? "paused" : "live";
    if (paused && timer) { clearTimeout(timer); timer = null; }
    if (!paused) { last = null; poll(); }
  });
  intervalSelect.addEventListener("change", function () {
    interval = parseFloat(intervalSelect.value) || 2;
    drawXAxis();
  });
  drawYAxis([0, 1]);
  drawXAxis();
  poll();
})();
