"""Log setup for `pgqueue worker`: plain text lines, or one JSON object per line; and the
run's fields on every log record emitted while a run executes."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from pgqueue.workflows.context import CURRENT

# The LogRecord attributes a record made while a run executes carries (its task's code, its
# hooks, whatever they call), from pgqueue.current(): the ContextVar the worker sets for
# the attempt, in its thread or in its asyncio task.
RUN_FIELDS = ("pgqueue_run_id", "pgqueue_task", "pgqueue_queue", "pgqueue_attempt")

# Attributes every LogRecord has; anything else came from `extra=` and is a field.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """{"ts", "level", "logger", "message", ...extra fields, "exc_info"?} on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def printed_elsewhere(record: logging.LogRecord) -> bool:
    """Whether a console handler of the record's logger or of an ancestor below the root
    (a framework's own logging config: Django's LOGGING prints `django.*` records to the
    console while DEBUG is on) has printed the record before it reached the root."""
    logger = logging.Logger.manager.loggerDict.get(record.name)
    while isinstance(logger, logging.Logger) and logger is not logging.root:
        for handler in logger.handlers:
            if (
                isinstance(handler, logging.StreamHandler)
                and not isinstance(handler, logging.FileHandler)
                and record.levelno >= handler.level
                and handler.filter(record)
            ):
                return True
        if not logger.propagate:
            break
        logger = logger.parent
    return False


class _OncePerRecord(logging.Filter):
    """The root handler's filter: a record another console handler printed is not
    printed twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not printed_elsewhere(record)


def setup(level: str, fmt: str = "text") -> None:
    """Configure the root logger for a command-line process."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_OncePerRecord())
    logging.basicConfig(level=level.upper(), handlers=[handler])
    logging.getLogger("alembic").setLevel(logging.WARNING)


def install_run_fields() -> None:
    """Make every LogRecord created while a run executes carry RUN_FIELDS (a LogRecord
    factory around the current one; installed once per process, by the worker). A JSON
    formatter, structlog's ExtraAdder or a "%(pgqueue_run_id)s" format then shows them.
    Records made outside a run have none of them."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "pgqueue_run_fields", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        ctx = CURRENT.get(None)
        if ctx is not None:
            record.pgqueue_run_id = ctx.run_id
            record.pgqueue_task = ctx.task
            record.pgqueue_queue = ctx.queue
            record.pgqueue_attempt = ctx.attempt
        return record

    factory.pgqueue_run_fields = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
