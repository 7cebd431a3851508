"""The one JSON codec: strict (no NaN, no implicit str() of unknown objects), compact."""

from __future__ import annotations

import json
import re
from typing import Any

from pgqueue.errors import InvalidArguments, PayloadTooLarge

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
# One encoder, built once: json.dumps() with non-default options builds a new one per call.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)
# The escape of a NUL character (an even number of backslashes before it: `\\u0000` is a
# backslash followed by the text "u0000", which is fine). JSON allows it, jsonb does not.
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def dumps(value: Any, *, what: str, limit: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Serialise `value`; `what` names it in errors ("arguments of task 'x'")."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(
            f"{what} must be JSON: {exc}. Pass plain dicts, lists, str, int, float, bool or None "
            "(e.g. an id instead of an object, an ISO string instead of a datetime)"
        ) from None
    if "\\u0000" in text and _NUL.search(text):
        raise InvalidArguments(
            f"{what} must not contain a NUL character (\\x00): PostgreSQL cannot store it "
            "in jsonb. Remove it, or pass binary data base64-encoded"
        )
    size = len(text.encode())
    if size > limit:
        raise PayloadTooLarge(
            f"{what} are {size:,} bytes, over the {limit:,}-byte limit: store large data "
            "in your own table and pass its id (or raise App(max_payload_bytes=...))"
        )
    return text


def loads(text: str | bytes) -> Any:
    return json.loads(text)
