// pgqueue dashboard: live refresh. Every action is a plain form POST (with the page's
// CSRF token) that the server answers with a confirmation page (the exact count of a
// bulk action, a reason field) before it acts, so the dashboard works, and asks, the
// same without this file.
(function () {
  "use strict";
  var root = document.querySelector('meta[name="pgqueue-root"]').content;
  document.documentElement.setAttribute("data-js", "on");

  // The overview's live part: fetched every 2 s and swapped in place.
  var live = document.getElementById("live");
  if (live) {
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) { return; }
      busy = true;
      fetch(root + "/parts/overview", { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) { if (html !== null) { live.innerHTML = html; } })
        .catch(function () {})
        .then(function () { busy = false; });
    }, 2000);
  }
})();
