"""Drives the dashboard in headless Chromium (Debian's `chromium` and `chromium-driver`) through
Selenium, against a running server. Run by tests/dashboard.rs:

    dashboard_browser.py SCENARIO BASE_URL [ARTIFACT_DIR]

Scenarios: live, chat, token, reconnect. Each step waits up to WAIT seconds for what it expects,
then fails naming it; none measures time. `reconnect` talks to its caller on stdin/stdout: it
prints `RESTART` when the page is live, and goes on once a line `restarted` arrives.
"""

import json
import sys
import threading
import time
import unicodedata

import requests
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

# Generous bound on each wait: the machine running the tests may be slow and shared.
WAIT = 90
TOKEN = "metrics-secret"
API_KEY = "api-secret"
XSS = '<img src=x onerror=alert(1)> and <script>window.__xss = 1</script> hi'


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1100", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=opts)


def wait_for(what, cond):
    deadline = time.monotonic() + WAIT
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # the element may not exist yet
            last = e
        time.sleep(0.1)
    raise AssertionError(f"within {WAIT} s: {what} (last seen: {last!r})")


def visible(s):
    """What a browser's rendered text keeps of `s`: its words, without invisible format
    characters (a right-to-left mark, say, which the model may write and `.text` drops), spaced
    by single spaces."""
    return " ".join("".join(c for c in s if unicodedata.category(c) != "Cf").split())


def text(d, css):
    return d.find_element(By.CSS_SELECTOR, css).text


def console_errors(d):
    return [e for e in d.get_log("browser") if e["level"] == "SEVERE"]


def failed_requests(d, allowed_status=(), entries=None):
    """Requests that failed at the network level or answered >= 400 (but `allowed_status`).
    `entries`: the performance log already read (reading it empties it)."""
    bad = []
    for entry in d.get_log("performance") if entries is None else entries:
        m = json.loads(entry["message"])["message"]
        if m["method"] == "Network.loadingFailed" and not m["params"].get("canceled"):
            bad.append(m["params"])
        elif m["method"] == "Network.responseReceived":
            r = m["params"]["response"]
            if r["status"] >= 400 and r["status"] not in allowed_status:
                bad.append({"url": r["url"], "status": r["status"]})
    return bad


def completion(base, prompt="Say hello.", max_tokens=12, key=None):
    h = {"Authorization": f"Bearer {key}"} if key else {}
    r = requests.post(f"{base}/v1/chat/completions", headers=h, timeout=WAIT,
                      json={"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens})
    assert r.status_code == 200, r.text
    return r.json()["id"]


def row_shown(d, request_id):
    return d.execute_script(
        "return [...document.querySelectorAll('#req-rows tr')].some(tr => tr.dataset.requestId === arguments[0])",
        request_id)


def points(d, canvas_id):
    return int(d.find_element(By.ID, canvas_id).get_attribute("data-points") or 0)


def wait_live(d):
    wait_for("the stream badge reads 'live'", lambda: d.find_element(By.ID, "conn").get_attribute("data-state") == "live")


def scenario_live(d, base, artifacts):
    d.set_window_size(1400, 600)
    d.get(base + "/")
    wait_live(d)
    wait_for("the server panel shows the model", lambda: "backend cpu" in text(d, "#server-info"))
    rid = completion(base)
    for c in ("c-toks", "c-lat", "c-acc", "c-tokens", "c-prefix"):
        wait_for(f"chart {c} has a point", lambda c=c: points(d, c) >= 1)
    # The table below the fold (a short window) makes no rows until it is seen.
    assert d.execute_script("return document.getElementById('requests').getBoundingClientRect().top > innerHeight"), \
        "the table is on screen: this check needs a shorter window"
    assert not row_shown(d, rid), "the table made rows while off screen"
    d.execute_script("document.getElementById('requests').scrollIntoView()")
    wait_for(f"the table shows request {rid} once in view", lambda: row_shown(d, rid))
    d.set_window_size(1400, 1100)
    wait_for("the routes table counts the completion",
             lambda: "/v1/chat/completions" in text(d, "#s-routes"))
    # The row opens the request's whole record.
    d.find_element(By.CSS_SELECTOR, f'#req-rows tr[data-request-id="{rid}"]').click()
    detail = json.loads(d.find_element(By.ID, "req-detail").text)
    assert detail["request_id"] == rid and "accepted_by_depth" in detail, detail
    # Under load: a few clients at once, then a screenshot a person can look at.
    ids = []
    threads = [threading.Thread(target=lambda i=i: ids.append(completion(base, f"Count to {i + 5}.", 24)))
               for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 6, ids
    for i in ids:
        wait_for(f"the table shows request {i}", lambda i=i: row_shown(d, i))
    wait_for("the latency quantiles are shown", lambda: "p50/p90/p99" in text(d, "#q-lat"))
    d.execute_script("window.scrollTo(0, 0)")
    if artifacts:
        d.save_screenshot(f"{artifacts}/dashboard-under-load.png")
        print(f"screenshot: {artifacts}/dashboard-under-load.png")
    errs = console_errors(d)
    assert not errs, f"console errors: {errs}"
    bad = failed_requests(d)
    assert not bad, f"failed requests: {bad}"


# Notes in window.__answerTexts each distinct non-empty text of the first answer bubble.
WATCH_ANSWER = """
window.__answerTexts = [];
const log = document.getElementById("chat-log");
new MutationObserver(() => {
  const b = log.querySelector(".msg.assistant .body");
  const t = b ? b.textContent : "";
  const seen = window.__answerTexts;
  if (t && seen[seen.length - 1] !== t) seen.push(t);
}).observe(log, { childList: true, subtree: true, characterData: true });
"""


def chat(d, message):
    n = len(d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant"))
    box = d.find_element(By.ID, "chat-text")
    box.clear()
    box.send_keys(message)
    d.find_element(By.ID, "chat-send").click()
    wait_for("an answer bubble appears", lambda: len(d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant")) > n)
    answer = d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant")[n]
    rec = wait_for("the answer's record line (tok/s, TTFT)",
                   lambda: "tok/s" in answer.find_element(By.CSS_SELECTOR, ".rec").text and answer)
    return answer


def scenario_chat(d, base, _artifacts):
    d.get(base + "/dashboard")
    wait_live(d)
    # Tokens arrive one chunk at a time: the answer text grows before the record line appears.
    # The page itself notes every text the first answer shows, so a fast stream cannot slip
    # between two polls of this script.
    d.execute_script(WATCH_ANSWER)
    box = d.find_element(By.ID, "chat-text")
    box.send_keys("Write a long story about a cat.")
    d.find_element(By.ID, "chat-send").click()
    wait_for("the answer to grow in at least two steps while it streams",
             lambda: d.execute_script("return window.__answerTexts.length") >= 2)
    a = d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant")[0]
    wait_for("the record line", lambda: "tok/s" in a.find_element(By.CSS_SELECTOR, ".rec").text)
    assert "TTFT" in a.find_element(By.CSS_SELECTOR, ".rec").text
    assert a.find_element(By.CSS_SELECTOR, ".body").text.strip(), "empty answer"
    # Markup in a prompt is text: no element is made of it and no script runs.
    answer = chat(d, XSS)
    users = d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.user .body")
    assert users[-1].text == XSS, users[-1].text
    assert not d.find_elements(By.CSS_SELECTOR, "#chat-log img, #chat-log script, #req-rows img, #req-detail img")
    assert d.execute_script("return window.__xss") is None, "an injected script ran"
    try:
        alert = d.switch_to.alert
        raise AssertionError(f"an alert opened: {alert.text}")
    except NoAlertPresentException:
        pass
    rid = answer.find_element(By.CSS_SELECTOR, ".rec").text.split(" · ")[-1]
    # The table makes rows only while on screen, and two answers (their length varies) may have
    # pushed it below the fold: look at it, as a user would.
    d.execute_script("document.getElementById('requests').scrollIntoView()")
    wait_for(f"the chat's request {rid} in the table", lambda: row_shown(d, rid))
    # The pane is on the chats API: one chat, created by the first message, kept by the server
    # with both turns, the answers as streamed and under the records' ids.
    chat_id = d.find_element(By.ID, "chat-log").get_attribute("data-chat-id")
    assert chat_id and chat_id.startswith("chat_"), chat_id
    r = requests.get(f"{base}/v1/chats/{chat_id}/messages", timeout=WAIT)
    assert r.status_code == 200, r.text
    stored = r.json()["data"]
    assert [m["role"] for m in stored] == ["user", "assistant"] * 2, stored
    assert stored[0]["content"] == "Write a long story about a cat." and stored[2]["content"] == XSS, stored
    shown = [b.text for b in d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant .body")]
    assert [visible(m["content"]) for m in stored[1::2]] == [visible(t) for t in shown], (stored, shown)
    assert stored[3]["request_id"] == rid, (stored[3], rid)
    perf = d.get_log("performance")
    urls = [json.loads(e["message"])["message"]["params"].get("request", {}).get("url", "") for e in perf]
    assert any(f"/v1/chats/{chat_id}/messages" in u for u in urls), "no request to the chat's messages"
    assert not any(u.endswith("/v1/chat/completions") for u in urls), "the pane still uses /v1/chat/completions"
    # A new chat empties the pane; the list reopens the stored one, markup still as text.
    d.find_element(By.ID, "chat-clear").click()
    wait_for("the pane is empty", lambda: not d.find_elements(By.CSS_SELECTOR, "#chat-log .msg"))
    wait_for("the list offers the chat", lambda: d.find_elements(By.CSS_SELECTOR, f'#chat-list option[value="{chat_id}"]'))
    d.find_element(By.CSS_SELECTOR, f'#chat-list option[value="{chat_id}"]').click()
    wait_for("the reopened chat shows its four messages", lambda: len(d.find_elements(By.CSS_SELECTOR, "#chat-log .msg")) == 4)
    assert d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.user .body")[1].text == XSS
    assert not d.find_elements(By.CSS_SELECTOR, "#chat-log img, #chat-log script")
    assert d.find_element(By.ID, "chat-log").get_attribute("data-chat-id") == chat_id
    errs = console_errors(d)
    assert not errs, f"console errors: {errs}"
    bad = failed_requests(d, entries=perf + d.get_log("performance"))
    assert not bad, f"failed requests: {bad}"


def scenario_token(d, base, _artifacts):
    d.get(base + "/")
    wait_for("the page asks for the metrics token",
             lambda: d.find_element(By.ID, "auth").is_displayed() and "metrics token" in text(d, "#auth-title"))
    assert d.find_element(By.ID, "conn").get_attribute("data-state") == "auth"
    d.find_element(By.ID, "auth-input").send_keys(TOKEN)
    d.find_element(By.ID, "auth-save").click()
    wait_live(d)
    assert not d.find_element(By.ID, "auth").is_displayed()
    rid = completion(base, key=API_KEY)
    wait_for(f"the table shows request {rid}", lambda: row_shown(d, rid))
    wait_for("the server panel shows the model", lambda: "backend cpu" in text(d, "#server-info"))
    # The chat needs the API key: asked for on the first message, then the answer streams.
    d.find_element(By.ID, "chat-text").send_keys("Hello!")
    d.find_element(By.ID, "chat-send").click()
    wait_for("the page asks for the API key",
             lambda: d.find_element(By.ID, "auth").is_displayed() and "API key" in text(d, "#auth-title"))
    d.find_element(By.ID, "auth-input").send_keys(API_KEY)
    d.find_element(By.ID, "auth-save").click()
    a = wait_for("the answer's record", lambda: [x for x in d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant .rec")
                                                  if "tok/s" in x.text])
    stored = d.execute_script("return [sessionStorage.getItem('mtplx.metricsToken'), sessionStorage.getItem('mtplx.apiKey')]")
    assert stored == [TOKEN, API_KEY], stored
    # Only the 401s that asked for the credentials failed.
    bad = failed_requests(d, allowed_status=(401,))
    assert not bad, f"failed requests: {bad}"


def scenario_reconnect(d, base, _artifacts):
    d.get(base + "/")
    wait_live(d)
    rid = completion(base)
    wait_for(f"the table shows request {rid}", lambda: row_shown(d, rid))
    print("RESTART", flush=True)
    wait_for("the badge reads 'reconnecting'",
             lambda: d.find_element(By.ID, "conn").get_attribute("data-state") == "reconnecting")
    line = sys.stdin.readline().strip()
    assert line == "restarted", f"expected 'restarted' from the test, got {line!r}"
    wait_live(d)
    rid2 = completion(base)
    wait_for(f"after the restart the table shows request {rid2}", lambda: row_shown(d, rid2))
    assert row_shown(d, rid), "the request from before the restart left the table"


def report(d):
    """What the page showed when a scenario failed, for the test's output."""
    try:
        log = d.find_element(By.ID, "chat-log").get_attribute("outerHTML")
        print("chat log:", log[:2000], file=sys.stderr)
        print("console:", d.get_log("browser")[-20:], file=sys.stderr)
        print("failed requests:", failed_requests(d)[-20:], file=sys.stderr)
    except Exception as e:  # the browser itself may be what failed
        print("no page to report:", e, file=sys.stderr)


def main():
    scenario, base = sys.argv[1], sys.argv[2].rstrip("/")
    artifacts = sys.argv[3] if len(sys.argv) > 3 else None
    d = browser()
    try:
        globals()[f"scenario_{scenario}"](d, base, artifacts)
        print(f"{scenario}: ok")
    except BaseException:
        report(d)
        raise
    finally:
        d.quit()


if __name__ == "__main__":
    main()
