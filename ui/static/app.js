// The live parts of the tidings page. Markup comes from the server, rendered from the
// cluster's data with every value escaped; this script only places it, sorts and filters
// the list, keeps relative times current, and appends log lines as text (never as markup).
"use strict";

(function () {
  const body = document.body;
  const page = body.dataset.page;

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html;
    return t.content;
  }

  function replaceContent(id, html) {
    const el = document.getElementById(id);
    if (el) el.replaceChildren(fragment(html));
    refreshTimes(el || document);
  }

  // --- relative times, as kubectl says an age -------------------------------------------
  function age(secs) {
    secs = Math.floor(secs);
    if (secs < 0) return "<invalid>";
    const m = Math.floor(secs / 60), h = Math.floor(secs / 3600), d = Math.floor(secs / 86400);
    if (secs < 120) return secs + "s";
    if (m < 10) return secs % 60 ? m + "m" + (secs % 60) + "s" : m + "m";
    if (m < 180) return m + "m";
    if (h < 8) return m % 60 ? h + "h" + (m % 60) + "m" : h + "h";
    if (h < 48) return h + "h";
    if (h < 192) return h % 24 ? d + "d" + (h % 24) + "h" : d + "d";
    if (d < 730) return d + "d";
    const y = Math.floor(d / 365);
    return y < 8 && d % 365 ? y + "y" + (d % 365) + "d" : y + "y";
  }

  function refreshTimes(root) {
    const now = Date.now() / 1000;
    for (const el of root.querySelectorAll("time[data-rel]")) {
      const t = Date.parse(el.getAttribute("datetime")) / 1000;
      if (isNaN(t)) continue;
      const kind = el.dataset.rel;
      const text = kind === "eta" ? (t - now >= 1 ? "in " + age(t - now) : t - now > -1 ? "now"
        : "overdue " + age(now - t))
        : kind === "ago" ? age(now - t) + " ago" : age(now - t);
      if (el.textContent !== text) el.textContent = text;  // most ages have not changed
    }
  }

  // --- the list: sort and filter ----------------------------------------------------------
  const table = document.getElementById("tasks");
  const tbody = table ? table.tBodies[0] : null;
  const filter = document.getElementById("filter");
  const count = document.getElementById("count");
  let sortKey = "namespace", sortNumeric = false, sortDesc = false;

  function compare(a, b) {
    let x = a.dataset[sortKey] || "", y = b.dataset[sortKey] || "";
    let c;
    if (sortNumeric) {
      c = (x === "" ? -Infinity : Number(x)) - (y === "" ? -Infinity : Number(y));
    } else {
      c = x < y ? -1 : x > y ? 1 : 0;
    }
    if (c === 0) {
      const p = a.dataset.namespace + "/" + a.dataset.name, q = b.dataset.namespace + "/" + b.dataset.name;
      c = p < q ? -1 : p > q ? 1 : 0;
    }
    return sortDesc ? -c : c;
  }

  function sortRows(moveRows) {
    if (moveRows) tbody.append(...Array.from(tbody.rows).sort(compare));
    for (const b of table.querySelectorAll("th button")) {
      b.removeAttribute("aria-sort");
      if (b.dataset.sort === sortKey) b.setAttribute("aria-sort", sortDesc ? "descending" : "ascending");
    }
  }

  function shows(row) {
    const words = (filter.value || "").toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) return true;
    const text = [row.dataset.namespace, row.dataset.name, row.dataset.phase, row.dataset.health]
      .join(" ").toLowerCase();
    return words.every((w) => text.includes(w));
  }

  function applyFilter(rows) {
    for (const row of rows) row.hidden = !shows(row);
    const total = tbody.rows.length;
    const shown = Array.from(tbody.rows).filter((r) => !r.hidden).length;
    count.textContent = total === shown ? total + " tasks" : shown + " of " + total + " tasks";
  }

  function placeRow(html) {
    const row = fragment(html).firstElementChild;
    if (!row) return;
    const old = document.getElementById(row.id);
    if (old) {
      old.replaceWith(row);
    } else {
      const next = Array.from(tbody.rows).find((r) => compare(row, r) < 0);
      tbody.insertBefore(row, next || null);
    }
    refreshTimes(row);
    applyFilter([row]);
  }

  if (table) {
    for (const b of table.querySelectorAll("th button")) {
      b.addEventListener("click", () => {
        if (sortKey === b.dataset.sort) sortDesc = !sortDesc;
        else {
          sortKey = b.dataset.sort;
          sortNumeric = b.hasAttribute("data-numeric");
          sortDesc = b.hasAttribute("data-desc");
        }
        sortRows(true);
      });
    }
    filter.addEventListener("input", () => applyFilter(tbody.rows));
    sortRows(false);  // the server sends the rows in this order (namespace, name)
    applyFilter(tbody.rows);
  }

  // --- the log tail -----------------------------------------------------------------------
  const logs = document.getElementById("logs");
  const MAX_LINES = 2000;

  function addLine(text, note) {
    const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
    const line = document.createElement("div");
    line.className = note ? "line note" : "line";
    line.textContent = text;
    logs.append(line);
    while (logs.childElementCount > MAX_LINES) logs.firstElementChild.remove();
    if (atEnd) logs.scrollTop = logs.scrollHeight;
  }

  // --- live updates -----------------------------------------------------------------------
  const conn = document.getElementById("conn");
  const events = new EventSource(body.dataset.events);
  events.addEventListener("open", () => { conn.hidden = true; });
  events.addEventListener("error", () => {
    // Closed, not reconnecting: the server answered with an error (too many open tabs, a
    // request it refused), and a browser never retries that by itself.
    conn.textContent = events.readyState === EventSource.CLOSED
      ? "live updates refused by the server (too many open tabs?): reload to try again"
      : "lost the server: reconnecting…";
    conn.hidden = false;
  });
  events.addEventListener("banner", (e) => replaceContent("banner", e.data));
  events.addEventListener("reload", () => window.location.reload());
  if (page === "list") {
    events.addEventListener("row", (e) => placeRow(e.data));
    events.addEventListener("gone", (e) => {
      const row = document.getElementById(e.data);
      if (row) row.remove();
      applyFilter([]);
    });
  } else if (page === "task") {
    events.addEventListener("task", (e) => replaceContent("task-body", e.data));
    events.addEventListener("lineage", (e) => replaceContent("lineage", e.data));
    events.addEventListener("log", (e) => addLine(e.data, false));
    events.addEventListener("note", (e) => addLine(e.data, true));
  }

  refreshTimes(document);
  window.setInterval(() => refreshTimes(document), 1000);
})();
