"""The documentation site (mkdocs.yml): every page in docs/ is in the nav and in README's
list of guides, and the site builds in strict mode (broken links and anchors, pages left
out of the nav and docstrings griffe rejects all fail the build)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT

DOCS = ROOT / "docs"
GENERATED = {"index.md", "changelog.md", "benchmarks.md"}  # put in by docs_hooks.py


def nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [page for value in node.values() for page in nav_pages(value)]
    return [page for item in node for page in nav_pages(item)]


def docs_pages() -> set[str]:
    return {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    assert len(listed) == len(set(listed)), "a page is listed twice in mkdocs.yml's nav"
    assert sorted(docs_pages() - set(listed)) == [], "docs pages missing from mkdocs.yml's nav"
    assert sorted(set(listed) - docs_pages() - GENERATED) == [], "nav entries with no page"


def test_readme_lists_every_guide() -> None:
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\(docs/([\w/]+\.md)", readme))
    guides = {page for page in docs_pages() if not page.startswith("reference/")}
    assert sorted(guides - linked) == [], "guides README.md does not link to"


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    if os.environ.get("CI") != "true":
        pytest.importorskip("mkdocstrings")
        pytest.importorskip("material")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    home = (tmp_path / "index.html").read_text()
    assert 'href="sql/"' in home  # README's docs/sql.md, pointed at the site's page
    django = (tmp_path / "reference/django/index.html").read_text()
    assert "pgqueue.contrib.django.backend.PgQueueBackend" in django


def test_every_document_the_tree_names_is_in_the_repository() -> None:
    """A comment, docstring or page that names a document (a Markdown file, a section of
    a design document) names one in the repository, or a page docs_hooks.py generates."""
    tracked = subprocess.run(
        [
            "git",
            "ls-files",
            "pgqueue",
            "sql",
            "migrations",
            "tests",
            "docs",
            "bench",
            "examples",
            "README.md",
            "CHANGELOG.md",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    names = {Path(path).name for path in tracked} | GENERATED
    missing = []
    for path in tracked:
        if not path.endswith((".py", ".sql", ".md", ".html", ".js", ".pml")):
            continue
        text = (ROOT / path).read_text(errors="replace")
        for cited in re.findall(r"\bDESIGN\b[ .]*\w*", text):
            missing.append(f"{path}: {cited}")
        for cited in re.findall(r"[\w./-]*\w\.md\b", text):
            if Path(cited).name not in names:
                missing.append(f"{path}: {cited}")
    assert not missing, missing
