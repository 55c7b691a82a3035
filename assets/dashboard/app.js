// The dashboard: wires the live stream to the charts and the table, the server state, the chat.

import * as auth from "./auth.js";
import { LineChart, BarChart, redrawOnResize } from "./charts.js";
import { startLive } from "./live.js";
import { startState } from "./state.js";
import { RequestTable } from "./table.js";
import { startChat } from "./chat.js";
import { quantile, fmtSecs, fmtBytes } from "./stats.js";

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
redrawOnResize(Object.values(charts));

const table = new RequestTable();
const recent = [];

// Records are applied in batches, at most one batch per REDRAW_MS: at 10 requests/s a redraw
// per record would cost the browser a third of a core; a batch a second costs a few percent.
const REDRAW_MS = 1000;
let pending = [];
let lastFlush = 0;
let flushTimer = 0;

function onRecord(r) {
  pending.push(r);
  if (!flushTimer) flushTimer = setTimeout(flush, Math.max(0, lastFlush + REDRAW_MS - performance.now()));
}

function flush() {
  flushTimer = 0;
  lastFlush = performance.now();
  const batch = pending;
  pending = [];
  for (const r of batch) apply(r);
  summarize(batch[batch.length - 1]);
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
  table.add(r);
}

// What depends on the whole window: the draft-position bars, the quantiles, the KV card.
function summarize(r) {
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
  document.getElementById("depth-n").textContent = String(recent.length);
  const ttft = recent.map((q) => q.ttft_s).filter((v) => v !== null);
  const ttlt = recent.map((q) => q.ttlt_s);
  const qs = (v) => [0.5, 0.9, 0.99].map((q) => fmtSecs(quantile(v, q))).join(" / ");
  document.getElementById("q-lat").textContent =
    `p50/p90/p99 of last ${recent.length}: TTFT ${qs(ttft)} · TTLT ${qs(ttlt)}`;
  const kv = r.session_postcommit_snapshot;
  if (kv && kv.capacity_tokens) {
    const pct = (100 * kv.total_tokens / kv.capacity_tokens).toFixed(0);
    document.getElementById("s-kv").textContent = `${pct} % · ${fmtBytes(kv.used_bytes)}`;
  }
  document.body.dataset.records = String(table.total);
}

const LABELS = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…", auth: "waiting for the token" };
function onState(s) {
  const b = document.getElementById("conn");
  b.dataset.state = s;
  b.textContent = LABELS[s] || s;
}

auth.init();
startLive({ onRecord, onState, history: WINDOW });
startState();
startChat();
