/* blitzq live dashboard: no dependencies, no network beyond its own server.
 * Reads a snapshot then deltas from the WebSocket (data-socket); without one, or when it
 * cannot connect, polls the JSON snapshot (data-data-url) every 2 seconds. */
(function () {
  "use strict";
  var root = document.getElementById("bq-dashboard");
  if (!root) { return; }
  var WINDOW_S = 900, POLL_MS = 2000;
  var state = { series: {}, queues: {}, workers: [], failures: [], seen: {}, now: Date.now(),
                offset: 0, running: [], runningTotal: 0 };
  // Whether Redis has been read (state.read) and why it cannot be now (failing): with
  // Redis down the page says so and shows no number as if it were known (docs/dashboard.md).
  state.read = false;
  var failing = "", transport = { mode: "connecting", label: "connecting…" };
  var socket = null, pollTimer = null, retryTimer = null, drawQueued = false;
  // How much work the page does: messages applied, and the slowest apply or redraw (ms),
  // on the root element (data-messages, data-slowest-ms) for tests and the curious.
  var messages = 0, slowest = 0;

  function timed(work) {
    var began = window.performance.now();
    work();
    var took = window.performance.now() - began;
    if (took > slowest) { slowest = took; root.setAttribute("data-slowest-ms", took.toFixed(1)); }
  }

  function $(id) { return document.getElementById(id); }
  function text(el, value) { if (el && el.textContent !== String(value)) { el.textContent = String(value); } }
  function fmt(n) { return (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en-US"); }
  function ms(n) {
    if (n === null || n === undefined) { return "–"; }
    return n < 1000 ? n + " ms" : (n / 1000).toFixed(n < 10000 ? 2 : 1) + " s";
  }
  function span(msv) {
    if (msv === null || msv === undefined) { return ""; }
    var s = msv / 1000;
    if (s >= 86400) { return (s / 86400).toFixed(0) + " d"; }
    if (s >= 3600) { return (s / 3600).toFixed(0) + " h"; }
    if (s >= 60) { return (s / 60).toFixed(0) + " min"; }
    return s.toFixed(0) + " s";
  }
  function cell(tag, value, cls) {
    var el = document.createElement(tag);
    el.textContent = value;
    if (cls) { el.className = cls; }
    return el;
  }
  function setStatus(mode, label) {
    transport = { mode: mode, label: label };
    showStatus();
  }
  function showStatus() {
    var el = $("bq-status"), down = failing && transport.mode !== "offline" &&
                                    transport.mode !== "denied";
    el.setAttribute("data-mode", down ? "error" : transport.mode);
    text(el, down ? "Redis unreachable" : transport.label);
  }
  function unknown(span_) {
    return emptyRow(span_, failing ? "Unknown: Redis cannot be read." : "Waiting for the first numbers…");
  }

  // -- applying messages ------------------------------------------------------------

  function apply(msg) {
    if (!msg || (msg.t !== "snapshot" && msg.t !== "delta")) { return; }
    messages += 1;
    root.setAttribute("data-messages", String(messages));
    state.now = msg.now;
    state.offset = Date.now() - msg.now;
    if (msg.t === "snapshot") { state.series = {}; state.failures = []; state.seen = {}; }
    var was = failing;
    failing = msg.error || "";
    if (!failing && msg.stats_ms) { state.read = true; }
    root.setAttribute("data-redis", failing ? "down" : state.read ? "up" : "unknown");
    root.classList.toggle("bq-stale", !!failing);
    showStatus();
    (msg.series || []).forEach(function (p) { state.series[p[0]] = [p[1], p[2]]; });
    if (msg.queues && (state.read || !failing)) { state.queues = msg.queues; }
    if (msg.workers) { state.workers = msg.workers; }
    if (msg.running) {
      state.running = msg.running;
      state.runningTotal = msg.running_total || msg.running.length;
    }
    if (msg.queues || was !== failing) { renderQueues(); }
    if (msg.workers || was !== failing) { renderWorkers(); }
    if (msg.running || was !== failing) { renderRunning(); }
    (msg.failures || []).forEach(function (f) {
      if (!state.seen[f.cursor]) { state.seen[f.cursor] = true; state.failures.unshift(f); }
    });
    if (state.failures.length > 25) { state.failures.length = 25; }
    if (msg.failures || was !== failing) { renderFailures(); }
    var t = state.read ? (msg.totals || {}) : {};  // nothing read yet: "–", not 0
    text($("bq-enqueued"), fmt(t.enqueued));
    text($("bq-started"), fmt(t.started));
    text($("bq-succeeded"), fmt(t.succeeded));
    text($("bq-retried"), fmt(t.retried));
    text($("bq-failed"), fmt(t.failed));
    text($("bq-dead-lettered"), fmt(t.dead_lettered));
    var w = state.read ? (msg.workflows || {}) : {};
    text($("bq-workflows-running"), fmt(w.running));
    text($("bq-workflows-failed"), fmt(w.failed));
    var lat = msg.latency || {};
    text($("bq-p50"), ms(lat.p50));
    text($("bq-p99"), ms(lat.p99));
    var err = $("bq-error");
    err.hidden = !msg.error;
    text(err, msg.error || "");
    scheduleDraw();
  }

  function renderQueues() {
    var body = $("bq-queues").tBodies[0], names = Object.keys(state.queues).sort();
    var rows = document.createDocumentFragment();
    var dead = root.getAttribute("data-dead-letters-url");
    names.forEach(function (name) {
      var q = state.queues[name], tr = document.createElement("tr");
      tr.setAttribute("data-queue", name);
      tr.appendChild(cell("th", name));
      tr.appendChild(cell("td", fmt(q.ready), "bq-ready"));
      tr.appendChild(cell("td", fmt(q.in_flight), "bq-in-flight"));
      tr.appendChild(cell("td", fmt(q.scheduled), "bq-scheduled"));
      var td = cell("td", "", "bq-dead");
      if (dead && q.dead_letters) {
        var a = cell("a", fmt(q.dead_letters));
        a.href = dead + "?queue=" + encodeURIComponent(name);
        td.appendChild(a);
      } else { td.textContent = fmt(q.dead_letters); }
      tr.appendChild(td);
      tr.appendChild(cell("td", fmt(q.enqueue_rate), "bq-enqueue-rate"));
      tr.appendChild(cell("td", fmt(q.completion_rate), "bq-completion-rate"));
      tr.appendChild(cell("td", span(q.oldest_ready_age_ms), "bq-oldest"));
      // Messages wait and no live worker serves the queue: nothing will run them.
      var served = cell("td", fmt(q.workers), "bq-workers");
      if (q.unserved) {
        served.appendChild(document.createTextNode(" "));
        served.appendChild(cell("span", "no live worker", "bq-unserved"));
      }
      tr.appendChild(served);
      rows.appendChild(tr);
    });
    if (!names.length) { rows.appendChild(state.read ? emptyRow(9, "No queues.") : unknown(9)); }
    body.replaceChildren(rows);
  }

  function emptyRow(span_, message) {
    var tr = document.createElement("tr"), td = cell("td", message);
    tr.className = "bq-empty";
    td.colSpan = span_;
    tr.appendChild(td);
    return tr;
  }

  function renderWorkers() {
    var body = $("bq-workers").tBodies[0], rows = document.createDocumentFragment();
    state.workers.forEach(function (w) {
      var tr = document.createElement("tr");
      tr.appendChild(cell("th", w.name));
      tr.appendChild(cell("td", w.queues.join(", ")));
      tr.appendChild(cell("td", w.running + " / " + w.concurrency));
      var load = cell("td", "", "bq-load"), bar = document.createElement("span"),
          fill = document.createElement("span");
      bar.className = "bq-meter";
      fill.style.width = Math.round(Math.min(1, w.load) * 100) + "%";
      bar.appendChild(fill);
      load.appendChild(bar);
      load.appendChild(document.createTextNode(" " + Math.round(w.load * 100) + " %"));
      tr.appendChild(load);
      tr.appendChild(cell("td", fmt(w.processed)));
      tr.appendChild(cell("td", w.heartbeat_age_s.toFixed(1) + " s ago", "bq-heartbeat"));
      rows.appendChild(tr);
    });
    if (!state.workers.length) {
      rows.appendChild(state.read ? emptyRow(6, "No live workers.") : unknown(6));
    }
    body.replaceChildren(rows);
  }

  function renderRunning() {
    var body = $("bq-running").tBodies[0], rows = document.createDocumentFragment();
    var history = root.getAttribute("data-history-url");
    state.running.forEach(function (r) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-id", r.id);
      tr.appendChild(cell("td", r.task, "bq-task"));
      var id = cell("td", "", "bq-task-id");
      if (history) {
        var a = cell("a", r.id);
        a.href = history + "?q=" + encodeURIComponent(r.id);
        id.appendChild(a);
      } else { id.textContent = r.id; }
      tr.appendChild(id);
      tr.appendChild(cell("td", r.queue, "bq-queue"));
      tr.appendChild(cell("td", r.worker + (r.attempt > 1 ? " (attempt " + r.attempt + ")" : ""),
                          "bq-worker"));
      var since = cell("td", "", "bq-since");
      since.setAttribute("data-started", String(r.started_ms));
      tr.appendChild(since);
      var td = cell("td", "", "bq-progress"), p = r.progress;
      if (p) {
        var counts = fmt(p.done) + (p.total !== null && p.total !== undefined
          ? " / " + fmt(p.total) : "");
        if (p.fraction !== null && p.fraction !== undefined) {
          var bar = document.createElement("span"), fill = document.createElement("span");
          bar.className = "bq-meter";
          fill.style.width = Math.round(p.fraction * 100) + "%";
          bar.appendChild(fill);
          td.appendChild(bar);
          counts = " " + Math.round(p.fraction * 100) + " % (" + counts + ")";
        }
        td.appendChild(document.createTextNode(counts + (p.note ? " · " + p.note : "")));
      } else { td.textContent = "–"; }
      tr.appendChild(td);
      rows.appendChild(tr);
    });
    if (!state.running.length) {
      rows.appendChild(state.read ? emptyRow(6, "Nothing running.") : unknown(6));
    }
    body.replaceChildren(rows);
    text($("bq-running-total"), state.runningTotal > state.running.length
      ? "(" + fmt(state.runningTotal) + " in all)" : "");
    tickRunning();
  }

  function tickRunning() {  // "running for" moves on between updates
    var now = Date.now() - state.offset;
    Array.prototype.forEach.call(document.querySelectorAll("#bq-running td.bq-since"),
      function (td) { text(td, span(Math.max(0, now - Number(td.getAttribute("data-started"))))); });
  }

  function renderFailures() {
    var body = $("bq-failures").tBodies[0], rows = document.createDocumentFragment();
    var history = root.getAttribute("data-history-url");
    state.failures.forEach(function (f) {
      var tr = document.createElement("tr");
      tr.appendChild(cell("td", new Date(f.time_ms).toLocaleTimeString()));
      tr.appendChild(cell("td", f.task));
      tr.appendChild(cell("td", f.queue));
      tr.appendChild(cell("td", f.kind.replace("_", " ") + (f.attempt ? " (attempt " + f.attempt + ")" : "")));
      tr.appendChild(cell("td", f.error));
      var id = cell("td", "", "bq-task-id");
      if (history) {
        var a = cell("a", f.id);
        a.href = history + "?q=" + encodeURIComponent(f.id);
        id.appendChild(a);
      } else { id.textContent = f.id; }
      tr.appendChild(id);
      rows.appendChild(tr);
    });
    if (!state.failures.length) { rows.appendChild(state.read ? emptyRow(6, "None.") : unknown(6)); }
    body.replaceChildren(rows);
  }

  // -- the chart --------------------------------------------------------------------

  function scheduleDraw() {
    if (drawQueued) { return; }
    drawQueued = true;
    window.requestAnimationFrame(function () { drawQueued = false; timed(draw); });
  }

  function color(name, fallback) {
    var v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return v || fallback;
  }

  function draw() {
    var canvas = $("bq-chart"), box = canvas.parentNode;
    var width = Math.max(300, box.clientWidth), height = 220, ratio = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(width * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
      canvas.style.width = width + "px";
      canvas.style.height = height + "px";
    }
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    var fg = color("--body-quiet-color", "#666"), grid = color("--hairline-color", "#ddd");
    var ok = getComputedStyle(canvas).getPropertyValue("--bq-ok").trim() || "#2e9d5b";
    var bad = getComputedStyle(canvas).getPropertyValue("--bq-fail").trim() || "#d64545";
    var now = Math.floor((Date.now() - state.offset) / 1000), start = now - WINDOW_S;
    var left = 44, right = width - 8, top = 10, bottom = height - 22;
    var peak = 0, sumOk = 0, sumFail = 0, s;
    for (s in state.series) {
      if (+s < start) { delete state.series[s]; continue; }
      var c = state.series[s];
      peak = Math.max(peak, c[0], c[1]);
      sumOk += c[0];
      sumFail += c[1];
    }
    canvas.setAttribute("data-completed", String(sumOk));
    canvas.setAttribute("data-failed", String(sumFail));
    text($("bq-chart-peak"), "· peak " + fmt(peak) + "/s");
    var scale = Math.max(4, niceCeil(Math.max(1, peak)));  // 4 grid lines: whole numbers
    ctx.font = "11px " + (color("--font-family-primary", "sans-serif") || "sans-serif");
    ctx.fillStyle = fg;
    ctx.strokeStyle = grid;
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (var i = 0; i <= 4; i++) {
      var y = Math.round(bottom - (bottom - top) * i / 4) + 0.5;
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(right, y); ctx.stroke();
      ctx.fillText(fmt(Math.round(scale * i / 4)), left - 6, y);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (var m = 0; m <= 15; m += 5) {
      var x = left + (right - left) * (WINDOW_S - m * 60) / WINDOW_S;
      ctx.textAlign = m === 0 ? "right" : m === 15 ? "left" : "center";
      ctx.fillText(m === 0 ? "now" : "-" + m + " min", x, bottom + 6);
    }
    function line(index, stroke) {
      ctx.beginPath();
      ctx.strokeStyle = stroke;
      ctx.lineWidth = 1.5;
      var step = (right - left) / WINDOW_S;
      for (var t = start; t <= now; t++) {
        var v = state.series[t] ? state.series[t][index] : 0;
        var px = left + (t - start) * step, py = bottom - (bottom - top) * v / scale;
        if (t === start) { ctx.moveTo(px, py); } else { ctx.lineTo(px, py); }
      }
      ctx.stroke();
    }
    line(0, ok);
    line(1, bad);
  }

  function niceCeil(v) {
    var p = Math.pow(10, Math.floor(Math.log10(v))), n = v / p;
    return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 5 ? 5 : 10) * p;
  }

  // -- transport ----------------------------------------------------------------------

  function poll() {
    if (pollTimer !== null) { return; }
    setStatus("polling", "refreshing every 2 s");
    var tick = function () {
      fetch(root.getAttribute("data-data-url"), { credentials: "same-origin",
                                                  headers: { "Accept": "application/json" } })
        .then(function (r) { return r.json(); })
        .then(function (msg) {
          if (msg.t === "error") { apply({ t: "delta", now: Date.now(), error: msg.error }); }
          else { apply(msg); }
        })
        .catch(function () { setStatus("offline", "cannot reach the server"); });
    };
    tick();
    pollTimer = window.setInterval(tick, POLL_MS);
  }

  function stopPolling() {
    if (pollTimer !== null) { window.clearInterval(pollTimer); pollTimer = null; }
  }

  function connect(delay) {
    var path = root.getAttribute("data-socket");
    if (!path || !("WebSocket" in window)) { poll(); return; }
    var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
    var opened = false;
    try { socket = new WebSocket(url); } catch (e) { poll(); return; }
    socket.onopen = function () { opened = true; stopPolling(); setStatus("live", "live"); };
    socket.onmessage = function (event) {
      var msg;
      try { msg = JSON.parse(event.data); } catch (e) { return; /* a bad frame: skip it */ }
      timed(function () { apply(msg); });
    };
    socket.onclose = function (event) {
      socket = null;
      if (event.code === 4403) { setStatus("denied", "not allowed"); return; }
      poll();  // keep the numbers coming meanwhile, and try the socket again later
      var next = opened ? 1000 : Math.min(60000, (delay || 2000) * 2);
      if (retryTimer === null) {
        retryTimer = window.setTimeout(function () { retryTimer = null; connect(next); }, next);
      }
    };
  }

  // The admin's theme toggle (data-theme on <html>) and the system's preference.
  new MutationObserver(scheduleDraw).observe(document.documentElement,
                                             { attributes: true, attributeFilter: ["data-theme"] });
  if (window.matchMedia) {
    var mq = window.matchMedia("(prefers-color-scheme: dark)");
    if (mq.addEventListener) { mq.addEventListener("change", scheduleDraw); }
  }
  window.addEventListener("resize", scheduleDraw);
  window.setInterval(scheduleDraw, 1000);  // the time axis moves on even when idle
  window.setInterval(tickRunning, 1000);
  connect(1000);
}());
