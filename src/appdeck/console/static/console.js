// AppDeck console: live parts, progressively enhanced. Every page is complete without this
// script; with it, the page follows its Server-Sent Events stream (body[data-live]) and, on a
// change, fetches again each part whose data-on names the change's kind ("*": any), keeping
// which <details> were open. Log followers (pre[data-follow]) append lines from their own
// stream. No eval, no inline code: the Content-Security-Policy allows this file only.
"use strict";
(function () {
  var body = document.body;
  var url = body.getAttribute("data-live");
  var state = document.querySelector("[data-live-state]");
  var pending = new Map();

  function openDetails(el) {
    var open = new Set();
    el.querySelectorAll("details[open]").forEach(function (d) {
      var li = d.closest("[id]");
      if (li) open.add(li.id);
    });
    return open;
  }

  // pending: el -> whether a change came while its fetch was out (then fetch once more: the
  // answer in flight may predate that change)
  function refresh(el) {
    if (pending.has(el)) { pending.set(el, true); return; }
    pending.set(el, false);
    var open = openDetails(el);
    fetch(el.getAttribute("data-refresh"), {credentials: "same-origin", headers: {"X-Console-Fragment": "1"}})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        el.innerHTML = html;
        open.forEach(function (id) {
          var d = document.getElementById(id);
          var det = d && d.querySelector("details");
          if (det) det.open = true;
        });
        el.dispatchEvent(new CustomEvent("console:refreshed", {bubbles: true}));
      })
      .catch(function () {})
      .finally(function () {
        var again = pending.get(el);
        pending.delete(el);
        if (again) refresh(el);
      });
  }

  function changed(kind) {
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      var on = (el.getAttribute("data-on") || "").split(" ");
      if (kind === "resync" || on.indexOf("*") >= 0 || on.indexOf(kind) >= 0) refresh(el);
    });
  }

  if (url && window.EventSource) {
    var source = new EventSource(url);
    source.addEventListener("change", function (e) {
      var kind = "resync";
      try { kind = JSON.parse(e.data).kind; } catch (err) { /* a resync */ }
      changed(kind);
    });
    source.addEventListener("open", function () {
      if (state) { state.hidden = true; }
      body.setAttribute("data-live-connected", "1");
    });
    source.addEventListener("error", function () {
      if (state) { state.textContent = "Live updates paused, reconnecting…"; state.hidden = false; }
      body.removeAttribute("data-live-connected");
    });
  }

  document.querySelectorAll("pre[data-follow]").forEach(function (pre) {
    if (!window.EventSource) return;
    var logs = new EventSource(pre.getAttribute("data-follow"));
    logs.addEventListener("line", function (e) {
      var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
      pre.appendChild(document.createTextNode(e.data + "\n"));
      var excess = pre.childNodes.length - 2000;
      for (var i = 0; i < excess; i++) pre.removeChild(pre.firstChild);
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    });
  });
})();
