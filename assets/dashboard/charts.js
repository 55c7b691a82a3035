// Line and bar charts drawn on a canvas: a few hundred points each, redrawn only when data
// changed and at most once per animation frame (none while the tab is hidden). A chart knows its
// size from a ResizeObserver, so that drawing never asks for layout (a forced reflow per chart
// after the table changed was most of the page's cost).

const COLORS = ["#4fa3ff", "#ffb547", "#6dd38c", "#e86a8a"];
// The page's background (--bg): the canvases are opaque, so that the compositor copies them
// instead of blending them (in software, blending the charts was most of the GPU process's
// drawing, traced with benches/dashboard_trace.py).
const BG = "#0f1419";
const PAD = { l: 44, r: 8, t: 18, b: 18 };
// One formatter for every time label: toLocaleTimeString builds a new one per call.
const TIME = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
const dirty = new Set();
let frame = 0;

function schedule(chart) {
  dirty.add(chart);
  if (!frame) frame = requestAnimationFrame(drawDirty);
}

// Draws every chart whose data changed. Called from inside an animation frame (the page's
// batched flush), it draws in that frame: a new requestAnimationFrame there would wait for the
// next frame, and every flush would cost the browser two frames instead of one.
export function drawDirty() {
  if (frame) cancelAnimationFrame(frame);
  frame = 0;
  for (const c of dirty) c.draw();
  dirty.clear();
}

// Every chart's CSS size, kept by one observer (its first report draws the chart).
const sizes = new WeakMap();
const observed = new Map();
const observer = new ResizeObserver((entries) => {
  for (const e of entries) {
    const box = e.contentBoxSize?.[0];
    const w = box ? box.inlineSize : e.contentRect.width;
    const h = box ? box.blockSize : e.contentRect.height;
    sizes.set(e.target, { w, h });
    const chart = observed.get(e.target);
    if (chart) schedule(chart);
  }
});

function observe(chart) {
  observed.set(chart.canvas, chart);
  observer.observe(chart.canvas);
}

function setup(chart) {
  const canvas = chart.canvas;
  const dpr = window.devicePixelRatio || 1;
  const { w, h } = sizes.get(canvas) || { w: 0, h: 0 };
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  chart.ctx ||= canvas.getContext("2d", { alpha: false });
  const ctx = chart.ctx;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = BG;
  ctx.fillRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  return { ctx, w, h };
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function yAxis(ctx, w, h, max, fmt) {
  ctx.strokeStyle = "#2a3541";
  ctx.fillStyle = "#8a96a3";
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const y = PAD.t + (h - PAD.t - PAD.b) * (1 - i / 4);
    ctx.beginPath();
    ctx.moveTo(PAD.l, y);
    ctx.lineTo(w - PAD.r, y);
    ctx.stroke();
    ctx.fillText(fmt(max * i / 4), PAD.l - 4, y);
  }
}

// Legend widths, measured once per name (the font never changes).
const widths = new Map();

function legend(ctx, names) {
  let x = PAD.l;
  ctx.textAlign = "left";
  ctx.textBaseline = "top";
  names.forEach((n, i) => {
    ctx.fillStyle = COLORS[i % COLORS.length];
    ctx.fillRect(x, 4, 8, 8);
    ctx.fillStyle = "#dde3ea";
    ctx.fillText(n, x + 11, 2);
    if (!widths.has(n)) widths.set(n, ctx.measureText(n).width);
    x += widths.get(n) + 24;
  });
}

const num = (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

// Points in time: each series keeps its last `keep` (x = ms, y) pairs; y = null is a gap.
export class LineChart {
  constructor(canvas, names, { keep = 240, fmt = num, maxY = null } = {}) {
    this.canvas = canvas;
    this.names = names;
    this.series = names.map(() => []);
    this.keep = keep;
    this.fmt = fmt;
    this.maxY = maxY;
    this.count = 0;
    this.ctx = null;
    observe(this);
  }

  push(x, ys) {
    ys.forEach((y, i) => {
      const s = this.series[i];
      s.push([x, y]);
      if (s.length > this.keep) s.shift();
    });
    this.count++;
    schedule(this);
  }

  draw() {
    // What the browser test reads; written once per drawn frame, not per point.
    this.canvas.dataset.points = String(this.count);
    const { ctx, w, h } = setup(this);
    let x0 = Infinity, x1 = -Infinity, ymax = 0;
    for (const s of this.series) for (const [x, y] of s) {
      x0 = Math.min(x0, x); x1 = Math.max(x1, x);
      if (y !== null && Number.isFinite(y)) ymax = Math.max(ymax, y);
    }
    const max = this.maxY ?? niceMax(ymax);
    yAxis(ctx, w, h, max, this.fmt);
    legend(ctx, this.names);
    if (!(x1 >= x0)) return;
    const span = Math.max(x1 - x0, 1000);
    const px = (x) => PAD.l + (w - PAD.l - PAD.r) * ((x - x0) / span);
    const py = (y) => PAD.t + (h - PAD.t - PAD.b) * (1 - Math.min(y, max) / max);
    ctx.fillStyle = "#8a96a3";
    ctx.textBaseline = "bottom";
    ctx.textAlign = "left";
    ctx.fillText(TIME.format(x0), PAD.l, h);
    ctx.textAlign = "right";
    ctx.fillText(TIME.format(x1), w - PAD.r, h);
    this.series.forEach((s, i) => {
      ctx.strokeStyle = ctx.fillStyle = COLORS[i % COLORS.length];
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      let pen = false;
      for (const [x, y] of s) {
        if (y === null || !Number.isFinite(y)) { pen = false; continue; }
        if (pen) ctx.lineTo(px(x), py(y)); else ctx.moveTo(px(x), py(y));
        pen = true;
      }
      ctx.stroke();
      if (s.length <= 60) for (const [x, y] of s) {
        if (y !== null && Number.isFinite(y)) ctx.fillRect(px(x) - 1.5, py(y) - 1.5, 3, 3);
      }
    });
  }
}

// Bars by category (draft position): one group per index, one bar per series.
export class BarChart {
  constructor(canvas, names, { fmt = num } = {}) {
    this.canvas = canvas;
    this.names = names;
    this.values = names.map(() => []);
    this.fmt = fmt;
    this.ctx = null;
    this.key = "";
    observe(this);
  }

  set(values) {
    const key = values.join("|");
    if (key === this.key) return;
    this.key = key;
    this.values = values;
    schedule(this);
  }

  draw() {
    const { ctx, w, h } = setup(this);
    const n = Math.max(1, ...this.values.map((v) => v.length));
    const max = niceMax(Math.max(0, ...this.values.flat()));
    yAxis(ctx, w, h, max, this.fmt);
    legend(ctx, this.names);
    const gw = (w - PAD.l - PAD.r) / n;
    const bw = Math.max(2, (gw * 0.8) / this.values.length);
    ctx.textAlign = "center";
    ctx.textBaseline = "bottom";
    for (let g = 0; g < n; g++) {
      this.values.forEach((vals, i) => {
        const v = vals[g] || 0;
        const bh = (h - PAD.t - PAD.b) * (v / max);
        ctx.fillStyle = COLORS[i % COLORS.length];
        ctx.fillRect(PAD.l + g * gw + gw * 0.1 + i * bw, h - PAD.b - bh, bw - 1, bh);
      });
      ctx.fillStyle = "#8a96a3";
      ctx.fillText(String(g + 1), PAD.l + g * gw + gw / 2, h);
    }
  }
}
