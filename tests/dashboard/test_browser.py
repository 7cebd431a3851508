"""The dashboard in a real headless Chromium (Debian's chromium and chromedriver, driven by
Selenium; nothing is downloaded), served by `pgqueue dashboard` as a user runs it.

With PGQUEUE_SCREENSHOTS=DIR the screenshots (1400x900) go to DIR: docs/dashboard.md
and the README show the ones written with PGQUEUE_SCREENSHOTS=docs/images."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.helpers import ROOT, free_port, run_state, scalar, scalar_conn, wait_until

pytest.importorskip("selenium")

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WORKER = "00000000-0000-0000-0000-0000000000bb"


@pytest.fixture
def server(dsn: str) -> Iterator[str]:
    """`pgqueue dashboard` in a process of its own; its base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "pgqueue", "dashboard", "--dsn", dsn, "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PGQUEUE_DASHBOARD_TOKEN", None)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            with urllib.request.urlopen(f"{url}/api/workers", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    wait_until(up, timeout=30, message="the dashboard to listen")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def chromium(*extra: str) -> Any:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        # CI installs them (.ci/run): there, a missing browser fails the test
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI needs {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium")
        pytest.skip("no chromium/chromedriver (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        *extra,
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def rebinding_browser() -> Iterator[Any]:
    """A browser in which attacker.test resolves to 127.0.0.1: what DNS rebinding makes
    of an attacker's name once its page has loaded."""
    driver = chromium("--host-resolver-rules=MAP attacker.test 127.0.0.1")
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: Any, name: str) -> None:
    target = os.environ.get("PGQUEUE_SCREENSHOTS")
    if target:
        folder = Path(target) if Path(target).is_absolute() else ROOT / target
        folder.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(folder / f"dashboard-{name}.png"))


def seed(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """A cluster an hour into its day: three queues, a limited one with groups, runs
    finished over the last hour, failures with tracebacks, a workflow with steps."""
    conn.execute(
        "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version) "
        "VALUES (%s, 'app-1', 4242, '{emails,crawl,reports}', 8, '0.1.0')",
        (WORKER,),
    )
    conn.execute(
        "INSERT INTO pgqueue.queues (name, concurrency, group_concurrency) VALUES ('crawl', 4, 2)"
    )
    conn.execute("""
        INSERT INTO pgqueue.runs (task, queue, state, created_at, run_at, started_at,
                                  finished_at, attempt)
        SELECT CASE WHEN q = 'emails' THEN 'send_email' WHEN q = 'crawl' THEN 'crawl_page'
                    ELSE 'build_report' END,
               q, 'succeeded', t - interval '1 s', t - (random() * 0.8 + 0.05) * interval '1 s',
               t - interval '0.02 s' * (1 + random()), t, 1
        FROM (SELECT (ARRAY['emails', 'emails', 'emails', 'crawl', 'crawl', 'reports'])
                         [1 + i % 6] AS q,
                     now() - interval '3590 s' * (u + 0.01 * sin(u * 25)) AS t
              FROM (SELECT i, i / 6000.0 AS u FROM generate_series(1, 6000) i) g) x
    """)
    conn.execute("""
        INSERT INTO pgqueue.runs (task, queue, state, args, created_at, run_at, started_at,
                                  finished_at, attempt, error)
        SELECT 'send_email', 'emails', 'failed', jsonb_build_array('user' || i || '@example.com'),
               now() - i * interval '3 min' - interval '70 s',
               now() - i * interval '3 min', now() - i * interval '3 min',
               now() - i * interval '3 min' + interval '0.4 s', 3,
               'SMTPServerDisconnected: Connection unexpectedly closed'
        FROM generate_series(1, 6) i
    """)
    conn.execute("""
        INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message, traceback)
        SELECT id, 3, 'error', error, 'Traceback (most recent call last):
  File "app/tasks.py", line 41, in send_email
    smtp.send_message(message)
  File "/usr/lib/python3.11/smtplib.py", line 986, in send_message
    return self.sendmail(from_addr, to_addrs, flatmsg, mail_options, rcpt_options)
smtplib.SMTPServerDisconnected: Connection unexpectedly closed'
        FROM pgqueue.runs WHERE state = 'failed'
    """)
    conn.execute("""
        INSERT INTO pgqueue.runs (task, queue, group_key, limited, args)
        SELECT 'crawl_page', 'crawl', 'tenant-' || (i % 5), true,
               jsonb_build_array('https://example.com/' || i)
        FROM generate_series(1, 40) i;
        -- leases that outlast the test even on a loaded machine: their permits stay taken
        INSERT INTO pgqueue.runs (task, queue, group_key, limited, state, attempt, worker_id,
                                  lease_token, lease_expires_at, started_at)
        SELECT 'crawl_page', 'crawl', 'tenant-' || (i % 2), true, 'running', 1,
               '00000000-0000-0000-0000-0000000000bb', gen_random_uuid(),
               now() + interval '10 min', now() - interval '3 s'
        FROM generate_series(1, 4) i;
        INSERT INTO pgqueue.runs (task, queue, args)
        SELECT 'send_email', 'emails', jsonb_build_array('user' || i || '@example.com')
        FROM generate_series(1, 25) i;
        INSERT INTO pgqueue.runs (task, queue, state, run_at)
        SELECT 'build_report', 'reports', 'scheduled', now() + interval '2 hours'
        FROM generate_series(1, 3) i;
    """)
    flow = scalar_conn(
        conn,
        "INSERT INTO pgqueue.runs (task, queue, state, attempt, wait_event, wait_key, "
        "wait_since, run_at, args) VALUES ('checkout', 'emails', 'waiting', 1, 'order.paid', "
        "'order-42', now(), now() + interval '1 hour', '[42]') RETURNING id",
    )
    conn.execute(
        "INSERT INTO pgqueue.steps (run_id, name, state, attempt, started_at, finished_at) "
        "VALUES (%(id)s, 'reserve_stock', 'succeeded', 1, now() - interval '5 s', "
        "now() - interval '4.2 s'), "
        "(%(id)s, 'charge_card', 'succeeded', 1, now() - interval '4.1 s', "
        "now() - interval '2.5 s'), "
        "(%(id)s, 'send_receipt', 'succeeded', 1, now() - interval '2.4 s', "
        "now() - interval '2.2 s')",
        {"id": flow},
    )
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, parent_id, state, finished_at) "
        "VALUES ('send_email', 'emails', %s, 'succeeded', now())",
        (flow,),
    )
    batch = scalar_conn(
        conn,
        "INSERT INTO pgqueue.batch_heads (on_complete, queue, total, created_at, sealed_at) "
        "VALUES ('send_digest', 'reports', 12, now() - interval '2 min', now()) RETURNING id",
    )
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, batch_id, args) "
        "SELECT 'build_report', 'reports', %s, jsonb_build_array(i) FROM generate_series(1, 12) i",
        (batch,),
    )
    conn.execute(  # 9 of 12 finished: counted by the batch trigger as a worker's would be
        "UPDATE pgqueue.runs SET state = 'succeeded', attempt = 1, started_at = now(), "
        "finished_at = now() "
        "WHERE id IN (SELECT id FROM pgqueue.runs WHERE batch_id = %s ORDER BY id LIMIT 9)",
        (batch,),
    )
    conn.execute("ANALYZE pgqueue.runs")
    return {"flow": flow, "batch": batch}


def test_the_dashboard_in_a_browser(
    server: str, browser: Any, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    ids = seed(conn)
    # The overview's 2 s refresh swaps its elements: one found a moment ago may be gone
    # by the time its text is read, so such a wait looks again.
    wait = WebDriverWait(browser, 15, ignored_exceptions=(StaleElementReferenceException,))

    # The overview's counts change after an enqueue, without a reload.
    browser.get(server + "/")
    total = wait.until(lambda d: d.find_element(By.ID, "total-queued").text)
    assert total == "68"
    shot(browser, "overview")
    browser.execute_script("window.pgqueueNotReloaded = true;")
    conn.execute("SELECT pgqueue.enqueue('send_email', '[\"new@example.com\"]', queue => 'emails')")
    # the refresh comes after what the part cost the database (X-Refresh-After)
    slow = WebDriverWait(browser, 90, ignored_exceptions=(StaleElementReferenceException,))
    slow.until(lambda d: d.find_element(By.ID, "total-queued").text == "69")
    assert browser.execute_script("return window.pgqueueNotReloaded === true;")

    # Filter the runs: the failed ones.
    browser.get(server + "/runs")
    Select(browser.find_element(By.NAME, "state")).select_by_value("failed")
    browser.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
    wait.until(lambda d: "state=failed" in d.current_url)
    states = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#runs td .state")]
    assert states == ["failed"] * 6
    shot(browser, "runs")

    # Open a failed run and read its traceback.
    browser.find_element(By.CSS_SELECTOR, "#runs tbody tr a").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "pre.traceback"))
    traceback = browser.find_element(By.CSS_SELECTOR, "pre.traceback").text
    assert "smtplib.SMTPServerDisconnected" in traceback
    assert 'File "app/tasks.py", line 41' in traceback
    shot(browser, "failed-run")

    # A workflow: its steps on a timeline, its child, what it waits for.
    browser.get(f"{server}/runs/{ids['flow']}")
    why = browser.find_element(By.ID, "why").text
    assert "waiting for event order.paid key order-42" in why
    assert browser.find_elements(By.CSS_SELECTOR, "svg.timeline rect")
    shot(browser, "workflow")

    # The limited queue: its groups and who holds the permits.
    browser.get(server + "/queues/crawl")
    rows = browser.find_elements(By.CSS_SELECTOR, "#groups tbody tr")
    assert len(rows) == 5
    shot(browser, "queue")
    browser.get(server + "/runs?state=queued&queue=crawl")
    assert "group tenant-1 at its limit" in browser.find_element(By.ID, "runs").text
    shot(browser, "why")

    # A batch: its progress in the list, its members on its page, the way back from one.
    browser.get(server + "/batches")
    row = browser.find_element(By.CSS_SELECTOR, f"#batches tr[data-batch='{ids['batch']}']")
    assert "75%" in row.text and "send_digest" in row.text
    row.find_element(By.CSS_SELECTOR, "a").click()
    wait.until(lambda d: d.find_elements(By.ID, "members"))
    members = browser.find_elements(By.CSS_SELECTOR, "#members tbody tr")
    assert len(members) == 12
    states = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#members td .state")]
    assert states == ["succeeded"] * 9 + ["queued"] * 3
    assert "not yet" in browser.find_element(By.ID, "callback").text
    shot(browser, "batch")
    members[-1].find_element(By.CSS_SELECTOR, "a").click()
    wait.until(lambda d: d.find_elements(By.ID, "batch"))
    browser.find_element(By.CSS_SELECTOR, "#batch a").click()
    wait.until(lambda d: d.current_url.endswith(f"/batches/{ids['batch']}"))

    # Cancel a queued run, and see the database change.
    queued = scalar(dsn, "SELECT min(id) FROM pgqueue.runs WHERE state = 'queued'")
    browser.get(f"{server}/runs/{queued}")
    browser.find_element(By.XPATH, "//button[text()='Cancel this run']").click()
    wait.until(lambda d: d.find_elements(By.ID, "confirm-button"))
    browser.find_element(By.ID, "confirm-button").click()
    wait_until(
        lambda: (
            scalar(dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (queued,)) == "canceled"
        ),
        message="the run to be canceled",
    )
    wait.until(lambda d: d.find_elements(By.XPATH, "//button[text()='Retry this run']"))

    # Bulk-retry the failed runs: the page says how many first.
    browser.get(server + "/runs?state=failed")
    browser.find_element(By.ID, "bulk-button").click()
    wait.until(lambda d: d.find_elements(By.ID, "confirm-count"))
    assert browser.find_element(By.ID, "confirm-count").text == "6"
    browser.find_element(By.ID, "confirm-button").click()
    wait_until(
        lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.runs WHERE state = 'failed'") == 0,
        message="the failed runs to be retried",
    )
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.run_errors WHERE kind = 'retried'") == 6


def test_a_rebound_name_can_neither_read_nor_act(
    server: str, rebinding_browser: Any, conn: psycopg.Connection[Any]
) -> None:
    """A page of attacker.test:PORT whose name now resolves to 127.0.0.1 (DNS rebinding)
    is same-origin with whatever answers there: the token-less dashboard must answer it
    nothing but 400, for its pages, its JSON and its actions."""
    secret = "secret-api-key-456"
    row = conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, args) VALUES ('charge', 'mail', %s) RETURNING id",
        (f'["{secret}"]',),
    ).fetchone()
    assert row is not None
    run_id = int(row[0])
    driver = rebinding_browser
    driver.get(f"{server}/runs/{run_id}")  # by its own name the run's page shows the args
    assert secret in driver.page_source
    port = server.rsplit(":", 1)[1]
    driver.get(f"http://attacker.test:{port}/runs/{run_id}")
    assert secret not in driver.page_source and "not an allowed host" in driver.page_source
    # the attacker's script, same-origin with attacker.test:PORT, reads and posts
    result = driver.execute_async_script(
        """
        const [id, done] = arguments;
        const form = {method: "POST", body: "csrf=x&next=/",
                      headers: {"Content-Type": "application/x-www-form-urlencoded"}};
        const status = (r) => r.text().then((t) => [r.status, t]);
        Promise.all([
            fetch("/api/runs/" + id).then(status),
            fetch("/runs/" + id).then(status),
            fetch("/api/runs/" + id + "/cancel", {method: "POST"}).then(status),
            fetch("/api/runs/" + id + "/cancel", form).then(status),
            fetch("/api/queues/mail/pause", form).then(status),
            fetch("/api/runs/bulk", {method: "POST", body: '{"action": "cancel", "filter": {}}',
                                     headers: {"Content-Type": "application/json"}}).then(status),
        ]).then(done, (e) => done(String(e)));
        """,
        run_id,
    )
    assert isinstance(result, list), result
    for status, body in result:
        assert status == 400 and secret not in body, (status, body[:200])
    assert run_state(conn, run_id) == "queued"
    assert conn.execute("SELECT count(*) FROM pgqueue.queues WHERE paused").fetchone() == (0,)
