// The drawing helpers of loadgen-node's HTML pages (the run report, compare
// and sweep): SVG line charts and tables, no library, nothing fetched. Each
// chart drawn is named in `drawn`, which the page puts in body's
// data-drawn; each series is a polyline with data-name.
"use strict";
const NS = "http://www.w3.org/2000/svg";
const drawn = [];
window.onerror = (m) => { document.body.dataset.error = String(m); };

function el(tag, attrs, parent, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(NS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function ms(ns) { return ns == null ? "" : (ns / 1e6).toFixed(3); }
function table(parent, head, rows) {
  const t = el("table", {}, parent);
  const tr = el("tr", {}, t);
  head.forEach(h => el("th", {}, tr, h));
  rows.forEach(r => { const row = el("tr", {}, t); r.forEach(c => el("td", {}, row, String(c))); });
  return t;
}
function nice(max) { if (!(max > 0)) return 1; const p = Math.pow(10, Math.floor(Math.log10(max))); for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p; return 10 * p; }

// A line chart: series = [{name, points: [[x, y]...], color, dash, marks}],
// with an optional horizontal (bound) or vertical (vbound) bound line.
// opts.ylog: a logarithmic y axis from opts.ymin to opts.ymax (powers of
// ten); opts.xmin: where the x axis starts (0 by default). A series with
// marks: [[x, y, label]...] also draws a circle at each, filled when
// label is "VALID".
function chart(parent, id, series, opts) {
  const W = 900, H = 300, L = 70, R = 20, T = 30, B = 40;
  const svg = el("svg:svg", { id, width: W, height: H, viewBox: `0 0 ${W} ${H}` }, parent);
  const pts = series.flatMap(s => s.points).filter(p => p[1] != null && (!opts.ylog || p[1] > 0));
  const xmin = opts.xmin ?? 0;
  const xmax = opts.xmax ?? Math.max(...pts.map(p => p[0]));
  let ymax = opts.ylog ? 1 : nice(Math.max(...pts.map(p => p[1]), opts.bound || 0) * 1.05);
  if (opts.ymax) ymax = opts.ymax;
  const ymin = opts.ylog ? (opts.ymin ?? Math.pow(10, Math.floor(Math.log10(Math.min(...pts.map(p => p[1])))))) : 0;
  const x = v => L + (W - L - R) * (v - xmin) / ((xmax - xmin) || 1);
  const y = opts.ylog
    ? v => H - B - (H - T - B) * (Math.log10(Math.max(v, ymin)) - Math.log10(ymin)) / ((Math.log10(ymax) - Math.log10(ymin)) || 1)
    : v => H - B - (H - T - B) * v / ymax;
  const yticks = [];
  if (opts.ylog) { for (let v = ymin; v <= ymax * 1.0001; v *= 10) yticks.push(v); }
  else { for (let i = 0; i <= 4; i++) yticks.push(ymax * i / 4); }
  for (const v of yticks) {
    el("svg:line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }, svg);
    el("svg:text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "label" }, svg, opts.yfmt(v));
  }
  for (let i = 0; i <= 5; i++) {
    const v = xmin + (xmax - xmin) * i / 5;
    el("svg:text", { x: x(v), y: H - B + 16, "text-anchor": "middle", class: "label" }, svg, opts.xfmt(v));
  }
  el("svg:line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }, svg);
  el("svg:line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }, svg);
  el("svg:text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", class: "label" }, svg, opts.xlabel);
  el("svg:text", { x: 12, y: 16, class: "label" }, svg, opts.ylabel);
  if (opts.bound) {
    el("svg:line", { x1: L, x2: W - R, y1: y(opts.bound), y2: y(opts.bound), class: "bound", "data-name": "bound" }, svg);
  }
  if (opts.vbound) {
    const X = x(Math.min(opts.vbound, xmax));
    el("svg:line", { x1: X, x2: X, y1: T, y2: H - B, class: "bound", "data-name": "bound" }, svg);
  }
  series.forEach((s, i) => {
    const p = s.points.filter(q => q[1] != null && (!opts.ylog || q[1] > 0)).map(q => `${x(q[0]).toFixed(1)},${y(q[1]).toFixed(1)}`).join(" ");
    const attrs = { points: p, fill: "none", stroke: s.color, "stroke-width": 2, class: "series", "data-name": s.name };
    if (s.dash) attrs["stroke-dasharray"] = s.dash;
    el("svg:polyline", attrs, svg);
    (s.marks || []).forEach(m => {
      el("svg:circle", { cx: x(m[0]).toFixed(1), cy: y(m[1]).toFixed(1), r: 4, stroke: s.color, "stroke-width": 2,
        fill: m[2] === "VALID" ? s.color : "#fff", class: "mark", "data-name": `${s.name}/${m[2]}` }, svg);
    });
    el("svg:text", { x: W - R - 200, y: T + 14 + 14 * i, fill: s.color, class: "label" }, svg, s.name);
  });
  drawn.push(id);
  return svg;
}

// Stacked bars of where the time went: one row per node and quantile,
// from a breakdown file's nodes (`mlperf_net_breakdown.json`). `label`
// prefixes each row's name (a side of a comparison, a sweep's point).
const PARTS = ["wire_and_qdl", "node_queue", "node_compute", "node_send", "qdl_decode"];
const PART_COLORS = ["#8e24aa", "#f9a825", "#1565c0", "#00897b", "#6d4c41"];
function breakdownBars(parent, id, groups) {
  const rowsOf = groups.flatMap(g => g.nodes.flatMap(n => ["p50", "p99"].map(q => ({ label: g.label, n, q }))));
  const W = 900, rowH = 26, L = 260, H = 40 + rowH * rowsOf.length;
  const svg = el("svg:svg", { id, width: W, height: H, viewBox: `0 0 ${W} ${H}` }, parent);
  const max = Math.max(...rowsOf.map(r => PARTS.reduce((a, p) => a + r.n[p][r.q], 0)), 1);
  rowsOf.forEach((r, i) => {
    const yy = 20 + rowH * i;
    const name = r.label ? `${r.label} ${r.n.name}` : r.n.name;
    el("svg:text", { x: L - 8, y: yy + 16, "text-anchor": "end", class: "label" }, svg, `${name} ${r.q}`);
    let x0 = L;
    PARTS.forEach((p, k) => {
      const w = (W - L - 20) * r.n[p][r.q] / max;
      el("svg:rect", { x: x0, y: yy + 4, width: Math.max(w, 0), height: rowH - 8, fill: PART_COLORS[k], class: "part", "data-name": `${r.label ? r.label + "/" : ""}${r.n.name}/${p}/${r.q}` }, svg);
      x0 += w;
    });
  });
  const legend = el("p", {}, parent);
  PARTS.forEach((p, k) => { el("span", { style: `color:${PART_COLORS[k]}` }, legend, `■ ${p}  `); });
  drawn.push(id);
}
