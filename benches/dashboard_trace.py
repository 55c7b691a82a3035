#!/usr/bin/env python3
"""Where the browser's time goes with the dashboard open: a Chromium trace at 10 requests/s,
summed per process and thread (CPU time, `tdur`), then per event, and the cost of one frame.

    ~/.cache/mtplx-lite/test-venv/bin/python3 benches/dashboard_trace.py [--assets DIR] [--top 40]

`benches/dashboard_cost.py` says how much the browser costs; this says where. It starts
mtplx-lite on the demo model ($MTPLX_BIN, else target/release/mtplx-lite) and headless Chromium
with a startup trace (JSON), sends 10 short requests per second while the trace runs, and reads
the trace back. `--assets DIR` serves the page's files from DIR instead of the binary (through a
small local proxy that passes everything else on to the server), so that an edit of
`assets/dashboard/` can be measured without a rebuild. Tracing costs CPU itself: compare traces
with traces, and take the browser's share from dashboard_cost.py.
"""

import argparse
import collections
import http.client
import http.server
import json
import os
import subprocess
import tempfile
import threading
import time
import urllib.parse

import dashboard_cost as dc

# Trace categories: the renderer's frames (style, layout, paint, commit), the compositor and the
# GPU process's software drawing.
CATEGORIES = "devtools.timeline,disabled-by-default-devtools.timeline,blink,cc,viz,toplevel,loading"
# Seconds the trace runs; the summary covers WINDOW_S of it after SKIP_S (page load, history).
TRACE_S, SKIP_S, WINDOW_S = 20, 6, 11
PAGE_PATHS = ("/", "/dashboard", "/dashboard/")


def proxy(upstream, assets):
    """A local server answering the page's files from `assets` and passing the rest upstream
    (streamed: the live record stream goes through it)."""
    up = urllib.parse.urlsplit(upstream)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def forward(self, method):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            c = http.client.HTTPConnection(up.hostname, up.port)
            skip = ("host", "if-none-match", "connection")
            c.request(method, self.path, body=body, headers={k: v for k, v in self.headers.items() if k.lower() not in skip})
            r = c.getresponse()
            path = urllib.parse.urlsplit(self.path).path
            local = "index.html" if path in PAGE_PATHS else path[len("/dashboard/"):] if path.startswith("/dashboard/") else None
            hop = ("content-length", "etag", "connection", "transfer-encoding", "date", "server")
            if local and r.status == 200:
                r.read()
                with open(os.path.join(assets, local), "rb") as f:
                    data = f.read()
                self.send_response(200)
                for k, v in r.getheaders():
                    if k.lower() not in hop:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(r.status)
            length = r.getheader("Content-Length")
            for k, v in r.getheaders():
                if k.lower() not in hop or (k.lower() == "content-length" and length is not None):
                    self.send_header(k, v)
            if length is None:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            try:
                while chunk := r.read1(65536):
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (http.client.IncompleteRead, ConnectionError):
                pass  # the server went away at the end of the run

        def do_GET(self):
            self.forward("GET")

        def do_POST(self):
            self.forward("POST")

        def do_DELETE(self):
            self.forward("DELETE")

    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    s.daemon_threads = True
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{s.server_address[1]}"


def record(page_url, base, out, profile_dir):
    chromium = subprocess.Popen(
        ["/usr/bin/chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--window-size=1400,1100", f"--user-data-dir={profile_dir}", f"--trace-startup={CATEGORIES}",
         f"--trace-startup-duration={TRACE_S}", "--trace-startup-format=json", f"--trace-startup-file={out}",
         "--remote-debugging-port=0", page_url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(4)
        dc.paced_load(base, 10, TRACE_S - 6)
        deadline = time.monotonic() + 60
        while not (os.path.exists(out) and os.path.getsize(out) > 0) and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(3)  # the file is written in pieces
    finally:
        chromium.terminate()
        chromium.wait()


def summarize(path, top):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    threads, procs = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
    xs = [e for e in events if e.get("ph") == "X" and e.get("ts", 0) > 0 and "dur" in e]
    t0 = min(e["ts"] for e in xs)
    # The dashboard's renderer is the one drawing frames; other renderers (Chromium's own
    # pages) are left out.
    frames_by_pid = collections.Counter(e["pid"] for e in xs if e["name"] == "ProxyMain::BeginMainFrame")
    page = frames_by_pid.most_common(1)[0][0]
    others = {p for p, n in procs.items() if n == "Renderer" and p != page}
    lo, hi = t0 + SKIP_S * 1e6, t0 + (SKIP_S + WINDOW_S) * 1e6
    per_thread = collections.defaultdict(list)
    for e in xs:
        if lo <= e["ts"] < hi and e["pid"] not in others:
            per_thread[(e["pid"], e["tid"])].append(e)
    top_level, by_event, count = collections.Counter(), collections.Counter(), collections.Counter()
    for key, evs in per_thread.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        name, end = (procs.get(key[0], str(key[0])), threads.get(key, str(key[1]))), -1
        for e in evs:
            cpu = e.get("tdur", e["dur"])
            if e["ts"] >= end:  # not nested in an event already counted
                top_level[name] += cpu
                end = e["ts"] + e["dur"]
            by_event[(name, e["name"])] += cpu
            count[(name, e["name"])] += 1
    print(f"{WINDOW_S} s at 10 requests/s; traced CPU {100 * sum(top_level.values()) / 1e6 / WINDOW_S:.2f} % of a core")
    for (proc, thread), v in top_level.most_common(10):
        print(f"  {100 * v / 1e6 / WINDOW_S:6.2f} %  {proc} / {thread}")
    frames = [e for e in xs if e["pid"] == page and e["name"] == "ProxyMain::BeginMainFrame" and lo <= e["ts"] < hi]
    print(f"page frames: {len(frames) / WINDOW_S:.1f} per second, "
          f"{sum(e.get('tdur', e['dur']) for e in frames) / max(1, len(frames)) / 1e3:.2f} ms of CPU each")
    print("events (nested ones too), CPU ms per second:")
    for (name, ev), v in by_event.most_common(top):
        print(f"  {v / 1e3 / WINDOW_S:8.2f}  {count[(name, ev)] / WINDOW_S:6.1f}/s  {name[0]} / {name[1]}: {ev}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--assets", help="serve the page's files from this directory (no rebuild)")
    ap.add_argument("--top", type=int, default=40, help="events listed")
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    server, base = dc.start_server()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            page = (proxy(base, a.assets) if a.assets else base) + "/"
            out = os.path.join(tmp, "trace.json")
            record(page, base, out, os.path.join(tmp, "profile"))
        finally:
            server.kill()
            server.wait()
        summarize(out, a.top)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
