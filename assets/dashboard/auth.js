// The metrics token and the API key: asked for once, when the server first answers 401, and
// kept in sessionStorage (this tab only). Concurrent callers share one prompt.

const KINDS = {
  metrics: { key: "mtplx.metricsToken", title: "This server needs its metrics token",
    why: "The metrics routes (the live stream and /metrics) are guarded by --metrics-token-file.", label: "Metrics token" },
  api: { key: "mtplx.apiKey", title: "This server needs its API key",
    why: "The chat routes are guarded by --api-key-file (or MTPLX_API_KEY).", label: "API key" },
};

const pending = new Map();
const queue = [];

export function token(kind) {
  return sessionStorage.getItem(KINDS[kind].key) || "";
}

export function headers(kind, extra = {}) {
  const t = token(kind);
  return t ? { ...extra, Authorization: "Bearer " + t } : { ...extra };
}

// Resolves once the user has entered a credential of `kind`. `refused` says the one kept was
// wrong, so the prompt says so.
export function ask(kind, refused) {
  if (pending.has(kind)) return pending.get(kind).promise;
  let resolve;
  const promise = new Promise((r) => { resolve = r; });
  pending.set(kind, { promise, resolve, refused });
  queue.push(kind);
  if (queue.length === 1) show(kind);
  return promise;
}

function show(kind) {
  const k = KINDS[kind];
  const p = pending.get(kind);
  document.getElementById("auth-title").textContent = k.title;
  document.getElementById("auth-why").textContent =
    (p.refused && token(kind) ? "The one entered was refused. " : "") + k.why;
  document.getElementById("auth-label").textContent = k.label;
  const input = document.getElementById("auth-input");
  input.value = "";
  document.getElementById("auth").hidden = false;
  input.focus();
}

function save() {
  const kind = queue[0];
  if (!kind) return;
  const value = document.getElementById("auth-input").value.trim();
  if (!value) return;
  sessionStorage.setItem(KINDS[kind].key, value);
  const p = pending.get(kind);
  pending.delete(kind);
  queue.shift();
  document.getElementById("auth").hidden = true;
  p.resolve();
  if (queue.length) show(queue[0]);
}

export function init() {
  document.getElementById("auth-save").addEventListener("click", save);
  document.getElementById("auth-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter") save();
  });
}

// fetch() that asks for the credential of `kind` on a 401 and tries again with it.
export async function authedFetch(kind, url, init = {}) {
  for (;;) {
    const resp = await fetch(url, { ...init, headers: headers(kind, init.headers || {}) });
    if (resp.status !== 401) return resp;
    await resp.body?.cancel();
    await ask(kind, true);
  }
}
