"""MkDocs hooks (mkdocs.yml): README.md is the site's home page, CHANGELOG.md its changelog
and bench/RESULTS.md its benchmarks page, so each text is written once. Their links are
written for the repository (README's are absolute URLs under the repository's URL, so
that they work on the package index too: `REPO/blob/main/docs/sql.md`; the changelog's
and the guides' are relative: `docs/sql.md`, `../bench/RESULTS.md`); these hooks point
them at the site's pages instead, which mkdocs' strict build then checks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).parent
PAGES = {
    "index.md": ROOT / "README.md",
    "changelog.md": ROOT / "CHANGELOG.md",
    "benchmarks.md": ROOT / "bench" / "RESULTS.md",
}
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
# A link's target: after "](" (inline) or "]: " (a reference definition)
TARGET = r"(\]\(|\]: )"


def on_files(files: Files, config: Any) -> Files:
    for name, source in PAGES.items():
        files.append(File.generated(config, name, content=source.read_text()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri in ("index.md", "changelog.md"):
        tree = re.escape(REPOSITORY) + r"/(?:blob|raw)/main/"
        markdown = re.sub(TARGET + tree + r"README\.md#", r"\1#", markdown)
        markdown = re.sub(TARGET + tree, r"\1", markdown)
        markdown = re.sub(TARGET + r"docs/", r"\1", markdown)
        markdown = re.sub(TARGET + r"bench/RESULTS\.md", r"\1benchmarks.md", markdown)
    return re.sub(r"\]\(\.\./bench/RESULTS\.md", "](benchmarks.md", markdown)
