"""The confirmation pages in headless Chromium, with JavaScript and without: a cancel
from a list and a bulk retry each ask first (the bulk one with its exact count), take a
reason, change the database only once confirmed, and land in the audit log."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("selenium")

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.dashboard.test_browser import chromium, server  # noqa: F401  (a fixture)
from tests.helpers import scalar


@pytest.fixture(params=["js", "no-js"])
def any_browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    extra = ("--blink-settings=scriptEnabled=false",) if request.param == "no-js" else ()
    driver = chromium(*extra)
    driver.pgqueue_js = request.param == "js"
    try:
        yield driver
    finally:
        driver.quit()


def test_actions_ask_first_with_and_without_javascript(
    server: str,  # noqa: F811
    any_browser: Any,
    dsn: str,
    conn: psycopg.Connection[Any],
) -> None:
    browser = any_browser
    wait = WebDriverWait(browser, 15)
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue) SELECT 'send', 'mail' FROM generate_series(1, 3);"
        "INSERT INTO pgqueue.runs (task, queue, state, finished_at, error) "
        "SELECT 'charge', 'pay', 'failed', now(), 'KeyError: card' FROM generate_series(1, 4)"
    )
    browser.get(server + "/runs?state=queued")
    js = browser.find_element(By.TAG_NAME, "html").get_dom_attribute("data-js")
    assert js == ("on" if browser.pgqueue_js else None)

    # Cancel from the list: a confirmation page, then the run is canceled with the reason
    row = browser.find_element(By.CSS_SELECTOR, "#runs tbody tr")
    run_id = int(row.get_dom_attribute("data-run"))
    row.find_element(By.XPATH, ".//button[text()='Cancel']").click()
    wait.until(lambda d: d.find_elements(By.ID, "confirm-button"))
    assert scalar(dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (run_id,)) == "queued"
    browser.find_element(By.ID, "reason").send_keys("customer asked")
    browser.find_element(By.ID, "confirm-button").click()
    wait.until(lambda d: "/runs?state=queued" in d.current_url)
    assert scalar(dsn, "SELECT state FROM pgqueue.runs WHERE id = %s", (run_id,)) == "canceled"

    # Going back from a confirmation page changes nothing
    browser.get(server + "/runs?state=failed")
    browser.find_element(By.ID, "bulk-button").click()
    wait.until(lambda d: d.find_elements(By.ID, "confirm-count"))
    assert browser.find_element(By.ID, "confirm-count").text == "4"
    browser.find_element(By.ID, "confirm-back").click()
    wait.until(lambda d: d.find_elements(By.ID, "runs"))
    failed = "SELECT count(*) FROM pgqueue.runs WHERE state = 'failed'"
    assert scalar(dsn, failed) == 4

    # Bulk retry, confirmed
    browser.find_element(By.ID, "bulk-button").click()
    wait.until(lambda d: d.find_elements(By.ID, "confirm-count"))
    browser.find_element(By.ID, "confirm-button").click()
    wait.until(lambda d: "/runs?state=failed" in d.current_url)
    assert scalar(dsn, failed) == 0

    browser.get(server + "/audit")
    text = browser.find_element(By.ID, "audit").text
    assert "bulk_retry" in text and "customer asked" in text
