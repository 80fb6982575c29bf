"""The page ``GET /dashboard`` serves (:mod:`cachekit.proxy.ops.dashboard`): one self-contained HTML
document, its CSS and JavaScript inline, its charts plain SVG drawn by its own script. It loads
nothing from anywhere (no CDN, no font, no image), so it works air-gapped; the only request it
makes is ``GET /dashboard/data``, every 2 s (``?every=MS`` sets another period, 250 ms to 60 s).
Text from the data (model names, reasons, problems) is set as text, never parsed as HTML.
Every panel has a ``data-panel`` name and gets ``data-ready="1"`` once drawn from data.
"""

from __future__ import annotations

__all__ = ["PAGE"]

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cachekit proxy dashboard</title>
<style>
:root {
  --bg: #f5f6f8; --card: #fff; --ink: #1f2430; --muted: #6b7280; --line: #e5e7eb;
  --exact: #2563eb; --semantic: #9333ea; --all: #111827; --ok: #16a34a; --warn: #d97706;
  --bad: #dc2626; --bar: #0891b2;
}
* { box-sizing: border-box; }
body {
  margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", sans-serif;
}
header {
  display: flex; align-items: baseline; gap: 16px; flex-wrap: wrap;
  padding: 14px 22px; background: #111827; color: #f9fafb;
}
header h1 { font-size: 18px; margin: 0; font-weight: 600; }
header .meta { color: #9ca3af; font-size: 13px; }
#conn { display: inline-block; width: 9px; height: 9px; border-radius: 50%;
  background: var(--muted); margin-right: 6px; }
#conn.up { background: var(--ok); } #conn.down { background: var(--bad); }
main {
  display: grid; gap: 16px; padding: 16px 22px 28px;
  grid-template-columns: repeat(auto-fit, minmax(520px, 1fr));
}
section {
  background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: 14px 16px; min-width: 0;
}
section h2 { font-size: 15px; margin: 0 0 10px; font-weight: 600; }
section h2 small { color: var(--muted); font-weight: 400; margin-left: 6px; }
.stats { display: flex; gap: 22px; flex-wrap: wrap; margin-bottom: 8px; }
.stat b { display: block; font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.stat span { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: right; padding: 4px 6px; border-bottom: 1px solid var(--line); }
th:first-child, td:first-child { text-align: left; overflow-wrap: anywhere; min-width: 7em; }
td + td, th + th { white-space: nowrap; }
th { color: var(--muted); font-weight: 500; font-size: 12px; }
svg.chart { width: 100%; height: auto; display: block; }
svg text { font-size: 11px; fill: var(--muted); font-family: inherit; }
svg .grid { stroke: var(--line); stroke-width: 1; }
.legend { display: flex; gap: 14px; flex-wrap: wrap; font-size: 12px; margin: 4px 0 6px; }
.legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px;
  margin-right: 5px; vertical-align: -1px; }
.note { color: var(--muted); font-size: 12px; margin: 8px 0 0; }
.badge { display: inline-block; padding: 2px 10px; border-radius: 10px; color: #fff;
  font-weight: 600; }
.badge.ok { background: var(--ok); } .badge.degraded { background: var(--warn); }
ul.problems { margin: 8px 0; padding-left: 18px; color: var(--bad); }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 14px; margin: 10px 0 0; }
dt { color: var(--muted); } dd { margin: 0; overflow-wrap: anywhere; }
</style>
</head>
<body>
<header>
  <h1>cachekit proxy</h1>
  <span class="meta"><span id="conn"></span><span id="status">connecting&hellip;</span></span>
</header>
<main>
  <section data-panel="hitrate">
    <h2>Hit rate by tier <small>exact and semantic, over time</small></h2>
    <div class="stats"></div><div class="legend"></div><div class="chart"></div>
  </section>
  <section data-panel="endpoints">
    <h2>Hit rate by endpoint</h2>
    <div class="legend"></div><div class="chart"></div><div class="table"></div>
  </section>
  <section data-panel="saved">
    <h2>Tokens and dollars saved <small>by hits, at list prices</small></h2>
    <div class="stats"></div><div class="table"></div><p class="note"></p>
  </section>
  <section data-panel="latency">
    <h2>Latency <small>p50 / p95 / p99</small></h2>
    <div class="table"></div>
    <p class="note">A miss costs its upstream call: the proxy keeps no histogram of whole misses,
    so misses are shown as upstream latency. Percentiles are estimated from the histograms'
    buckets.</p>
  </section>
  <section data-panel="refusals">
    <h2>Semantic refusals by reason <small>near entries not served</small></h2>
    <div class="stats"></div><div class="chart"></div>
  </section>
  <section data-panel="shadow">
    <h2>Shadow mode <small>semantic hits decided, not served</small></h2>
    <div class="stats"></div>
    <p class="note">With <code>--shadow</code> (or <code>x-cachekit-shadow: 1</code>), each
    semantic hit goes upstream instead and the answer it would have served is scored against the
    fresh one (docs/shadow.md).</p>
  </section>
  <section data-panel="similarity">
    <h2>Nearest similarity of misses</h2>
    <div class="stats"></div><div class="chart"></div>
    <p class="note">How close misses came to their nearest entry, in bins up to the bound shown
    (the first: 0.50 and below). Mass just under the threshold is what a lower threshold would
    serve.</p>
  </section>
  <section data-panel="health">
    <h2>Health</h2>
    <div class="body"></div>
  </section>
</main>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const query = new URLSearchParams(location.search);
const EVERY = Math.min(60000, Math.max(250, Number(query.get("every")) || 2000));
const WINDOW_S = Math.max(10, 5 * EVERY / 1000);  // hit rates over time: trailing window
const KEEP = 1800;                                // samples kept by the page
const DATA = location.pathname.replace(/\/+$/, "") + "/data";
const LOOKUPS = ["HIT", "SEMANTIC_HIT", "MISS", "COALESCED"];
const COLOR = {all: "#111827", exact: "#2563eb", semantic: "#9333ea", bar: "#0891b2"};
const PALETTE = ["#2563eb", "#16a34a", "#db2777", "#ea580c", "#0891b2", "#7c3aed", "#65a30d"];
const samples = [];

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
}
function sv(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}
const fmt = {
  pct: v => v == null ? "\u2014" : (100 * v).toFixed(1) + "%",
  int: v => v == null ? "\u2014" : Math.round(v).toLocaleString("en-US"),
  usd: v => v == null ? "\u2014" : "$" + (v >= 1 || v === 0 ? v.toFixed(2) : v.toPrecision(3)),
  dur: v => v == null ? "\u2014"
    : v < 1 ? (1000 * v).toPrecision(3) + " ms" : v.toPrecision(3) + " s",
  time: t => new Date(t * 1000).toLocaleTimeString("en-GB"),
};
function panel(name) { return document.querySelector(`[data-panel="${name}"]`); }
function part(name, cls) { return panel(name).querySelector("." + cls); }
function ready(name) { panel(name).dataset.ready = "1"; }
function stats(box, items) {
  box.replaceChildren(...items.map(([v, label]) => el("div",
    {class: "stat", "data-stat": label.replace(/\W+/g, "-")}, el("b", {}, v),
    el("span", {}, label))));
}
function legend(box, lines) {
  box.replaceChildren(...lines.map(l => el("span", {},
    el("i", {style: `background:${l.color}`}), l.name + (l.value ? " " + l.value : ""))));
}
function table(box, head, rows) {
  const t = el("table", {}, el("tr", {}, ...head.map(h => el("th", {}, h))));
  for (const r of rows) t.append(el("tr", {}, ...r.map(c => el("td", {}, c))));
  box.replaceChildren(t);
}
function empty(svg, W, H, text) {
  svg.append(sv("text", {x: W / 2, y: H / 2 + 4, "text-anchor": "middle"}, text));
}

// Rates over time from cumulative counts: pick(sample) gives [part, whole].
function rates(pick) {
  const out = [];
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i];
    let j = i;
    while (j > 0 && samples[j - 1].pid === s.pid && s.t - samples[j - 1].t <= WINDOW_S) j--;
    if (j === i) { out.push([s.t, null]); continue; }
    const [p1, w1] = pick(s), [p0, w0] = pick(samples[j]);
    out.push([s.t, w1 - w0 > 0 ? (p1 - p0) / (w1 - w0) : null]);
  }
  return out;
}
function sumEndpoints(s, keys, only) {
  let n = 0;
  for (const [e, c] of Object.entries(s.endpoints || {}))
    if (only === undefined || e === only) for (const k of keys) n += c[k] || 0;
  return n;
}

function lineChart(box, lines, opt) {
  const W = 600, H = 180, L = 44, R = 10, T = 10, B = 22;
  const svg = sv("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img"});
  const pts = lines.flatMap(l => l.points);
  const ts = pts.map(p => p[0]);
  const now = ts.length ? Math.max(...ts) : Date.now() / 1000;
  const span = Math.max(ts.length ? now - Math.min(...ts) : 0, 30);
  const ymax = opt.ymax || Math.max(1e-9, ...pts.map(p => p[1] || 0)) * 1.1;
  const x = t => L + (W - L - R) * (t - (now - span)) / span;
  const y = v => T + (H - T - B) * (1 - v / ymax);
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    svg.append(sv("line", {x1: L, x2: W - R, y1: y(f * ymax), y2: y(f * ymax), class: "grid"}));
    svg.append(sv("text", {x: L - 6, y: y(f * ymax) + 4, "text-anchor": "end"},
      opt.yfmt(f * ymax)));
  }
  svg.append(sv("text", {x: L, y: H - 6}, fmt.time(now - span)));
  svg.append(sv("text", {x: W - R, y: H - 6, "text-anchor": "end"}, fmt.time(now)));
  let drawn = 0;
  for (const l of lines) {
    let d = "", pen = false;
    const valid = l.points.filter(p => p[1] != null);
    for (const [t, v] of l.points) {
      if (v == null) { pen = false; continue; }
      d += (pen ? "L" : "M") + x(t).toFixed(1) + " " + y(v).toFixed(1);
      pen = true;
    }
    if (d) svg.append(sv("path", {d, fill: "none", stroke: l.color, "stroke-width": 2,
      "stroke-linejoin": "round"}));
    if (valid.length < 40) for (const [t, v] of valid)
      svg.append(sv("circle", {cx: x(t), cy: y(v), r: 2.5, fill: l.color}));
    drawn += valid.length;
  }
  if (!drawn) empty(svg, W, H, opt.empty || "no lookups in this window yet");
  box.replaceChildren(svg);
}

function hbars(box, items, opt) {
  const W = 600, row = 24, L = 150, R = 70;
  const H = Math.max(1, items.length) * row + 6;
  const svg = sv("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img"});
  const max = Math.max(1, ...items.map(i => i.value));
  items.forEach((it, k) => {
    const y = 3 + k * row;
    svg.append(sv("text", {x: L - 8, y: y + 15, "text-anchor": "end"}, it.label));
    svg.append(sv("rect", {x: L, y: y + 3, height: row - 8, rx: 3, fill: opt.color,
      width: Math.max(1, (W - L - R) * it.value / max)}));
    svg.append(sv("text", {x: L + (W - L - R) * it.value / max + 6, y: y + 15},
      fmt.int(it.value)));
  });
  if (!items.length) empty(svg, W, H, opt.empty);
  box.replaceChildren(svg);
}

function vbars(box, buckets, color) {
  const W = 600, H = 180, L = 30, R = 10, T = 18, B = 24;
  const svg = sv("svg", {viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img"});
  const max = Math.max(1, ...buckets.map(b => b.count));
  const bw = (W - L - R) / Math.max(1, buckets.length);
  svg.append(sv("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, class: "grid"}));
  if (!buckets.some(b => b.count)) empty(svg, W, H - B, "no misses with a near entry yet");
  buckets.forEach((b, k) => {
    const h = (H - T - B) * b.count / max, x = L + k * bw;
    svg.append(sv("rect", {x: x + 3, y: H - B - h, width: bw - 6, height: Math.max(h, 0.5),
      rx: 2, fill: color}));
    if (b.count) svg.append(sv("text", {x: x + bw / 2, y: H - B - h - 4,
      "text-anchor": "middle"}, fmt.int(b.count)));
    svg.append(sv("text", {x: x + bw, y: H - 7, "text-anchor": k + 1 < buckets.length ?
      "middle" : "end"}, b.le.toFixed(2)));
  });
  box.replaceChildren(svg);
}

function renderHitrate(d) {
  const hr = d.hit_rate;
  stats(part("hitrate", "stats"), [
    [fmt.pct(hr.all), "all hits"], [fmt.pct(hr.exact), "exact"],
    [fmt.pct(hr.semantic), "semantic"], [fmt.int(hr.lookups), "lookups"],
  ]);
  const whole = s => sumEndpoints(s, LOOKUPS);
  const lines = [
    {name: "all", color: COLOR.all, points: rates(s =>
      [sumEndpoints(s, ["HIT", "SEMANTIC_HIT"]), whole(s)])},
    {name: "exact", color: COLOR.exact, points: rates(s =>
      [sumEndpoints(s, ["HIT"]), whole(s)])},
    {name: "semantic", color: COLOR.semantic, points: rates(s =>
      [sumEndpoints(s, ["SEMANTIC_HIT"]), whole(s)])},
  ];
  legend(part("hitrate", "legend"), lines.map(l => ({...l,
    name: l.name + ` (last ${WINDOW_S.toFixed(0)} s)`})));
  lineChart(part("hitrate", "chart"), lines, {ymax: 1, yfmt: v => (100 * v).toFixed(0) + "%"});
  ready("hitrate");
}

function renderEndpoints(d) {
  const eps = Object.keys(d.requests.by_endpoint).sort();
  const lines = eps.map((e, k) => ({name: e, color: PALETTE[k % PALETTE.length],
    points: rates(s => [sumEndpoints(s, ["HIT", "SEMANTIC_HIT"], e), sumEndpoints(s, LOOKUPS, e)])
  }));
  legend(part("endpoints", "legend"), lines);
  lineChart(part("endpoints", "chart"), lines, {ymax: 1, yfmt: v => (100 * v).toFixed(0) + "%",
    empty: eps.length ? undefined : "no requests yet"});
  const rows = eps.map(e => {
    const c = d.requests.by_endpoint[e];
    return [e, fmt.int(c.total), fmt.int(c.HIT), fmt.int(c.SEMANTIC_HIT), fmt.int(c.MISS),
      fmt.int(c.COALESCED), fmt.int(c.BYPASS + c.PASSTHROUGH), fmt.pct(c.hit_rate)];
  });
  const o = d.requests.by_outcome;
  rows.push(["all", fmt.int(d.requests.total), fmt.int(o.HIT), fmt.int(o.SEMANTIC_HIT),
    fmt.int(o.MISS), fmt.int(o.COALESCED), fmt.int(o.BYPASS + o.PASSTHROUGH),
    fmt.pct(d.hit_rate.all)]);
  table(part("endpoints", "table"),
    ["endpoint", "requests", "exact", "semantic", "miss", "coalesced", "uncached", "hit rate"],
    rows);
  ready("endpoints");
}

function renderSaved(d) {
  const s = d.saved;
  stats(part("saved", "stats"), [
    [fmt.int(s.tokens), "tokens saved"], [fmt.usd(s.dollars), "dollars saved"],
    [fmt.int(s.prompt_tokens), "prompt"], [fmt.int(s.completion_tokens), "completion"],
  ]);
  table(part("saved", "table"), ["model", "requests", "hit rate", "tokens", "dollars"],
    d.models.map(m => [m.model, fmt.int(m.requests), fmt.pct(m.hit_rate), fmt.int(m.tokens),
      fmt.usd(m.dollars) + (m.unpriced_hits ? ` (+${m.unpriced_hits} unpriced)` : "")]));
  part("saved", "note").textContent = (d.models.length ? "" : "No hits yet. ") +
    "Requests are counted by the model a request names, savings by the model its answer names.";
  ready("saved");
}

function renderLatency(d) {
  const l = d.latency;
  const row = (name, h) => [name, fmt.int(h.count), fmt.dur(h.p50), fmt.dur(h.p95),
    fmt.dur(h.p99)];
  const rows = [row("hits: exact", l.exact_hit), row("hits: semantic", l.semantic_hit),
    row("misses (upstream latency)", l.upstream)];
  for (const [e, h] of Object.entries(l.upstream_by_endpoint).sort())
    rows.push(row("\u2003upstream: " + e, h));
  table(part("latency", "table"), ["", "count", "p50", "p95", "p99"], rows);
  ready("latency");
}

function renderRefusals(d) {
  const r = d.refusals;
  stats(part("refusals", "stats"), [[fmt.int(r.total), "refused near entries"],
    [fmt.int(d.not_stored.total), "answers not stored"], [fmt.int(d.stored), "stored"]]);
  hbars(part("refusals", "chart"),
    Object.entries(r.by_reason).map(([label, value]) => ({label, value})),
    {color: COLOR.semantic, empty: "no refusals"});
  ready("refusals");
}

function renderShadow(d) {
  const s = d.shadow;
  stats(part("shadow", "stats"), [[fmt.int(s.lookups), "shadowed lookups"],
    [fmt.int(s.would_hit), "would have hit"], [fmt.pct(s.would_hit_rate), "would-hit rate"],
    [fmt.pct(s.agree_rate), "answers agreeing"], [fmt.int(s.pairs.false), "disagreeing"]]);
  ready("shadow");
}

function renderSimilarity(d) {
  const m = d.miss_similarity;
  const near = m.buckets.filter(b => b.le > 0.5).reduce((n, b) => n + b.count, 0);
  stats(part("similarity", "stats"), [[fmt.int(m.count), "misses with a near entry"],
    [fmt.int(near), "above 0.5"], [fmt.int(d.requests.by_outcome.MISS), "misses"]]);
  vbars(part("similarity", "chart"), m.buckets, COLOR.bar);
  ready("similarity");
}

function renderHealth(d) {
  const h = d.health, up = h.upstream || {};
  const body = [el("span", {class: "badge " + h.status}, h.status)];
  if (h.problems.length) body.push(el("ul", {class: "problems"},
    ...h.problems.map(p => el("li", {}, p))));
  else body.push(el("span", {}, " no problems"));
  const redis = h.redis ? `${h.redis.target} (${h.redis.ok ? "ok" : "failing"}, circuit ` +
    `${h.redis.breaker_state})` : "none: entries live in this process";
  const errors = Object.entries(d.errors.by_reason).map(([k, v]) => `${k} ${v}`).join(", ");
  const dl = el("dl", {});
  for (const [k, v] of [
    ["upstream", `${up.url || ""}: ${up.reachable === false ? "unreachable" : "reachable"}`],
    ["", up.detail || ""],
    ["in flight now", fmt.int(d.in_flight.now)],
    ["in flight, average", d.in_flight.avg.toFixed(3)],
    ["passthrough", fmt.int(d.requests.passthrough)],
    ["errors", fmt.int(d.errors.total) + (errors ? ` (${errors})` : "")],
    ["redis", redis],
    ["worker", `pid ${d.pid}`],
  ]) dl.append(el("dt", {}, k), el("dd", {}, v));
  body.push(dl);
  part("health", "body").replaceChildren(...body);
  ready("health");
}

const RENDER = [renderHitrate, renderEndpoints, renderSaved, renderLatency, renderRefusals,
  renderShadow, renderSimilarity, renderHealth];

function keep(s) {
  if (samples.length && s.t <= samples[samples.length - 1].t) return;
  samples.push(s);
  if (samples.length > KEEP) samples.splice(0, samples.length - KEEP);
}

async function tick(first) {
  const conn = document.getElementById("conn"), status = document.getElementById("status");
  try {
    const r = await fetch(DATA + (first ? "?history=1" : ""), {cache: "no-store"});
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const d = await r.json();
    for (const s of d.history || []) keep(s);
    keep(d.sample);
    for (const render of RENDER) {
      try { render(d); } catch (e) { console.error(render.name, e); }
    }
    conn.className = "up";
    status.textContent = `updated ${fmt.time(d.t)} \u00b7 every ${EVERY / 1000} s` +
      ` \u00b7 worker ${d.pid} \u00b7 ${d.health.status}`;
  } catch (e) {
    conn.className = "down";
    status.textContent = `cannot reach ${DATA}: ${e.message}; retrying`;
  }
  setTimeout(tick, EVERY, false);
}
tick(true);
</script>
</body>
</html>
"""
