// queued dashboard: the live graph of the overview, confirmations, select-all.
// Loaded from this origin only (the Content-Security-Policy allows no inline script).
"use strict";

(function () {
  // --- confirmations: a button with data-confirm asks before its form is sent ---------------
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (button && button.dataset.confirm && !window.confirm(button.dataset.confirm)) {
      event.preventDefault();
    }
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

  // --- the live graph ------------------------------------------------------------------------
  var totals = document.getElementById("totals");
  var svg = document.getElementById("live");
  if (!totals || !svg) return;

  var POINTS = 60, W = 600, H = 160;
  var url = totals.dataset.stats;
  var interval = parseFloat(totals.dataset.interval) || 2;
  var paused = false, timer = null, last = null;
  var series = { processed: [], failed: [] };
  var status = document.getElementById("live-status");
  var pauseButton = document.getElementById("live-pause");
  var intervalSelect = document.getElementById("live-interval");

  function fmt(n) { return Number(n).toLocaleString("en-US"); }

  function latency(s) {
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return s.toFixed(1) + " s";
    return Math.floor(s / 60) + "m " + Math.round(s % 60) + "s";
  }

  function draw() {
    var peak = 1;
    ["processed", "failed"].forEach(function (k) {
      series[k].forEach(function (v) { if (v > peak) peak = v; });
    });
    ["processed", "failed"].forEach(function (k) {
      var values = series[k], step = W / (POINTS - 1), start = POINTS - values.length;
      var points = values.map(function (v, i) {
        return ((start + i) * step).toFixed(1) + "," + (H - 4 - (H - 8) * v / peak).toFixed(1);
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
        if (el) el.textContent = fmt(doc[k]);
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
  });
  poll();
})();
