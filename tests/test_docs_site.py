"""The documentation site (mkdocs.yml): every page in docs/ is in the nav and in README's
list of guides, and the site builds in strict mode (broken links and anchors, pages left
out of the nav and docstrings griffe rejects all fail the build). README.md is also the
package index's description: its links and image are absolute URLs under the
repository's URL (pyproject.toml's [project.urls]), to files that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT

DOCS = ROOT / "docs"
GENERATED = {"index.md", "changelog.md", "benchmarks.md"}  # put in by docs_hooks.py
URLS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
REPOSITORY = URLS["Repository"]
# The target of a Markdown link or image, inline `](target)` or a reference definition
# `[label]: target`, and of an HTML one.
TARGETS = (
    r"\]\(\s*<?([^)\s>]+)",
    r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)",
    r"""(?:href|src)\s*=\s*["']([^"']+)""",
)
ABSOLUTE = re.compile(r"(https?|mailto):")


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
    linked = set(re.findall(rf"{re.escape(REPOSITORY)}/blob/main/docs/([\w/]+\.md)", readme))
    guides = {page for page in docs_pages() if not page.startswith("reference/")}
    assert sorted(guides - linked) == [], "guides README.md does not link to"


def readme_targets() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    return [target for pattern in TARGETS for target in re.findall(pattern, readme, re.M)]


def test_the_project_declares_its_urls() -> None:
    """The package index shows them beside the description; the docs site links to the
    same repository."""
    assert set(URLS) == {"Homepage", "Repository", "Documentation", "Changelog", "Issues"}
    assert all(url.startswith(REPOSITORY) for url in URLS.values()), URLS
    assert REPOSITORY.startswith("https://") and not REPOSITORY.endswith("/")
    repo_url = re.search(r"^repo_url: (\S+)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert repo_url is not None and repo_url.group(1) == REPOSITORY


def test_readme_has_no_relative_link_or_image() -> None:
    """On the package index a relative link or image points nowhere (and an in-page
    `#anchor` misses the index's renamed heading ids): README's are absolute, and those
    into this repository name a file of the tree, at its default branch."""
    targets = readme_targets()
    assert len(targets) >= 20  # the patterns still find them
    assert [t for t in targets if not ABSOLUTE.match(t)] == []
    tree = re.compile(re.escape(REPOSITORY) + r"/(?:blob|raw)/main/([^#?]+)(#[\w-]+)?$")
    ours = [t for t in targets if t.startswith(REPOSITORY + "/")]
    assert ours, "README links to no file of the repository"
    for target in ours:
        match = tree.match(target)
        assert match is not None, f"{target}: not REPOSITORY/blob/main/PATH (raw for an image)"
        assert (ROOT / match.group(1)).is_file(), f"{target}: no such file in the tree"
        if match.group(2):
            assert match.group(1).endswith(".md"), target


def test_readme_as_the_package_index_renders_it_links_nowhere_relative() -> None:
    """README.md through the package index's renderer (readme_renderer, as `twine check`
    runs it): every href and src is absolute, but the renderer's own links to headings,
    and no reference was left undefined (it would show as `[docs/...]` text)."""
    markdown = pytest.importorskip("readme_renderer.markdown")
    html = markdown.render((ROOT / "README.md").read_text())
    if html is None:  # readme_renderer without its Markdown extra
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs readme-renderer[md] (the dev extra installs it)")
        pytest.skip("no Markdown renderer: pip install 'readme-renderer[md]'")
    targets = re.findall(r'(?:href|src)="([^"]*)"', html)
    headings = "#user-content-"
    assert [t for t in targets if not (ABSOLUTE.match(t) or t.startswith(headings))] == []
    assert '<img src="' + REPOSITORY + "/raw/main/docs/images/" in html
    assert "[docs/" not in html and "[bench/" not in html


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
