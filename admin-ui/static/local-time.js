// Shows the dashboard's times in the agent's own time zone. The server writes each as UTC text
// in a <time datetime="…" data-local> (what shows without this script); this rewrites the text
// as local hours and minutes (with the date when it is not today), on load and after every htmx
// swap, and says which zone that is.
(function () {
  "use strict";
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "your time zone";
  var clock = { hour: "2-digit", minute: "2-digit", hourCycle: "h23" };
  var dated = { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", hourCycle: "h23" };

  function localize(root) {
    var today = new Date().toDateString();
    root.querySelectorAll("time[data-local]").forEach(function (element) {
      var at = new Date(element.getAttribute("datetime"));
      if (isNaN(at.getTime())) {
        return;
      }
      var format = at.toDateString() === today ? clock : dated;
      element.textContent = new Intl.DateTimeFormat(undefined, format).format(at);
      element.title = at.toISOString().replace(".000Z", "Z") + " (UTC)";
    });
    root.querySelectorAll("[data-local-zone]").forEach(function (element) {
      element.textContent = element.textContent.replace("Times in UTC.", "Times in your time zone, " + zone + ".");
    });
  }

  document.addEventListener("DOMContentLoaded", function () { localize(document); });
  document.addEventListener("htmx:afterSettle", function () { localize(document); });
})();
