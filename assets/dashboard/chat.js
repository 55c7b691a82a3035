// The chat pane. A backend turns the conversation plus a new message into streamed text and the
// answer's metrics record; today's talks to /v1/chat/completions and keeps the history here. A
// backend on the chats API (/v1/chats/{id}/messages, where the server keeps the history) only
// needs the same `send` shape.

import { authedFetch } from "./auth.js";
import { fmt, fmtSecs } from "./stats.js";

// Longest answer asked for; the server bounds it by the context anyway.
const MAX_TOKENS = 512;

// Data payloads of an SSE response, as they arrive.
async function* sseData(resp) {
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data) yield data;
    }
  }
}

async function errorText(resp) {
  try {
    return (await resp.json()).error.message;
  } catch (e) {
    return `the server answered ${resp.status}`;
  }
}

export const completionsBackend = {
  messages: [],
  reset() { this.messages = []; },
  // Streams the answer to `text`: onDelta(piece) per piece; resolves with the metrics record.
  async send(text, onDelta, signal) {
    this.messages.push({ role: "user", content: text });
    const resp = await authedFetch("api", "/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify({ messages: this.messages, stream: true, max_tokens: MAX_TOKENS }),
      signal,
    });
    if (!resp.ok) {
      this.messages.pop();
      throw new Error(await errorText(resp));
    }
    let answer = "", record = null, error = null;
    for await (const data of sseData(resp)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      const piece = chunk.choices?.[0]?.delta?.content;
      if (piece) {
        answer += piece;
        onDelta(piece);
      }
      if (chunk.mtplx_stats) record = chunk.mtplx_stats;
      if (chunk.error) error = chunk.error.message;
    }
    this.messages.push({ role: "assistant", content: answer });
    if (error) throw new Error(error);
    return record;
  },
};

function recordLine(r) {
  if (!r) return "";
  const acc = r.drafted_tokens ? ` · accept ${fmt(r.accept_rate * 100, 0)} %` : "";
  return `${r.completion_tokens} tokens · ${fmt(r.tok_s, 1)} tok/s (decode ${fmt(r.decode_tok_s, 1)}) · TTFT ${fmtSecs(r.ttft_s)}${acc} · ${r.request_id}`;
}

export function startChat(backend = completionsBackend) {
  const log = document.getElementById("chat-log");
  const text = document.getElementById("chat-text");
  const send = document.getElementById("chat-send");
  let abort = null;

  function bubble(cls, content) {
    const div = document.createElement("div");
    div.className = "msg " + cls;
    const body = document.createElement("span");
    body.className = "body";
    body.textContent = content;
    div.append(body);
    log.append(div);
    log.scrollTop = log.scrollHeight;
    return div;
  }

  async function submit() {
    const t = text.value.trim();
    if (!t || abort) return;
    text.value = "";
    bubble("user", t);
    const out = bubble("assistant", "");
    const body = out.querySelector(".body");
    send.disabled = true;
    abort = new AbortController();
    try {
      const rec = await backend.send(t, (piece) => {
        body.textContent += piece;
        log.scrollTop = log.scrollHeight;
      }, abort.signal);
      const line = document.createElement("span");
      line.className = "rec";
      line.textContent = recordLine(rec);
      out.append(line);
    } catch (e) {
      if (e.name !== "AbortError") {
        out.classList.add("error");
        const line = document.createElement("span");
        line.className = "rec";
        line.textContent = String(e.message || e);
        out.append(line);
      }
    } finally {
      abort = null;
      send.disabled = false;
    }
  }

  send.addEventListener("click", submit);
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      submit();
    }
  });
  document.getElementById("chat-clear").addEventListener("click", () => {
    abort?.abort();
    backend.reset();
    log.replaceChildren();
  });
}
