"""The management web UI driven in a real browser (headless Chromium through Selenium),
against a running RelayMQ server, as an operator would use it.

Run by tests/it/ui.rs (the README's test command); by hand:

    python3 tests/ui/browser.py --http-port 15672 --amqp-port 5672 \
        --bench target/ci/relaymq-bench --screenshots target/ui-screenshots

Every step asserts what the operator would see; the script exits non-zero on the first
failure, printing which step failed, and saves a screenshot of each page it visits (test
artifacts, not committed). With --time-queues N it instead declares N queues and prints
how long the Queues page takes to render its first page (docs/ui.md, benchmarks).

Selenium is kept offline (SE_OFFLINE): it uses Debian's /usr/bin/chromium and
/usr/bin/chromedriver (or RELAYMQ_CHROMIUM / RELAYMQ_CHROMEDRIVER) and never downloads
a browser or a driver.
"""

import argparse
import base64
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

os.environ["SE_OFFLINE"] = "true"

import pika  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import NoAlertPresentException, TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

# The longest wait for anything the page should show, in seconds.
WAIT_S = 20
# The marker an XSS payload would set if it ran.
XSS = '<img src=x onerror="window.__xss=1">'


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


class Broker:
    """The API and AMQP sides, for setting up and checking what the UI did."""

    def __init__(self, http_port, amqp_port):
        self.base = f"http://127.0.0.1:{http_port}"
        self.amqp_port = amqp_port

    def api(self, method, path, body=None, user="guest", password="guest"):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + "/api/" + path, data=data, method=method)
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("authorization", "Basic " + token)
        if data is not None:
            req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                text = r.read().decode()
                return r.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as e:
            text = e.read().decode()
            return e.code, text

    def queue(self, name, vhost="%2F"):
        status, q = self.api("GET", f"queues/{vhost}/{urllib.request.quote(name, safe='')}")
        return q if status == 200 else None

    def channel(self, name="ui.browser"):
        c = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", self.amqp_port, credentials=pika.PlainCredentials("guest", "guest"),
            client_properties={"connection_name": name}))
        return c, c.channel()

    def connection_named(self, name):
        status, conns = self.api("GET", "connections")
        check(status == 200, f"GET /api/connections: {status}")
        found = [c["name"] for c in conns if c.get("user_provided_name") == name]
        check(len(found) == 1, f"one connection named {name}: {conns}")
        return found[0]


class Ui:
    def __init__(self, http_port, shots):
        self.base = f"http://127.0.0.1:{http_port}/"
        self.shots = shots
        os.makedirs(shots, exist_ok=True)
        o = webdriver.ChromeOptions()
        o.binary_location = os.environ.get("RELAYMQ_CHROMIUM", "/usr/bin/chromium")
        for a in ("--headless=new --no-sandbox --disable-gpu --disable-quic --no-first-run "
                  "--disable-background-networking --disable-component-update --disable-sync "
                  "--disable-dev-shm-usage --window-size=1280,800").split():
            o.add_argument(a)
        o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = os.environ.get("RELAYMQ_CHROMEDRIVER", "/usr/bin/chromedriver")
        self.d = webdriver.Chrome(service=Service(driver), options=o)
        self.d.set_window_size(1280, 800)
        self.errors = []

    def quit(self):
        self.d.quit()

    def wait(self, cond, what, timeout=WAIT_S):
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.1).until(lambda d: cond())
        except TimeoutException:
            raise Failed(f"timed out waiting for {what}")

    def el(self, css):
        return self.wait(lambda: self.d.find_element(By.CSS_SELECTOR, css) if self.d.find_elements(By.CSS_SELECTOR, css) else None, css)

    def text(self, css):
        # Read in one script call: a page redrawn by its poll between a lookup and a
        # read would make a found element stale.
        return self.d.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", css)

    def go(self, hash_):
        self.d.get(self.base + "#/" + hash_)
        self.wait(lambda: self.d.execute_script("return document.querySelector('main').dataset.ready") == "#/" + hash_,
                  f"page {hash_} to be shown")

    def shot(self, name, show=None):
        # `show`: the part of the page to scroll into view first.
        if show:
            # Below the sticky message under the header, not under it.
            self.d.execute_script(
                "const e = document.querySelector(arguments[0]); if (e) e.scrollIntoView({block: 'start'});"
                "window.scrollBy(0, -document.querySelector('#flash').offsetHeight)", show)
        self.d.save_screenshot(os.path.join(self.shots, name + ".png"))
        self.d.execute_script("window.scrollTo(0, 0)")

    def collect_console(self, page):
        for e in self.d.get_log("browser"):
            if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]:
                self.errors.append(f"{page}: {e['message']}")

    def rows(self, css):
        """The rows of the table at `css`, each a dict from column heading to cell text."""
        return self.d.execute_script(
            "const t = document.querySelector(arguments[0]); if (!t) return [];"
            "const heads = [...t.querySelectorAll('thead th')].map(h => h.innerText.replace(/[▲▼]/g, '').trim());"
            "return [...t.querySelectorAll('tbody tr')].map(tr => Object.fromEntries("
            "  [...tr.cells].map((c, i) => [heads[i], c.innerText.trim()])));", css)

    def flash(self, contains):
        self.wait(lambda: contains in self.text("#flash"), f"the message '{contains}' (shown: '{self.text('#flash')}')")

    def open_panel(self, panel_id):
        p = self.el("#" + panel_id)
        if p.get_attribute("open") is None:
            p.find_element(By.TAG_NAME, "summary").click()
        return p

    def fill(self, form, name, value):
        f = self.el(form)
        field = f.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_value(value)
        else:
            field.clear()
            field.send_keys(value)

    def submit(self, form):
        self.el(form).find_element(By.CSS_SELECTOR, "[type=submit]").click()

    def accept_confirm(self):
        WebDriverWait(self.d, WAIT_S).until(EC.alert_is_present())
        self.d.switch_to.alert.accept()

    def no_xss(self, where):
        check(not self.d.find_elements(By.CSS_SELECTOR, "img[src='x']"), f"{where}: an <img> from data reached the DOM")
        check(self.d.execute_script("return window.__xss === undefined"), f"{where}: injected script ran")
        try:
            self.d.switch_to.alert
            raise Failed(f"{where}: an alert is open")
        except NoAlertPresentException:
            pass

    def login(self, user, password):
        self.d.get(self.base)
        self.el("#login-form")
        self.fill("#login-form", "username", user)
        self.fill("#login-form", "password", password)
        self.submit("#login-form")
        self.wait(lambda: self.d.find_element(By.ID, "header").is_displayed(), f"{user} to be logged in")
        self.wait(lambda: self.d.find_elements(By.CSS_SELECTOR, "#ov-totals .totals"), "the overview")

    def logout(self):
        self.el("#logout").click()
        self.el("#login-form")


def step(name):
    print(f"step: {name}", flush=True)


def run(args):
    broker = Broker(args.http_port, args.amqp_port)
    ui = Ui(args.http_port, args.screenshots)
    bench = None
    try:
        step("log in")
        ui.d.get(ui.base)
        ui.el("#login-form")
        ui.shot("login")
        ui.fill("#login-form", "username", "guest")
        ui.fill("#login-form", "password", "wrong")
        ui.submit("#login-form")
        ui.wait(lambda: "Login failed" in ui.text("#login-error"), "a refused login to say so")
        ui.login("guest", "guest")
        ui.collect_console("login")

        step("the overview shows a publish rate while relaymq-bench runs")
        Select(ui.el("#poll")).select_by_value("2000")
        bench = subprocess.Popen(
            [args.bench, "--uri", f"amqp://guest:guest@127.0.0.1:{args.amqp_port}/%2F",
             "--duration", "25", "--rate", "400", "--consumers", "1", "--json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def publish_rate():
            v = ui.d.execute_script(
                "for (const li of document.querySelectorAll('#ov-charts .legend li'))"
                "  if (li.textContent.trim().startsWith('Publish ')) return li.querySelector('strong').textContent;"
                "return null;")
            try:
                return v is not None and float(v.replace("/s", "").replace(",", "")) > 0
            except ValueError:
                return False
        ui.wait(publish_rate, "a publish rate above 0 on the overview", timeout=40)
        ui.wait(lambda: ui.d.find_elements(By.CSS_SELECTOR, "#ov-nodes table"), "the node table")
        ui.shot("overview")
        ui.collect_console("overview")
        bench.kill()
        bench.wait()
        bench = None

        step("polling pauses in a hidden tab and resumes when shown")
        calls = ("return performance.getEntriesByType('resource')"
                 ".filter(e => e.name.includes('/api/')).length")

        def set_hidden(hidden):
            ui.d.execute_script(
                "Object.defineProperty(document, 'hidden', {configurable: true, get: () => arguments[0]});"
                "document.dispatchEvent(new Event('visibilitychange'))", hidden)

        ui.d.execute_script("performance.clearResourceTimings()")
        time.sleep(4.5)
        check(ui.d.execute_script(calls) > 0, "the page polls every 2 s while shown")
        set_hidden(True)
        time.sleep(0.5)
        ui.d.execute_script("performance.clearResourceTimings()")
        time.sleep(4.5)
        check(ui.d.execute_script(calls) == 0, "a hidden tab does not poll")
        set_hidden(False)
        ui.wait(lambda: ui.d.execute_script(calls) > 0, "polling again once the tab is shown", timeout=5)

        step("the pages are reachable with the keyboard")
        ui.go("overview")
        ui.d.execute_script("document.activeElement && document.activeElement.blur(); window.focus()")
        body = ui.d.find_element(By.TAG_NAME, "body")
        seen = []
        for _ in range(20):
            body.send_keys(Keys.TAB)
            seen.append(ui.d.execute_script("return document.activeElement.textContent.trim()"))
            if seen[-1] == "Queues":
                break
        check(seen[-1] == "Queues", f"Tab reaches the Queues tab (focus went: {seen})")
        ui.d.switch_to.active_element.send_keys(Keys.ENTER)
        ui.wait(lambda: ui.d.execute_script("return document.querySelector('main').dataset.ready") == "#/queues",
                "Enter on the Queues tab to open it")

        step("add a queue from the Queues page")
        ui.go("queues")
        ui.fill("#add-queue", "name", "ui.orders")
        ui.submit("#add-queue")
        ui.flash("Queue ui.orders added.")
        check(broker.queue("ui.orders") is not None, "the queue exists after the UI added it")
        ui.fill("#list", "filter", "ui.orders")
        ui.wait(lambda: "ui.orders" in ui.text("#list tbody"), "the new queue in the filtered list")
        ui.collect_console("queues")

        quorum(ui, broker)

        step("bind it to amq.direct from its page")
        ui.go("queues/%2F/ui.orders")
        ui.fill("#bind-form", "source", "amq.direct")
        ui.fill("#bind-form", "routing_key", "ui.key")
        ui.submit("#bind-form")
        ui.flash("Binding added.")
        ui.wait(lambda: "amq.direct" in ui.text("#q-bindings"), "the binding in the queue's bindings")
        ui.shot("queue")
        ui.collect_console("queue")

        step("publish from the exchange page")
        ui.go("exchanges/%2F/amq.direct")
        ui.open_panel("p-publish")
        ui.fill("#publish-form", "routing_key", "ui.key")
        ui.fill("#publish-form", "payload", "first " + XSS + "<script>window.__xss=2</script>")
        ui.submit("#publish-form")
        ui.flash("Message published.")
        ui.fill("#publish-form", "payload", "second message")
        ui.submit("#publish-form")
        ui.wait(lambda: (broker.queue("ui.orders") or {}).get("messages") == 2, "2 messages in ui.orders")
        ui.shot("exchange")
        ui.collect_console("exchange")

        step("get the first message from the queue page")
        ui.go("queues/%2F/ui.orders")
        ui.open_panel("p-get")
        ui.fill("#get-form", "ackmode", "ack_requeue_false")
        ui.submit("#get-form")
        ui.wait(lambda: "first" in ui.text("#got"), "the got message")
        check("<script>window.__xss=2</script>" in ui.text("#got .payload"), "the payload shown as text")
        ui.no_xss("get messages")
        ui.shot("queue-get", "#p-get")

        step("peek shows the second one twice; consumed over AMQP it is not redelivered")
        ui.open_panel("p-peek")
        ui.submit("#peek-form")
        ui.wait(lambda: "second message" in ui.text("#peeked"), "the peeked message")
        ui.d.execute_script("document.querySelector('#peeked').textContent = ''")
        ui.submit("#peek-form")
        ui.wait(lambda: "second message" in ui.text("#peeked"), "the message peeked again")
        check("○" in ui.text("#peeked .redelivered"), "a peeked message is not shown redelivered")
        ui.shot("queue-peek", "#p-peek")
        conn, ch = broker.channel()
        method, _, body = ch.basic_get("ui.orders", auto_ack=True)
        check(body == b"second message", f"AMQP got {body!r} after the peeks")
        check(method.redelivered is False, "the peeked message is not redelivered when consumed")
        conn.close()
        ui.collect_console("peek")

        step("pause and resume the queue's deliveries")
        conn, ch = broker.channel()
        ch.basic_publish("", "ui.orders", b"held while paused")
        ui.go("queues/%2F/ui.orders")
        ui.el("#pause").click()
        ui.flash("Deliveries paused")
        ui.wait(lambda: ui.text("#q-state") == "paused", "the state to read paused")
        check(broker.queue("ui.orders")["state"] == "paused", "the API says paused")
        got = []
        ch.basic_consume("ui.orders", lambda c, m, p, b: got.append(b), auto_ack=True)
        conn.process_data_events(time_limit=1.5)
        check(got == [], f"nothing is delivered while paused: {got}")
        ui.shot("queue-paused")
        ui.el("#resume").click()
        ui.flash("Deliveries resumed")
        deadline = time.time() + WAIT_S
        while not got and time.time() < deadline:
            conn.process_data_events(time_limit=0.2)
        check(got == [b"held while paused"], f"delivered once resumed: {got}")
        conn.close()
        ui.wait(lambda: ui.text("#q-state") == "running", "the state to read running")
        ui.collect_console("pause")

        step("the unacked browser lists what a consumer holds")
        conn, ch = broker.channel()
        for i in range(3):
            ch.basic_publish("", "ui.orders", f"held {i}".encode())
        ch.basic_qos(prefetch_count=2)
        held = []
        ch.basic_consume("ui.orders", lambda c, m, p, b: held.append(m.delivery_tag), consumer_tag="ui.holder")
        deadline = time.time() + WAIT_S
        while len(held) < 2 and time.time() < deadline:
            conn.process_data_events(time_limit=0.2)
        check(len(held) == 2, f"2 deliveries held: {held}")
        ui.go("queues/%2F/ui.orders")
        ui.open_panel("p-unacked")
        ui.el("#unacked-show").click()
        ui.wait(lambda: ui.text("#unacked tbody").count("ui.holder") == 2, "2 unacked rows of ui.holder")
        check("held 0" in ui.text("#unacked tbody"), "the oldest first, with its payload")
        ui.shot("queue-unacked", "#p-unacked")
        ch.basic_cancel("ui.holder")
        conn.close()
        ui.collect_console("unacked")

        step("dead-lettered messages replayed to their origin queue")
        conn, ch = broker.channel()
        ch.exchange_declare("ui.dlx", "fanout", durable=True)
        ch.queue_declare("ui.dead", durable=True)
        ch.queue_bind("ui.dead", "ui.dlx")
        ch.queue_declare("ui.work", durable=True, arguments={"x-dead-letter-exchange": "ui.dlx"})
        for i in range(3):
            ch.basic_publish("", "ui.work", f"job {i}".encode(), pika.BasicProperties(delivery_mode=2))
        for _ in range(3):
            m, _, _ = ch.basic_get("ui.work")
            ch.basic_reject(m.delivery_tag, requeue=False)
        conn.close()
        ui.wait(lambda: (broker.queue("ui.dead") or {}).get("messages") == 3, "3 dead-lettered messages")
        ui.go("queues/%2F/ui.dead")
        ui.open_panel("p-replay")
        ui.fill("#replay-form", "target", "origin")
        ui.submit("#replay-form")
        ui.accept_confirm()
        ui.flash("3 moved")
        ui.wait(lambda: (broker.queue("ui.work") or {}).get("messages") == 3, "3 messages back in ui.work")
        check(broker.queue("ui.dead")["messages"] == 0, "the dead-letter queue is empty after the replay")
        ui.shot("queue-replay", "#p-replay")
        ui.collect_console("replay")

        step("purge from the queue page")
        ui.go("queues/%2F/ui.work")
        ui.open_panel("p-purge")
        ui.el("#purge-q").click()
        ui.accept_confirm()
        ui.flash("purged")
        ui.wait(lambda: (broker.queue("ui.work") or {}).get("messages") == 0, "ui.work purged")

        step("delete from the queue page")
        ui.open_panel("p-delete")
        ui.el("#delete-q").click()
        ui.accept_confirm()
        ui.flash("deleted")
        ui.wait(lambda: ui.d.current_url.endswith("#/queues"), "the Queues page after the delete")
        check(broker.queue("ui.work") is None, "ui.work is gone")
        ui.collect_console("delete")

        step("names and bodies holding markup are shown as text")
        conn, ch = broker.channel()
        ch.queue_declare(XSS)
        ch.basic_publish("", XSS, ("<script>window.__xss=2</script>" + XSS).encode())
        conn.close()
        ui.go("queues")
        ui.fill("#list", "filter", "img")
        ui.wait(lambda: XSS in ui.text("#list tbody"), "the queue's name shown as text")
        ui.no_xss("queues list")
        ui.go("queues/%2F/" + urllib.request.quote(XSS, safe=""))
        ui.wait(lambda: XSS in ui.text("h1"), "the queue page's title")
        ui.open_panel("p-peek")
        ui.submit("#peek-form")
        ui.wait(lambda: "window.__xss=2" in ui.text("#peeked"), "the peeked body shown as text")
        ui.no_xss("queue page")
        ui.shot("xss")
        ui.collect_console("xss")

        step("connections, channels and the admin pages")
        conn, ch = broker.channel("ui.to-close")
        ui.go("connections")
        ui.wait(lambda: "ui.to-close" in ui.text("#list tbody"), "the connection in the list, with its name")
        ui.shot("connections")
        ui.go("connections/" + urllib.request.quote(broker.connection_named("ui.to-close"), safe=""))
        ui.wait(lambda: ui.d.find_elements(By.CSS_SELECTOR, "#c-overview dl"), "the connection page")
        ui.shot("connection")
        # Force close with a reason beyond Latin-1: the client reads it as typed.
        reason = "maintenance 🐇 ünï"
        ui.fill("#close-form", "reason", reason)
        ui.submit("#close-form")
        ui.accept_confirm()
        ui.flash("Connection closed.")
        closed = None
        deadline = time.time() + WAIT_S
        while closed is None and time.time() < deadline:
            try:
                conn.process_data_events(time_limit=0.2)
            except pika.exceptions.ConnectionClosedByBroker as e:
                closed = e
        check(closed is not None and reason in closed.reply_text, f"the client got the reason: {closed!r}")
        conn, ch = broker.channel()
        ui.go("channels")
        ui.wait(lambda: "127.0.0.1" in ui.text("#list tbody"), "a channel in the list")
        ui.shot("channels")
        conn.close()
        ui.go("exchanges")
        ui.wait(lambda: "amq.topic" in ui.text("#list tbody"), "the exchanges")
        types = [o.get_attribute("value") for o in Select(ui.el("#add-exchange [name=type]")).options]
        check("x-consistent-hash" in types, f"the exchange types offered: {types}")
        ui.shot("exchanges")
        for page, marker in (("users", "#users table"), ("vhosts", "#vhosts table"),
                             ("policies", "#policies table"), ("limits", "#vl table")):
            ui.go(page)
            ui.el(marker)
            ui.shot(page)
            ui.collect_console(page)
        ui.go("users")
        ui.fill("#add-user", "name", "guest")
        ui.fill("#add-user", "password", "x")
        ui.fill("#add-user", "password2", "x")
        ui.submit("#add-user")
        ui.flash("already exists")
        status, guest = broker.api("GET", "users/guest")
        check(status == 200 and guest["tags"] == ["administrator"], f"guest untouched: {guest}")
        ui.go("policies")
        ui.fill("#policy-form", "name", "ui-limit")
        ui.fill("#policy-form", "pattern", "^ui\\.")
        ui.el("[data-arg='max-length']").click()
        rows = ui.d.find_elements(By.CSS_SELECTOR, "#policy-def .arg-row")
        rows[-1].find_element(By.NAME, "arg-value").send_keys("1000")
        ui.submit("#policy-form")
        ui.flash("Policy ui-limit set.")
        status, p = broker.api("GET", "policies/%2F/ui-limit")
        check(status == 200 and p["definition"] == {"max-length": 1000}, f"the policy as the UI set it: {p}")
        ui.collect_console("policies")

        step("dark theme and phone width")
        ui.go("overview")
        ui.el("#theme").click()
        ui.shot("overview-dark")
        ui.el("#theme").click()
        ui.d.set_window_size(360, 800)
        for page in ("overview", "queues"):
            ui.go(page)
            ui.wait(lambda: ui.d.find_elements(By.CSS_SELECTOR, "main h1"), page)
            wide = ui.d.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            check(wide <= 1, f"{page} at phone width scrolls sideways by {wide}px")
            ui.shot(page + "-phone")
        ui.d.set_window_size(1280, 800)

        step("a management-tagged user does not see the Admin pages")
        broker.api("PUT", "users/ui.manager", {"password": "pw", "tags": "management"})
        broker.api("PUT", "permissions/%2F/ui.manager", {"configure": ".*", "write": ".*", "read": ".*"})
        ui.logout()
        ui.login("ui.manager", "pw")
        admin = ui.d.find_element(By.CSS_SELECTOR, "#tabs [data-admin]")
        check(not admin.is_displayed(), "the Admin tab is hidden from a management user")
        ui.d.get(ui.base + "#/users")
        ui.wait(lambda: ui.d.current_url.endswith("#/overview"), "#/users to send a management user to the overview")
        ui.shot("management-user")
        ui.collect_console("management user")
        ui.logout()

        step("a cross-site form post carrying cached credentials is refused")
        csrf(ui, broker, args.http_port)

        check(not ui.errors, "JavaScript errors in the console:\n  " + "\n  ".join(ui.errors))
        print("ok: every step passed", flush=True)
    finally:
        if bench is not None:
            bench.kill()
            bench.wait()
        ui.quit()


def quorum(ui, broker):
    """A quorum queue with single active consumer added from the Queues page's form (a
    refused argument's reason shown first), listed with its type and features, and its
    page with one active and one waiting consumer."""
    step("add a quorum queue from the Queues page")
    ui.go("queues")
    form = "#add-queue"
    ui.fill(form, "type", "quorum")
    durable = ui.el(form).find_element(By.NAME, "durable")
    check(durable.get_attribute("value") == "true" and not durable.is_enabled(), "a quorum queue is forced durable")
    offered = ui.text("#add-queue-shortcuts")
    check(all(a in offered for a in ("Single active consumer", "Delivery limit", "Initial cluster size",
                                     "Dead letter strategy")) and "Maximum priority" not in offered,
          f"the quorum arguments offered: {offered}")
    ui.fill(form, "name", "ui.quorum")
    row = ui.el("#add-queue-args .arg-row")
    row.find_element(By.NAME, "arg-name").send_keys("x-max-priority")
    row.find_element(By.NAME, "arg-value").send_keys("5")
    Select(row.find_element(By.NAME, "arg-type")).select_by_value("number")
    ui.submit(form)
    ui.flash("invalid arg 'x-max-priority' for queue 'ui.quorum' in vhost '/' of queue type rabbit_quorum_queue")
    check(broker.queue("ui.quorum") is None, "no queue after the refusal")
    row.find_element(By.CSS_SELECTOR, "[data-remove-arg]").click()
    ui.el("[data-arg='x-single-active-consumer']").click()
    ui.el("[data-arg='x-delivery-limit']").click()
    ui.d.find_elements(By.CSS_SELECTOR, "#add-queue-args .arg-row")[-1].find_element(By.NAME, "arg-value").send_keys("5")
    ui.shot("queues-add-quorum", "#add-queue")
    ui.submit(form)
    ui.flash("Queue ui.quorum added.")
    q = broker.queue("ui.quorum") or {}
    check(q.get("type") == "quorum" and q.get("durable") is True and q.get("arguments") == {
        "x-queue-type": "quorum", "x-single-active-consumer": True, "x-delivery-limit": 5},
        f"a durable quorum queue with the form's arguments: {q}")

    step("the Queues list shows each queue's type and features")
    ui.fill("#list", "filter", "ui.")

    def listed():
        return {r.get("Name"): r for r in ui.rows("#list table")}
    ui.wait(lambda: {"ui.orders", "ui.quorum"} <= set(listed()) and all("ui." in n for n in listed()),
            "both queues in the filtered list")
    rows = listed()
    check(rows["ui.quorum"].get("Type") == "quorum", f"the Type column of ui.quorum: {rows['ui.quorum']}")
    check(rows["ui.orders"].get("Type") == "classic", f"the Type column of ui.orders: {rows['ui.orders']}")
    check(rows["ui.quorum"].get("Features", "").split() == ["D", "DlL", "SAC"],
          f"ui.quorum's features as RabbitMQ abbreviates them: {rows['ui.quorum']}")
    ui.shot("queues")

    step("a single-active-consumer queue's page: one consumer active, one waiting")
    conn, ch = broker.channel("ui.sac")
    ch.basic_consume("ui.quorum", lambda *a: None, consumer_tag="ui.first", arguments={"x-priority": 5})
    ch.basic_consume("ui.quorum", lambda *a: None, consumer_tag="ui.second", arguments={"x-priority": 1})
    ui.go("queues/%2F/ui.quorum")
    ui.wait(lambda: ui.text("#q-sac") == "ui.first", "the single active consumer's tag")
    check(ui.text("#q-type") == "quorum" and ui.text("#q-delivery-limit") == "5", "the type and delivery limit")
    check(ui.text("#q-delayed-retry") == "disabled", f"no delayed retry: {ui.text('#q-delayed-retry')}")
    ui.wait(lambda: len(ui.rows("#q-consumers table")) == 2, "two consumers")
    got = {r["Consumer tag"]: (r["Priority"], r["Active"], r["Activity status"]) for r in ui.rows("#q-consumers table")}
    check(got == {"ui.first": ("5", "●", "single active"), "ui.second": ("1", "○", "waiting")},
          f"one active and one waiting consumer: {got}")
    ui.shot("queue-sac", "#main section")
    conn.close()
    ui.collect_console("quorum")

    step("a delayed-message exchange's page: the messages it holds and the next due time")
    conn, ch = broker.channel("ui.delayed")
    ch.exchange_declare("ui.later", "x-delayed-message", arguments={"x-delayed-type": "direct"})
    ch.basic_publish("ui.later", "k", b"later", pika.BasicProperties(headers={"x-delay": 3_600_000}))
    ui.go("exchanges/%2F/ui.later")
    ui.wait(lambda: ui.text("#x-delayed") == "1", "one message held")
    check("x-delayed-message" in ui.text("#x-overview"), "the type")
    ui.shot("exchange-delayed", "#x-overview")
    ch.exchange_delete("ui.later")
    conn.close()
    ui.collect_console("delayed")


def csrf(ui, broker, http_port):
    """Caches guest's credentials in the browser (a Basic-auth navigation), then lets a
    page of another site post a JSON-looking text/plain form and a multipart definitions
    upload to the API: both must be refused, and nothing changed."""
    broker.api("PUT", "queues/%2F/ui.victim", {"durable": False})
    ui.d.get(f"http://guest:guest@127.0.0.1:{http_port}/api/whoami")
    check("guest" in ui.d.page_source, "the browser logged in with the URL's credentials")
    ui.d.get(f"http://127.0.0.1:{http_port}/api/whoami")
    check("guest" in ui.d.page_source, "the browser resends the cached credentials")
    target = f"http://127.0.0.1:{http_port}/api"
    pages = {
        "/bind.html": f"""<!doctype html><form id=f method=POST enctype="text/plain"
            action="{target}/bindings/%2F/e/amq.direct/q/ui.victim">
            <input name='{{"routing_key":"pwned","x":"' value='"}}'></form>
            <script>document.getElementById('f').submit()</script>""",
        "/import.html": f"""<!doctype html><form id=f method=POST enctype="multipart/form-data"
            action="{target}/definitions">
            <textarea name=file>{{"vhosts":[{{"name":"pwned"}}]}}</textarea></form>
            <script>document.getElementById('f').submit()</script>""",
    }

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # "localhost" and "127.0.0.1" are different sites.
        for page, refused in (("/bind.html", "CSRF"), ("/import.html", "CSRF")):
            ui.d.get(f"http://localhost:{server.server_address[1]}{page}")
            ui.wait(lambda: "/api/" in ui.d.current_url, f"the attacker's form {page} to post")
            ui.wait(lambda: refused in ui.d.page_source, f"the API's refusal of {page} (shown: {ui.d.page_source[:300]})")
        status, bindings = broker.api("GET", "queues/%2F/ui.victim/bindings")
        check(status == 200 and all(b["routing_key"] != "pwned" for b in bindings), f"no forged binding: {bindings}")
        status, _ = broker.api("GET", "vhosts/pwned")
        check(status == 404, "no forged virtual host")
    finally:
        server.shutdown()


def time_queues(args):
    """Declares --time-queues queues (over AMQP) and measures, in the browser, the time from
    opening the Queues page to its first page of rows shown."""
    broker = Broker(args.http_port, args.amqp_port)
    conn, ch = broker.channel()
    status, q = broker.api("GET", "overview")
    have = q["object_totals"]["queues"]
    for i in range(have, args.time_queues):
        ch.queue_declare(f"bench.q.{i:06d}", durable=False)
    conn.close()
    ui = Ui(args.http_port, args.screenshots)
    try:
        ui.login("guest", "guest")
        times = []
        for _ in range(args.repeat):
            ui.go("overview")
            start = time.perf_counter()
            ui.d.get(ui.base + "#/queues")
            ui.wait(lambda: len(ui.d.find_elements(By.CSS_SELECTOR, "#list tbody tr")) >= 100, "100 rows")
            times.append(time.perf_counter() - start)
        ui.shot("queues-10000")
        times.sort()
        print(json.dumps({"queues": args.time_queues, "runs": len(times),
                          "median_ms": round(times[len(times) // 2] * 1000, 1),
                          "max_ms": round(times[-1] * 1000, 1)}))
    finally:
        ui.quit()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--amqp-port", type=int, required=True)
    p.add_argument("--bench", help="the relaymq-bench binary")
    p.add_argument("--screenshots", default="target/ui-screenshots")
    p.add_argument("--time-queues", type=int, default=0)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    try:
        if args.time_queues:
            time_queues(args)
        else:
            check(args.bench, "--bench is required")
            run(args)
    except Failed as e:
        print(f"FAILED: {e}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
