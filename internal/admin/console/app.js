// The Ankusa console: a few pages over the operator JSON API. Every change
// goes through the same API a curl would use (same roles, same audit
// trail); this file only draws. Data is put in the page with textContent
// (el()), never as HTML, since hook headers and bodies are the providers'.
"use strict";

const S = { auth: null, timers: [], charts: [] };

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}
const badge = (s) => el("span", { class: "badge " + s }, s);
const canOperate = () => S.auth && S.auth.role === "operate";
// opButton is a button only the operate role may press: shown disabled to
// a read token (the API would answer 403 anyway).
function opButton(label, onclick, cls) {
  const b = el("button", { type: "button", class: cls || "", onclick }, label);
  if (!canOperate()) { b.disabled = true; b.title = "needs a token with role operate"; }
  return b;
}

function toast(msg, bad) {
  const t = document.getElementById("toast");
  t.textContent = msg; t.className = bad ? "bad" : ""; t.hidden = false;
  clearTimeout(toast.h); toast.h = setTimeout(() => { t.hidden = true; }, 5000);
}

class APIError extends Error {
  constructor(status, body) {
    super((body && (body.message || body.error)) || ("HTTP " + status));
    this.status = status; this.body = body || {};
  }
}

async function api(method, path, body) {
  const headers = {};
  if (S.auth && S.auth.csrf && method !== "GET") headers["X-CSRF-Token"] = S.auth.csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await r.json(); } catch (_) { /* an empty answer */ }
  if (r.status === 401) { showLogin(); throw new APIError(401, data); }
  if (!r.ok) throw new APIError(r.status, data);
  return data;
}

function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) p.set(k, v);
  const s = p.toString();
  return s ? "?" + s : "";
}
// localToISO turns a datetime-local value into RFC 3339 (UTC).
const localToISO = (v) => (v ? new Date(v).toISOString() : "");
const fmtTime = (s) => (s ? new Date(s).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "");
const fmtBytes = (n) => (n < 1024 ? n + " B" : n < 1 << 20 ? (n / 1024).toFixed(1) + " KiB" : (n / (1 << 20)).toFixed(1) + " MiB");

function table(cols, rows, empty) {
  if (!rows.length) return el("p", { class: "muted empty" }, empty || "Nothing here.");
  return el("table", {}, el("thead", {}, el("tr", {}, cols.map((c) => el("th", {}, c[0])))),
    el("tbody", {}, rows.map((r) => el("tr", {}, cols.map((c) => el("td", {}, c[1](r)))))));
}

function view(...kids) {
  const v = document.getElementById("view");
  v.replaceChildren(...kids.flat());
  return v;
}
function every(ms, fn) { S.timers.push(setInterval(fn, ms)); }
function stopAll() {
  S.timers.forEach(clearInterval); S.timers = [];
  S.charts.forEach((c) => c.destroy()); S.charts = [];
}

// ---- auth ----

function showLogin() {
  stopAll();
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("view").replaceChildren();
  document.getElementById("login").hidden = false;
  document.getElementById("login-refused").hidden = new URLSearchParams(location.search).get("login") !== "refused";
}

async function boot() {
  S.auth = await (await fetch("/console/session", { credentials: "same-origin" })).json();
  if (!S.auth.authenticated) { showLogin(); return; }
  if (location.search) history.replaceState(null, "", "/" + location.hash);
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = !S.auth.auth_required;
  document.getElementById("who").textContent = S.auth.actor + " · " + S.auth.role;
  window.addEventListener("hashchange", route);
  route();
}

const pages = {};
function route() {
  stopAll();
  document.getElementById("toast").hidden = true; // a message belongs to the page it came from
  const parts = (location.hash.replace(/^#\/?/, "") || "overview").split("/");
  const name = parts[0];
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === name));
  const page = pages[name] || pages.overview;
  document.body.dataset.page = name;
  Promise.resolve(page(...parts.slice(1).map(decodeURIComponent))).catch((e) => {
    if (e.status !== 401) view(el("h1", {}, "Error"), el("p", { class: "error" }, e.message));
  });
}

// ---- overview ----

// quantile estimates the q-quantile from the bucket increase between two
// readings of a cumulative histogram, interpolating inside the bucket
// (as Prometheus' histogram_quantile does).
function quantile(q, prev, cur) {
  const total = cur.count - prev.count;
  if (total <= 0) return null;
  const want = q * total;
  let lower = 0, below = 0;
  for (let i = 0; i < cur.buckets.length; i++) {
    const le = cur.buckets[i][0];
    const n = cur.buckets[i][1] - (prev.buckets[i] ? prev.buckets[i][1] : 0);
    if (n >= want) {
      const inB = n - below;
      return inB > 0 ? lower + (le - lower) * ((want - below) / inB) : le;
    }
    lower = le; below = n;
  }
  return lower;
}

function chart(title, series, target) {
  const box = el("div", { class: "chart" }, el("h3", {}, title));
  target.append(box);
  const colors = ["#3a5bd9", "#1e8e3e", "#c0392b", "#b7791f"];
  const opts = {
    width: 400, height: 170, legend: { live: false },
    scales: { x: { time: true } },
    series: [{}].concat(series.map((s, i) => ({ label: s, stroke: colors[i], width: 2, spanGaps: true }))),
    axes: [{}, { size: 50 }],
  };
  const data = [[]].concat(series.map(() => []));
  const u = new uPlot(opts, data, box);
  S.charts.push(u);
  const ro = new ResizeObserver(() => u.setSize({ width: box.clientWidth - 16, height: 170 }));
  ro.observe(box);
  return { u, data, push(t, vals) {
    data[0].push(t); vals.forEach((v, i) => data[i + 1].push(v));
    if (data[0].length > 120) data.forEach((d) => d.shift());
    u.setData(data);
  } };
}

pages.overview = async function () {
  const cards = el("div", { class: "cards", id: "cards" });
  const charts = el("div", { class: "charts" });
  const root = view(el("h1", {}, "Overview"), cards, charts,
    el("p", { class: "muted" }, "Live from /v1/console/summary (the /metrics registry) every second; rates are the change between two readings."));
  root.dataset.samples = "0";
  const cIngest = chart("Ingest (requests/s)", ["accepted", "refused", "rejected"], charts);
  const cAck = chart("Ack latency (ms)", ["p50", "p99"], charts);
  const cDel = chart("Deliveries by result (/s)", ["delivered", "retry", "dead"], charts);
  const cBack = chart("Backlog (rows)", ["pending", "in flight", "dead letters"], charts);
  let prev = null, prevT = 0, n = 0, lastP99 = null;
  const card = (k, v, id) => el("div", { class: "card", id }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
  async function tick() {
    let s, ready;
    try {
      [s, ready] = await Promise.all([api("GET", "/v1/console/summary"),
        fetch("/ready", { credentials: "same-origin" }).then((r) => r.json()).catch(() => ({}))]);
    } catch (e) { if (e.status !== 401) toast(e.message, true); return; }
    const t = Date.parse(s.at) / 1000, g = s.gauges;
    let rate = (f) => null;
    if (prev && t > prevT) rate = (f) => Math.max(0, (f(s) - f(prev)) / (t - prevT));
    const p50 = prev ? quantile(0.5, prev.ack_seconds, s.ack_seconds) : null;
    const p99 = prev ? quantile(0.99, prev.ack_seconds, s.ack_seconds) : null;
    const ingest = rate((x) => x.ingest.accepted);
    cards.replaceChildren(
      card("Ingest", ingest === null ? "…" : ingest.toFixed(1) + "/s", "card-ingest"),
      card("Accepted (total)", s.ingest.accepted, "card-accepted"),
      card("Ack p99" + (p99 === null && lastP99 !== null ? " (last)" : ""),
        (p99 !== null ? p99 : lastP99) === null ? "–" : ((p99 !== null ? p99 : lastP99) * 1000).toFixed(1) + " ms", "card-ack"),
      card("Delivered (total)", s.deliveries.delivered, "card-delivered"),
      card("Backlog", (g.queue_pending || 0) + " due · " + (g.queue_inflight || 0) + " in flight", "card-backlog"),
      card("Dead letters", g.queue_dead || 0, "card-dead"),
      card("Intake", el("span", {}, badge(ready.intake || "?"), " ", badge(ready.status || "?")), "card-intake"),
      card("History", (g.history_hooks || 0) + " hooks · " + fmtBytes(g.history_bytes || 0), "card-history"));
    if (prev) {
      cIngest.push(t, [ingest, rate((x) => x.ingest.refused), rate((x) => x.ingest.rejected)]);
      cAck.push(t, [p50 === null ? null : p50 * 1000, p99 === null ? null : p99 * 1000]);
      cDel.push(t, [rate((x) => x.deliveries.delivered), rate((x) => x.deliveries.retry), rate((x) => x.deliveries.dead)]);
    }
    cBack.push(t, [g.queue_pending || 0, g.queue_inflight || 0, g.queue_dead || 0]);
    if (p99 !== null) lastP99 = p99;
    prev = s; prevT = t;
    root.dataset.samples = String(++n);
  }
  await tick();
  every(1000, tick);
};

// ---- hooks ----

function hookLink(id) { return el("a", { href: "#/hooks/" + encodeURIComponent(id), class: "mono" }, id); }

pages.hooks = async function (id) {
  if (id) return hookDetail(id);
  const p = new URLSearchParams(location.hash.split("?")[1] || "");
  const f = el("form", { class: "filters", id: "hook-filters" },
    el("label", {}, "Source", el("input", { name: "source", value: p.get("source") || "" })),
    el("label", {}, "Tenant", el("input", { name: "tenant", value: p.get("tenant") || "" })),
    el("label", {}, "State", el("select", { name: "state" }, ["", "pending", "delivered", "dead"].map((s) =>
      el("option", { value: s, selected: p.get("state") === s }, s || "any")))),
    el("label", {}, "Dedupe key", el("input", { name: "dedupe_key", value: p.get("dedupe_key") || "" })),
    el("label", {}, "Since", el("input", { name: "since", type: "datetime-local" })),
    el("label", {}, "Until", el("input", { name: "until", type: "datetime-local" })),
    el("button", { type: "submit" }, "Search"));
  const goto = el("form", { class: "filters" }, el("label", {}, "Hook id", el("input", { name: "id", size: 38, placeholder: "uuid" })),
    el("button", { type: "submit", class: "secondary" }, "Open"));
  goto.addEventListener("submit", (e) => { e.preventDefault(); const v = goto.id.value.trim(); if (v) location.hash = "#/hooks/" + v; });
  const out = el("div", { id: "hook-list" });
  view(el("h1", {}, "Hooks"), f, goto, out);
  let cursor = null;
  async function load(more) {
    const fd = new FormData(f);
    const params = { source: fd.get("source"), tenant: fd.get("tenant"), state: fd.get("state"), dedupe_key: fd.get("dedupe_key"),
      since: localToISO(fd.get("since")), until: localToISO(fd.get("until")), limit: 50, cursor: more ? cursor : "" };
    let r;
    try { r = await api("GET", "/v1/hooks" + qs(params)); } catch (e) { out.replaceChildren(el("p", { class: "error" }, e.message)); return; }
    cursor = r.next_cursor;
    const t = table([
      ["received", (h) => fmtTime(h.received_at)],
      ["id", (h) => hookLink(h.id)],
      ["source", (h) => h.source], ["tenant", (h) => h.tenant],
      ["state", (h) => badge(h.state)],
      ["deliveries", (h) => h.deliveries.map((d) => el("div", {}, d.sink + " ", badge(d.state), " ×" + d.attempts))],
      ["size", (h) => fmtBytes(h.size)],
    ], r.hooks, "No hooks match.");
    const pager = cursor ? el("div", { class: "pager" }, el("button", { type: "button", class: "secondary", onclick: () => load(true) }, "Older")) : null;
    out.replaceChildren(t, pager || "");
  }
  f.addEventListener("submit", (e) => { e.preventDefault(); load(false); });
  await load(false);
};

function decodeBody(b64, contentType) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const shown = bytes.slice(0, 64 << 10);
  let text;
  try { text = new TextDecoder("utf-8", { fatal: true }).decode(shown); } catch (_) {
    return Array.from(shown.slice(0, 1024), (x) => x.toString(16).padStart(2, "0")).join(" ") + (bytes.length > 1024 ? " …" : "") + "  (binary, hex)";
  }
  if (/json/.test(contentType || "") && bytes.length === shown.length) {
    try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* shown as sent */ }
  }
  return text + (bytes.length > shown.length ? "\n… (" + fmtBytes(bytes.length) + " in all; first 64 KiB shown)" : "");
}

async function hookDetail(id) {
  const h = await api("GET", "/v1/hooks/" + encodeURIComponent(id) + (canOperate() ? "?body=1" : ""));
  async function resend(sink) {
    try {
      const r = await api("POST", "/v1/hooks/" + encodeURIComponent(id) + "/resend", sink ? { sink } : undefined);
      toast("Resend " + r.resend_id + " queued for " + (r.sinks || []).join(", "));
      setTimeout(() => { if (location.hash === "#/hooks/" + id) route(); }, 800);
    } catch (e) { toast(e.message, true); }
  }
  const body = h.body_base64 !== undefined && h.body_base64 !== null
    ? el("pre", { id: "hook-body" }, decodeBody(h.body_base64, h.content_type))
    : el("p", { class: "muted", id: "hook-body" }, "The body needs a token with role operate.");
  view(
    el("h1", {}, "Hook ", el("span", { class: "mono" }, h.id)),
    el("div", { class: "row" }, opButton("Resend to every sink", () => resend(""), ""), h.durable ? "" : badge("not yet durable")),
    table([["source", () => h.source], ["tenant", () => h.tenant], ["received", () => fmtTime(h.received_at)],
      ["content type", () => h.content_type], ["size", () => fmtBytes(h.size)], ["sha256", () => el("code", {}, h.sha256)],
      ["dedupe key", () => h.dedupe_key || "–"], ["seq", () => h.seq]], [h]),
    el("h2", {}, "Deliveries"),
    table([["sink", (d) => d.sink], ["state", (d) => badge(d.state)], ["attempts", (d) => d.attempts],
      ["next attempt", (d) => fmtTime(d.next_at) || "–"], ["last error", (d) => d.last_error || "–"],
      ["", (d) => opButton("Resend", () => resend(d.sink), "secondary")]], h.deliveries),
    el("div", { class: "grid2" },
      el("div", {}, el("h2", {}, "Attempts"),
        h.attempts_log.length ? el("ol", { class: "timeline", id: "attempts" }, h.attempts_log.map((a) =>
          el("li", { class: a.result }, el("strong", {}, fmtTime(a.at)), " ", a.sink, " #" + a.n, " ", badge(a.result),
            " " + a.latency_ms + " ms", a.replay_id ? el("span", { class: "muted" }, " resend/replay " + a.replay_id) : "",
            a.error ? el("div", { class: "error" }, a.error) : "")))
          : el("p", { class: "muted", id: "attempts" }, "No attempt finished yet.")),
      el("div", {}, el("h2", {}, "Headers"),
        table([["name", (x) => x.name], ["value", (x) => el("code", {}, x.value)]], h.headers, "No headers."))),
    el("h2", {}, "Body"), body);
}

// ---- dead letters ----

pages.dlq = async function () {
  const f = el("form", { class: "filters" },
    el("label", {}, "Source id", el("input", { name: "source_id" })),
    el("label", {}, "Dead-lettered since", el("input", { name: "since", type: "datetime-local" })),
    el("button", { type: "submit" }, "Filter"));
  const out = el("div", { id: "dlq-list" });
  const replay = el("form", { class: "filters", id: "dlq-replay" },
    el("label", {}, "Rate (rows/s)", el("input", { name: "rate", type: "number", value: "50", min: "0.1", step: "any" })));
  replay.append(opButton("Replay these dead letters", async () => {
    const src = new FormData(f).get("source_id");
    try {
      const j = await api("POST", "/v1/replays", { kind: "dlq", source_id: src, rate: Number(new FormData(replay).get("rate")) || 0 });
      toast("Replay " + j.id + " started"); location.hash = "#/replays";
    } catch (e) { toast(e.message, true); }
  }));
  view(el("h1", {}, "Dead letters"), f, out, el("h2", {}, "Replay"),
    el("p", { class: "muted" }, "Moves the dead deliveries of the source filtered above (every source when empty) back to due, at the rate given, while dispatch keeps up."), replay);
  async function load() {
    const fd = new FormData(f);
    const r = await api("GET", "/v1/dlq" + qs({ source_id: fd.get("source_id"), since: localToISO(fd.get("since")).replace(/\.\d+Z$/, "Z") }));
    out.replaceChildren(el("p", { id: "dlq-total" }, r.total + " dead " + (r.total === 1 ? "delivery" : "deliveries")),
      table([["dead-lettered", (d) => fmtTime(d.dead_lettered_at)], ["hook", (d) => hookLink(d.id)], ["source", (d) => d.source_id],
        ["sink", (d) => d.sink], ["reason", (d) => d.reason], ["size", (d) => fmtBytes(d.size)]], r.entries, "The dead-letter queue is empty."));
  }
  f.addEventListener("submit", (e) => { e.preventDefault(); load().catch((x) => toast(x.message, true)); });
  await load();
};

// ---- replays ----

pages.replays = async function () {
  const out = el("div", { id: "replay-list" });
  view(el("h1", {}, "Replays"), out);
  async function setState(id, state) {
    try { await api("PATCH", "/v1/replays/" + encodeURIComponent(id), { state }); await load(); } catch (e) { toast(e.message, true); }
  }
  async function load() {
    const r = await api("GET", "/v1/replays");
    out.replaceChildren(table([
      ["id", (j) => el("code", {}, j.id)], ["kind", (j) => j.kind], ["source", (j) => j.source_id || "every source"],
      ["state", (j) => badge(j.state)], ["moved", (j) => j.moved], ["skipped", (j) => j.skipped], ["rate", (j) => j.rate + "/s"],
      ["created", (j) => fmtTime(j.created_at)], ["updated", (j) => fmtTime(j.updated_at)], ["error", (j) => j.error || ""],
      ["", (j) => (j.state === "running" || j.state === "paused")
        ? el("span", { class: "row" },
          j.state === "running" ? opButton("Pause", () => setState(j.id, "paused"), "secondary") : opButton("Resume", () => setState(j.id, "running"), "secondary"),
          opButton("Cancel", () => setState(j.id, "cancelled"), "danger"))
        : ""],
    ], r.replays, "No replay jobs. Start one from Dead letters or Quarantine."));
  }
  await load();
  every(2000, () => load().catch(() => {}));
};

// ---- quarantine ----

pages.quarantine = async function () {
  const f = el("form", { class: "filters" },
    el("label", {}, "Source id", el("input", { name: "source_id" })),
    el("label", {}, "Since", el("input", { name: "since", type: "datetime-local" })),
    el("label", {}, "Until", el("input", { name: "until", type: "datetime-local" })),
    el("button", { type: "submit" }, "Filter"));
  const out = el("div", { id: "quarantine-list" });
  const filters = () => { const fd = new FormData(f); return { source_id: fd.get("source_id"), since: localToISO(fd.get("since")), until: localToISO(fd.get("until")) }; };
  async function purge(params, what) {
    if (!confirm("Purge " + what + "? The hooks are deleted for good.")) return;
    try { const r = await api("DELETE", "/v1/quarantine" + qs(params)); toast(r.purged + " purged"); await load(); } catch (e) { toast(e.message, true); }
  }
  const actions = el("div", { class: "row" },
    opButton("Release (re-verify and deliver)", async () => {
      try {
        const j = await api("POST", "/v1/replays", { kind: "quarantine", source_id: filters().source_id });
        toast("Release " + j.id + " started"); location.hash = "#/replays";
      } catch (e) { toast(e.message, true); }
    }),
    opButton("Purge matching", () => {
      const p = filters();
      if (!p.source_id && !p.since && !p.until) p.all = "true";
      purge(p, p.all ? "everything in quarantine" : "the hooks matching the filter");
    }, "danger"));
  view(el("h1", {}, "Quarantine"), f, out, el("h2", {}, "Act on the filter"),
    el("p", { class: "muted" }, "Release re-verifies each held hook of the source (every source when empty) against the source's current secrets and commits those that pass; the rest stay held. Purge deletes."), actions);
  async function load() {
    const r = await api("GET", "/v1/quarantine" + qs(filters()));
    out.replaceChildren(el("p", { id: "quarantine-total" }, r.total + " held"),
      table([["received", (q) => fmtTime(q.received_at)], ["id", (q) => el("code", {}, q.id)], ["source", (q) => q.source_id],
        ["tenant", (q) => q.tenant_id], ["reason", (q) => q.reason], ["type", (q) => q.content_type], ["size", (q) => fmtBytes(q.size)],
        ["", (q) => opButton("Purge", () => purge({ id: q.id }, "hook " + q.id), "secondary")]], r.entries, "Nothing is held in quarantine."));
  }
  f.addEventListener("submit", (e) => { e.preventDefault(); load().catch((x) => toast(x.message, true)); });
  await load();
};

// ---- sources ----

pages.sources = async function () {
  const tenantF = el("form", { class: "filters" }, el("label", {}, "Tenant", el("input", { name: "tenant", value: "default" })),
    el("button", { type: "submit" }, "Show"));
  const apiList = el("div", { id: "source-list" });
  const fileList = el("div", { id: "file-sources" });
  const editor = el("div", { id: "source-editor" });
  view(el("h1", {}, "Sources"), tenantF, el("h2", {}, "Added through the API"), apiList, editor,
    el("h2", {}, "From the config file (read-only here)"), fileList);
  const tenant = () => new FormData(tenantF).get("tenant") || "default";

  function form(existing) {
    const cfg = existing ? JSON.parse(JSON.stringify(existing.config)) : null;
    const f = el("form", { id: existing ? "source-edit" : "source-create" },
      el("h2", {}, existing ? "Edit " + existing.id : "New source in tenant " + tenant()),
      existing ? "" : el("div", { class: "row" },
        el("label", {}, "Name", el("input", { name: "name", required: true, pattern: "[a-z0-9][a-z0-9_-]*" })),
        el("label", {}, "Verify", el("select", { name: "verify_type" }, ["none", "hmac", "github", "stripe", "standard_webhooks", "svix", "slack", "shopify"].map((v) => el("option", { value: v }, v)))),
        el("label", {}, "On verify failure", el("select", { name: "on_verify_failure" }, ["reject", "quarantine", "accept_flag"].map((v) => el("option", { value: v }, v))))),
      el("label", {}, (existing ? "New verify secret (empty keeps the stored one)" : "Verify secret") + " — write-only, never shown again",
        el("input", { name: "secret", type: "password", autocomplete: "new-password" })),
      el("label", {}, existing ? "Block (JSON; secrets show as [REDACTED] and are kept when sent back so)" : "Sinks (JSON)",
        el("textarea", { name: "block" }, existing ? JSON.stringify(cfg, null, 2) : '[{"id": "log", "type": "log"}]')),
      el("div", { class: "row" }, el("button", { type: "submit", disabled: !canOperate() }, existing ? "Save" : "Create"),
        el("button", { type: "button", class: "secondary", onclick: () => editor.replaceChildren(newButton()) }, "Close")));
    f.addEventListener("submit", async (e) => {
      e.preventDefault();
      const fd = new FormData(f);
      let parsed;
      try { parsed = JSON.parse(fd.get("block")); } catch (x) { toast("Not JSON: " + x.message, true); return; }
      let body;
      if (existing) {
        body = parsed;
        if (fd.get("secret")) { body.verify = body.verify || {}; body.verify.secret = [fd.get("secret")]; }
      } else {
        body = { name: fd.get("name"), verify: { type: fd.get("verify_type") }, on_verify_failure: fd.get("on_verify_failure"), sinks: parsed };
        if (fd.get("secret")) body.verify.secret = [fd.get("secret")];
      }
      try {
        const v = existing
          ? await api("PUT", "/v1/tenants/" + encodeURIComponent(existing.tenant) + "/sources/" + encodeURIComponent(existing.name), body)
          : await api("POST", "/v1/tenants/" + encodeURIComponent(tenant()) + "/sources", body);
        toast((existing ? "Saved " : "Created ") + v.id + " — providers POST to " + v.catch_url);
        editor.replaceChildren(newButton());
        await load();
      } catch (x) { toast(x.message, true); }
    });
    return f;
  }
  const newButton = () => opButton("New source", () => editor.replaceChildren(form(null)));

  async function load() {
    try {
      const r = await api("GET", "/v1/tenants/" + encodeURIComponent(tenant()) + "/sources");
      apiList.replaceChildren(table([["id", (s) => el("code", {}, s.id)], ["catch URL", (s) => el("code", {}, s.catch_url)],
        ["verify", (s) => (s.config.verify && s.config.verify.type) || "none"],
        ["sinks", (s) => (s.config.sinks || []).map((k) => (k.id || k.type) + " (" + k.type + ")").join(", ")],
        ["updated", (s) => fmtTime(s.updated_at)],
        ["", (s) => opButton("Edit", () => editor.replaceChildren(form(s)), "secondary")]], r.sources, "No API sources in tenant " + tenant() + "."));
      if (!editor.firstChild) editor.replaceChildren(newButton());
    } catch (e) {
      apiList.replaceChildren(el("p", { class: "muted" }, e.status === 404
        ? "source_store.type is static: sources come from the config file only."
        : e.message));
    }
    const cfg = await api("GET", "/v1/config");
    const rows = Object.entries(cfg.sources || {}).map(([id, s]) => ({ id, s }));
    fileList.replaceChildren(table([["id", (x) => el("code", {}, x.id)], ["tenant", (x) => x.s.tenant || "default"],
      ["verify", (x) => (x.s.verify && x.s.verify.type) || "none"], ["on failure", (x) => x.s.on_verify_failure || "reject"],
      ["sinks", (x) => (x.s.sinks || []).map((k) => (k.id || k.type) + " (" + k.type + ")").join(", ")]], rows, "No sources in the file."));
  }
  tenantF.addEventListener("submit", (e) => { e.preventDefault(); editor.replaceChildren(); load(); });
  await load();
};

// The logout form posts normally; the session cookie is dropped server side.
boot().catch((e) => view(el("p", { class: "error" }, "The console could not start: " + e.message)));
