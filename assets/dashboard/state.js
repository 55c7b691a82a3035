// Server state from `/metrics` in its JSON form (`server` of the envelope; `limit=0` leaves the
// records out), polled while the tab is visible.

import { headers, ask } from "./auth.js";
import { fmtDuration, fmtBytes } from "./stats.js";

const POLL_MS = 2000;
// Route and status pairs shown, busiest first.
const ROUTES_MAX = 20;

// Only what changed is written: an unchanged page costs no layout.
const set = (id, text) => {
  const el = document.getElementById(id);
  if (el.textContent !== text) el.textContent = text;
};
let routesKey = "";

function kvText(kv) {
  if (!kv || !kv.capacity_tokens) return "–";
  const pct = (100 * kv.used_tokens / kv.capacity_tokens).toFixed(0);
  return `${pct} % · ${fmtBytes(kv.used_bytes)}`;
}

export function render(s) {
  set("s-inflight", String(s.requests_in_flight));
  set("s-running", String(s.requests_running));
  set("s-waiting", String(s.requests_waiting));
  set("s-kv", kvText(s.kv_cache));
  set("s-limited", String(s.rate_limited_total));
  set("s-uptime", fmtDuration(s.uptime_s));
  const b = s.build;
  set("server-info", `${b.model || "no model"} · backend ${b.backend}${b.adapter ? ` (${b.adapter})` : ""} · build ${b.version}`);
  // Summed over methods: the table is by route and status.
  const byRoute = new Map();
  for (const c of s.requests) {
    if (!c.count) continue;
    const key = c.route + "\u0000" + (c.status ?? "other");
    byRoute.set(key, (byRoute.get(key) || 0) + c.count);
  }
  const sorted = [...byRoute].sort((a, b) => b[1] - a[1]).slice(0, ROUTES_MAX);
  const key = sorted.join("\u0001");
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

export function startState(apply = render) {
  let timer = 0;
  async function poll() {
    timer = 0;
    if (document.hidden) return;
    try {
      const resp = await fetch("/metrics?limit=0", {
        headers: headers("metrics", { Accept: "application/json" }), cache: "no-store",
      });
      if (resp.status === 401) {
        await resp.body?.cancel();
        await ask("metrics", true);
      } else if (resp.ok) {
        apply((await resp.json()).server);
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
