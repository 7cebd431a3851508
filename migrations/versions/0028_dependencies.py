"""Dependencies between runs (docs/flow_control.md, Dependencies):
`task.options(after=[...], on_dependency_failure="cancel"|"run")` and
`pgqueue.enqueue(..., after => array[...]::bigint[])`.

- runs.after (bigint[]): the runs it waits for; runs.on_dependency_failure ('cancel' or
  'run'); runs.after_due: its due time while it waits (its run_at is then 9999-12-31);
  runs.has_dependents: some run waits for it (the condition of the trigger that releases
  them). All nullable or with a constant default: no rewrite, and the inserts of a
  release before this one (which name none of them) go on as they were.
- runs_after_idx: the waiting runs by the ids they wait for (GIN, partial: only runs
  waiting for dependencies), which the release reads.
- The triggers runs_enqueue_after, runs_after_canceled, runs_dependency_done and
  runs_dependency_deleted (0028_dependencies.sql) and their functions; pgqueue.enqueue()
  and pgqueue.enqueue_unique() write the two new options.

Revision ID: 0028
Revises: 0027
"""

from pathlib import Path

from alembic import op
from pgqueue.migrations import history, online

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The columns, with their CHECK NOT VALID (validated after the commit: the table is
    # not held for a scan, pgqueue.migrations.online), and a constant default: no rewrite.
    op.execute(
        """
        ALTER TABLE pgqueue.runs
            ADD COLUMN IF NOT EXISTS after bigint[],
            ADD COLUMN IF NOT EXISTS on_dependency_failure text,
            ADD COLUMN IF NOT EXISTS after_due timestamptz,
            ADD COLUMN IF NOT EXISTS has_dependents boolean NOT NULL DEFAULT false,
            DROP CONSTRAINT IF EXISTS runs_on_dependency_failure_check,
            ADD CONSTRAINT runs_on_dependency_failure_check
                CHECK (on_dependency_failure IN ('cancel', 'run')) NOT VALID
        """
    )
    for name in (
        "runs_enqueue_after",
        "runs_after_canceled",
        "runs_dependency_done",
        "enqueue",
        "enqueue_unique",
    ):
        op.execute(history.definition(f"functions/{name}", revision))
    op.execute(Path(__file__).with_suffix(".sql").read_text())
    online.validate("pgqueue.runs", "runs_on_dependency_failure_check")
    # Built CONCURRENTLY, outside the revision's transaction: claims and enqueues go on
    # meanwhile. Tiny: only the runs waiting for dependencies.
    online.create_index(
        "runs_after_idx",
        "ON pgqueue.runs USING gin (after) WHERE state = 'waiting' AND after IS NOT NULL",
    )


def downgrade() -> None:
    raise NotImplementedError("pgqueue migrations are forward-only")
