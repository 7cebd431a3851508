"""The one encoding of a run to insert: `encode(row)` turns a RunRow into the JSON array
that every enqueue statement reads, through one SQL part (sql/parts/enqueue_run_fields.sql,
which reads position i as FIELDS[i]).

- A run is the array of its fields in the order of FIELDS. args and kwargs come first, as
  the JSON text they already are; a missing or null value is the field's absence.
- A statement that inserts several runs takes a document, the array of their arrays
  (`document`). enqueue_many's batch (pgqueue.enqueue.options.RunBatch) sends the prefix
  of each run's array that varies per run ([args, kwargs], or [args, kwargs, group_key])
  and the rest once, as the encoding of the batch's shared row.

Adding an enqueue option: its field in EnqueueOptions and RunRow (pgqueue.enqueue.options),
its place in FIELDS and in `encode` (and in `plain`, if a run with it is not plain), its
reading in sql/parts/enqueue_run_fields.sql and its column in the insert
(sql/parts/enqueue_insert.sql, sql/enqueue_runs_plain.sql; sql/functions/enqueue_unique.sql
for a run with a unique key). tests/enqueue/test_encoding.py checks that they agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from json.encoder import encode_basestring

from pgqueue.enqueue.options import RunRow

# A str as a JSON string, non-ASCII characters as they are (json's ensure_ascii=False).
_str = encode_basestring

# Position i of a run's array holds field FIELDS[i] (RunRow's fields, in this order).
FIELDS = (
    "args",
    "kwargs",
    "group_key",
    "idempotency_key",
    "task",
    "queue",
    "priority",
    "max_attempts",
    "timeout_seconds",
    "run_at",
    "delay",
    "parent_id",
    "unique_key",
    "unique_while",
    "unique_for",
    "replace",
    "after",
    "on_dependency_failure",
    "cancel_running",
)


def encode(row: RunRow) -> str:
    """The run as the enqueue statements read it: a JSON array in the order of FIELDS.
    Written out field by field: JSONEncoder.encode of the same list took 1.5 us a run,
    this 0.6 (the values are checked already: names and keys are str, numbers finite)."""
    r = row
    return (
        f"[{r.args},{r.kwargs},{_text(r.group_key)},{_text(r.idempotency_key)},"
        f"{_str(r.task)},{_str(r.queue)},{r.priority:d},{r.max_attempts:d},"
        f"{_seconds(r.timeout_seconds)},"
        f"{'null' if r.run_at is None else _str(r.run_at.isoformat())},"
        f"{_seconds(r.delay)},{'null' if r.parent_id is None else int(r.parent_id)},"
        f"{_text(r.unique_key)},{_text(r.unique_while)},{_seconds(r.unique_for)},"
        f"{'true' if r.replace else 'false'},{_ids(r.after)},{_text(r.on_dependency_failure)},"
        f"{'true' if r.cancel_running else 'false'}]"
    )


def _text(value: str | None) -> str:
    return "null" if value is None else _str(value)


def _ids(value: tuple[int, ...] | None) -> str:
    return "null" if value is None else f"[{','.join(map(str, value))}]"


def _seconds(value: float | None) -> str:
    return "null" if value is None else repr(float(value))


def document(rows: Sequence[RunRow]) -> str:
    """Several runs: the JSON array of their encodings, in order."""
    return "[" + ",".join(map(encode, rows)) + "]"


def plain(row: RunRow) -> bool:
    """Whether the run has only the fields every run has (task, queue, priority, args,
    kwargs, max_attempts, timeout_seconds): due now, with no key, group, parent,
    uniqueness or dependency. sql/enqueue_run_plain.sql inserts such a run, leaving the rest to the
    columns' defaults."""
    return (
        row.run_at is None
        and row.delay is None
        and row.group_key is None
        and row.idempotency_key is None
        and row.parent_id is None
        and row.unique_key is None
        and row.after is None
    )
