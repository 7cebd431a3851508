"""The one JSON codec: strict (no NaN, no implicit str() of unknown objects), compact."""

from __future__ import annotations

import json
import re
from typing import Any

from pgqueue.errors import InvalidArguments, PayloadTooLarge

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
# Deeper JSON than this is refused at enqueue: decoding it costs a worker a stack frame a
# level (Python's json module raises RecursionError near 1,000), and one such run must not
# make the worker fail a whole claim. pgqueue.enqueue() in SQL has the same limit.
DEFAULT_MAX_JSON_DEPTH = 256
# One encoder, built once: json.dumps() with non-default options builds a new one per call.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)
# The escape of a NUL character (an even number of backslashes before it: `\\u0000` is a
# backslash followed by the text "u0000", which is fine). JSON allows it, jsonb does not.
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# For too_deep(): brackets of either kind as `[]`, and `"`; every other byte goes.
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(set(range(256)) - set(b'[]{}"'))


def too_deep(data: bytes, max_depth: int) -> bool:
    """Whether the JSON text `data` nests arrays and objects deeper than `max_depth`.

    Text too short to hold max_depth + 1 pairs of brackets, or with too few opening ones,
    is not read further: nearly every payload costs a len(). Otherwise, in C-speed bytes
    operations (a Python loop over the text cost four times the encoding): escapes go,
    then everything but brackets and quotes, then the strings, whose brackets are text;
    what is left is the bracket tree, and each `replace` removes its leaves, one level.
    About 70 us for the document of a 1,000-run enqueue_many chunk of small arguments
    (its encoding: 400 us)."""
    if len(data) <= 2 * max_depth + 1 or data.count(b"[") + data.count(b"{") <= max_depth:
        return False
    if b"\\" in data:
        # left to right, a pair of backslashes is an escaped backslash; then a backslash
        # before a quote makes it a quote inside a string
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    # `""` is an empty string or two strings side by side: either way, dropping it keeps
    # every bracket inside or outside the strings it was
    tree = data.translate(_BRACKETS, _NOT_BRACKET).replace(b'""', b"")
    if b'"' in tree:
        tree = b"".join(tree.split(b'"')[::2])
    for _ in range(max_depth):
        if not tree:
            return False
        tree = tree.replace(b"[]", b"")
    return bool(tree)


def dumps(
    value: Any,
    *,
    what: str,
    limit: int = DEFAULT_MAX_PAYLOAD_BYTES,
    max_depth: int = DEFAULT_MAX_JSON_DEPTH,
) -> str:
    """Serialise `value`; `what` names it in errors ("arguments of task 'x'")."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(
            f"{what} must be JSON: {exc}. Pass plain dicts, lists, str, int, float, bool or None "
            "(e.g. an id instead of an object, an ISO string instead of a datetime)"
        ) from None
    except RecursionError:
        raise _too_deep(what, max_depth) from None
    if "\\u0000" in text and _NUL.search(text):
        raise InvalidArguments(
            f"{what} must not contain a NUL character (\\x00): PostgreSQL cannot store it "
            "in jsonb. Remove it, or pass binary data base64-encoded"
        )
    try:
        data = text.encode()
    except UnicodeEncodeError as exc:
        raise _not_unicode(what, exc) from None
    size = len(data)
    if size > limit:
        raise PayloadTooLarge(
            f"{what} are {size:,} bytes, over the {limit:,}-byte limit: store large data "
            "in your own table and pass its id (or raise App(max_payload_bytes=...))"
        )
    # too_deep() starts with the length test; made here, it saves most payloads a call
    if size > 2 * max_depth + 1 and too_deep(data, max_depth):
        raise _too_deep(what, max_depth)
    return text


def _too_deep(what: str, max_depth: int) -> InvalidArguments:
    return InvalidArguments(
        f"{what}: nested deeper than {max_depth} levels of lists and dicts; flatten them "
        "(or raise App(max_json_depth=...))"
    )


def _not_unicode(what: str, exc: UnicodeEncodeError) -> InvalidArguments:
    char = exc.object[exc.start : exc.start + 1]
    return InvalidArguments(
        f"{what} must be valid Unicode: {char!r} at position {exc.start} is a lone surrogate, "
        "which UTF-8 cannot encode (decode bytes with errors='replace' before passing them)"
    )


def loads(text: str | bytes) -> Any:
    return json.loads(text)
