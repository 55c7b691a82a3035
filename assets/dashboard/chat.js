// The chat pane, on the chats API: the server keeps the conversation (/v1/chats), the first
// message creates a chat, each answer streams from /v1/chats/{id}/messages and is shown with
// its metrics record. Earlier chats can be reopened from the list.

import { authedFetch, headers } from "./auth.js";
import { fmt, fmtSecs } from "./stats.js";

// Longest answer asked for; the server bounds it by the context anyway.
const MAX_TOKENS = 512;
// Chats offered for reopening, newest first.
const LIST_SIZE = 20;
// Longest title a new chat gets from its first message.
const TITLE_CHARS = 60;
// Messages shown of a reopened chat: its last ones.
const REOPEN_MESSAGES = 100;

// Data payloads of an SSE response, as they arrive (comments such as `: keep-alive` skipped).
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

const JSON_HEADERS = { "Content-Type": "application/json" };

export const chatsBackend = {
  chatId: null,
  reset() { this.chatId = null; },

  // Streams the answer to `text`: onDelta(piece) per piece; resolves with the answer's metrics
  // record. The first message of a conversation creates its chat.
  async send(text, onDelta, signal) {
    if (!this.chatId) {
      const resp = await authedFetch("api", "/v1/chats", {
        method: "POST", headers: JSON_HEADERS, signal,
        body: JSON.stringify({ title: text.slice(0, TITLE_CHARS), max_tokens: MAX_TOKENS }),
      });
      if (!resp.ok) throw new Error(await errorText(resp));
      this.chatId = (await resp.json()).chat_id;
    }
    const resp = await authedFetch("api", `/v1/chats/${encodeURIComponent(this.chatId)}/messages`, {
      method: "POST", headers: { ...JSON_HEADERS, Accept: "text/event-stream" }, signal,
      body: JSON.stringify({ content: text, stream: true }),
    });
    if (!resp.ok) throw new Error(await errorText(resp));
    let record = null, error = null;
    for await (const data of sseData(resp)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      const piece = chunk.choices?.[0]?.delta?.content;
      if (piece) onDelta(piece);
      if (chunk.mtplx_stats) record = chunk.mtplx_stats;
      if (chunk.error) error = chunk.error.message;
    }
    if (error) throw new Error(error);
    return record;
  },

  // The chats to offer for reopening; none when the API key is not known yet (the list is
  // not worth a prompt: the first message asks for it).
  async list() {
    const resp = await fetch(`/v1/chats?page_size=${LIST_SIZE}`, { headers: headers("api") });
    if (!resp.ok) {
      await resp.body?.cancel();
      return [];
    }
    return (await resp.json()).data;
  },

  // The last messages of chat `id`, oldest first; it becomes the conversation.
  async open(id) {
    const path = (page) => `/v1/chats/${encodeURIComponent(id)}/messages?page_size=${REOPEN_MESSAGES}&page=${page}`;
    let resp = await authedFetch("api", path(1));
    if (!resp.ok) throw new Error(await errorText(resp));
    let body = await resp.json();
    const last = Math.ceil(body.total / REOPEN_MESSAGES);
    if (last > 1) {
      resp = await authedFetch("api", path(last));
      if (!resp.ok) throw new Error(await errorText(resp));
      body = await resp.json();
    }
    this.chatId = id;
    return body.data;
  },
};

function recordLine(r) {
  if (!r) return "";
  const acc = r.drafted_tokens ? ` · accept ${fmt(r.accept_rate * 100, 0)} %` : "";
  return `${r.completion_tokens} tokens · ${fmt(r.tok_s, 1)} tok/s (decode ${fmt(r.decode_tok_s, 1)}) · TTFT ${fmtSecs(r.ttft_s)}${acc} · ${r.request_id}`;
}

// A stored answer of a reopened chat: its record may be long gone from the page.
function storedLine(m) {
  return `${m.completion_tokens ?? 0} tokens · ${m.finish_reason || "–"} · ${m.request_id || ""}`;
}

export function startChat(backend = chatsBackend) {
  const log = document.getElementById("chat-log");
  const text = document.getElementById("chat-text");
  const send = document.getElementById("chat-send");
  const list = document.getElementById("chat-list");
  let abort = null;

  function bubble(cls, content, rec) {
    const div = document.createElement("div");
    div.className = "msg " + cls;
    const body = document.createElement("span");
    body.className = "body";
    body.textContent = content;
    div.append(body);
    if (rec !== undefined) recLine(div, rec);
    log.append(div);
    log.scrollTop = log.scrollHeight;
    return div;
  }

  function recLine(div, content) {
    const line = document.createElement("span");
    line.className = "rec";
    line.textContent = content;
    div.append(line);
  }

  function showChat() {
    log.dataset.chatId = backend.chatId || "";
  }

  async function refreshList() {
    let chats = [];
    try {
      chats = await backend.list();
    } catch (e) {
      // The server is away: the list stays as it was.
      return;
    }
    const options = [new Option(chats.length ? "Reopen a chat…" : "No saved chats", "")];
    for (const c of chats) {
      const when = new Date(c.created_at * 1000).toLocaleString();
      options.push(new Option(`${c.title || c.chat_id} · ${when}`, c.chat_id));
    }
    list.replaceChildren(...options);
    list.value = "";
  }

  async function reopen(id) {
    abort?.abort();
    log.replaceChildren();
    try {
      const messages = await backend.open(id);
      for (const m of messages) {
        if (m.role === "user") bubble("user", m.content);
        else bubble("assistant", m.content, storedLine(m));
      }
    } catch (e) {
      bubble("assistant error", "", String(e.message || e));
    }
    showChat();
  }

  async function submit() {
    const t = text.value.trim();
    if (!t || abort) return;
    text.value = "";
    bubble("user", t);
    const out = bubble("assistant", "");
    const body = out.querySelector(".body");
    const fresh = !backend.chatId;
    send.disabled = true;
    abort = new AbortController();
    try {
      const rec = await backend.send(t, (piece) => {
        body.textContent += piece;
        log.scrollTop = log.scrollHeight;
      }, abort.signal);
      recLine(out, recordLine(rec));
    } catch (e) {
      if (e.name !== "AbortError") {
        out.classList.add("error");
        recLine(out, String(e.message || e));
      }
    } finally {
      abort = null;
      send.disabled = false;
      showChat();
      if (fresh && backend.chatId) refreshList();
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
    showChat();
    refreshList();
  });
  list.addEventListener("change", () => {
    if (list.value) reopen(list.value);
  });
  refreshList();
}
