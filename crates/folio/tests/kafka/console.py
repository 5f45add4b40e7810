#!/usr/bin/env python3
"""The operator console driven in headless Chromium (Debian's, through Playwright) against a
live standalone: topics with records, a group with lag, a deletion; each page loads with no
console error and shows the expected names and numbers, a search finds a record by key, an
offset reset moves the group, a chart updates, a login is required when users exist.
Screenshots go to the directory given.

Usage: console.py <scenario> <bootstrap> <http host:port> <screenshot dir>"""

import os
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("FOLIO_CHROMIUM", "/usr/bin/chromium")


def check(cond, what):
    if not cond:
        print("FAIL: " + what, flush=True)
        sys.exit(1)


def browser(p):
    return p.chromium.launch(executable_path=CHROMIUM, headless=True,
                             args=["--no-sandbox", "--disable-gpu"])


def watch_errors(page):
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def seed(bootstrap, conf=None):
    """Topic `orders` (3 partitions, 300 records keyed k-<i>), group `billing` that read
    and committed 100 of them (lag 200), topic `doomed` deleted."""
    conf = dict(conf or {}, **{"bootstrap.servers": bootstrap})
    admin = AdminClient(conf)
    for f in admin.create_topics([NewTopic("orders", 3, 1), NewTopic("doomed", 1, 1)]).values():
        f.result(30)
    p = Producer(conf)
    for i in range(300):
        p.produce("orders", key="k-%d" % i, value="v-%d" % i, partition=i % 3)
    p.produce("doomed", value="bye")
    check(p.flush(30) == 0, "seed records not acknowledged")
    c = Consumer(dict(conf, **{"group.id": "billing", "enable.auto.commit": False}))
    c.assign([TopicPartition("orders", q, 0) for q in range(3)])
    got, deadline = 0, time.time() + 60
    while got < 100 and time.time() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            got += 1
    check(got == 100, "the group read %d of 100" % got)
    # 34 + 33 + 33 committed: 200 left to read.
    c.commit(offsets=[TopicPartition("orders", q, 34 if q == 0 else 33) for q in range(3)],
             asynchronous=False)
    c.close()
    from confluent_kafka import TopicCollection
    desc = admin.describe_topics(TopicCollection(["doomed"]))["doomed"].result(30)
    admin.delete_topics(["doomed"])["doomed"].result(30)
    u = desc.topic_id
    mask = (1 << 64) - 1
    return "%016x%016x" % (u.get_most_significant_bits() & mask,
                           u.get_least_significant_bits() & mask)


def scenario_browse(bootstrap, http, shots):
    doomed = seed(bootstrap)
    url = "http://" + http
    with sync_playwright() as p:
        b = browser(p)
        page = b.new_page(viewport={"width": 1280, "height": 900})
        errors = watch_errors(page)
        # Overview: brokers, topics, backend, bookies; the traffic chart moves while a
        # producer writes.
        page.goto(url + "/#/overview")
        page.wait_for_selector("[data-testid=brokers]")
        check(page.inner_text("[data-testid=brokers]") == "1", "brokers on the overview")
        check(int(page.inner_text("[data-testid=topic-count]")) >= 1, "topics on the overview")
        check("embedded" in page.inner_text("[data-testid=backend]"), "the metadata backend")
        check("bookie-0" in page.inner_text("[data-testid=bookies]"), "the bookie and its disk")
        stop = threading.Event()

        def traffic():
            prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            while not stop.is_set():
                for _ in range(50):
                    prod.produce("traffic", value=b"x" * 1000)
                prod.flush(10)
                time.sleep(0.05)

        t = threading.Thread(target=traffic)
        t.start()
        try:
            page.wait_for_function(
                "() => document.getElementById('chart-in').dataset.points >= 3 &&"
                " !/^0 B/.test(document.getElementById('chart-in-now').textContent)",
                timeout=30000)
        finally:
            stop.set()
            t.join()
        page.screenshot(path=os.path.join(shots, "overview.png"), full_page=True)
        # Topics and one topic: names, partitions, offsets, ledgers, configs.
        page.goto(url + "/#/topics")
        page.wait_for_selector("[data-testid=topics] td")
        rows = page.inner_text("[data-testid=topics]")
        check("orders" in rows and "300" in rows, "topics list: %s" % rows)
        check("doomed" not in rows, "a deleted topic is listed")
        page.screenshot(path=os.path.join(shots, "topics.png"), full_page=True)
        page.click("text=orders")
        page.wait_for_selector("[data-testid=partitions] td")
        parts = page.inner_text("[data-testid=partitions]")
        check(parts.count("\n") >= 3 and "100" in parts, "partitions of orders: %s" % parts)
        page.screenshot(path=os.path.join(shots, "topic.png"), full_page=True)
        # The message browser finds a record by key.
        page.goto(url + "/#/messages/orders")
        page.wait_for_selector("[data-testid=key]")
        page.fill("[data-testid=key]", "k-42")
        page.click("[data-testid=search]")
        page.wait_for_selector("[data-testid=found]")
        check(page.inner_text("[data-testid=found]") == "1 records", "search by key")
        check("v-42" in page.inner_text("[data-testid=messages]"), "the record found")
        page.screenshot(path=os.path.join(shots, "messages.png"), full_page=True)
        # Groups: lag, then an offset reset (dry run, then confirmed) moves the group.
        page.goto(url + "/#/groups")
        page.wait_for_selector("[data-testid=groups] td")
        g = page.inner_text("[data-testid=groups]")
        check("billing" in g and "200" in g, "group lag: %s" % g)
        page.click("text=billing")
        page.wait_for_selector("[data-testid=lag] td")
        page.click("#dry-run")
        page.wait_for_selector("text=Would move 3 partitions")
        page.click("#apply-reset")
        page.wait_for_selector("#confirm:not([hidden])")
        page.screenshot(path=os.path.join(shots, "reset-confirm.png"))
        page.click("#confirm-yes")
        page.wait_for_selector("text=Moved 3 partitions")
        page.wait_for_function(
            "() => [...document.querySelectorAll('[data-testid=lag] tr')]"
            ".slice(1).every(r => r.cells[2] && r.cells[2].textContent.trim() === '0')",
            timeout=15000)
        page.screenshot(path=os.path.join(shots, "group.png"), full_page=True)
        # The data lifecycle: the deleted topic's way out, GC per bookie.
        page.goto(url + "/#/lifecycle")
        page.wait_for_selector("[data-testid=gc] td")
        check("bookie-0" in page.inner_text("[data-testid=gc]"), "GC per bookie")
        check("healed" in page.inner_text("[data-testid=autorecovery]"), "autorecovery progress")
        # The standalone's trash deleter passes rarely (--trash-interval-ms): the deleted
        # topic's log waits in the trash, named by its topic id.
        life = page.inner_text("main").replace("-", "")
        check(doomed in life, "the deleted topic %s on its way out: %s" % (doomed, life))
        page.screenshot(path=os.path.join(shots, "lifecycle.png"), full_page=True)
        check(not errors, "console errors: %s" % errors)
        b.close()
    print("OK browse", flush=True)


def scenario_login(bootstrap, http, shots):
    """Users exist: the console asks for a login, refuses a wrong password, and shows a
    user what the user's ACLs let it see."""
    url = "http://" + http
    admin = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.username": "admin", "sasl.password": "pw"}
    a = AdminClient(dict(admin, **{"bootstrap.servers": bootstrap}))
    for f in a.create_topics([NewTopic("orders-1", 1, 1), NewTopic("secret", 1, 1)]).values():
        f.result(30)
    with sync_playwright() as p:
        b = browser(p)
        page = b.new_page()
        errors = watch_errors(page)
        page.goto(url + "/#/topics")
        page.wait_for_selector("#login")
        check("Log in" in page.inner_text("main"), "no login asked")
        page.fill("input[name=user]", "alice")
        page.fill("input[name=password]", "wrong")
        page.click("#login button")
        page.wait_for_selector("[data-testid=login-error]")
        page.screenshot(path=os.path.join(shots, "login.png"))
        page.fill("input[name=user]", "alice")
        page.fill("input[name=password]", "pw")
        page.click("#login button")
        page.wait_for_selector("[data-testid=topics] td")
        rows = page.inner_text("[data-testid=topics]")
        check("orders-1" in rows and "secret" not in rows, "alice's topics: %s" % rows)
        check("alice" in page.inner_text("#who"), "the user shown")
        # The data lifecycle needs DESCRIBE on the cluster, which alice lacks.
        page.goto(url + "/#/lifecycle")
        page.wait_for_selector("[data-testid=error]")
        refused = page.inner_text("[data-testid=error]")
        check("User:alice may not Describe the cluster" in refused, "lifecycle: %s" % refused)
        # The refused password (401) and the refused page (403) are the only failed loads.
        real = [e for e in errors if "401" not in e and "403" not in e]
        check(not real, "console errors: %s" % real)
        b.close()
    print("OK login", flush=True)


if __name__ == "__main__":
    globals()["scenario_" + sys.argv[1]](*sys.argv[2:])
