// The console's few behaviours: live regions that refresh themselves, filters, tabs and
// confirmations. No framework; loaded from the console itself (no CDN).
"use strict";

(function () {
  const refreshMs = Number(document.body.dataset.refreshMs || 2000);

  // <div data-live="/live/..."> is replaced by the fragment at that URL every refreshMs,
  // while the page is visible; a failed refresh keeps the last content and says so.
  function startLive(el) {
    let busy = false;
    let note = null;
    async function refresh() {
      if (busy || document.visibilityState !== "visible") return;
      busy = true;
      try {
        const response = await fetch(el.dataset.live, { credentials: "same-origin", cache: "no-store" });
        const body = await response.text();
        if (response.ok) {
          el.innerHTML = body;
          if (note) { note.remove(); note = null; }
        } else {
          showProblem(`refresh failed (${response.status}): ${body}`);
        }
      } catch (err) {
        showProblem("the console is not answering; showing the last figures");
      } finally {
        busy = false;
      }
    }
    function showProblem(text) {
      if (!note) {
        note = document.createElement("p");
        note.className = "live-problem";
        el.before(note);
      }
      note.textContent = text;
    }
    setInterval(refresh, refreshMs);
    document.addEventListener("visibilitychange", refresh);
  }

  // <input data-filter="#table tbody tr"> hides the rows that do not contain the text.
  function startFilter(input) {
    input.addEventListener("input", () => {
      const needle = input.value.trim().toLowerCase();
      for (const row of document.querySelectorAll(input.dataset.filter)) {
        row.hidden = needle !== "" && !row.textContent.toLowerCase().includes(needle);
      }
    });
  }

  // <div data-tabs> buttons [data-tab=x] show the sibling [data-panel=x].
  function startTabs(bar) {
    const panels = () => bar.parentElement.querySelectorAll("[data-panel]");
    for (const button of bar.querySelectorAll("[data-tab]")) {
      button.addEventListener("click", () => {
        for (const b of bar.querySelectorAll("[data-tab]")) b.classList.toggle("active", b === button);
        for (const p of panels()) p.hidden = p.dataset.panel !== button.dataset.tab;
      });
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("[data-live]").forEach(startLive);
    document.querySelectorAll("[data-filter]").forEach(startFilter);
    document.querySelectorAll("[data-tabs]").forEach(startTabs);
    for (const form of document.querySelectorAll("form[data-confirm]")) {
      form.addEventListener("submit", (event) => {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    }
  });
})();
