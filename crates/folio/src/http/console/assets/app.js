// The Folio console: a page per hash route (#/overview, #/topics, #/topics/<t>,
// #/messages/<t>, #/groups, #/groups/<g>, #/lifecycle), each drawn from /api/v1/ JSON.
// Changes send the session's CSRF token; destructive ones ask first.
"use strict";

let session = { csrf: "", user: null, login_required: false };
let chartTimer = null;

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const num = (n) => (n === null || n === undefined || n < 0 ? "–" : Number(n).toLocaleString("en-US"));
const bytes = (n) => {
  if (!n) return "0 B";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + u[i];
};
const age = (ms) => (ms ? Math.max(0, Math.round((Date.now() - ms) / 1000)) + " s ago" : "never");

async function api(method, path, body) {
  const opts = { method, headers: { "x-csrf-token": session.csrf }, credentials: "same-origin" };
  if (body !== undefined) { opts.body = JSON.stringify(body); opts.headers["content-type"] = "application/json"; }
  const r = await fetch(path, opts);
  const text = await r.text();
  let data = null;
  try { data = JSON.parse(text); } catch (_) { data = text; }
  if (!r.ok) {
    const msg = data && data.error ? data.error : String(text);
    const e = new Error(msg);
    e.status = r.status;
    throw e;
  }
  return data;
}

function table(cols, rows, testid) {
  const head = cols.map((c) => `<th>${esc(c[0])}</th>`).join("");
  const body = rows.map((r) => "<tr>" + cols.map((c) => {
    const v = c[1](r);
    return `<td class="${c[2] || ""}">${v}</td>`;
  }).join("") + "</tr>").join("");
  const empty = rows.length ? "" : `<tr><td colspan="${cols.length}" class="muted">none</td></tr>`;
  return `<table data-testid="${testid || ""}"><thead><tr>${head}</tr></thead><tbody>${body}${empty}</tbody></table>`;
}

function confirmAction(text) {
  return new Promise((resolve) => {
    $("#confirm-text").textContent = text;
    $("#confirm").hidden = false;
    const done = (yes) => { $("#confirm").hidden = true; resolve(yes); };
    $("#confirm-yes").onclick = () => done(true);
    $("#confirm-no").onclick = () => done(false);
  });
}

function showError(e) {
  if (e.status === 401 && session.login_required) { drawLogin(); return; }
  $("#main").insertAdjacentHTML("afterbegin", `<p class="error" data-testid="error">${esc(e.message)}</p>`);
}

function drawLogin(message) {
  $("#main").innerHTML = `<h1>Log in</h1>
    <p class="muted">This broker has SASL users: log in as one of them. What you see and do
    is what that user's ACLs allow.</p>
    <form class="inline" id="login"><label>User<input name="user" autocomplete="username"></label>
    <label>Password<input name="password" type="password" autocomplete="current-password"></label>
    <button class="primary">Log in</button></form>
    ${message ? `<p class="error" data-testid="login-error">${esc(message)}</p>` : ""}`;
  $("#login").onsubmit = async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    try {
      const r = await api("POST", "/api/v1/login", { user: f.get("user"), password: f.get("password") });
      session.user = r.user;
      drawWho();
      route();
    } catch (e) { drawLogin(e.message); }
  };
}

function drawWho() {
  $("#who").innerHTML = session.user
    ? `${esc(session.user)} · <a href="#" id="logout" style="color:#c9d3ee">log out</a>`
    : (session.login_required ? "not logged in" : "");
  const out = $("#logout");
  if (out) out.onclick = async (ev) => { ev.preventDefault(); await api("POST", "/api/v1/logout", {}); await start(); };
}

// ---- overview ----------------------------------------------------------------------

async function overview() {
  const o = await api("GET", "/api/v1/overview");
  const bookieRows = o.bookies_here.map((b) => ({ ...b, registered: true }));
  $("#main").innerHTML = `<h1>Overview</h1>
    <div class="cards">
      <div class="card"><div class="n" data-testid="brokers">${o.brokers.length}</div><div class="l">brokers</div></div>
      <div class="card"><div class="n">${o.controller}</div><div class="l">controller</div></div>
      <div class="card"><div class="n" data-testid="topic-count">${o.topics}</div><div class="l">topics</div></div>
      <div class="card"><div class="n">${o.bookies_writable.length} / ${o.bookies_read_only.length}</div><div class="l">bookies writable / read-only</div></div>
      <div class="card"><div class="n" style="font-size:13px" data-testid="backend">${esc(o.backend)}</div><div class="l">metadata</div></div>
    </div>
    <h2>Brokers</h2>${table([["id", (b) => b.id + (b.id === o.controller ? " (controller)" : "")], ["address", (b) => esc(b.addr)]], o.brokers, "brokers")}
    <h2>Bookies in this process</h2>${table([
      ["bookie", (b) => esc(b.id)],
      ["state", (b) => (b.read_only ? '<span class="error">read-only</span>' : '<span class="ok">writable</span>')],
      ["disk used", (b) => {
        const u = b.disk_total ? b.disk_used / b.disk_total : 0;
        return `<span class="bar${u > b.threshold ? " hot" : ""}"><i style="width:${(u * 100).toFixed(1)}%"></i></span> ${bytes(b.disk_used)}`;
      }],
      ["free", (b) => bytes(b.disk_free), "num"],
    ], bookieRows, "bookies")}
    <h2>Traffic (this broker)</h2>
    <div class="cards">
      <div class="chart"><div class="l muted">produce bytes/s</div><svg id="chart-in" data-testid="chart-in" width="360" height="90"></svg><div id="chart-in-now" data-testid="chart-in-now" class="muted">–</div></div>
      <div class="chart"><div class="l muted">fetch bytes/s</div><svg id="chart-out" width="360" height="90"></svg><div id="chart-out-now" class="muted">–</div></div>
      <div class="chart"><div class="l muted">produce latency, mean ms</div><svg id="chart-lat" width="360" height="90"></svg><div id="chart-lat-now" class="muted">–</div></div>
    </div>`;
  startCharts();
}

function metricValue(text, name) {
  let total = 0, found = false;
  for (const line of text.split("\n")) {
    if (line.startsWith(name + " ") || line.startsWith(name + "{")) {
      const v = parseFloat(line.slice(line.lastIndexOf(" ") + 1));
      if (!Number.isNaN(v)) { total += v; found = true; }
    }
  }
  return found ? total : 0;
}

function drawChart(id, points, fmt) {
  const svg = document.getElementById(id);
  if (!svg) return;
  const w = 360, h = 90, max = Math.max(1, ...points);
  const step = w / Math.max(1, points.length - 1);
  const d = points.map((p, i) => `${(i * step).toFixed(1)},${(h - 4 - (p / max) * (h - 10)).toFixed(1)}`).join(" ");
  svg.innerHTML = `<polyline fill="none" stroke="#2f5bd3" stroke-width="2" points="${d}"/>` +
    `<text x="4" y="12" font-size="10" fill="#667085">max ${esc(fmt(max))}</text>`;
  svg.dataset.points = String(points.length);
}

function startCharts() {
  if (chartTimer) clearInterval(chartTimer);
  const series = { in: [], out: [], lat: [] };
  let last = null;
  const tick = async () => {
    if (!document.getElementById("chart-in")) { clearInterval(chartTimer); chartTimer = null; return; }
    let text;
    try { text = await (await fetch("/metrics")).text(); } catch (_) { return; }
    const now = {
      t: Date.now(),
      in: metricValue(text, "folio_kafka_bytes_in_total"),
      out: metricValue(text, "folio_kafka_bytes_out_total"),
      sum: metricValue(text, "folio_kafka_produce_latency_seconds_sum"),
      count: metricValue(text, "folio_kafka_produce_latency_seconds_count"),
    };
    if (last) {
      const dt = Math.max(0.001, (now.t - last.t) / 1000);
      const push = (k, v) => { series[k].push(v); if (series[k].length > 60) series[k].shift(); };
      push("in", (now.in - last.in) / dt);
      push("out", (now.out - last.out) / dt);
      const dc = now.count - last.count;
      push("lat", dc > 0 ? ((now.sum - last.sum) / dc) * 1000 : 0);
      const rate = (v) => bytes(v) + "/s";
      drawChart("chart-in", series.in, rate);
      drawChart("chart-out", series.out, rate);
      drawChart("chart-lat", series.lat, (v) => v.toFixed(2) + " ms");
      $("#chart-in-now").textContent = bytes(series.in[series.in.length - 1]) + "/s now";
      $("#chart-out-now").textContent = bytes(series.out[series.out.length - 1]) + "/s now";
      $("#chart-lat-now").textContent = series.lat[series.lat.length - 1].toFixed(2) + " ms now";
    }
    last = now;
  };
  tick();
  chartTimer = setInterval(tick, 1000);
}

// ---- topics -------------------------------------------------------------------------

async function topics() {
  const ts = await api("GET", "/api/v1/topics");
  $("#main").innerHTML = `<h1>Topics</h1>` + table([
    ["topic", (t) => `<a href="#/topics/${encodeURIComponent(t.name)}">${esc(t.name)}</a>` + (t.error ? ` <span class="error">${esc(t.error)}</span>` : "")],
    ["partitions", (t) => t.partitions, "num"],
    ["records", (t) => num(t.records), "num"],
    ["messages", (t) => `<a href="#/messages/${encodeURIComponent(t.name)}">browse</a>`],
  ], ts, "topics");
}

async function topic(name) {
  const t = await api("GET", "/api/v1/topics/" + encodeURIComponent(name));
  const set = t.configs.filter((c) => c.set);
  $("#main").innerHTML = `<h1>Topic ${esc(t.name)}</h1>
    <p class="muted">id ${esc(t.id)} · <a href="#/messages/${encodeURIComponent(t.name)}">browse messages</a></p>
    <h2>Partitions</h2>${table([
      ["partition", (p) => p.partition, "num"],
      ["owner (broker)", (p) => p.leader, "num"],
      ["start", (p) => num(p.start), "num"],
      ["end", (p) => num(p.end), "num"],
      ["ledgers", (p) => p.ledgers.map((l) => `${l.ledger} <span class="muted">(${num(l.entries)} entries, ${bytes(l.bytes)})</span>`).join("<br>") || "–"],
      ["bytes", (p) => bytes(p.ledgers.reduce((s, l) => s + l.bytes, 0)), "num"],
    ], t.partitions, "partitions")}
    <h2>Configs set on the topic</h2>${table([["name", (c) => esc(c.name)], ["value", (c) => esc(c.value)]], set, "configs")}
    <details><summary>All configs (${t.configs.length})</summary>${table([["name", (c) => esc(c.name)], ["value", (c) => esc(c.value)]], t.configs)}</details>
    <h2>Delete</h2><button class="danger" id="delete-topic">Delete topic ${esc(t.name)}</button>
    <p class="muted">Deletion unbinds the topic at once; its data is deleted through the trash (see Data lifecycle).</p>`;
  $("#delete-topic").onclick = async () => {
    if (!(await confirmAction(`Delete topic ${t.name} and all its records?`))) return;
    try { await api("DELETE", "/api/v1/topics/" + encodeURIComponent(t.name)); location.hash = "#/lifecycle"; } catch (e) { showError(e); }
  };
}

async function messages(name) {
  const t = await api("GET", "/api/v1/topics/" + encodeURIComponent(name));
  const opts = t.partitions.map((p) => `<option value="${p.partition}">${p.partition}</option>`).join("");
  $("#main").innerHTML = `<h1>Messages of ${esc(name)}</h1>
    <form class="inline" id="browse">
      <label>Partition<select name="partition"><option value="">all</option>${opts}</select></label>
      <label>From<select name="from"><option value="offset">an offset</option><option value="time">a time</option><option value="end">the end</option></select></label>
      <label>Offset<input name="offset" type="number" value="0" style="width:90px"></label>
      <label>Time (ms)<input name="time" type="number" style="width:150px"></label>
      <label>Key<input name="key" data-testid="key"></label>
      <label>Text<input name="text"></label>
      <label>Limit<input name="limit" type="number" value="50" style="width:70px"></label>
      <button class="primary" data-testid="search">Search</button>
    </form><div id="results"></div>`;
  $("#browse").onsubmit = async (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(ev.target)) if (v !== "") q.set(k, v);
    try {
      const ms = await api("GET", `/api/v1/topics/${encodeURIComponent(name)}/messages?${q}`);
      $("#results").innerHTML = `<p class="muted" data-testid="found">${ms.length} records</p>` + table([
        ["partition", (m) => m.partition, "num"], ["offset", (m) => m.offset, "num"],
        ["time", (m) => esc(new Date(m.timestamp).toISOString())],
        ["key", (m) => shownField(m, "key")], ["value", (m) => shownField(m, "value")],
      ], ms, "messages");
    } catch (e) { showError(e); }
  };
}

// A key or value: text, hex, or decoded with its registered schema (named by its id).
function shownField(m, field) {
  const v = m[field];
  const id = m[field + "_schema"];
  if (id === undefined) return `<pre>${esc(v)}</pre>`;
  return `<pre data-testid="decoded">${esc(JSON.stringify(v))}</pre><span class="muted">schema ${id}</span>`;
}

// ---- groups -------------------------------------------------------------------------

async function groups() {
  const gs = await api("GET", "/api/v1/groups");
  $("#main").innerHTML = `<h1>Consumer groups</h1>` + table([
    ["group", (g) => `<a href="#/groups/${encodeURIComponent(g.group)}">${esc(g.group)}</a>`],
    ["state", (g) => esc(g.state)], ["protocol", (g) => esc(g.protocol)],
    ["lag", (g) => num(g.lag), "num"],
  ], gs, "groups");
}

async function group(name) {
  const g = await api("GET", "/api/v1/groups/" + encodeURIComponent(name));
  $("#main").innerHTML = `<h1>Group ${esc(g.group)}</h1>
    <p class="muted">state <b data-testid="group-state">${esc(g.state)}</b> · assignor ${esc(g.assignor || "–")}</p>
    <h2>Members</h2>${table([["member", (m) => esc(m.member)], ["client", (m) => esc(m.client_id)], ["host", (m) => esc(m.host)]], g.members, "members")}
    <h2>Lag per partition</h2>${table([
      ["topic", (l) => esc(l.topic)], ["partition", (l) => l.partition, "num"],
      ["committed", (l) => num(l.committed), "num"], ["end", (l) => num(l.end), "num"],
      ["lag", (l) => num(l.lag), "num"],
    ], g.lag, "lag")}
    <h2>Reset offsets</h2>
    <form class="inline" id="reset">
      <label>To<select name="to"><option value="earliest">the start</option><option value="latest">the end</option><option value="time">a time</option></select></label>
      <label>Time (ms)<input name="time" type="number" style="width:150px"></label>
      <button type="button" id="dry-run">Dry run</button>
      <button type="button" class="danger" id="apply-reset">Reset</button>
    </form><div id="reset-result"></div>
    <p class="muted">A group's offsets can be reset only while it has no members (as kafka-consumer-groups).</p>`;
  const send = async (dry) => {
    const f = new FormData($("#reset"));
    const body = { to: f.get("to"), time: Number(f.get("time") || 0), dry_run: dry };
    if (!dry && !(await confirmAction(`Reset the offsets of ${g.group} to ${body.to}?`))) return;
    try {
      const r = await api("POST", `/api/v1/groups/${encodeURIComponent(g.group)}/reset`, body);
      $("#reset-result").innerHTML = `<p data-testid="reset-done">${r.dry_run ? "Would move" : "Moved"} ${r.offsets.length} partitions:</p>` +
        table([["topic", (o) => esc(o.topic)], ["partition", (o) => o.partition, "num"], ["offset", (o) => num(o.offset), "num"]], r.offsets, "reset-offsets");
      if (!dry) setTimeout(route, 300);
    } catch (e) { showError(e); }
  };
  $("#dry-run").onclick = () => send(true);
  $("#apply-reset").onclick = () => send(false);
}

// ---- data lifecycle -------------------------------------------------------------------

async function lifecycle() {
  const l = await api("GET", "/api/v1/lifecycle");
  const d = l.deletions && l.deletions.deletions ? l.deletions.deletions : [];
  $("#main").innerHTML = `<h1>Data lifecycle</h1>
    <p class="muted">Where deleted data is on its way out: topics being deleted, ledgers in the
    trash (deleted by the controller's deleter${l.trash_deleter_active ? ", active here" : ""}), and what GC gave back on each bookie.</p>
    <h2>Topic deletions in progress</h2>${table([
      ["topic", (x) => esc(x.topic)], ["id", (x) => esc(x.topic_id)],
      ["partitions left", (x) => num(x.partitions_left), "num"],
      ["ledgers in trash", (x) => num(x.ledgers_in_trash), "num"],
      ["not reclaimed", (x) => bytes(x.bytes_not_reclaimed), "num"],
      ["requested", (x) => age(x.requested_ms)],
    ], d, "deletions")}
    <h2>Trash</h2>${table([
      ["ledger", (x) => x.ledger, "num"], ["log", (x) => esc(x.log)], ["reason", (x) => esc(x.reason)],
      ["age", (x) => age(x.time_ms)], ["attempts", (x) => x.attempts, "num"],
      ["last error", (x) => esc(x.last_error || "")],
    ], l.trash, "trash")}
    <h2>GC per bookie</h2>${table([
      ["bookie", (x) => esc(x.bookie)], ["passes", (x) => num(x.passes), "num"],
      ["failures", (x) => num(x.failures), "num"], ["last run", (x) => age(x.last_run_ms)],
      ["reclaimed", (x) => bytes(x.bytes_reclaimed), "num"],
    ], l.gc, "gc")}
    <button id="run-gc">Run GC now</button> <span id="gc-result" class="muted"></span>
    <h2>Under-replicated ledgers (autorecovery)</h2>
    <p data-testid="under-replicated">${l.under_replicated.length ? l.under_replicated.map(esc).join(", ") : "none"}</p>
    ${l.autorecovery ? `<p class="muted" data-testid="autorecovery">This process's autorecovery:
      ${l.autorecovery.auditor ? "the cluster's auditor" : "a worker"};
      ${num(l.autorecovery.marks)} ledgers marked (oldest ${Math.round(l.autorecovery.oldest_mark_age_ms / 1000)} s);
      ${num(l.autorecovery.ledgers_healed)} healed, ${num(l.autorecovery.entries_copied)} entries
      (${bytes(l.autorecovery.bytes_copied)}) copied, ${num(l.autorecovery.copy_errors)} copy errors.</p>` : ""}
    <h2>Last audit</h2>${l.audit ? table([["class", (x) => esc(x.class)], ["ledgers", (x) => num(x.ledgers), "num"], ["bytes", (x) => bytes(x.bytes), "num"]], l.audit, "audit") : '<p class="muted">no audit run yet (folio audit)</p>'}`;
  $("#run-gc").onclick = async () => {
    if (!(await confirmAction("Run a GC pass on this process's bookies now?"))) return;
    try { $("#gc-result").textContent = await api("POST", "/api/v1/gc", {}); } catch (e) { showError(e); }
  };
}

// ---- routing ------------------------------------------------------------------------

async function route() {
  const [, page, arg] = (location.hash || "#/overview").split("/").map(decodeURIComponent);
  document.querySelectorAll("header nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === (page === "messages" ? "topics" : page)));
  if (session.login_required && !session.user) { drawLogin(); return; }
  const pages = { overview, topics: arg ? () => topic(arg) : topics, messages: () => messages(arg), groups: arg ? () => group(arg) : groups, lifecycle };
  try {
    await (pages[page] || overview)();
    document.body.dataset.page = page || "overview";
  } catch (e) { $("#main").innerHTML = ""; showError(e); }
}

async function start() {
  session = await api("GET", "/api/v1/session");
  drawWho();
  await route();
}

window.addEventListener("hashchange", route);
start().catch(showError);
