// Draws every <canvas data-chart="{Chart.js config}"> the server rendered, on page load and in
// every fragment htmx swaps in. The server names how the y axis reads ("yFormat"); the only
// code here is that formatting: the charts themselves are Chart.js, the requests htmx.
(function () {
  "use strict";
  var formats = {
    pct: function (v) { return (v * 100).toFixed(v < 0.1 ? 1 : 0) + "%"; },
    usd: function (v) { return "$" + Number(v).toPrecision(3); },
    ms: function (v) { return Math.round(v) + " ms"; },
    num: function (v) { return Number(v).toLocaleString(); }
  };

  function draw(root) {
    if (typeof Chart === "undefined") { return; }
    root.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      if (canvas.dataset.drawn) { return; }
      var spec = JSON.parse(canvas.dataset.chart);
      var fmt = formats[spec.yFormat] || formats.num;
      delete spec.yFormat;
      spec.options.scales.y.ticks = { callback: function (v) { return fmt(v); } };
      spec.options.plugins.tooltip = {
        callbacks: {
          label: function (item) {
            var y = item.parsed.y;
            return item.dataset.label + ": " + (y === null || y === undefined ? "-" : fmt(y));
          }
        }
      };
      new Chart(canvas, spec);
      canvas.dataset.drawn = "1";
    });
  }

  if (typeof htmx !== "undefined") {
    htmx.onLoad(draw);
  } else {
    document.addEventListener("DOMContentLoaded", function () { draw(document); });
  }
})();
