"""What a type checker sees of pgqueue's API: a task's handle is RunHandle[R] with the
task's return type (an `async def`'s awaited type), `ctx.step` and `ctx.call` have their
function's and task's result type, and the keywords of `options()`, `@app.task()` and
`@app.workflow()` are typed, so a misspelt option or a value of the wrong type is an
error. mypy --strict checks two sample modules as a user's code would be: pgqueue found
on the path, its own modules not reported (pyproject's mypy run checks those)."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pgqueue.enqueue.options import EnqueueKeywords, EnqueueOptions
from pgqueue.tasks.registry import Registry
from pgqueue.tasks.task import TaskKeywords
from tests.helpers import ROOT

# Code that uses the API as intended: no error, under --strict.
GOOD = """
from __future__ import annotations

from datetime import datetime, timedelta

import pgqueue
from pgqueue import Context, RunHandle

app = pgqueue.App()


@app.task(queue="emails", max_attempts=5, timeout=30, priority=0)
def send_email(to: str, subject: str) -> bool:
    return bool(to and subject)


@app.task
async def fetch(url: str) -> dict[str, int]:
    return {url: 1}


@app.task
def double(n: int) -> int:
    return 2 * n


def title(url: str) -> str:
    return url.upper()


@app.workflow(queue="crawl", name="crawl")
def crawl(ctx: Context, url: str) -> list[str]:
    page = ctx.step("title", title, url)
    size: int = ctx.step("size", len, page)
    sizes: dict[str, int] = ctx.call("fetch", fetch, url)
    doubled: list[int] = ctx.map("double", double, [1, 2])
    child: RunHandle[bool] = ctx.spawn("mail", send_email, "a@b.c", subject="hi")
    return [page.lower(), str(size), str(sizes), str(doubled), str(child.id)]


@app.periodic(cron="0 * * * *")
@app.task(name="hourly")
async def hourly() -> int:
    return 1


def produce() -> None:
    handle = send_email.enqueue("a@b.c", subject="hi")
    sent: bool = handle.wait(timeout=10)
    later: RunHandle[bool] = send_email.options(
        priority=-5, delay=timedelta(seconds=10), queue="x", idempotency_key="k"
    ).enqueue("a@b.c", "hi")
    bound = send_email.options(run_at=datetime.now(), max_attempts=3).options(group="g")
    bulk: list[RunHandle[bool]] = bound.enqueue_many([("a", "b"), {"to": "c", "subject": "d"}])
    by_hand: RunHandle = RunHandle(later.id, app)  # a bare RunHandle: RunHandle[Any]
    anything = by_hand.wait()
    pages: list[str] = crawl.enqueue("https://example.com").wait()
    count: int = hourly.enqueue().wait()
    print(sent, bulk, anything, pages, count)


async def produce_async() -> None:
    handle = await fetch.enqueue_async("https://example.com")
    sizes: dict[str, int] = await handle.wait_async(timeout=5)
    handles = await fetch.options(priority=1).enqueue_many_async([("u",)])
    more: list[dict[str, int]] = [await h.wait_async() for h in handles]
    print(sizes, more)
"""

# Mistakes: each line marked `# error: CODE` is reported with (at least) that mypy code,
# and no other line is.
BAD = """
from __future__ import annotations

import pgqueue
from pgqueue import Context

app = pgqueue.App()


@app.task
def send_email(to: str, subject: str) -> bool:
    return True


@app.task
async def fetch(url: str) -> dict[str, int]:
    return {}


def title(url: str) -> str:
    return url


@app.task(qeue="emails")  # error: call-overload
def misspelt() -> None: ...


@app.task(priority="high")  # error: call-overload
def wrong_priority() -> None: ...


@app.workflow(max_attempt=3)  # error: call-overload
def misspelt_workflow(ctx: Context) -> None: ...


@app.workflow
def flow(ctx: Context, url: str) -> None:
    n: int = ctx.step("title", title, url)  # error: assignment
    s: str = ctx.call("fetch", fetch, url)  # error: assignment
    print(n, s)


def produce() -> None:
    send_email.options(prio=1).enqueue("a", "b")  # error: call-arg
    send_email.options(qeue="x").enqueue("a", "b")  # error: call-arg
    send_email.options(priority="high").enqueue("a", "b")  # error: arg-type
    send_email.options(queue="x").options(delay="soon")  # error: arg-type
    sent: list[int] = send_email.enqueue("a", "b").wait()  # error: assignment
    first: str = send_email.enqueue_many([("a", "b")])[0].wait()  # error: assignment
    send_email.enqueue(1, subject="x")  # error: arg-type
    print(sent, first)


async def produce_async() -> None:
    handle = await fetch.enqueue_async("u")
    n: int = await handle.wait_async()  # error: assignment
    print(n)
"""

MYPY_INI = """
[mypy]
strict = True
python_version = 3.11

[mypy-pgqueue.*]
follow_imports = silent
"""


def expected_errors(source: str) -> dict[int, str]:
    return {
        number: match.group(1)
        for number, line in enumerate(source.splitlines(), start=1)
        if (match := re.search(r"# error: ([\w-]+)$", line))
    }


def reported(output: str, module: str) -> dict[int, set[str]]:
    """{line: mypy error codes} of `module`'s errors in mypy's output."""
    found: dict[int, set[str]] = {}
    for match in re.finditer(rf"^{module}:(\d+): error: .*\[([\w-]+)\]$", output, re.M):
        found.setdefault(int(match.group(1)), set()).add(match.group(2))
    return found


def test_mypy_strict_accepts_typed_use_and_reports_each_mistake_at_its_line(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "good.py", "bad.py"],
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = done.stdout + done.stderr
    assert reported(output, "good.py") == {}, output
    found = reported(output, "bad.py")
    expected = expected_errors(BAD)
    assert len(expected) == 13
    assert sorted(found) == sorted(expected), output
    for line, code in expected.items():
        assert code in found[line], (line, output)


def test_pyright_strict_accepts_typed_use_and_reports_each_mistake(tmp_path: Path) -> None:
    """The same samples under pyright's strict mode (CI installs pyright: .ci/run)."""
    pyright = shutil.which("pyright")
    if pyright is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs pyright: npm install pyright (see .ci/run)")
        pytest.skip("pyright is not installed (npm install pyright)")
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    config = (
        f'{{"extraPaths": ["{ROOT}"], "typeCheckingMode": "strict", '
        f'"pythonVersion": "3.11", "pythonPath": "{sys.executable}"}}'
    )
    (tmp_path / "pyrightconfig.json").write_text(config)
    done = subprocess.run(
        [pyright, "good.py", "bad.py"], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    output = done.stdout
    assert "good.py:" not in output, output
    lines = {int(n) for n in re.findall(r"bad\.py:(\d+):\d+ - error", output)}
    assert lines == set(expected_errors(BAD)), output


def test_the_typed_keywords_are_the_options_themselves() -> None:
    """EnqueueKeywords names every field of EnqueueOptions, and TaskKeywords every option
    of Registry.register (but `workflow`, which @app.task and @app.workflow set), so a new
    option is typed where it is added."""
    fields = {f.name for f in dataclasses.fields(EnqueueOptions)}
    assert set(EnqueueKeywords.__annotations__) == fields
    parameters = inspect.signature(Registry.register).parameters
    options = {
        name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY and name != "workflow"
    }
    assert set(TaskKeywords.__annotations__) == options
