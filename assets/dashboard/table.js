// The last requests, newest first; a click opens a request's whole record.

import { fmt, fmtSecs } from "./stats.js";

const ROWS_MAX = 50;

export class RequestTable {
  constructor() {
    this.body = document.getElementById("req-rows");
    this.detail = document.getElementById("req-detail");
    this.count = document.getElementById("req-count");
    this.records = new Map();
    this.open = null;
    this.total = 0;
  }

  add(r) {
    const tr = document.createElement("tr");
    tr.dataset.requestId = r.request_id;
    const cells = [
      r.request_id, r.route, r.status, `${r.prompt_tokens} + ${r.completion_tokens}`,
      fmt(r.tok_s, 1), fmtSecs(r.ttft_s), r.drafted_tokens ? fmt(r.accept_rate * 100, 0) + " %" : "–",
    ];
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = String(c);
      tr.append(td);
    }
    tr.addEventListener("click", () => this.show(tr, r));
    this.records.set(r.request_id, r);
    this.body.prepend(tr);
    while (this.body.rows.length > ROWS_MAX) {
      const last = this.body.lastElementChild;
      this.records.delete(last.dataset.requestId);
      last.remove();
    }
    this.total++;
    this.count.textContent = `(${this.total} seen)`;
  }

  show(tr, r) {
    this.open?.classList.remove("open");
    if (this.open === tr) {
      this.open = null;
      this.detail.hidden = true;
      return;
    }
    this.open = tr;
    tr.classList.add("open");
    this.detail.textContent = JSON.stringify(r, null, 2);
    this.detail.hidden = false;
  }
}
