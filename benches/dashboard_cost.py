#!/usr/bin/env python3
"""What the dashboard costs: the server's decode speed with the page open against closed, the
browser's CPU at 10 requests/s, and the server's CPU while nobody looks.

    ~/.cache/mtplx-lite/test-venv/bin/python3 benches/dashboard_cost.py [--rounds 3] [--clients 16]

Needs what `tests/setup.sh` installs (Chromium, chromium-driver, Selenium in the test venv).
Starts mtplx-lite ($MTPLX_BIN, else $CARGO_TARGET_DIR/release/mtplx-lite) on the demo model and
headless Chromium, then:

1. decode: rounds of `--clients` streaming greedy chat completions at once, alternating page
   closed (about:blank) and page open (the dashboard, live), in the same run; reported are the
   aggregate tokens/s of each round and the ratio of the medians, open over closed;
2. browser CPU: the page open while a client sends 10 short requests per second, the browser's
   processes' CPU time over the window as a share of one core, against the same window with the
   page closed, and the page's own main-thread task time (DevTools' TaskDuration);
3. idle: the server's CPU time over a quiet window with no page, and with the page open.

CPU times come from /proc/PID/stat (utime + stime) of the server and of every process under
chromedriver. The machine's load average is printed too: other work on it moves every number.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

SERVER_START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 300.0
TICK = os.sysconf("SC_CLK_TCK")


def binary():
    if os.environ.get("MTPLX_BIN"):
        return os.environ["MTPLX_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "target"))
    return os.path.join(target, "release", "mtplx-lite")


def start_server():
    p = subprocess.Popen([binary(), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    for line in p.stdout:
        if "listening on http://" in line:
            return p, "http://" + line.split("listening on http://")[1].strip()
        if time.monotonic() > deadline:
            break
    p.kill()
    sys.exit("the server did not start")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def descendants(root):
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except OSError:
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_cpu(root):
    total = 0.0
    for p in descendants(root):
        try:
            total += cpu_seconds(p)
        except OSError:
            pass  # ended meanwhile
    return total


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=opts)


def task_seconds(d):
    """The page's main-thread task time so far (DevTools' Performance.getMetrics TaskDuration):
    what the page itself costs, apart from the browser's other processes and other load."""
    metrics = d.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return next(m["value"] for m in metrics if m["name"] == "TaskDuration")


def chat(base, max_tokens, stream):
    body = {"messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}],
            "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    r = requests.post(f"{base}/v1/chat/completions", json=body, stream=stream, timeout=REQUEST_TIMEOUT_S)
    r.raise_for_status()
    if not stream:
        return r.json()["usage"]["completion_tokens"]
    tokens = 0
    for line in r.iter_lines():
        if line.startswith(b"data: {"):
            stats = json.loads(line[6:]).get("mtplx_stats")
            if stats:
                tokens = stats["completion_tokens"]
    return tokens


def decode_round(base, clients, max_tokens):
    counts = []
    def one():
        counts.append(chat(base, max_tokens, True))
    threads = [threading.Thread(target=one) for _ in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def open_page(d, base):
    d.get(base + "/")
    deadline = time.monotonic() + 60
    while d.execute_script("return document.getElementById('conn').dataset.state") != "live":
        if time.monotonic() > deadline:
            sys.exit("the dashboard did not go live")
        time.sleep(0.1)


def paced_load(base, rate, seconds):
    """`rate` short requests per second for `seconds`, each on its own thread."""
    stop = time.monotonic() + seconds
    threads, n = [], 0
    t0 = time.monotonic()
    while time.monotonic() < stop:
        t = threading.Thread(target=chat, args=(base, 2, False))
        t.start()
        threads.append(t)
        n += 1
        time.sleep(max(0.0, t0 + n / rate - time.monotonic()))
    for t in threads:
        t.join()
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each kind (closed, open)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64, help="max_tokens of each decode client")
    ap.add_argument("--window", type=float, default=20.0, help="seconds of each CPU window")
    ap.add_argument("--phases", default="decode,browser,idle", help="which of decode, browser, idle to run")
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    server, base = start_server()
    d = browser()
    driver_pid = d.service.process.pid
    try:
        decode_round(base, a.clients, a.tokens)  # warm up: the first round runs slower
        phases = a.phases.split(",")
        closed, opened = [], []
        for r in range(a.rounds if "decode" in phases else 0):
            for kind, out in (("closed", closed), ("open", opened)):
                if kind == "open":
                    open_page(d, base)
                else:
                    d.get("about:blank")
                out.append(decode_round(base, a.clients, a.tokens))
                print(f"round {r + 1} page {kind:6}: {out[-1]:7.1f} tokens/s ({a.clients} streaming clients)")
        if closed:
            ratio = statistics.median(opened) / statistics.median(closed)
            print(f"decode tokens/s, page open / page closed (medians): {ratio:.3f}")

        for kind in ("closed", "open") if "browser" in phases else ():
            if kind == "open":
                open_page(d, base)
            else:
                d.get("about:blank")
            d.execute_cdp_cmd("Performance.enable", {})
            m0 = task_seconds(d)
            c0, s0, t0 = tree_cpu(driver_pid), cpu_seconds(server.pid), time.monotonic()
            n = paced_load(base, 10, a.window)
            wall = time.monotonic() - t0
            cb, cs = tree_cpu(driver_pid) - c0, cpu_seconds(server.pid) - s0
            task = task_seconds(d) - m0
            print(f"10 req/s, page {kind:6}: {n} requests in {wall:.1f} s; browser CPU {100 * cb / wall:5.2f} % "
                  f"of one core (the page's own tasks {100 * task / wall:5.2f} %), server CPU {100 * cs / wall:5.1f} %")

        for kind in ("closed", "open") if "idle" in phases else ():
            if kind == "open":
                open_page(d, base)
            else:
                d.get("about:blank")
            time.sleep(1)
            s0, t0 = cpu_seconds(server.pid), time.monotonic()
            time.sleep(a.window)
            wall = time.monotonic() - t0
            print(f"idle, page {kind:6}: server CPU {100 * (cpu_seconds(server.pid) - s0) / wall:5.2f} % of one core")
    finally:
        d.quit()
        server.kill()
        server.wait()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
