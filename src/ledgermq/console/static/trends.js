// The Trends page: one uPlot chart (in and out TPS) per broker and per topic, redrawn from
// /api/trends every sampling interval while the page is visible.
"use strict";

(function () {
  const root = document.getElementById("trends");
  const status = document.getElementById("trends-status");
  const intervalMs = Number(root.dataset.intervalMs || 5000);
  const charts = new Map(); // "broker:addr" -> {plot, el}

  function options(title, width) {
    return {
      title: title,
      width: width,
      height: 200,
      scales: { x: { time: true } },
      series: [
        {},
        { label: "in", stroke: "#1f6feb", width: 2, spanGaps: false },
        { label: "out", stroke: "#cf222e", width: 2, spanGaps: false },
      ],
      axes: [{}, { label: "msg/s" }],
    };
  }

  function draw(kind, container, table, times) {
    const seen = new Set();
    for (const [name, series] of Object.entries(table)) {
      const key = kind + ":" + name;
      seen.add(key);
      const data = [times, series.in, series.out];
      let chart = charts.get(key);
      if (!chart) {
        const el = document.createElement("div");
        el.className = "chart";
        el.dataset.series = key;
        container.appendChild(el);
        const width = Math.max(380, el.clientWidth - 16);
        chart = { el: el, plot: new uPlot(options(name, width), data, el) };
        charts.set(key, chart);
      } else {
        chart.plot.setData(data);
      }
    }
    for (const [key, chart] of charts) {
      if (key.startsWith(kind + ":") && !seen.has(key)) {
        chart.plot.destroy();
        chart.el.remove();
        charts.delete(key);
      }
    }
  }

  async function refresh() {
    if (document.visibilityState !== "visible") return;
    try {
      const response = await fetch("/api/trends", { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
      const doc = await response.json();
      draw("broker", document.getElementById("broker-charts"), doc.brokers, doc.times);
      draw("topic", document.getElementById("topic-charts"), doc.topics, doc.times);
      const last = doc.times.length ? new Date(doc.times[doc.times.length - 1] * 1000).toLocaleTimeString() : "none yet";
      status.textContent = doc.lastError ? `last sample failed: ${doc.lastError}` : `${doc.times.length} samples, last ${last}`;
    } catch (err) {
      status.textContent = `cannot load the trends: ${err.message}`;
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    refresh();
    setInterval(refresh, intervalMs);
  });
})();
