// The Agent-Reach dashboard: polls the gateway's JSON endpoints every
// second and redraws. No framework, no build step; charts are SVG drawn
// here.
"use strict";

const POLL_MS = 1000;
const STATS_EVERY = 2, SERIES_EVERY = 10;
let statsPolls = 0, seriesPolls = 0, lastStats = null, seenKeys = new Set();
const SHOW_FAILURES = 10; // of the 20 the gateway keeps

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// none is a placeholder: muted and italic, worded so that it never reads
// as a value ("no samples", not "0" or "–").
function none(text, why) {
  return el("span", { class: "none", title: why || "" }, text);
}

// utc shows a time in UTC, its offset spelled out.
function utc(t) {
  const d = t instanceof Date ? t : new Date(t);
  if (isNaN(d)) return none("no time");
  return d.toISOString().slice(11, 19) + " UTC";
}
// localOffset is this browser's offset from UTC, as "UTC+01:00".
function localOffset() {
  const m = -new Date().getTimezoneOffset();
  const a = Math.abs(m);
  return "UTC" + (m < 0 ? "−" : "+") + String(Math.floor(a / 60)).padStart(2, "0") + ":" + String(a % 60).padStart(2, "0");
}

function num(v, digits) {
  return Number(v || 0).toLocaleString(undefined, { maximumFractionDigits: digits === undefined ? 0 : digits });
}
// ms shows a latency; a placeholder when there is none (null: not enough
// samples).
function ms(v) {
  if (!v) return none("no samples", "not enough samples for a figure");
  if (v < 0.01) return "< 0.01 ms";
  return (v < 10 ? num(v, 2) : num(v, 0)) + " ms";
}
function pct(v, tasks) { return tasks ? num(100 * v, 1) + " %" : none("no tasks"); }
// serviceSuccess is the share of the tasks the service answered that it
// finished: the caller's own mistakes (rejected) left out of both sides.
function serviceSuccess(r) {
  const answered = (r.finished || 0) + (r.failed || 0);
  if (!answered && r.tasks) return none("only caller errors", "every task was the caller's mistake: nothing for the service to answer");
  return pct(answered ? r.finished / answered : 0, answered);
}
function age(msAgo) { return msAgo < 1000 ? "now" : num(msAgo / 1000, 1) + " s ago"; }

function fill(table, rows, empty) {
  const body = document.querySelector(table + " tbody");
  body.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: empty.cols }, empty.text))]));
}

function cell(text, cls) { return el("td", cls ? { class: cls } : {}, text); }
// tile sets a tile's value: a number, or a placeholder when there is none.
function tile(id, v, why) {
  const e = document.getElementById(id);
  e.replaceChildren(v === undefined || v === null ? none("no data", why) : num(v));
  e.classList.toggle("nonzero", v > 0);
}

function drawAgents(agents) {
  document.getElementById("tile-agents").textContent = agents.length;
  fill("#agents", agents.map(a => el("tr", { "data-id": a.id },
    cell(a.id), cell(a.type), cell(a.capabilities.join(", ")), cell(a.status, "state-" + a.status),
    el("td", {}, el("span", { class: "bar", title: a.active + " of " + a.max_concurrent },
      el("i", { style: "width:" + Math.min(100, 100 * a.load) + "%" })), " " + a.active + "/" + a.max_concurrent),
    cell(age(a.heartbeat_age_ms)), cell(a.breaker, "state-" + a.breaker), cell(ms(a.latency_ms), "num latency"))),
    { cols: 8, text: "no agent registered" });
}

function drawCapabilities(summary) {
  const rows = (summary ? summary.rows : []).map(r => el("tr", { "data-capability": r.key },
    cell(r.key), el("td", { class: "num tasks" }, num(r.tasks)), cell(num(r.finished), "num finished"),
    cell(num(r.rejected), "num rejected"), cell(num(r.failed), r.failed ? "num failed bad" : "num failed"),
    cell(serviceSuccess(r), r.failed && r.finished / (r.finished + r.failed) < 0.99 ? "num success bad" : "num success"),
    cell(ms(r.latency_p50_ms), "num"), cell(ms(r.latency_p95_ms), "num"), cell(ms(r.latency_p99_ms), "num"),
    cell(num(r.retries), "num"), cell(r.cost_per_task ? num(r.cost_per_task, 4) : none("no cost"), "num"),
    cell(r.quality === undefined ? none("no scores") : num(r.quality, 2), "num")));
  fill("#capabilities", rows, { cols: 12, text: "no task yet" });
  const why = "this gateway aggregates no REACH_EVENTS";
  if (!summary) {
    for (const id of ["tile-tasks", "tile-rejected", "tile-failed", "tile-gathers"]) tile(id, undefined, why);
    document.getElementById("tile-success").replaceChildren(none("no data", why));
    return;
  }
  const total = summary.total;
  tile("tile-tasks", total.tasks);
  document.getElementById("tile-success").replaceChildren(serviceSuccess(total));
  tile("tile-rejected", total.rejected);
  tile("tile-failed", total.failed);
  document.getElementById("tile-gathers").textContent = num(total.broadcasts) + " / " + num(total.fanouts);
}

function drawFailures(summary) {
  const rows = (summary ? summary.failures : []).slice(0, SHOW_FAILURES).map(f => el("tr", { "data-request": f.request_id },
    cell(utc(f.time), "time"), cell(f.capability), cell(f.class, "class"),
    el("td", { class: "code" + (f.class === "failed" ? " bad" : "") }, f.code || f.status,
      f.unknown ? el("span", { class: "muted", title: "no instance has offered this name and no declaration names it" }, " (name never registered)") : ""),
    el("td", { class: "message", title: f.message || "" }, f.message || none("no message", "recorded by a dispatcher that kept no message")),
    cell(f.node || none("not delivered")), cell(f.attempts, "num"), cell(ms(f.latency_ms), "num"), cell(f.request_id)));
  fill("#failures", rows, { cols: 9, text: "none in the last hour" });
}

// chart draws one capability's series: volume as bars, p95 latency as a
// line on its own scale.
function chart(name, points) {
  const W = 320, H = 110, pad = 18;
  const maxVol = Math.max(1, ...points.map(p => p.tasks));
  const maxLat = Math.max(1, ...points.map(p => p.p95_ms));
  const step = (W - 2 * pad) / Math.max(1, points.length);
  const s = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": name });
  s.append(svg("line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, class: "axis" }));
  // The latency line is broken where a slice had no task: no latency
  // there. The bars are one path and the line one path of segments: a
  // few nodes a chart, not one a bar (200 charts on a page).
  const bars = [], line = [];
  let pen = false;
  const bw = Math.max(1, step - 1);
  points.forEach((p, i) => {
    const x = pad + i * step;
    const h = (H - 2 * pad) * p.tasks / maxVol;
    if (!p.tasks) {
      pen = false;
      return;
    }
    bars.push(`M${x.toFixed(1)},${(H - pad).toFixed(1)}v${(-h).toFixed(1)}h${bw.toFixed(1)}v${h.toFixed(1)}z`);
    line.push(`${pen ? "L" : "M"}${(x + step / 2).toFixed(1)},${(H - pad - (H - 2 * pad) * p.p95_ms / maxLat).toFixed(1)}`);
    pen = true;
  });
  if (bars.length) s.append(svg("path", { d: bars.join(""), class: "vol" }));
  if (line.length) s.append(svg("path", { d: line.join(""), class: "lat" }));
  const legend = svg("text", { x: pad, y: 11, class: "legend" });
  legend.textContent = `max ${num(maxVol)} tasks / 10 s · p95 up to ${ms(maxLat)}`;
  s.append(legend);
  return el("div", { class: "chart", "data-capability": name }, el("h3", {}, name), s);
}

function drawCharts(series) {
  const names = Object.keys(series || {}).sort();
  const box = document.getElementById("charts");
  box.replaceChildren(...(names.length ? names.map(n => chart(n, series[n])) : [el("p", { class: "muted empty" }, "no task yet")]));
}

function drawStreams(streams, dispatcher) {
  const set = (id, v) => tile(id, v, "not reported");
  set("tile-pending", streams.REACH_TASKS);
  set("tile-dlq", streams.REACH_DLQ);
  set("tile-review", streams.REACH_REVIEW);
  set("tile-inflight", dispatcher.in_flight);
  set("tile-refused", dispatcher.overloaded === undefined ? undefined : dispatcher.overloaded + dispatcher.dropped);
}

// With auth on, the gateway serves its data only to a bearer token: open
// the page as /#token=<token> (`agentreach auth token NAME`). The fragment
// never leaves the browser; the token is kept for this tab only and
// removed from the address bar.
const TOKEN = (() => {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem("agentreach-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("agentreach-token");
})();

async function getJSON(path) {
  const headers = TOKEN ? { Authorization: "Bearer " + TOKEN } : {};
  const r = await fetch(path, { cache: "no-store", headers });
  const body = await r.json();
  if (r.status === 401) throw new Error("auth is on: open this page as /#token=<token> (agentreach auth token NAME prints one)");
  if (!r.ok && !body.status) throw new Error(path + ": " + (body.message || r.status));
  return body;
}

async function refresh() {
  const health = document.getElementById("health");
  try {
    // What changes every second is polled every second; the aggregate
    // every STATS_EVERY polls, its 10 s series every SERIES_EVERY (their
    // cost grows with the capabilities: docs/operations.md, Performance).
    const wantSeries = seriesPolls-- <= 0, wantStats = wantSeries || statsPolls-- <= 0;
    // The topology is fetched beside the rest (it draws when it comes),
    // not after: a load waits for both.
    if (topoPolls-- <= 0) {
      topoPolls = TOPO_EVERY - 1;
      refreshTopology();
    }
    // The agents are drawn as soon as they come: the aggregate (its
    // series above all) takes the gateway longer, and the browser would
    // wait idle for it.
    const [h, , fresh] = await Promise.all([getJSON("/healthz"), getJSON("/v1/agents").then(drawAgents),
      wantStats ? getJSON(wantSeries ? "/v1/stats?series=10m" : "/v1/stats") : null]);
    if (fresh) {
      statsPolls = STATS_EVERY - 1;
      if (wantSeries) seriesPolls = SERIES_EVERY - 1;
      lastStats = Object.assign({}, fresh, { series: wantSeries ? fresh.series : (lastStats || {}).series });
      // A capability new to the aggregate: its chart at the next poll.
      const keys = new Set(((fresh.summary || {}).rows || []).map(r => r.key));
      if ([...keys].some(k => !seenKeys.has(k))) seriesPolls = 0;
      seenKeys = keys;
    }
    const stats = lastStats || {};
    health.textContent = h.status;
    health.className = "badge " + (h.status === "ok" ? "ok" : "bad");
    document.getElementById("dispatcher").textContent = "dispatcher " + h.dispatcher;
    drawCapabilities(stats.summary);
    drawFailures(stats.summary);
    drawCharts(stats.series);
    drawStreams(stats.streams || {}, stats.dispatcher || {});
    if (runsPolls-- <= 0) {
      runsPolls = RUNS_EVERY - 1;
      refreshRuns();
    }
    if (runSelected && !runEnded) refreshRun();
    if (governPolls-- <= 0) {
      governPolls = GOVERN_EVERY - 1;
      refreshGovern();
    }
    const counts = (stats.streams || {}).REACH_DLQ + "/" + (stats.streams || {}).REACH_REVIEW;
    if (counts !== parkedCounts || parkedPolls-- <= 0) {
      parkedCounts = counts;
      parkedPolls = PARKED_EVERY - 1;
      refreshParked();
    }
    document.getElementById("updated").textContent = "updated " + utc(new Date()) + " · times in UTC (this browser: " + localOffset() + ")";
  } catch (err) {
    health.textContent = "unreachable";
    health.className = "badge bad";
    document.getElementById("updated").textContent = String(err);
  }
}

// The console: dead letters and review entries, acted on by the bearer
// identity under the ACL (docs/operations.md, "The console").
const PARKED_EVERY = 10; // polls between listings when the counts stay put
let parkedPolls = 0, parkedCounts = "";

async function send(method, path) {
  const headers = Object.assign({ "X-Reach-Console": "1" }, TOKEN ? { Authorization: "Bearer " + TOKEN } : {});
  const r = await fetch(path, { method, cache: "no-store", headers });
  const body = await r.json();
  if (!r.ok) throw new Error((body.code ? body.code + ": " : "") + (body.message || r.status));
  return body;
}

function actionButton(stream, e, action, label, danger) {
  const b = el("button", { "data-action": action, class: danger ? "danger" : "" }, label);
  if (!e.allowed) {
    b.disabled = true;
    b.title = e.refusal || "not allowed";
  }
  b.addEventListener("click", async () => {
    if (danger && !confirm(label + " " + e.request_id + "?")) return;
    const status = document.getElementById("console-status");
    b.disabled = true;
    try {
      const a = await send("POST", `/v1/console/parked/${stream}/${e.seq}/${action}`);
      status.textContent = `${a.action} of ${a.request_id} (${a.capability}) done by ${a.by} at ${utc(a.time)}`;
      status.className = "ok-text";
    } catch (err) {
      status.textContent = `${action} of ${e.request_id} refused: ${err.message}`;
      status.className = "bad";
    }
    parkedPolls = 0;
    refreshParked();
  });
  return b;
}

function drawParked(stream, listing) {
  const rows = listing.entries.map(e => el("tr", { "data-seq": e.seq, "data-request": e.request_id },
    cell(utc(e.time), "time"), cell(e.capability), cell(e.request_id), cell(e.caller || none("no caller")),
    cell(e.reason, "reason"), cell(e.code || none("no code")), cell(e.attempts, "num"),
    el("td", { class: "lasterror", title: e.last_error || "" }, e.last_error || none("no error recorded")),
    el("td", { class: "preview", title: e.preview || "" }, e.withheld ? none("withheld", "the payload is its caller's") :
      e.binary ? none("binary, " + e.size + " bytes") : (e.preview || none("empty"))),
    el("td", { class: "actions" },
      stream === "dlq" ? actionButton(stream, e, "replay", "replay") : actionButton(stream, e, "rerun", "resolve: rerun"),
      actionButton(stream, e, "drop", stream === "dlq" ? "drop" : "resolve: drop", true))));
  const more = listing.total > listing.entries.length ? ` (the newest ${listing.entries.length} of ${listing.total})` : "";
  fill("#" + stream, rows, { cols: 10, text: (stream === "dlq" ? "no dead letter" : "nothing to review") + more });
}

async function refreshParked() {
  try {
    const [who, dlq, review, actions] = await Promise.all([getJSON("/v1/console/whoami"),
      getJSON("/v1/console/parked/dlq"), getJSON("/v1/console/parked/review"), getJSON("/v1/console/actions")]);
    const w = document.getElementById("console-who");
    w.textContent = !who.actions ? "· " + who.reason :
      who.identity ? `· acting as ${who.identity.name}${who.identity.operator ? " (operator: any entry)" : " (its own tasks the ACL lets it call)"}` :
      "· actions on for anyone (--http-admin, auth off)";
    w.dataset.actions = who.actions;
    drawParked("dlq", dlq);
    drawParked("review", review);
    fill("#actions", actions.map(a => el("tr", {}, cell(utc(a.time), "time"), cell(a.by, "by"), cell(a.action), cell(a.stream),
      a.key ? cell(a.key + " @" + a.revision, "key") : cell(a.seq, "num"), cell(a.capability || ""), cell(a.request_id || ""))),
      { cols: 7, text: "none since this replica started" });
  } catch (err) {
    document.getElementById("console-status").textContent = String(err);
  }
}

// The topology: three columns (callers, capabilities, instances) drawn
// as SVG from GET /v1/console/topology; a click shows a node's figures.
const TOPO_EVERY = 5; // polls between redraws (its slices are minutes)
const TOPO_MAX_ROWS = 200; // nodes per column drawn, the busiest
let topoPolls = 0, topoData = null, topoSelected = null;

function errClass(e) {
  const answered = e.finished + e.failed;
  if (!answered) return "caller";
  const rate = e.failed / answered;
  return rate < 0.01 ? "ok" : rate < 0.1 ? "warn" : "bad";
}

function drawTopology(t) {
  topoData = t;
  const sum = (m, k, n) => m.set(k, (m.get(k) || 0) + n);
  const callers = new Map(), caps = new Map(), insts = new Map();
  for (const e of t.calls) { sum(callers, e.from, e.tasks); sum(caps, e.to, e.tasks); }
  for (const e of t.deliveries) { sum(caps, e.from, 0); if (e.to !== "none") sum(insts, e.to, e.tasks); }
  const byId = new Map(t.instances.map(i => [i.id, i]));
  for (const i of t.instances) { sum(insts, i.id, 0); for (const c of i.capabilities) sum(caps, c, 0); }
  const order = m => [...m.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, TOPO_MAX_ROWS).map(e => e[0]);
  const cols = [order(callers), order(caps), order(insts)];
  const W = Math.max(600, document.getElementById("topo").parentElement.clientWidth - 360), ROW = 22, TOP = 26, BOXW = 170;
  const H = TOP + ROW * Math.max(3, ...cols.map(c => c.length)) + 10;
  const xs = [10, W / 2 - BOXW / 2, W - BOXW - 10];
  const pos = new Map();
  cols.forEach((c, k) => c.forEach((id, i) => pos.set(k + ":" + id, { x: xs[k], y: TOP + i * ROW })));
  const s = document.getElementById("topo");
  s.setAttribute("width", W); s.setAttribute("height", H); s.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const parts = [];
  ["callers", "capabilities", "instances"].forEach((name, k) => {
    const txt = svg("text", { x: xs[k], y: 14, class: "col" }); txt.textContent = name + (cols[k].length ? "" : " (none yet)"); parts.push(txt);
  });
  const maxTasks = Math.max(1, ...t.calls.map(e => e.tasks), ...t.deliveries.map(e => e.tasks));
  const edge = (e, a, b, kind) => {
    const p = pos.get(a), q = pos.get(b);
    if (!p || !q) return;
    const x1 = p.x + BOXW, y1 = p.y + 8, x2 = q.x, y2 = q.y + 8, mx = (x1 + x2) / 2;
    const path = svg("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, class: "edge " + errClass(e),
      "stroke-width": (1 + 7 * Math.sqrt(e.tasks / maxTasks)).toFixed(1), "data-kind": kind, "data-from": e.from, "data-to": e.to });
    const tip = svg("title", {}); tip.textContent = `${e.from} → ${e.to}: ${e.tasks} tasks, ${e.failed} failed, ${e.rejected} rejected`;
    path.append(tip);
    parts.push(path);
  };
  for (const e of t.calls) edge(e, "0:" + e.from, "1:" + e.to, "call");
  for (const e of t.deliveries) edge(e, "1:" + e.from, "2:" + e.to, "delivery");
  const kinds = ["caller", "capability", "instance"];
  cols.forEach((c, k) => c.forEach(id => {
    const p = pos.get(k + ":" + id);
    let cls = "node " + kinds[k];
    const inst = k === 2 ? byId.get(id) : null;
    if (k === 2) cls += !inst ? " warn" : inst.breaker === "OPEN" ? " bad" : (inst.status !== "ready" || inst.breaker !== "CLOSED") ? " warn" : " ready";
    if (topoSelected && topoSelected.kind === kinds[k] && topoSelected.id === id) cls += " selected";
    const g = svg("g", { class: cls, "data-kind": kinds[k], "data-id": id, transform: `translate(${p.x},${p.y})` });
    g.append(svg("rect", { class: "box", width: BOXW, height: 17 }));
    if (inst) g.append(svg("rect", { class: "load", x: 1, y: 13, height: 3, width: Math.min(1, inst.load) * (BOXW - 2) }));
    const label = svg("text", { x: 6, y: 12 });
    label.textContent = id.length > 26 ? id.slice(0, 25) + "…" : id;
    const tip = svg("title", {}); tip.textContent = inst ? `${id}: ${inst.status}, breaker ${inst.breaker}, load ${num(100 * inst.load)} %` : id;
    g.append(label, tip);
    g.addEventListener("click", () => { topoSelected = { kind: kinds[k], id }; drawTopology(topoData); });
    parts.push(g);
  }));
  s.replaceChildren(...parts);
  drawTopoDetail();
}

function drawTopoDetail() {
  const box = document.getElementById("topo-detail");
  if (!topoSelected || !topoData) return;
  const { kind, id } = topoSelected, t = topoData;
  const edges = kind === "caller" ? t.calls.filter(e => e.from === id) :
    kind === "capability" ? [...t.calls.filter(e => e.to === id), ...t.deliveries.filter(e => e.from === id)] :
    t.deliveries.filter(e => e.to === id);
  // Each task counts once: on its call edge (a caller's, a capability's)
  // or its delivery edge (an instance's).
  const counted = kind === "capability" ? t.calls.filter(e => e.to === id) : edges;
  const tot = counted.reduce((a, e) => ({ tasks: a.tasks + e.tasks, finished: a.finished + e.finished, failed: a.failed + e.failed, rejected: a.rejected + e.rejected }),
      { tasks: 0, finished: 0, failed: 0, rejected: 0 });
  const inst = kind === "instance" ? t.instances.find(i => i.id === id) : null;
  const fails = t.failures.filter(f => kind === "capability" ? f.capability === id : kind === "instance" ? f.node === id : false).slice(0, 5);
  box.replaceChildren(
    el("h3", { "data-kind": kind, "data-id": id }, kind + " " + id),
    el("p", {}, `${num(tot.tasks)} tasks in the window: ${num(tot.finished)} finished, ${num(tot.failed)} failed (service), ${num(tot.rejected)} rejected (caller); success `,
      serviceSuccess(tot)),
    inst ? el("p", {}, `status ${inst.status}, breaker ${inst.breaker}, load ${num(100 * inst.load)} %, type ${inst.type}`) : "",
    el("table", { class: "edges" }, el("tbody", {}, ...(edges.length ? edges.map(e => el("tr", {}, cell(e.from + " → " + e.to), cell(num(e.tasks), "num"),
      cell(num(e.failed), e.failed ? "num bad" : "num"), cell(ms(e.latency_mean_ms), "num"))) : [el("tr", { class: "empty" }, el("td", {}, "no task in the window"))]))),
    kind === "caller" ? "" : el("h3", {}, "recent failures"),
    kind === "caller" ? "" : (fails.length ? el("table", { class: "fails" }, el("tbody", {}, ...fails.map(f => el("tr", {}, cell(utc(f.time)), cell(f.code),
      el("td", { class: "message", title: f.message || "" }, f.message || none("no message")))))) : none("none in the window")));
}

async function refreshTopology() {
  try {
    drawTopology(await getJSON("/v1/console/topology?since=" + document.getElementById("topo-window").value));
  } catch (err) {
    document.getElementById("topo-detail").replaceChildren(none(String(err.message || err)));
  }
}
document.getElementById("topo-window").addEventListener("change", () => { topoPolls = 0; refreshTopology(); });

// Workflow runs: the list every RUNS_EVERY polls, the selected run's
// steps and decisions every poll while it runs (as `agentreach runs show`).
const RUNS_EVERY = 5;
let runsPolls = 0, runSelected = null, runEnded = false;

function drawRuns(runs) {
  fill("#runs-list", runs.map(r => {
    const tr = el("tr", { "data-run": r.id, class: "clickable" + (r.id === runSelected ? " selected" : "") },
      cell(r.id), cell(r.workflow), cell(r.tier), cell(r.status, "status state-" + r.status), cell(utc(r.started), "time"),
      cell(r.done + "/" + r.steps, "num"), cell(r.outcome || none("none yet")),
      el("td", { class: "message" }, r.error ? r.error.code + ": " + r.error.message : none("no error")));
    tr.addEventListener("click", () => { runSelected = r.id; runEnded = false; refreshRun(); });
    return tr;
  }), { cols: 8, text: "no workflow run (records are kept 7 days)" });
}

function drawRun(r) {
  const steps = (r.steps || []).map(s => el("tr", { "data-step": s.name }, cell(s.name), cell(s.status, "status"),
    cell(s.capability || none("no call")), cell(s.node || none("not delivered")), cell(s.attempts || 0, "num"), cell(ms(s.latency_ms), "num"),
    el("td", { class: "message" }, s.error ? s.error.code + ": " + s.error.message : s.skipped ? "skipped: " + s.skipped : none("no error"))));
  const decisions = (r.decisions || []).map(d => el("tr", {}, cell(utc(d.at), "time"), cell(d.step || none("the run")), cell(d.kind), el("td", { class: "message" }, d.detail)));
  document.getElementById("run-detail").replaceChildren(
    el("h3", { "data-run": r.id }, `run ${r.id} · ${r.workflow} (version ${r.version}) · ${r.tier} · ${r.status}` + (r.outcome ? ", outcome " + r.outcome : "") +
      ` · started ${utc(r.started)}` + (r.ended ? ", ended after " + num(new Date(r.ended) - new Date(r.started)) + " ms" : "")),
    el("table", { class: "steps" }, el("thead", {}, el("tr", {}, ...["step", "status", "capability", "instance", "attempts", "latency", "error"].map(h => el("th", {}, h)))),
      el("tbody", {}, ...(steps.length ? steps : [el("tr", { class: "empty" }, el("td", { colspan: 7 }, "no step yet"))]))),
    el("h3", {}, "decisions"),
    el("table", { class: "decisions" }, el("tbody", {}, ...(decisions.length ? decisions : [el("tr", { class: "empty" }, el("td", {}, "none"))]))));
  runEnded = !!r.ended;
}

async function refreshRun() {
  if (!runSelected) return;
  try {
    drawRun(await getJSON("/v1/console/runs/" + encodeURIComponent(runSelected)));
  } catch (err) {
    document.getElementById("run-detail").replaceChildren(none(String(err.message || err)));
  }
}

async function refreshRuns() {
  try {
    drawRuns(await getJSON("/v1/console/runs"));
  } catch (err) {
    fill("#runs-list", [], { cols: 8, text: String(err.message || err) });
  }
}

// Policy and declarations: viewed, validated and changed by an operator
// (docs/operations.md, "Policy and the catalog"); the catalog by
// first-level type with the taxonomy's warnings.
const GOVERN_EVERY = 10; // polls between listings: they change by hand
let governPolls = 2, editing = null, canWrite = false, writeRefusal = "";

async function post(path, body) {
  const headers = Object.assign({ "X-Reach-Console": "1", "Content-Type": "application/json" }, TOKEN ? { Authorization: "Bearer " + TOKEN } : {});
  const r = await fetch(path, { method: "POST", cache: "no-store", headers, body: JSON.stringify(body) });
  const b = await r.json();
  if (!r.ok) throw new Error((b.code ? b.code + " (" + r.status + "): " : "") + (b.message || r.status));
  return b;
}

function editButton(kind, key, text, revision) {
  const b = el("button", { "data-edit": key }, "edit");
  if (!canWrite) {
    b.disabled = true;
    b.title = writeRefusal || "not allowed";
  }
  b.addEventListener("click", () => openEditor(kind, key, text, revision));
  return b;
}

// openEditor edits a policy key (kind "policy") or a declaration ("caps")
// read at revision (0: a new one).
function openEditor(kind, key, text, revision) {
  editing = { kind, key, revision };
  document.getElementById("editor").hidden = false;
  document.getElementById("editor-title").textContent = (kind === "policy" ? "policy " : "declaration ") + key +
    (revision ? " (revision " + revision + ")" : " (new)");
  document.getElementById("editor-text").value = text;
  const st = document.getElementById("editor-status");
  st.replaceChildren();
  st.className = "";
  document.getElementById("editor-save").disabled = !canWrite;
  document.getElementById("editor-save").title = canWrite ? "" : writeRefusal;
}

function warningList(ws) {
  return el("ul", { class: "warnings" }, ...(ws || []).map(w => el("li", { class: "warning", "data-kind": w.kind }, "warning: " + w.message)));
}

async function submitEdit(validateOnly) {
  if (!editing) return;
  const st = document.getElementById("editor-status");
  const path = `/v1/console/${editing.kind}/${encodeURIComponent(editing.key)}` + (validateOnly ? "?validate=1" : "");
  try {
    const r = await post(path, { value: document.getElementById("editor-text").value, revision: editing.revision });
    st.className = "ok-text";
    st.replaceChildren(el("p", { class: "result" }, validateOnly ? `valid: ${r.key}` :
      `saved ${r.key} (revision ${r.action.revision}) by ${r.action.by} at ${utc(r.action.time)}`), warningList(r.warnings));
    if (!validateOnly) {
      editing.revision = r.action.revision;
      document.getElementById("editor-title").textContent = (editing.kind === "policy" ? "policy " : "declaration ") + editing.key +
        " (revision " + editing.revision + ")";
      governPolls = 0;
      refreshGovern();
      parkedPolls = 0;
    }
  } catch (err) {
    st.className = "bad";
    st.replaceChildren(el("p", { class: "error" }, (validateOnly ? "invalid: " : "not saved: ") + err.message));
  }
}

function pretty(v) { return JSON.stringify(v, null, 2); }

function drawPolicy(p) {
  canWrite = p.write;
  writeRefusal = p.refusal || "";
  document.getElementById("policy-status").textContent = p.write ? "" : "read only: " + p.refusal;
  document.getElementById("policy-new").disabled = !p.write;
  fill("#policy", p.keys.map(k => el("tr", { "data-key": k.key }, cell(k.key, "key"), cell(k.revision, "num"), cell(utc(k.updated), "time"),
    el("td", { class: "value" }, el("code", {}, k.error ? k.raw : JSON.stringify(k.value))),
    k.error ? el("td", { class: "bad", title: k.error }, "ignored: " + k.error) : cell("in force", "ok-text"),
    el("td", {}, editButton("policy", k.key, k.error ? k.raw : pretty(k.value), k.revision)))),
    { cols: 6, text: "no policy: every capability runs on the dispatcher's flags" });
}

function drawCatalog(c) {
  const tx = c.taxonomy;
  document.getElementById("catalog-taxonomy").textContent = c.taxonomy_error ? "taxonomy: " + c.taxonomy_error :
    tx ? "taxonomy (official first-level types): " + tx.types.map(t => t.name).join(", ") :
    "no taxonomy in REACH_POLICY: every type is allowed (set the key taxonomy to govern them)";
  const more = c.warnings_total > c.warnings.length ? [el("li", { class: "muted" }, `and ${c.warnings_total - c.warnings.length} more (each capability below lists its own)`)] : [];
  document.getElementById("catalog-warnings").replaceChildren(...c.warnings.map(w =>
    el("li", { class: "warning", "data-kind": w.kind, "data-capability": w.capability }, "warning: " + w.message)), ...more);
  const schema = (s, label) => s ? el("details", {}, el("summary", {}, label), el("pre", {}, pretty(s))) : none("none declared");
  const groups = c.types.map(t => el("div", { class: "captype", "data-type": t.type },
    el("h4", {}, t.type + " ", el("span", { class: t.official ? "muted" : "bad" }, t.official ? (tx ? "official" : "") : "outside the taxonomy"),
      t.description ? el("span", { class: "muted" }, " · " + t.description) : ""),
    t.capabilities.length ? el("table", {}, el("thead", {}, el("tr", {}, ...["capability", "declared by", "served by", "input schema", "output schema"].map(h => el("th", {}, h)))),
      el("tbody", {}, ...t.capabilities.map(cp => el("tr", { "data-capability": cp.name, class: cp.warnings ? "warned" : "" },
        el("td", { title: (cp.warnings || []).map(w => w.message).join("\n") }, cp.name + (cp.warnings ? " ⚠" : "")),
        cell(cp.declared.length ? cp.declared.map(d => d.agent_type + (d.mode ? " (" + d.mode + ")" : "") + (d.description ? ": " + d.description : "")).join("; ") : none("not declared")),
        cell(cp.served_by.length ? cp.served_by.join(", ") : none("no instance now")),
        el("td", {}, cp.declared.length ? schema(cp.declared[0].input_schema, "input") : none("not declared")),
        el("td", {}, cp.declared.length ? schema(cp.declared[0].output_schema, "output") : none("not declared")))))) :
      el("p", {}, none("no capability of this type yet"))));
  document.getElementById("catalog").replaceChildren(...(groups.length ? groups : [el("p", { class: "muted empty" }, none("no capability declared or served"))]));
  fill("#declarations", c.declarations.map(d => el("tr", { "data-type": d.type }, cell(d.type, "key"), cell(d.revision, "num"), cell(utc(d.updated), "time"),
    cell(d.declaration ? d.declaration.capabilities.map(cp => cp.name).join(", ") : none("invalid")),
    d.error ? el("td", { class: "bad", title: d.error }, "ignored: " + d.error) : cell("in force", "ok-text"),
    el("td", {}, editButton("caps", d.type, d.error ? d.raw : pretty(d.declaration), d.revision)))),
    { cols: 6, text: "no declaration: agents declare at start, or `agentreach caps put`" });
}

async function refreshGovern() {
  const [p, c] = await Promise.allSettled([getJSON("/v1/console/policy"), getJSON("/v1/console/catalog")]);
  if (c.status === "fulfilled") {
    canWrite = c.value.write;
    writeRefusal = c.value.refusal || "";
    drawCatalog(c.value);
  }
  if (p.status === "fulfilled") drawPolicy(p.value);
  else {
    document.getElementById("policy-status").textContent = String(p.reason.message || p.reason);
    fill("#policy", [], { cols: 6, text: "not shown" });
    document.getElementById("policy-new").disabled = true;
  }
}

document.getElementById("editor-validate").addEventListener("click", () => submitEdit(true));
document.getElementById("editor-save").addEventListener("click", () => submitEdit(false));
document.getElementById("editor-cancel").addEventListener("click", () => { editing = null; document.getElementById("editor").hidden = true; });
document.getElementById("policy-new").addEventListener("click", () => {
  const key = document.getElementById("policy-new-key").value.trim();
  if (key) openEditor("policy", key, "{}", 0);
});

refresh();
setInterval(refresh, POLL_MS);
