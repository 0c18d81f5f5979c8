/* blitzq_django/progress.js: follow one task from a page (docs/progress.md).
 *
 * No build step, no dependency:
 *
 *   <script src="{% static 'blitzq_django/progress.js' %}"></script>
 *   <script>
 *     BlitzQ.follow("{{ task_id }}", {
 *       queue: "{{ queue }}",                  // optional: the default queue otherwise
 *       onState(state, snapshot) {},           // "pending", "running", "succeeded"...
 *       onProgress(progress, snapshot) {},     // {done, total, fraction, note, time_ms}
 *       onDone(result, snapshot) {},           // succeeded: the task's return value
 *       onError(error, snapshot) {},           // failed, dead-lettered, cancelled, expired,
 *                                              // or {type: "forbidden"} / {type: "unreachable"}
 *     });
 *   </script>
 *
 * It listens on the WebSocket ws/blitzq/tasks/<id>/ (pushed by the worker's progress
 * writes); where WebSockets are not served (WSGI, a proxy that drops them) it polls
 * blitzq/tasks/<id>/progress/ every `pollMs` (1000) instead. Both need the user to be
 * allowed to follow the task: BLITZQ["PROGRESS_PERMISSION"]. follow() returns
 * {close()} to stop.
 */
(function (root) {
  "use strict";

  var FORBIDDEN = 4403;
  var BAD_REQUEST = 4400;

  function follow(taskId, options) {
    options = options || {};
    var queue = options.queue || "";
    var query = queue ? "?queue=" + encodeURIComponent(queue) : "";
    var id = encodeURIComponent(taskId);
    var socketPath = (options.socketPath || "/ws/blitzq/tasks/") + id + "/" + query;
    var pollUrl = (options.pollPath || "/blitzq/tasks/") + id + "/progress/" + query;
    var pollMs = options.pollMs || 1000;
    var noop = function () {};
    var onState = options.onState || noop;
    var onProgress = options.onProgress || noop;
    var onDone = options.onDone || noop;
    var onError = options.onError || noop;

    var finished = false;
    var socket = null;
    var timer = null;
    var last = {state: null, progress: null};

    function handle(snapshot) {
      if (finished) return;
      if (snapshot.state !== last.state) {
        last.state = snapshot.state;
        onState(snapshot.state, snapshot);
      }
      var progress = JSON.stringify(snapshot.progress);
      if (snapshot.progress && progress !== last.progress) {
        last.progress = progress;
        onProgress(snapshot.progress, snapshot);
      }
      if (snapshot.final) {
        finished = true;
        stop();
        if (snapshot.state === "succeeded") onDone(snapshot.result, snapshot);
        else onError(snapshot.error || {type: snapshot.state}, snapshot);
      }
    }

    function fail(error) {
      if (finished) return;
      finished = true;
      stop();
      onError(error, null);
    }

    function stop() {
      if (timer !== null) { clearTimeout(timer); timer = null; }
      if (socket !== null) {
        var s = socket; socket = null;
        try { s.close(); } catch (e) { /* already closed */ }
      }
    }

    function poll() {
      timer = null;
      if (finished) return;
      fetch(pollUrl, {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (response) {
          if (response.status === 403) { fail({type: "forbidden"}); return null; }
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.json();
        })
        .then(function (snapshot) {
          if (snapshot) handle(snapshot);
          if (!finished) timer = setTimeout(poll, pollMs);
        })
        .catch(function () {
          if (!finished) timer = setTimeout(poll, pollMs * 2);
        });
    }

    function listen() {
      if (!root.WebSocket || options.transport === "poll") { poll(); return; }
      var scheme = root.location.protocol === "https:" ? "wss://" : "ws://";
      var opened = false;
      try {
        socket = new root.WebSocket(scheme + root.location.host + socketPath);
      } catch (e) {
        poll();
        return;
      }
      socket.onopen = function () { opened = true; };
      socket.onmessage = function (message) {
        try { handle(JSON.parse(message.data)); } catch (e) { /* not ours */ }
      };
      socket.onclose = function (event) {
        socket = null;
        if (finished) return;
        if (event.code === FORBIDDEN) { fail({type: "forbidden"}); return; }
        if (event.code === BAD_REQUEST) { fail({type: "bad request"}); return; }
        // No WebSocket here (or it dropped): poll until the task is finished.
        if (!opened) poll(); else timer = setTimeout(poll, 0);
      };
    }

    listen();
    return {close: function () { finished = true; stop(); }};
  }

  root.BlitzQ = root.BlitzQ || {};
  root.BlitzQ.follow = follow;
})(window);
