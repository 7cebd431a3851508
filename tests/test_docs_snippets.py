"""The guides' code as a reader copies it: the Flask app of docs/flask.md, the FastAPI
service of docs/asyncio.md and docs/fastapi.md, and docs/django.md in a project made by
`django-admin startproject`, written to a directory outside the repository and run there
with the commands the guides give (so they must be complete: imports, models, tables)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.helpers import ROOT, WorkerProcess, free_port, scalar, wait_until
from tests.webapps import Databases, sqlalchemy_url

DOCS = ROOT / "docs"


def code_block(page: str, marker: str) -> str:
    """The first ```python block of docs/PAGE that contains `marker`."""
    for block in re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S):
        if marker in block:
            return str(block)
    raise AssertionError(f"no python block with {marker!r} in docs/{page}")


def shell_lines(page: str, marker: str) -> list[str]:
    """The lines of the first ```sh block of docs/PAGE that contains `marker`."""
    for block in re.findall(r"```sh\n(.*?)```", (DOCS / page).read_text(), re.S):
        if marker in block:
            return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    raise AssertionError(f"no sh block with {marker!r} in docs/{page}")


def sh(line: str, where: Path, env: dict[str, str]) -> str:
    bin_dir = str(Path(sys.executable).parent)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PGQUEUE_DSN")}
    full = {**clean, "PATH": bin_dir + os.pathsep + clean.get("PATH", ""), **env}
    done = subprocess.run(
        line, shell=True, cwd=where, env=full, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def empty_database(postgresql_noproc: Any) -> Any:
    databases = Databases(postgresql_noproc)
    name = databases.create("pgqueue_docs")
    try:
        yield databases.dsn(name)
    finally:
        databases.drop(name)


def test_the_flask_guide_runs_as_written(tmp_path: Path, empty_database: str) -> None:
    pytest.importorskip("flask_sqlalchemy")
    code = code_block("flask.md", "class User(db.Model)")
    uri = '"postgresql+psycopg://app@db/signup"'
    assert uri in code
    (tmp_path / "signup.py").write_text(code.replace(uri, repr(sqlalchemy_url(empty_database))))
    for line in shell_lines("flask.md", "create_all"):
        sh(line, tmp_path, {})
    assert scalar(empty_database, 'SELECT count(*) FROM "user"') == 0  # the app's table
    check = (
        "from signup import create_app, db, send_welcome, tasks, User\n"
        "from pgqueue import RunNotFound, testing\n"
        "with create_app().test_request_context():\n"
        "    user = User(email='ann@example.com')\n"
        "    db.session.add(user)\n"
        "    db.session.flush()\n"
        "    with testing.eager(tasks) as runs:\n"
        "        send_welcome.enqueue(user.id)\n"
        "    print(runs[0].result)\n"
        "    try:\n"
        "        tasks.get_run(123456)\n"
        "    except RunNotFound as exc:\n"
        "        print('RunNotFound:', exc)\n"
    )
    out = sh(f'{sys.executable} -c "{check}"', tmp_path, {})
    assert out.splitlines()[0] == "welcomed ann@example.com"
    assert out.splitlines()[1].startswith("RunNotFound: no run with id 123456")
    assert "RunNotFound" in (DOCS / "flask.md").read_text()


def test_the_fastapi_service_of_the_asyncio_guide_runs_from_its_own_directory(
    tmp_path: Path, empty_database: str
) -> None:
    pytest.importorskip("fastapi")
    (tmp_path / "main.py").write_text(code_block("asyncio.md", "api = FastAPI("))
    env = {"PGQUEUE_DSN": empty_database}
    commands = shell_lines("asyncio.md", "uvicorn main:api")
    assert "pgqueue migrate" in commands
    sh("pgqueue migrate", tmp_path, env)
    check = (
        "from fastapi.testclient import TestClient\n"
        "from main import api\n"
        "with TestClient(api) as client:\n"
        "    made = client.post('/signups', json={'email': 'bo@example.com'})\n"
        "    again = client.post('/signups', json={'email': 'bo@example.com'})\n"
        "    missing = client.get('/runs/123456')\n"
        "    run = client.get(f\\\"/runs/{made.json()['run']}\\\")\n"
        "    print(made.status_code, again.status_code, missing.status_code, run.json()['state'])\n"
    )
    out = sh(f'{sys.executable} -c "{check}"', tmp_path, env)
    assert out.split() == ["201", "409", "404", "queued"]
    sh("pgqueue worker --app main:tasks --burst", tmp_path, env)
    assert scalar(empty_database, "SELECT state FROM pgqueue.runs") == "succeeded"


def test_install_hints_name_the_distribution() -> None:
    """Every `pip install` hint in the docs, the README and the code's error messages names
    the distribution pgqueue-jobs: the name pgqueue on the package index is another
    project, so `pip install 'pgqueue[otel]'` would install that one."""
    wrong = re.compile(r"\bpgqueue\[\w+\]")
    files = [ROOT / "README.md", *DOCS.rglob("*.md"), *(ROOT / "pgqueue").rglob("*.py")]
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if wrong.search(line.replace("pgqueue-jobs[", ""))
    ]
    assert not found, "install hints naming the wrong distribution:\n" + "\n".join(found)


def http_json(method: str, url: str) -> Any:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=15) as r:
        return json.loads(r.read())


def test_the_fastapi_lifespan_worker_runs_tasks_and_drains_at_sigterm(
    tmp_path: Path, empty_database: str
) -> None:
    """docs/fastapi.md's main.py under a real uvicorn: its own worker runs what the API
    enqueues, and at SIGTERM the run in progress finishes before the process exits, and
    the worker's row is gone."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    (tmp_path / "main.py").write_text(code_block("fastapi.md", "worker.run_async()"))
    env = {"PGQUEUE_DSN": empty_database}
    commands = shell_lines("fastapi.md", "uvicorn main:api")
    assert commands[-2:] == ["pgqueue migrate", "uvicorn main:api"]
    sh("pgqueue migrate", tmp_path, env)
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PGQUEUE_DSN")}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "main:api", "--port", str(port)],
        cwd=tmp_path,
        env={**clean, "PATH": bin_dir + os.pathsep + clean.get("PATH", ""), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            try:
                return http_json("GET", f"{base}/healthz") == {"worker": True}
            except OSError:
                return False

        wait_until(healthy, message="uvicorn to serve /healthz")
        done = http_json("POST", f"{base}/reports/q3?wait=10")
        assert done["result"] == "report q3 ready"
        assert scalar(empty_database, "SELECT count(*) FROM pgqueue.workers") == 1

        slow = http_json("POST", f"{base}/reports/q4?seconds=2")["run"]
        wait_until(
            lambda: (
                scalar(empty_database, "SELECT state FROM pgqueue.runs WHERE id = %s", (slow,))
                == "running"
            ),
            message="the slow run to start",
        )
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=30)
        # uvicorn exits by the signal it got, once its shutdown is complete
        assert server.returncode in (0, -signal.SIGTERM), out
        assert "Application shutdown complete." in out
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    query = "SELECT state, result #>> '{}' FROM pgqueue.runs WHERE id = %s"
    with psycopg.connect(empty_database) as conn:
        assert conn.execute(query, (slow,)).fetchone() == ("succeeded", "report q4 ready")
    assert scalar(empty_database, "SELECT count(*) FROM pgqueue.workers") == 0


def pgqueue_blocks(page: str) -> list[str]:
    """The ```python blocks of docs/PAGE that start with `# pgqueue`, in order."""
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    return [str(block) for block in blocks if block.startswith("# pgqueue")]


def test_the_pgqueue_code_of_the_celery_guide_runs(tmp_path: Path, empty_database: str) -> None:
    """docs/celery.md's pgqueue side: tasks.py, a worker started as the guide says, then
    every other pgqueue block as a script of its own, in the guide's order."""
    module, *scripts = pgqueue_blocks("celery.md")
    assert module.startswith("# pgqueue: tasks.py")
    assert len(scripts) == 3
    (tmp_path / "tasks.py").write_text(module)
    path = os.pathsep.join([str(tmp_path), str(ROOT)])
    env = {"PGQUEUE_DSN": empty_database, "PYTHONPATH": path}
    assert shell_lines("celery.md", "pgqueue worker") == [
        "pgqueue migrate",
        "pgqueue worker --app tasks:app",
    ]
    sh(f"{sys.executable} -m pgqueue migrate", tmp_path, env)
    with psycopg.connect(empty_database, autocommit=True) as conn:  # the guide's own table
        conn.execute("CREATE TABLE signups (email text PRIMARY KEY)")
    outputs = []
    with WorkerProcess(empty_database, "tasks:app", env={"PYTHONPATH": path}).wait_ready():
        for n, script in enumerate(scripts):
            (tmp_path / f"snippet{n}.py").write_text(script)
            outputs.append(sh(f"{sys.executable} snippet{n}.py", tmp_path, env).splitlines())
    calling, transaction, canvas = outputs
    assert calling == ["5", "succeeded"]
    assert transaction == []
    assert canvas == ["9", str([2 * i for i in range(10)]), "285", "2"]

    def count(query: str) -> int:
        return int(scalar(empty_database, query))

    assert count("SELECT count(*) FROM signups") == 1
    welcome = "SELECT count(*) FROM pgqueue.runs WHERE kwargs->>'subject' = 'Welcome'"
    assert count(welcome) == 1  # committed with the signup
    assert count("SELECT count(*) FROM pgqueue.runs WHERE task = 'tasks.report'") == 1
    assert count("SELECT count(*) FROM pgqueue.runs WHERE run_at > now() + interval '50 s'") == 2
    schedule = "SELECT count(*) FROM pgqueue.schedules WHERE task = 'tasks.nightly_cleanup'"
    assert count(schedule) == 1


def test_the_changelog_has_a_section_for_this_version() -> None:
    """A release's version (pgqueue.__version__, the one place it is written) has its
    section in CHANGELOG.md, with what changed and what an upgrade needs."""
    import pgqueue

    text = (ROOT / "CHANGELOG.md").read_text()
    section = re.search(
        rf"^## {re.escape(pgqueue.__version__)}\n(.*?)(?=^## |\Z)", text, re.M | re.S
    )
    assert section, f"CHANGELOG.md has no section for {pgqueue.__version__}"
    assert "### Upgrade notes" in section[1] or pgqueue.__version__ == "0.1.0"


def test_the_django_guide_on_a_new_project(tmp_path: Path, empty_database: str) -> None:
    """docs/django.md followed in a project made by `django-admin startproject`: its
    settings blocks (DATABASES, INSTALLED_APPS and PGQUEUE, TASKS), myproj/tasks.py,
    orders/tasks.py, the view and the dashboard's URL, then `manage.py migrate`, the check,
    a request, `manage.py pgqueue worker`, and the admin and dashboard pages of a superuser.
    What the guide leaves to the reader (the orders app and its model, the view's URL, a
    `charge` function) is the only glue."""
    pytest.importorskip("django")
    pytest.importorskip("jinja2")
    import importlib.util

    from psycopg.conninfo import conninfo_to_dict

    from pgqueue.db import migrate

    django6 = importlib.util.find_spec("django.tasks") is not None
    if not django6:
        pytest.importorskip("django_tasks")
    env: dict[str, str] = {}
    sh("django-admin startproject myproj .", tmp_path, env)
    sh(f"{sys.executable} manage.py startapp orders", tmp_path, env)
    (tmp_path / "orders" / "models.py").write_text(
        "from django.db import models\n\n\n"
        "class Order(models.Model):\n"
        "    email = models.EmailField()\n"
        "    status = models.CharField(max_length=20, default='new')\n"
    )

    settings = tmp_path / "myproj" / "settings.py"
    databases = code_block("django.md", '"ENGINE": "django.db.backends.postgresql"')
    apps = code_block("django.md", '"pgqueue.contrib.django",')
    assert apps.count("INSTALLED_APPS = [") == 1
    apps = apps.replace("INSTALLED_APPS = [", "INSTALLED_APPS += [\n    'orders',")
    if django6:  # the guide's comment: the backport's app is for Django 5.2 only
        apps = "\n".join(line for line in apps.splitlines() if '"django_tasks"' not in line)
    params = conninfo_to_dict(empty_database)
    ours = {
        "NAME": params["dbname"],
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password") or "",
        "HOST": params.get("host", ""),
        "PORT": str(params.get("port", "")),
    }
    settings.write_text(
        settings.read_text()
        + databases
        + f"DATABASES['default'].update({ours!r})\n"
        + apps
        + code_block("django.md", '"BACKEND": "pgqueue.contrib.django.PgQueueBackend"')
    )
    (tmp_path / "myproj" / "tasks.py").write_text(code_block("django.md", "# myproj/tasks.py"))
    receipts = code_block("django.md", "# orders/tasks.py").split("\n\nresult =")[0]
    receipts = receipts.replace("-> str: ...", "-> str:\n    return f'receipt {order_id}'")
    if not django6:
        assert "# Django 5.2: from django_tasks import task" in receipts
        receipts = receipts.replace("from django.tasks import", "from django_tasks import")
    (tmp_path / "orders" / "tasks.py").write_text(receipts)
    view = code_block("django.md", "# orders/views.py")
    # glue: the guide's charge() stands for the reader's code; the receipt as in its
    # tasks framework section
    view = view.replace(
        "        charge(order)", "        charge(order)\n        send_receipt.enqueue(order.pk)"
    )
    (tmp_path / "orders" / "views.py").write_text(
        view + "\n\ndef charge(order):\n    pass\n\n\nfrom orders.tasks import send_receipt\n"
    )
    urls = tmp_path / "myproj" / "urls.py"
    mount = code_block("django.md", 'include("pgqueue.contrib.django.urls")')
    mount = mount.replace("urlpatterns = [", "urlpatterns += [\n    path('orders/', create_order),")
    urls.write_text(
        urls.read_text().replace(
            "from django.urls import path", "from django.urls import include, path"
        )
        + "from orders.views import create_order\n"
        + mount
    )

    manage = f"{sys.executable} manage.py"
    sh(f"{manage} makemigrations orders", tmp_path, env)
    out = sh(f"{manage} migrate", tmp_path, env)
    assert f"pgqueue schema (pgqueue's own migrations) at revision {migrate.head()}" in out
    assert "no issues" in sh(f"{manage} check --database default", tmp_path, env)

    request = (
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "made = Client(SERVER_NAME='localhost').post('/orders/', {'email': 'ann@example.com'})\n"
        "print(made.status_code, made.json()['run'])\n"
        "User.objects.create_superuser('admin', 'admin@example.com', 'pw')\n"
    )
    status, run = sh(f'{manage} shell -c "{request}"', tmp_path, env).split()[-2:]
    assert status == "201"
    commands = shell_lines("django.md", "manage.py pgqueue worker")
    worker = next(c for c in commands if "pgqueue worker" in c)
    sh(worker.replace("python manage.py", manage) + " --burst", tmp_path, env)
    done = (
        "from django.test import Client\n"
        "from orders.models import Order\n"
        f"print(Order.objects.get().status, {run})\n"
        "client = Client(SERVER_NAME='localhost')\n"
        "client.login(username='admin', password='pw')\n"
        "for page in ['/admin/pgqueue/run/', '/pgqueue/']:\n"
        "    print(client.get(page).status_code)\n"
    )
    assert sh(f'{manage} shell -c "{done}"', tmp_path, env).split()[-4:] == [
        "confirmed",
        run,
        "200",
        "200",
    ]
    failed = next(c for c in commands if "--state failed" in c)
    assert sh(failed.replace("python manage.py", manage), tmp_path, env).strip() == "(none)"
    assert (
        scalar(empty_database, "SELECT count(*) FROM pgqueue.runs WHERE state = 'succeeded'") == 2
    )
