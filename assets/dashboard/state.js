// Server state from `/metrics` (the text exposition, which carries every counter and gauge;
// the JSON envelope carries only the records and quantiles), polled while the tab is visible.

import { headers, ask } from "./auth.js";
import { fmtDuration } from "./stats.js";

const POLL_MS = 2000;

// Samples of a Prometheus text exposition: [{name, labels, value}].
export function parseExposition(text) {
  const out = [];
  const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const l of text.split("\n")) {
    if (!l || l[0] === "#") continue;
    const m = line.exec(l);
    if (!m) continue;
    const labels = {};
    for (const [, k, v] of (m[2] || "").matchAll(label)) {
      labels[k] = v.replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

// Only what changed is written: an unchanged page costs no layout.
const set = (id, text) => {
  const el = document.getElementById(id);
  if (el.textContent !== text) el.textContent = text;
};
let routesKey = "";

function render(samples, serverNow) {
  const one = (n) => samples.find((s) => s.name === n)?.value;
  set("s-inflight", String(one("http_requests_in_flight") ?? "–"));
  set("s-running", String(one("llm_requests_running") ?? "–"));
  set("s-waiting", String(one("llm_requests_waiting") ?? "–"));
  const limited = samples.filter((s) => s.name === "rejected_requests_total").reduce((a, s) => a + s.value, 0);
  set("s-limited", String(limited));
  const start = one("process_start_time_seconds");
  if (start && serverNow) set("s-uptime", fmtDuration(Math.max(0, serverNow / 1000 - start)));
  const build = samples.find((s) => s.name === "mtplx_build_info");
  if (build) {
    const b = build.labels;
    set("server-info", `${b.model || "no model"} · backend ${b.backend} · build ${b.version}`);
  }
  const byRoute = new Map();
  for (const s of samples) {
    if (s.name !== "http_requests_total" || !s.value) continue;
    const key = s.labels.route + "\u0000" + s.labels.status;
    byRoute.set(key, (byRoute.get(key) || 0) + s.value);
  }
  const sorted = [...byRoute].sort((a, b) => b[1] - a[1]);
  const key = JSON.stringify(sorted);
  if (key === routesKey) return;
  routesKey = key;
  const body = document.getElementById("s-routes");
  const rows = sorted.map(([key, n]) => {
    const [route, status] = key.split("\u0000");
    const tr = document.createElement("tr");
    for (const t of [route, status, String(n)]) {
      const td = document.createElement("td");
      td.textContent = t;
      tr.append(td);
    }
    return tr;
  });
  body.replaceChildren(...rows);
}

export function startState() {
  let timer = 0;
  async function poll() {
    timer = 0;
    if (document.hidden) return;
    try {
      const resp = await fetch("/metrics", { headers: headers("metrics", { Accept: "text/plain" }), cache: "no-store" });
      if (resp.status === 401) {
        await resp.body?.cancel();
        await ask("metrics", true);
      } else if (resp.ok) {
        const date = Date.parse(resp.headers.get("Date") || "");
        render(parseExposition(await resp.text()), Number.isFinite(date) ? date : Date.now());
      }
    } catch (e) {
      // The server is away; the stream's badge says so. Try again at the next tick.
    }
    if (!document.hidden && !timer) timer = setTimeout(poll, POLL_MS);
  }
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && !timer) poll();
  });
  poll();
}
