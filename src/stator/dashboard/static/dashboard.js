// Stator dashboard: refresh the figures of a page in place.  The page names a JSON URL in
// <body data-poll>; the JSON's "values" map data-key attributes to new texts.  No library.
(function () {
  "use strict";
  var url = document.body.getAttribute("data-poll");
  var stamp = document.getElementById("updated");
  function apply(values) {
    var nodes = document.querySelectorAll("[data-key]");
    for (var i = 0; i < nodes.length; i++) {
      var key = nodes[i].getAttribute("data-key");
      if (Object.prototype.hasOwnProperty.call(values, key)) {
        var link = nodes[i].querySelector("a");
        (link || nodes[i]).textContent = values[key];  // text, never markup
      }
    }
    // The throughput bars: a height in px, checked to be a number, set as two attributes.
    var bars = document.querySelectorAll("[data-bar]");
    for (var j = 0; j < bars.length; j++) {
      var h = Number(values["bar:" + bars[j].getAttribute("data-bar")]);
      var base = Number(bars[j].getAttribute("data-base"));
      if (isFinite(h) && h >= 0 && isFinite(base)) {
        bars[j].setAttribute("height", String(h));
        bars[j].setAttribute("y", String(base - h));
      }
    }
    if (stamp) { stamp.textContent = "updated " + new Date().toLocaleTimeString(); }
    document.body.setAttribute("data-refreshed", String(Date.now()));
  }
  var box = document.querySelector("[data-initial]");
  if (box) { apply(JSON.parse(box.getAttribute("data-initial"))); }
  if (!url) { return; }
  function poll() {
    fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { if (data) { apply(data.values); } })
      .catch(function () { if (stamp) { stamp.textContent = "refresh failed; retrying"; } })
      .then(function () { setTimeout(poll, 2000); });
  }
  setTimeout(poll, 2000);
})();
