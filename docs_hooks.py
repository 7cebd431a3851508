"""MkDocs hooks (mkdocs.yml): README.md is the site's home page, CHANGELOG.md its changelog
and bench/RESULTS.md its benchmarks page, so each text is written once. Their links are
written for the repository's tree (README's `docs/sql.md`, the guides'
`../bench/RESULTS.md`); these hooks point them at the site's pages instead."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).parent
PAGES = {
    "index.md": ROOT / "README.md",
    "changelog.md": ROOT / "CHANGELOG.md",
    "benchmarks.md": ROOT / "bench" / "RESULTS.md",
}


def on_files(files: Files, config: Any) -> Files:
    for name, source in PAGES.items():
        files.append(File.generated(config, name, content=source.read_text()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri in ("index.md", "changelog.md"):
        markdown = re.sub(r"\]\(docs/", "](", markdown)
        markdown = re.sub(r"\]\(bench/RESULTS\.md", "](benchmarks.md", markdown)
    return re.sub(r"\]\(\.\./bench/RESULTS\.md", "](benchmarks.md", markdown)
