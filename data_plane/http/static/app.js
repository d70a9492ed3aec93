// raftlog dashboard: polls /ui/api/status every REFRESH_MS and renders it.
// No framework and no build step; runs offline.
"use strict";

const REFRESH_MS = 2000;
const HISTORY = 90;
let previous = null;        // the last status document, for rates
const history = [];         // records/s samples for the sparkline

function el(id) { return document.getElementById(id); }

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function badge(td, text, kind) {
  td.textContent = "";
  const span = document.createElement("span");
  span.className = "badge " + kind;
  span.textContent = text;
  td.appendChild(span);
}

function fill(tableId, rows) {
  const body = el(tableId).querySelector("tbody");
  body.replaceChildren(...rows);
}

function human(n) {
  if (n === null || n === undefined || !isFinite(n)) return "–";
  const units = ["", "k", "M", "G"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i === 0 ? n.toFixed(n < 10 ? 1 : 0) : n.toFixed(1)) + units[i];
}

function renderBrokers(status) {
  fill("brokers", status.brokers.map(b => {
    const tr = document.createElement("tr");
    tr.dataset.brokerId = b.broker_id;
    cell(tr, String(b.broker_id));
    const state = cell(tr, "");
    if (b.fenced) badge(state, "fenced", "bad");
    else if (b.in_controlled_shutdown) badge(state, "shutting down", "warn");
    else badge(state, "live", "ok");
    state.className = "broker-state";
    cell(tr, b.endpoints.join(", "));
    cell(tr, b.rack || "–");
    return tr;
  }));
}

function renderQuorum(status) {
  const q = status.quorum;
  if (q.error) {
    el("quorum-summary").textContent = "quorum unavailable: " + q.error;
    fill("quorum", []);
    return;
  }
  el("quorum-summary").innerHTML = "";
  el("quorum-summary").append(
    "leader ", Object.assign(document.createElement("b"), { id: "quorum-leader", textContent: String(q.leader_id) }),
    " · epoch ", Object.assign(document.createElement("b"), { id: "quorum-epoch", textContent: String(q.epoch) }),
    " · high watermark " + q.high_watermark);
  const rows = [];
  for (const [role, list] of [["voter", q.voters], ["observer", q.observers]]) {
    for (const r of list) {
      const tr = document.createElement("tr");
      cell(tr, String(r.replica_id));
      cell(tr, r.replica_id === q.leader_id ? "leader" : role);
      cell(tr, String(r.log_end_offset));
      const lag = cell(tr, "");
      badge(lag, String(r.lag), r.lag === 0 ? "ok" : (r.lag < 0 ? "bad" : "warn"));
      cell(tr, r.last_fetch_timestamp > 0 ? Math.max(0, status.time_ms - r.last_fetch_timestamp) + " ms ago" : "–");
      rows.push(tr);
    }
  }
  fill("quorum", rows);
}

function renderPartitions(status) {
  const rows = [];
  let under = 0, offline = 0;
  for (const t of status.topics) {
    for (const p of t.partitions) {
      const tr = document.createElement("tr");
      tr.dataset.topic = t.topic_name;
      tr.dataset.partition = p.partition_id;
      cell(tr, t.topic_name);
      cell(tr, String(p.partition_id));
      cell(tr, p.offline ? "none" : String(p.leader_id), "leader");
      cell(tr, p.replicas.join(","), "replicas");
      cell(tr, p.isr.join(","), "isr");
      cell(tr, p.end_offset === null ? "–" : String(p.end_offset));
      const st = cell(tr, "", "status");
      if (p.offline) { tr.classList.add("offline"); badge(st, "offline", "bad"); offline++; }
      else if (p.under_replicated) { tr.classList.add("under-replicated"); badge(st, "under-replicated", "warn"); under++; }
      else badge(st, "in sync", "ok");
      rows.push(tr);
    }
  }
  fill("partitions", rows);
  el("health-counts").textContent = under + " / " + offline;
}

function sumEnds(status) {
  let total = 0;
  const ends = new Map();
  for (const t of status.topics) for (const p of t.partitions) {
    if (p.end_offset !== null) ends.set(t.topic_name + "/" + p.partition_id, p.end_offset);
  }
  return ends;
}

function renderThroughput(status) {
  if (previous) {
    const dt = (status.time_ms - previous.time_ms) / 1000;
    if (dt > 0) {
      const now = sumEnds(status), before = sumEnds(previous);
      let records = 0;
      for (const [k, v] of now) if (before.has(k)) records += Math.max(0, v - before.get(k));
      const rate = records / dt;
      const c = status.node_counters, pc = previous.node_counters;
      el("rate-records").textContent = human(rate);
      el("rate-bytes-in").textContent = human(((c.bytesin || 0) - (pc.bytesin || 0)) / dt);
      el("rate-bytes-out").textContent = human(((c.bytesout || 0) - (pc.bytesout || 0)) / dt);
      history.push(rate);
      if (history.length > HISTORY) history.shift();
      drawSpark();
    }
  }
}

function drawSpark() {
  const canvas = el("spark");
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const max = Math.max(1, ...history);
  ctx.strokeStyle = "#58a6ff";
  ctx.lineWidth = 2;
  ctx.beginPath();
  history.forEach((v, i) => {
    const x = (i / (HISTORY - 1)) * canvas.width;
    const y = canvas.height - 6 - (v / max) * (canvas.height - 12);
    if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
  });
  ctx.stroke();
}

async function refresh() {
  try {
    const response = await fetch("/ui/api/status", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const status = await response.json();
    el("cluster-id").textContent = status.cluster_id;
    el("node-id").textContent = status.node_id;
    el("metadata-offset").textContent = status.metadata_offset;
    renderBrokers(status);
    renderQuorum(status);
    renderPartitions(status);
    renderThroughput(status);
    previous = status;
    el("updated").textContent = "updated " + new Date(status.time_ms).toLocaleTimeString();
    el("error").hidden = true;
    document.body.dataset.refreshed = String(status.time_ms);
  } catch (err) {
    el("error").hidden = false;
    el("error").textContent = "refresh failed: " + err.message;
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

refresh();
