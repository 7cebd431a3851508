"""A run's page in headless Chromium follows its progress without a reload (issue 43)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("selenium")

from psycopg.types.json import Jsonb
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.dashboard.test_browser import chromium, server  # noqa: F401  (a fixture)
from tests.dashboard.test_live import working


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def set_progress(conn: psycopg.Connection[Any], run_id: int, done: int) -> None:
    progress = {"done": done, "total": 100, "message": f"page {done}", "at": "now"}
    conn.execute("UPDATE pgqueue.runs SET progress = %s WHERE id = %s", (Jsonb(progress), run_id))


def test_a_run_page_follows_its_progress(
    server: str,  # noqa: F811
    browser: Any,
    conn: psycopg.Connection[Any],
) -> None:
    run_id = working(conn, "mail")
    set_progress(conn, run_id, 10)
    browser.get(f"{server}/runs/{run_id}")
    assert "page 10" in browser.find_element(By.ID, "progress").text
    browser.execute_script("window.pgqueueNotReloaded = true;")
    set_progress(conn, run_id, 20)
    wait = WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,))
    wait.until(lambda d: "page 20" in d.find_element(By.ID, "progress").text)
    assert browser.execute_script("return window.pgqueueNotReloaded === true;")
