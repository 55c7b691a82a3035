// The live record stream, read with fetch and a stream reader (EventSource cannot send an
// Authorization header). A dropped stream is reopened with Last-Event-ID, so that records
// finished meanwhile are replayed from the server's ring; the badge says "reconnecting" until then.

import { headers, ask } from "./auth.js";

const RETRY_MIN_MS = 500;
// The server writes the records of each second together: the page redraws once a second, so a
// write per record would only wake the browser ten times a second at 10 requests/s.
const BATCH_MS = 1000;
const RETRY_MAX_MS = 5000;
// Request ids already shown: a replay after a reconnect may repeat some.
const SEEN_MAX = 2000;

export function startLive({ onRecord, onState, history = 100 }) {
  const seen = new Set();
  let lastId = null;
  const deliver = (rec) => {
    if (seen.has(rec.request_id)) return;
    seen.add(rec.request_id);
    if (seen.size > SEEN_MAX) seen.delete(seen.values().next().value);
    onRecord(rec);
  };

  async function loadHistory() {
    for (;;) {
      const resp = await fetch(`/v1/mtplx/metrics?limit=${history}`, { headers: headers("metrics") });
      if (resp.status === 401) {
        onState("auth");
        await ask("metrics", true);
        continue;
      }
      if (!resp.ok) throw new Error(`/v1/mtplx/metrics answered ${resp.status}`);
      const env = await resp.json();
      for (const rec of env.history) {
        deliver(rec);
        lastId = rec.seq;
      }
      return;
    }
  }

  async function readStream() {
    const h = headers("metrics", { Accept: "text/event-stream" });
    if (lastId !== null) h["Last-Event-ID"] = String(lastId);
    const resp = await fetch(`/v1/mtplx/metrics/stream?batch_ms=${BATCH_MS}`, { headers: h, cache: "no-store" });
    if (resp.status === 401) {
      await resp.body?.cancel();
      onState("auth");
      await ask("metrics", true);
      return false;
    }
    if (!resp.ok || !resp.body) throw new Error(`the stream answered ${resp.status}`);
    onState("live");
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return true;
      buf += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, end);
        buf = buf.slice(end + 2);
        let id = null, data = "";
        for (const line of event.split("\n")) {
          if (line.startsWith("id:")) id = line.slice(3).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trimStart();
        }
        if (!data) continue; // a keep-alive comment
        const rec = JSON.parse(data);
        if (id !== null) lastId = Number(id);
        deliver(rec);
      }
    }
  }

  (async () => {
    let delay = RETRY_MIN_MS;
    let loaded = false;
    for (;;) {
      try {
        if (!loaded) {
          await loadHistory();
          loaded = true;
        }
        const opened = await readStream();
        if (opened) delay = RETRY_MIN_MS;
        else continue;
      } catch (e) {
        // A network error while the server is away: retried below.
      }
      onState("reconnecting");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
  })();
}
