// gpugov console: refresh the lists marked data-refresh by polling their
// fragment URL (no library). Bounded: every data-refresh-ms, at most
// data-max-polls times per page load, paused while the tab is hidden,
// stopped when the session ends (401/403) or after 3 failures in a row.
(function () {
  "use strict";
  document.querySelectorAll("[data-refresh]").forEach(function (el) {
    var url = el.getAttribute("data-refresh");
    var every = parseInt(el.getAttribute("data-refresh-ms"), 10) || 10000;
    var left = parseInt(el.getAttribute("data-max-polls"), 10) || 180;
    var failures = 0;
    var timer = setInterval(function () {
      if (document.hidden) { return; }
      if (left-- <= 0 || failures >= 3) { clearInterval(timer); el.setAttribute("data-refresh-stopped", "true"); return; }
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } }).then(function (r) {
        if (r.status === 401 || r.status === 403) { clearInterval(timer); el.setAttribute("data-refresh-stopped", "true"); return null; }
        if (!r.ok) { failures++; return null; }
        return r.text();
      }).then(function (html) {
        if (html === null || html === undefined) { return; }
        failures = 0;
        el.innerHTML = html;
        el.setAttribute("data-refreshed-at", new Date().toISOString());
      }).catch(function () { failures++; });
    }, every);
  });
})();
