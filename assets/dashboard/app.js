// The dashboard: wires the live stream to the charts and the table, the server state, the chat.

import * as auth from "./auth.js";
import { LineChart, BarChart, drawDirty } from "./charts.js";
import { startLive } from "./live.js";
import { startState, render as renderState } from "./state.js";
import { RequestTable } from "./table.js";
import { startChat } from "./chat.js";
import { quantile, fmtSecs } from "./stats.js";

// Requests the quantiles and the draft-position bars are computed over.
const WINDOW = 100;

const canvas = (id) => document.getElementById(id);
const charts = {
  toks: new LineChart(canvas("c-toks"), ["end to end", "decode"]),
  lat: new LineChart(canvas("c-lat"), ["TTFT", "TTLT"], { fmt: (v) => v.toFixed(v < 1 ? 2 : 1) }),
  acc: new LineChart(canvas("c-acc"), ["accept rate"], { maxY: 1 }),
  depth: new BarChart(canvas("c-depth"), ["accepted", "drafted"]),
  tokens: new LineChart(canvas("c-tokens"), ["prompt", "completion"]),
  prefix: new LineChart(canvas("c-prefix"), ["reused", "prefilled"]),
};

const table = new RequestTable();
const recent = [];

// Records are applied in batches, at most one batch per REDRAW_MS and in an animation frame
// (so never while the tab is hidden): at 10 requests/s a redraw per record would cost the
// browser a third of a core. While hidden, only the records a flush would still show are kept.
const REDRAW_MS = 1000;
// Records a hidden tab holds for its next flush: as many as the longest chart keeps.
const PENDING_MAX = 240;
let pending = [];
// Records left out of `pending` while hidden: counted in the table's total all the same.
let skipped = 0;
let lastFlush = 0;
let flushTimer = 0;

// The server state last polled, drawn by the next flush: one frame a second for both.
let pendingState = null;

function onServerState(s) {
  pendingState = s;
  scheduleFlush();
}

function onRecord(r) {
  pending.push(r);
  if (pending.length > PENDING_MAX) {
    skipped += pending.length - PENDING_MAX;
    pending.splice(0, pending.length - PENDING_MAX);
  }
  scheduleFlush();
}

function scheduleFlush() {
  if (!flushTimer) {
    const wait = Math.max(0, lastFlush + REDRAW_MS - performance.now());
    flushTimer = setTimeout(() => requestAnimationFrame(flush), wait);
  }
}

function flush() {
  flushTimer = 0;
  lastFlush = performance.now();
  if (pendingState) renderState(pendingState);
  pendingState = null;
  const batch = pending;
  pending = [];
  if (!batch.length) return;
  for (const r of batch) apply(r);
  table.total += skipped;
  skipped = 0;
  table.addMany(batch);
  summarize();
  drawDirty();
}

function apply(r) {
  const x = Date.parse(r.timestamp) || Date.now();
  charts.toks.push(x, [r.tok_s, r.decode_tok_s]);
  charts.lat.push(x, [r.ttft_s, r.ttlt_s]);
  charts.acc.push(x, [r.accept_rate]);
  charts.tokens.push(x, [r.prompt_tokens, r.completion_tokens]);
  const p = r.session_prompt_prefix_commit || {};
  charts.prefix.push(x, [p.cached_tokens, p.prefilled_tokens]);
  recent.push(r);
  if (recent.length > WINDOW) recent.shift();
}

// What depends on the whole window: the draft-position bars and the quantiles.
let quantilesText = "";
function summarize() {
  const acc = [], drafted = [];
  for (const q of recent) {
    (q.accepted_by_depth || []).forEach((v, i) => { acc[i] = (acc[i] || 0) + v; });
    (q.drafted_by_depth || []).forEach((v, i) => { drafted[i] = (drafted[i] || 0) + v; });
  }
  for (let i = 0; i < Math.max(acc.length, drafted.length); i++) {
    acc[i] = acc[i] || 0;
    drafted[i] = drafted[i] || 0;
  }
  charts.depth.set([acc, drafted]);
  const ttft = recent.map((q) => q.ttft_s).filter((v) => v !== null);
  const ttlt = recent.map((q) => q.ttlt_s);
  const qs = (v) => [0.5, 0.9, 0.99].map((q) => fmtSecs(quantile(v, q))).join(" / ");
  const text = `p50/p90/p99 of last ${recent.length}: TTFT ${qs(ttft)} · TTLT ${qs(ttlt)}`;
  if (text !== quantilesText) {
    quantilesText = text;
    document.getElementById("q-lat").textContent = text;
    document.getElementById("depth-n").textContent = String(recent.length);
  }
}

const LABELS = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…", auth: "waiting for the token" };
function onState(s) {
  const b = document.getElementById("conn");
  b.dataset.state = s;
  b.textContent = LABELS[s] || s;
}

auth.init();
startLive({ onRecord, onState, history: WINDOW });
startState(onServerState);
startChat();
