"""Due times within bounds, payloads within 1 MiB from SQL too, keys in NFC
(docs/security.md, Input limits).

- Runs whose run_at, and events whose deliver_at, lie outside 1970-01-01 .. 9999-12-31
  00:00 UTC (infinity, BC dates, year 10000 and later, which pgqueue.enqueue() accepted
  and Python cannot read back) are moved to the nearest bound, the run's error noting
  what it was; then CHECK constraints keep such values out for good.
- Stored idempotency and unique keys, waiting runs' event keys and events' keys are put
  in Unicode NFC, the form every enqueue now gives them, so that a key stored before
  still matches the same key enqueued after (a key whose NFC form another run already
  holds is left as it was: that run holds it).
- pgqueue.enqueue(), enqueue_unique() and emit_event() check due times, payload sizes and
  normalise keys (pgqueue.check_due(), check_size(), nfc()); pgqueue.queue_stats reads a
  due time out of range without failing.

Revision ID: 0022
Revises: 0021
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history, online

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for name in ("check_due", "check_size", "nfc"):
        op.execute(history.definition(f"functions/{name}", revision))
    for name in ("enqueue", "enqueue_unique", "emit_event"):
        op.execute(history.definition(f"functions/{name}", revision))
    op.execute(history.definition("views/queue_stats", revision))
    # last: from its ALTER TABLEs to the commit, runs and events are locked
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    online.validate("pgqueue.runs", "runs_run_at_range")
    online.validate("pgqueue.events", "events_deliver_at_range")


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
