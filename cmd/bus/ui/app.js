// The dashboard polls /api/state and redraws. Every value from the
// backend is inserted as text (textContent), never as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
let allowWrites = false;
let dlqTopic = "";
// dlqOffset is where the dead-letter page shown starts; dlqLimit its size.
let dlqOffset = 0;
const dlqLimit = 50;
// token is the per-process write token; only this page can read it.
let token = "";
// selectedID is the dead letter shown in the detail panel.
let selectedID = "";
// busChartPoints is read by the browser test: how many samples the chart drew.
window.busChartPoints = 0;

function cell(tr, value, cls) {
  const td = document.createElement("td");
  if (value === null || value === undefined) {
    td.textContent = "unknown";
    td.className = cls ? cls + " unknown" : "unknown";
  } else {
    td.textContent = String(value);
    if (cls) td.className = cls;
  }
  tr.appendChild(td);
  return td;
}

function rows(tbody, items, fill) {
  tbody.replaceChildren();
  for (const it of items) {
    const tr = document.createElement("tr");
    fill(tr, it);
    tbody.appendChild(tr);
  }
}

function render(state) {
  $("#backend").textContent = state.backend;
  $("#status").textContent = state.error ? "error: " + state.error : "";
  $("#status").className = state.error ? "error" : "";
  allowWrites = state.allow_writes;
  token = state.token || "";
  $("#writes").textContent = allowWrites ? "" : "read-only: start bus ui with --allow-writes to replay or purge";
  const snap = state.snapshot;
  if (!snap) return;
  const topics = snap.topics || [];
  rows($("#topics tbody"), topics, (tr, t) => {
    tr.dataset.topic = t.name;
    cell(tr, t.name);
    cell(tr, t.messages, "num messages");
    cell(tr, t.bytes, "num");
    // The rate of publishes, from the broker's count of messages that
    // entered the topic: unknown where it keeps none, "-" until a second
    // sample.
    const known = t.published !== null && t.published !== undefined;
    const rate = t.publish_rate !== null && t.publish_rate !== undefined ? t.publish_rate.toFixed(1) : (known ? "-" : null);
    cell(tr, rate, "num rate");
    cell(tr, t.newest ? when(t.newest) : "-");
    cell(tr, t.scheduled, "num scheduled");
    cell(tr, t.next_due ? when(t.next_due) : "-");
  });
  const groups = [];
  for (const t of topics) for (const g of t.groups || []) groups.push([t.name, g, (t.bounds || {})[g.name] || []]);
  rows($("#groups tbody"), groups, (tr, [topic, g, bounds]) => {
    tr.dataset.topic = topic;
    tr.dataset.group = g.name;
    if (g.lag > 0) tr.className = "lagging";
    cell(tr, topic);
    cell(tr, g.name);
    cell(tr, g.consumers, "num consumers");
    cell(tr, g.pending, "num pending");
    cell(tr, g.lag, "num lag");
    cell(tr, g.owner ? g.owner : "-", "owner");
    const bound = cell(tr, bounds.length ? bounds.map((b) => b.bound).join(", ") : "-", "num bound");
    bound.title = bounds.map((b) => `${b.member}: ${b.bound} (${b.reason}, ${b.time})`).join("\n");
  });
  const sel = $("#dlq-topic");
  // Dead-letter topics are found by their headers, whatever their names.
  const dlqs = state.dead_letter_topics || [];
  if (sel.options.length !== dlqs.length || dlqs.some((n, i) => sel.options[i].value !== n)) {
    sel.replaceChildren(...dlqs.map((n) => new Option(n, n)));
    if (dlqs.length && !dlqs.includes(dlqTopic)) {
      dlqTopic = dlqs[0];
      dlqOffset = 0;
    }
    sel.value = dlqTopic;
  }
  drawChart(state.history || []);
}

// when shows a timestamp to the second, in the viewer's time zone.
function when(t) {
  const d = new Date(t);
  if (isNaN(d)) return String(t);
  const p = (n) => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " +
    p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
}

// ticks returns up to five round, distinct axis values from 0 to at least
// max (just 0 when max is 0).
function ticks(max) {
  if (max <= 0) return [0];
  const raw = max / 4;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = Math.max(1, [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw));
  const out = [];
  for (let v = 0; out.length < 6; v += step) {
    out.push(v);
    if (v >= max) break;
  }
  return out;
}

function drawChart(history) {
  const c = $("#chart");
  const ctx = c.getContext("2d");
  ctx.clearRect(0, 0, c.width, c.height);
  window.busChartPoints = history.length;
  if (history.length < 1) return;
  const series = [["lag", "#c62828"], ["pending", "#1565c0"], ["rate", "#2e7d32"]];
  let top = 0;
  for (const s of history) for (const [k] of series) top = Math.max(top, s[k]);
  const axis = ticks(top);
  const max = Math.max(axis[axis.length - 1], 1);
  window.busChartTicks = axis.map(String);
  ctx.strokeStyle = "#e6e8ec";
  ctx.fillStyle = "#6b7280";
  ctx.font = "11px sans-serif";
  for (const v of axis) {
    const y = c.height - 20 - (v * (c.height - 30)) / max;
    ctx.beginPath(); ctx.moveTo(40, y); ctx.lineTo(c.width, y); ctx.stroke();
    ctx.fillText(String(v), 2, y + 4);
  }
  const x = (i) => 40 + (history.length === 1 ? 0 : (i * (c.width - 45)) / (history.length - 1));
  const y = (v) => c.height - 20 - (v * (c.height - 30)) / max;
  for (const [k, color] of series) {
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    history.forEach((s, i) => (i ? ctx.lineTo(x(i), y(s[k])) : ctx.moveTo(x(i), y(s[k]))));
    ctx.stroke();
  }
}

async function refresh() {
  try {
    const r = await fetch("api/state");
    render(await r.json());
    await loadDLQ();
  } catch (e) {
    $("#status").textContent = "dashboard: " + e;
  }
}

async function loadDLQ() {
  const tbody = $("#dlq tbody");
  $("#replay-all").disabled = !allowWrites || !dlqTopic;
  $("#purge-all").disabled = !allowWrites || !dlqTopic;
  if (!dlqTopic) { tbody.replaceChildren(); hideDetail(); return; }
  let r = await fetch(dlqURL());
  let page = r.ok ? await r.json() : { items: [], offset: 0, more: false };
  if (page.items.length === 0 && dlqOffset > 0) {
    // The page emptied (replayed or purged): show the last one with rows.
    dlqOffset = Math.max(0, dlqOffset - dlqLimit);
    r = await fetch(dlqURL());
    page = r.ok ? await r.json() : { items: [], offset: 0, more: false };
  }
  const list = page.items;
  $("#dlq-prev").disabled = dlqOffset === 0;
  $("#dlq-next").disabled = !page.more;
  $("#dlq-page").textContent = list.length ? (dlqOffset + 1) + "–" + (dlqOffset + list.length) + (page.more ? " of more" : "") : "none";
  rows(tbody, list, (tr, d) => {
    tr.dataset.id = d.id;
    if (d.id === selectedID) tr.classList.add("selected");
    cell(tr, d.id);
    cell(tr, d.code || "-", "code");
    cell(tr, d.topic);
    cell(tr, d.group || "-");
    cell(tr, d.attempt, "num");
    cell(tr, d.time ? when(d.time) : "-", "time");
    cell(tr, d.reason);
    const td = document.createElement("td");
    for (const op of ["replay", "purge"]) {
      const b = document.createElement("button");
      b.textContent = op === "replay" ? "Replay" : "Purge";
      b.className = op;
      b.disabled = !allowWrites;
      b.addEventListener("click", (ev) => { ev.stopPropagation(); write(op, { ids: [d.id] }); });
      td.appendChild(b);
    }
    tr.appendChild(td);
    const link = document.createElement("a");
    link.textContent = "history";
    link.className = "history";
    link.href = "#history=" + encodeURIComponent(d.id);
    link.addEventListener("click", (ev) => ev.stopPropagation());
    const ltd = document.createElement("td");
    ltd.appendChild(link);
    tr.appendChild(ltd);
    tr.addEventListener("click", () => showDetail(tr, d));
  });
  // A message replayed or purged since leaves the detail panel.
  if (selectedID && !list.some((d) => d.id === selectedID)) hideDetail();
  await loadHeld();
}

// loadHeld shows the keys held on the dead-letter topic (bus.KeyHold),
// each with a Release button.
async function loadHeld() {
  const tbody = $("#held tbody");
  if (!dlqTopic) { tbody.replaceChildren(); return; }
  const r = await fetch("api/keys?topic=" + encodeURIComponent(dlqTopic));
  const keys = r.ok ? await r.json() : [];
  rows(tbody, keys, (tr, k) => {
    cell(tr, k.topic);
    cell(tr, k.group);
    cell(tr, k.key);
    cell(tr, k.head || "- (parked only)");
    cell(tr, k.parked, "num");
    cell(tr, k.since ? when(k.since) : "-", "time");
    const td = document.createElement("td");
    const b = document.createElement("button");
    b.textContent = "Release";
    b.className = "release";
    b.disabled = !allowWrites;
    b.addEventListener("click", () => release(k));
    td.appendChild(b);
    tr.appendChild(td);
  });
}

async function release(k) {
  const what = "key " + k.key + " of group " + k.group + " on " + k.topic;
  if (!confirm("release " + what + "? Its head stays given up; the " + k.parked + " parked message(s) are handled.")) return;
  try {
    const r = await fetch("api/keys/release", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Bus-Token": token },
      body: JSON.stringify({ dlq: dlqTopic, topic: k.topic, group: k.group, key: k.key }),
    });
    const res = await r.json();
    showResult(res.error ? "release " + what + ": " + res.error : "release " + what + ": " + res.done + " parked replayed", !!res.error);
  } catch (e) {
    showResult("release: " + e, true);
  }
  await refresh();
}

function dlqURL() {
  return "api/dlq?topic=" + encodeURIComponent(dlqTopic) + "&offset=" + dlqOffset + "&limit=" + dlqLimit;
}

function hideDetail() {
  selectedID = "";
  $("#detail").hidden = true;
}

function showDetail(tr, d) {
  for (const r of document.querySelectorAll("#dlq tbody tr")) r.classList.remove("selected");
  tr.classList.add("selected");
  selectedID = d.id;
  $("#detail").hidden = false;
  $("#detail-id").textContent = d.id;
  const headers = Object.entries(d.headers || {});
  rows($("#detail-headers tbody"), headers, (row, [k, v]) => { cell(row, k); cell(row, v); });
  $("#detail-payload").textContent = (d.payload_encoding === "base64" ? "(base64) " : "") + d.payload + (d.truncated ? " …(truncated)" : "");
}

// showResult keeps the outcome of a replay or purge on screen until it is
// dismissed (the periodic refresh does not touch it).
function showResult(text, failed) {
  $("#result-text").textContent = text;
  $("#result").className = failed ? "error" : "";
  $("#result").hidden = false;
}

async function write(op, body) {
  const what = body.all ? "all dead letters of " + dlqTopic : body.ids.join(", ");
  if (!confirm(op + " " + what + "?")) return;
  const req = { topic: dlqTopic, ...body };
  if (body.all) req.confirm = dlqTopic;
  try {
    const r = await fetch("api/dlq/" + op, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Bus-Token": token },
      body: JSON.stringify(req),
    });
    const res = await r.json();
    showResult(res.error ? op + " " + what + ": " + res.error : op + " " + what + ": " + res.done + " done", !!res.error);
  } catch (e) {
    showResult(op + ": " + e, true);
  }
  await refresh();
}

// detail is what a timeline entry says besides its columns.
function detail(e) {
  const parts = [];
  if (e.duration_ns) parts.push("took " + (e.duration_ns / 1e6).toFixed(3) + " ms");
  if (e.delay_ns) parts.push("next in " + (e.delay_ns / 1e6).toFixed(0) + " ms");
  if (e.code) parts.push("code " + e.code);
  if (e.dead_letter) parts.push("dead-letter topic " + e.dead_letter);
  if (e.held) parts.push("held there now");
  if (e.error) parts.push("error: " + e.error);
  return parts.join(", ") || "-";
}

// showHistory shows the timeline of the messages whose ID or key is q.
async function showHistory(q) {
  q = q.trim();
  if (!q) return;
  $("#history-q").value = q;
  $("#history-status").textContent = "reading…";
  const table = $("#timeline");
  try {
    const r = await fetch("api/history?q=" + encodeURIComponent(q));
    const res = await r.json();
    if (res.error) throw new Error(res.error);
    const entries = res.history.entries;
    rows($("#timeline tbody"), entries, (tr, e) => {
      tr.dataset.kind = e.kind;
      cell(tr, e.time ? when(e.time) : "-", "time");
      cell(tr, e.kind, "kind");
      cell(tr, e.id || "-");
      cell(tr, e.topic || "-");
      cell(tr, e.group || "-");
      cell(tr, e.attempt || "-", "num");
      cell(tr, e.member || "-");
      cell(tr, detail(e), "detail");
    });
    table.hidden = entries.length === 0;
    let status = entries.length ? entries.length + " step(s) of " + q : "nothing about " + q + " in " + res.events + " or the dead-letter topics";
    if (res.history.truncated) status += " (read the first " + res.history.scanned + " events only)";
    if (res.history.events_missing) status += " (there is no events topic " + res.events + ": from the dead-letter topics alone)";
    else if (!res.history.scanned) status += " (the events topic " + res.events + " is empty: from the dead-letter topics alone)";
    $("#history-status").textContent = status;
  } catch (e) {
    table.hidden = true;
    $("#history-status").textContent = "history: " + e.message;
  }
}

// A link #history=ID (each dead letter has one) opens that history.
function historyFromHash() {
  const m = location.hash.match(/^#history=(.*)$/);
  if (m) {
    showHistory(decodeURIComponent(m[1]));
    $("#history").scrollIntoView();
  }
}

$("#history-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const q = $("#history-q").value.trim();
  if (location.hash === "#history=" + encodeURIComponent(q)) showHistory(q);
  else location.hash = "history=" + encodeURIComponent(q);
});
window.addEventListener("hashchange", historyFromHash);
historyFromHash();
$("#result-dismiss").addEventListener("click", () => { $("#result").hidden = true; });
$("#dlq-topic").addEventListener("change", (e) => { dlqTopic = e.target.value; dlqOffset = 0; loadDLQ(); });
$("#dlq-prev").addEventListener("click", () => { dlqOffset = Math.max(0, dlqOffset - dlqLimit); loadDLQ(); });
$("#dlq-next").addEventListener("click", () => { dlqOffset += dlqLimit; loadDLQ(); });
$("#replay-all").addEventListener("click", () => write("replay", { all: true }));
$("#purge-all").addEventListener("click", () => write("purge", { all: true }));
refresh();
setInterval(refresh, 1000);

// The outbox panel (bus ui --db URL): rows pending and the dead rows. It
// polls on its own and stays hidden when the dashboard has no outbox.
async function refreshOutbox() {
  try {
    const r = await fetch("api/outbox");
    const o = await r.json();
    if (!o.enabled) return;
    $("#outbox").hidden = false;
    if (o.error) {
      $("#outbox-stats").textContent = "error: " + o.error;
      return;
    }
    const s = o.report.stats;
    $("#outbox-stats").textContent = s.pending + " pending" + (s.oldest ? " (oldest " + when(s.oldest) + ")" : "") + ", " + s.dead + " dead";
    rows($("#outbox-dead tbody"), o.report.dead, (tr, d) => {
      cell(tr, d.seq, "num");
      cell(tr, d.topic);
      cell(tr, d.id);
      cell(tr, when(d.failed_at));
      cell(tr, d.reason);
    });
  } catch (e) {
    $("#outbox-stats").textContent = "error: " + e;
  }
}
refreshOutbox();
setInterval(refreshOutbox, 2000);
