// The last requests, newest first; a click opens a request's whole record. Rows are made only
// while the table is on screen: off screen, records wait (as many as it shows) and are drawn
// when it scrolls into view, so that a table nobody sees costs the browser no layout or paint.

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
    this.waiting = [];
    this.visible = false;
    new IntersectionObserver((entries) => {
      this.visible = entries[entries.length - 1].isIntersecting;
      if (this.visible) this.draw();
    }).observe(this.body.closest("section"));
    // One listener for every row, rather than one per row made.
    this.body.addEventListener("click", (e) => {
      const tr = e.target.closest("tr");
      const r = tr && this.records.get(tr.dataset.requestId);
      if (r) this.show(tr, r);
    });
  }

  row(r) {
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
    return tr;
  }

  // Records in the order they finished: one insertion and one trim for the whole batch, and
  // rows only for those that stay.
  addMany(batch) {
    if (!batch.length) return;
    this.total += batch.length;
    this.waiting.push(...batch);
    if (this.waiting.length > ROWS_MAX) this.waiting.splice(0, this.waiting.length - ROWS_MAX);
    if (this.visible) this.draw();
  }

  draw() {
    if (!this.waiting.length) return;
    const kept = this.waiting;
    this.waiting = [];
    const rows = document.createDocumentFragment();
    for (let i = kept.length - 1; i >= 0; i--) {
      this.records.set(kept[i].request_id, kept[i]);
      rows.append(this.row(kept[i]));
    }
    this.body.prepend(rows);
    let extra = this.body.rows.length - ROWS_MAX;
    while (extra-- > 0) {
      const last = this.body.lastElementChild;
      // An open record stays shown after its row scrolled out.
      if (last === this.open) this.open = null;
      this.records.delete(last.dataset.requestId);
      last.remove();
    }
    this.count.textContent = `(${this.total} seen)`;
  }

  close() {
    this.open?.classList.remove("open");
    this.open = null;
    this.detail.hidden = true;
  }

  show(tr, r) {
    const same = this.open === tr;
    this.close();
    if (same) return;
    this.open = tr;
    tr.classList.add("open");
    this.detail.textContent = JSON.stringify(r, null, 2);
    this.detail.hidden = false;
  }
}
