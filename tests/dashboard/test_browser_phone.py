"""The dashboard on a phone and for a keyboard (issue 43), in headless Chromium: no page
scrolls sideways at 390 and 360 px wide (wide tables scroll inside their box), keyboard
focus survives the live refresh, text and control borders meet WCAG AA contrast, and every
control has a label."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

pytest.importorskip("selenium")

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.dashboard.test_browser import chromium, seed, server, shot  # noqa: F401

# The contrast of each element's own text with the background it sits on, and of each
# control's border with its surroundings: [what, ratio, needed] for every failure.
CONTRAST = """
function rgba(text) {
  var m = text.match(/rgba?\\(([^)]+)\\)/);
  if (!m) { return null; }
  var p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
  return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
}
function lum(c) {
  var v = c.slice(0, 3).map(function (x) {
    x = x / 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4);
  });
  return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
}
function ratio(a, b) {
  var x = lum(a), y = lum(b);
  return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
}
function background(el) {
  for (var e = el; e && e.nodeType === 1; e = e.parentElement) {
    var c = rgba(getComputedStyle(e).backgroundColor);
    if (c && c[3] > 0.5) { return c; }
  }
  return [255, 255, 255, 1];
}
var bad = [];
document.querySelectorAll("body *").forEach(function (el) {
  var style = getComputedStyle(el);
  if (style.visibility === "hidden" || style.display === "none") { return; }
  var own = Array.prototype.some.call(el.childNodes, function (n) {
    return n.nodeType === 3 && n.textContent.trim();
  });
  if (own && el.getClientRects().length) {
    var svg = el instanceof SVGElement;
    var fg = rgba(svg ? style.fill : style.color);
    var bg = svg ? background(el.ownerSVGElement || el) : background(el);
    var size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
    var need = (size >= 24 || (size >= 18.66 && bold)) ? 3 : 4.5;
    if (fg && ratio(fg, bg) < need) {
      bad.push([el.tagName + " " + el.textContent.trim().slice(0, 30), ratio(fg, bg), need]);
    }
  }
  if (el.matches("input:not([type=hidden]), select, textarea, button")) {
    var border = rgba(style.borderTopColor);
    var around = background(el.parentElement);
    var fill = background(el);
    var r = Math.max(ratio(border, around), ratio(fill, around));
    var what = "border of " + el.tagName + " " + (el.name || el.textContent.trim());
    if (r < 3) { bad.push([what, r, 3]); }
  }
});
return bad;
"""

# Controls without an accessible name: no label (for= or around it), aria-label or text.
UNLABELLED = """
var bad = [];
document.querySelectorAll("input:not([type=hidden]), select, textarea, button").forEach(
  function (el) {
    var named = el.getAttribute("aria-label") || el.closest("label") ||
      (el.id && document.querySelector('label[for="' + el.id + '"]')) ||
      (el.tagName === "BUTTON" && el.textContent.trim());
    if (!named) { bad.push(el.outerHTML.slice(0, 80)); }
  });
return bad;
"""


@pytest.fixture
def phone() -> Iterator[Any]:
    driver = chromium()
    driver.set_window_size(390, 844)
    try:
        yield driver
    finally:
        driver.quit()


def pages(server: str, ids: dict[str, int], dsn: str) -> list[str]:  # noqa: F811
    return [
        "/",
        "/runs",
        "/runs?state=failed",
        "/runs?state=queued&queue=crawl",
        f"/runs/{ids['flow']}",
        "/queues/crawl",
        "/workers",
        "/schedules",
        "/batches",
        f"/batches/{ids['batch']}",
        "/failures",
        "/audit",
        "/confirm?action=retry&state=failed",
    ]


def test_no_page_scrolls_sideways_on_a_phone(
    server: str,  # noqa: F811
    phone: Any,
    dsn: str,
    conn: psycopg.Connection[Any],
) -> None:
    ids = seed(conn)
    for width in (390, 360):
        phone.set_window_size(width, 844)
        for page in pages(server, ids, dsn):
            phone.get(server + page)
            inner, scroll = phone.execute_script(
                "return [window.innerWidth, document.documentElement.scrollWidth];"
            )
            assert inner <= width
            assert scroll <= inner, (page, width, scroll, inner)
            if width == 390 and page == "/":
                shot(phone, "phone-overview")  # docs/dashboard.md shows it


def test_contrast_and_labels(
    server: str,  # noqa: F811
    phone: Any,
    dsn: str,
    conn: psycopg.Connection[Any],
) -> None:
    ids = seed(conn)
    phone.set_window_size(1400, 900)
    for page in pages(server, ids, dsn):
        phone.get(server + page)
        assert phone.execute_script(CONTRAST) == [], page
        assert phone.execute_script(UNLABELLED) == [], page


def test_focus_stays_across_a_refresh(
    server: str,  # noqa: F811
    phone: Any,
    conn: psycopg.Connection[Any],
) -> None:
    seed(conn)
    phone.set_window_size(1400, 900)
    phone.get(server + "/")
    # the refresh comes after what the part cost the database (X-Refresh-After)
    wait = WebDriverWait(phone, 90, ignored_exceptions=(StaleElementReferenceException,))
    button = phone.find_element(By.CSS_SELECTOR, "#queues tr[data-queue='emails'] button")
    assert button.text == "Pause"
    phone.execute_script("arguments[0].focus();", button)
    phone.execute_script("document.querySelector('#queues').dataset.old = 'yes';")
    conn.execute("SELECT pgqueue.enqueue('send_email', '[]', queue => 'emails')")
    # the part was swapped (the marked table is gone) and shows the new run
    wait.until(lambda d: d.execute_script("return !document.querySelector('#queues[data-old]');"))
    focused = phone.execute_script(
        "var a = document.activeElement;"
        "return [a.tagName, a.textContent, a.closest('tr') && a.closest('tr').dataset.queue];"
    )
    assert focused == ["BUTTON", "Pause", "emails"]
