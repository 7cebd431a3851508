// pgqueue dashboard: live refresh. Every action is a plain form POST (with the page's
// CSRF token) that the server answers with a confirmation page (the exact count of a
// bulk action, a reason field) before it acts, so the dashboard works, and asks, the
// same without this file.
(function () {
  "use strict";
  var root = document.querySelector('meta[name="pgqueue-root"]').content;
  document.documentElement.setAttribute("data-js", "on");

  // A page's live part (#live, with data-part: the URL that renders it again) is fetched
  // again and swapped in place. How often: the server says, in X-Refresh-After, from
  // what the part cost it (docs/dashboard.md: at most 0.2 s of database time a minute
  // per tab); never while the tab is hidden. Keyboard focus stays on the control it was
  // on (the same position among the part's controls).
  var live = document.getElementById("live");
  if (!live || !live.dataset.part) { return; }
  var every = Number(live.dataset.refresh || "5");
  var controls = "a[href], button, input, select, textarea";

  function focusedIndex() {
    var active = document.activeElement;
    if (!active || !live.contains(active)) { return -1; }
    return Array.prototype.indexOf.call(live.querySelectorAll(controls), active);
  }

  function refresh() {
    if (document.hidden) { schedule(); return; }
    fetch(root + live.dataset.part, { credentials: "same-origin" })
      .then(function (r) {
        var after = Number(r.headers.get("x-refresh-after"));
        if (after > 0) { every = after; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html === null) { return; }
        var index = focusedIndex();
        live.innerHTML = html;
        if (index >= 0) {
          var again = live.querySelectorAll(controls)[index];
          if (again) { again.focus({ preventScroll: true }); }
        }
        var shown = document.getElementById("refresh-every");
        if (shown) { shown.textContent = String(every); }
      })
      .catch(function () {})
      .then(schedule);
  }

  function schedule() { setTimeout(refresh, every * 1000); }
  schedule();
})();
