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
  // A table the JSON sends whole ("tables": rows of cell texts) is rebuilt, text only; a
  // cell takes its column's class from the table's header.
  function fill(tables) {
    var bodies = document.querySelectorAll("tbody[data-table]");
    for (var i = 0; i < bodies.length; i++) {
      var rows = tables[bodies[i].getAttribute("data-table")];
      if (!Array.isArray(rows)) { continue; }
      var heads = bodies[i].parentNode.querySelectorAll("thead th");
      var fresh = document.createDocumentFragment();
      for (var r = 0; r < rows.length; r++) {
        var tr = document.createElement("tr");
        for (var c = 0; c < rows[r].length; c++) {
          var td = document.createElement("td");
          td.textContent = String(rows[r][c]);  // text, never markup
          if (heads[c] && heads[c].className) { td.className = heads[c].className; }
          tr.appendChild(td);
        }
        fresh.appendChild(tr);
      }
      if (!rows.length) {
        var none = document.createElement("tr"), cell = document.createElement("td");
        cell.colSpan = heads.length || 1;
        cell.textContent = bodies[i].getAttribute("data-empty") || "";
        none.appendChild(cell);
        fresh.appendChild(none);
      }
      bodies[i].replaceChildren(fresh);
    }
  }
  var box = document.querySelector("[data-initial]");
  if (box) { apply(JSON.parse(box.getAttribute("data-initial"))); }
  if (!url) { return; }
  function poll() {
    fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (data) { fill(data.tables || {}); apply(data.values); }
      })
      .catch(function () { if (stamp) { stamp.textContent = "refresh failed; retrying"; } })
      .then(function () { setTimeout(poll, 2000); });
  }
  setTimeout(poll, 2000);
})();
