// pgqueue dashboard: live refresh of the overview and the count-first confirmation of
// bulk actions. Every action is a plain form POST (with the page's CSRF token), so the
// dashboard works without this file too.
(function () {
  "use strict";
  var root = document.querySelector('meta[name="pgqueue-root"]').content;

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

  // A bulk action asks the server how many runs match, says so, and only then posts.
  document.querySelectorAll("form[data-bulk]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (form.dataset.confirmed === "yes") { return; }
      event.preventDefault();
      var params = new URLSearchParams();
      ["action", "state", "queue", "task", "group"].forEach(function (name) {
        var input = form.elements[name];
        if (input && input.value) { params.set(name, input.value); }
      });
      fetch(root + "/api/runs/count?" + params.toString(), { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (body) {
          if (body.error) { window.alert(body.error); return; }
          var verb = form.elements.action.value;
          if (window.confirm(verb + " " + body.count + " run" + (body.count === 1 ? "" : "s") + "?")) {
            form.dataset.confirmed = "yes";
            form.submit();
          }
        });
    });
  });

  // Single-run and queue actions that ask first.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) { event.preventDefault(); }
    });
  });
})();
