"""ctx.map(name, task, items): one child run per item, a durable wait for all of them, and
their results in the items' order.

The children are enqueued in one statement, each with the idempotency key of a child of
this step (`name[i]`), so a parent that re-executes (after a wait, a retry, a worker's
death) finds the same children instead of making new ones; the step stores their ids.
While some child is not terminal, the parent waits for the one with the highest id (the
last to start in FIFO order, so usually the last to finish) and, woken, looks at all of
them again: one read of the children per wake-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pgqueue.db import payload as _json
from pgqueue.db import sql as _sql
from pgqueue.enqueue.options import EnqueueOptions
from pgqueue.errors import ChildFailed, ChildMissing
from pgqueue.states import RunState, StepState
from pgqueue.workflows.determinism import call_text

if TYPE_CHECKING:
    from pgqueue.tasks.task import Task
    from pgqueue.workflows.durable import Durable

TERMINAL = (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELED)


def map_children(
    durable: Durable,
    name: str,
    task: Task[Any, Any],
    items: Iterable[Sequence[Any] | Mapping[str, Any] | Any],
    return_exceptions: bool,
) -> list[Any]:
    from pgqueue.workflows.durable import CHILD_KEY, Suspend

    rec = durable.check(name, call_text(f"ctx.map {task.name}"))
    if rec is not None and rec.state == StepState.SUCCEEDED:
        return _outcomes(rec.output)
    if rec is not None and rec.state == StepState.WAITING:
        ids = [int(i) for i in rec.output["run_ids"]]
    else:
        rows = []
        for i, item in enumerate(items):
            args, kwargs = _split(item)
            key = CHILD_KEY.format(parent=durable.run_id, name=f"{name}[{i}]")
            opts = EnqueueOptions(idempotency_key=key, parent_id=durable.run_id)
            rows.append(task.make_row(args, kwargs, opts))
        ids = [h.id for h in durable.enqueuer.insert_runs(rows)]
        durable.record(name, StepState.WAITING, output=_json.dumps({"run_ids": ids}, what="map"))
    with durable.database.connection() as conn:
        found = conn.execute(_sql.query("children_states"), {"ids": ids}).fetchall()
    by_id = {row[0]: row for row in found}
    outcomes: list[dict[str, Any]] = []
    pending = None
    for child_id in ids:
        row = by_id.get(child_id)
        if row is None:
            raise ChildMissing(child_id, durable.run_id, name)
        _, state, result, error, child_task = row
        if state == RunState.SUCCEEDED:
            outcomes.append({"ok": result})
        elif state in TERMINAL:
            failure = {"run_id": child_id, "task": child_task, "state": state, "error": error}
            if not return_exceptions:
                durable.record(
                    name, StepState.FAILED, error=f"child run {child_id} {state}: {error}"
                )
                raise ChildFailed(child_id, child_task, state, error)
            outcomes.append({"failed": failure})
        else:
            pending = child_id if pending is None else max(pending, child_id)
    if pending is not None:
        raise Suspend(RunState.WAITING, None, wait_run_id=pending)
    text = _json.dumps(
        outcomes,
        what=f"the results of map {name!r}",
        limit=durable.database.max_payload_bytes,
        max_depth=durable.database.max_json_depth + 2,
    )
    durable.record(name, StepState.SUCCEEDED, output=text)
    return _outcomes(_json.loads(text))


def _split(item: Any) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """An item as the child's arguments: a tuple or list is its positional arguments, a
    dict its keyword arguments, anything else its one argument."""
    if isinstance(item, (list, tuple)):
        return item, {}
    if isinstance(item, Mapping):
        return (), dict(item)
    return (item,), {}


def _outcomes(stored: list[dict[str, Any]]) -> list[Any]:
    """The stored outcomes as ctx.map returns them: results, and (return_exceptions=True)
    a ChildFailed in place of each failed child."""
    out: list[Any] = []
    for o in stored:
        if "ok" in o:
            out.append(o["ok"])
        else:
            f = o["failed"]
            out.append(ChildFailed(f["run_id"], f["task"], f["state"], f["error"]))
    return out
