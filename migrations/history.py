"""Definitions as the revisions before a later change installed them.

A revision that creates a function from sql/ gets the file's current text. When a later
revision changes that text to use something the later revision adds (a column), a
database migrated only that far, or one between the two while `pgqueue migrate` runs
(each revision commits on its own), would get a function that fails at its first call.
So the revisions before such a change install the text as it stood before it, kept here
(versions/pre<REVISION>_<NAME>.sql); the changing revision installs sql/'s.
"""

from __future__ import annotations

from pathlib import Path

from pgqueue.db import sql as _sql

VERSIONS = Path(__file__).parent / "versions"
# functions/NAME -> the revisions that changed its text (to need that revision's schema,
# or to behave differently), oldest first; the text before each is pre<REVISION>_<NAME>.sql
CHANGED_BY: dict[str, tuple[str, ...]] = {
    "functions/claim_limited": ("0029", "0031"),
    "functions/enqueue": ("0028",),
    "functions/enqueue_unique": ("0028", "0030"),
}
# functions/NAME -> the revision that added it: a revision before it that installs every
# function of sql/ (0021) leaves it out
ADDED_BY = {
    "functions/runs_after_canceled": "0028",
    "functions/runs_dependency_done": "0028",
    "functions/runs_enqueue_after": "0028",
}


def functions(revision: str) -> list[str]:
    """The names of sql/functions/ that exist at `revision`, sorted."""
    return [
        path.partition("/")[2]
        for path in _sql.definitions()
        if path.startswith("functions/") and ADDED_BY.get(path, "") <= revision
    ]


def definition(path: str, revision: str) -> str:
    """The definition `path` ("functions/NAME") for revision `revision`: its text before
    the first revision after `revision` that changed it, if there is one."""
    for changed in CHANGED_BY.get(path, ()):
        if revision < changed:
            name = path.partition("/")[2]
            return (VERSIONS / f"pre{changed}_{name}.sql").read_text()
    return _sql.definition(path)
