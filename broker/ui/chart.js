// chart.js: rates from cumulative counters, and a small SVG line chart.

const svgNS = "http://www.w3.org/2000/svg";

// Rates turns successive polls of cumulative counters into per-second
// rates. A queue without counters (a broker that does not report them)
// has no rate; a counter that went down (the store reopened) restarts.
export class Rates {
  constructor() { this.prev = new Map(); }

  // update records counters of queue seen at time t (milliseconds) and
  // returns {sent, completed} per second, or null when unknown.
  update(queue, counters, t) {
    if (!counters) { this.prev.delete(queue); return null; }
    const p = this.prev.get(queue);
    this.prev.set(queue, { c: counters, t });
    if (!p || t <= p.t) return null;
    const dt = (t - p.t) / 1000;
    const rate = (k) => {
      const d = (counters[k] || 0) - (p.c[k] || 0);
      return d < 0 ? null : d / dt;
    };
    const sent = rate("sent"), completed = rate("completed");
    if (sent === null || completed === null) return null;
    return { sent, completed };
  }
}

// Series keeps the last n points of two lines.
export class Series {
  constructor(n) { this.n = n; this.points = []; }
  push(p) {
    this.points.push(p);
    if (this.points.length > this.n) this.points.shift();
  }
}

function node(tag, attrs) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

// draw renders series into svg (viewBox 600x160): a sent and a completed
// line, a horizontal grid and the maximum on the axis. No points, no lines.
export function draw(svg, series) {
  svg.replaceChildren();
  const W = 600, H = 160, left = 40, top = 10, bottom = 20;
  const h = H - top - bottom, w = W - left - 10;
  const pts = series.points;
  const max = niceMax(Math.max(1, ...pts.map((p) => Math.max(p.sent, p.completed))));
  for (let i = 0; i <= 5; i++) {
    const y = top + (h * i) / 5;
    svg.append(node("line", { x1: left, x2: W - 10, y1: y, y2: y, class: "grid" }));
    const label = node("text", { x: left - 4, y: y + 3, "text-anchor": "end", class: "axis" });
    label.textContent = fmtRate((max * (5 - i)) / 5);
    svg.append(label);
  }
  if (pts.length < 2) return;
  const step = w / (series.n - 1);
  const x0 = left + w - step * (pts.length - 1);
  for (const k of ["sent", "completed"]) {
    const d = pts.map((p, i) => `${(x0 + i * step).toFixed(1)},${(top + h - (h * p[k]) / max).toFixed(1)}`).join(" ");
    svg.append(node("polyline", { points: d, class: k, "data-series": k }));
  }
}

// niceMax rounds m up to 1, 2 or 5 times a power of ten, so that the five
// grid steps read as round numbers.
function niceMax(m) {
  const e = 10 ** Math.floor(Math.log10(m));
  return [1, 2, 5, 10].map((f) => f * e).find((v) => v >= m);
}

// fmtRate formats a rate: "—" when unknown.
export function fmtRate(r) {
  if (r === null || r === undefined) return "—";
  if (r >= 100) return Math.round(r).toString();
  const digits = r >= 1 ? 1 : 2;
  return r.toFixed(digits).replace(/\.?0+$/, "") || "0";
}
