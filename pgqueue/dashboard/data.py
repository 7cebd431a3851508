"""What the dashboard shows and does, read from and written to the database: one function
per page or action, each on a connection, returning plain values (the JSON endpoints
serve them as they are; the pages render them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, LiteralString

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgqueue.dashboard import why
from pgqueue.db import sql as _sql
from pgqueue.enqueue import events as _events
from pgqueue.errors import RunNotFound, UserError
from pgqueue.ops import audit as _audit
from pgqueue.ops import bulk as _bulk
from pgqueue.ops import operator as _operator
from pgqueue.ops import search_indexes
from pgqueue.schedules import schedule as _schedules
from pgqueue.states import FINISHED_STATES, LIVE_STATES, STATES, RunState
from pgqueue.tasks import registry as _registry

PAGE_SIZE = 50
# A page of runs reads at most this many runs after its cursor, whatever its filters
# match: rare matches cost more pages, never a slower page.
SCAN = 2000
MAX_CHILDREN = 200
FAR_FUTURE_YEAR = 9999  # complete.sql's "no deadline" for a wait


class BadRequest(UserError, ValueError):
    """A filter, cursor or action the dashboard cannot act on (HTTP 400)."""


class NotFound(UserError, LookupError):
    """No such run, queue, schedule or batch (HTTP 404)."""


@dataclass(frozen=True)
class RunFilter:
    state: str | None = None
    queue: str | None = None
    task: str | None = None
    group: str | None = None
    q: str | None = None
    arg: str | None = None  # JSON: a value the runs' arguments contain
    error_class: str | None = None  # the error's first line up to its colon (Failures page)

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> RunFilter:
        def text(name: str) -> str | None:
            value = values.get(name)
            if value is None or value == "":
                return None
            if not isinstance(value, str):
                raise BadRequest(f"filter {name!r} must be a string")
            if "\x00" in value or len(value) > 512:
                raise BadRequest(f"filter {name!r} is not a name (NUL, or over 512 characters)")
            return value

        state = text("state")
        if state is not None and state not in STATES:
            raise BadRequest(f"unknown state {state!r}: one of {', '.join(STATES)}")
        arg = text("arg")
        if arg is not None:
            try:
                json.loads(arg)
            except ValueError:
                raise BadRequest(
                    'filter "arg" must be JSON: {"user_id": 42} (a keyword argument), '
                    '[42] or 42 (a positional one), "text"'
                ) from None
        return cls(
            state, text("queue"), text("task"), text("group"), text("q"), arg, text("error_class")
        )

    def params(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "task": self.task,
            "group": self.group,
            "q": self.q,
            "arg": self.arg,
            "error_class": self.error_class,
        }

    def to_json(self) -> dict[str, str]:
        fields = {"state": self.state, **self.params()}
        return {k: v for k, v in fields.items() if v is not None}


def _literals(states: tuple[str, ...]) -> sql.Composable:
    assert all(s in STATES for s in states)
    return sql.SQL(", ").join(sql.Literal(s) for s in states)


def states_query(name: str, **states: tuple[str, ...]) -> sql.Composed:
    """sql/<name>.sql with its {state lists} filled in as literals: a partial index
    applies only when the planner sees the state, which a parameter would hide from a
    generic plan."""
    text: LiteralString = _sql.query(name)
    return sql.SQL(text).format(**{k: _literals(v) for k, v in states.items()})


# A list with no state and a queue or a task (or a group, with its indexes) reads these
# sections one after the other: the unfinished runs newest (largest id) first, then the
# finished ones most recently finished first, each through an index keyed by the queue,
# the task or the group.
UNFINISHED, FINISHED = "unfinished", "finished"
SECTIONS = (UNFINISHED, FINISHED)


def sections(filt: RunFilter, group_index: bool = False) -> tuple[str, ...]:
    """The sections a list of `filt` reads in turn: SECTIONS with no state and a queue, a
    task, or a group when runs_live_group_idx and runs_finished_group_idx exist
    (`group_index`), else one ("": the list itself)."""
    keyed = filt.queue is not None or filt.task is not None
    if filt.state is None and (keyed or (filt.group is not None and group_index)):
        return SECTIONS
    return ("",)


def runs_query(
    filt: RunFilter,
    flagged: bool = False,
    task_index: bool = False,
    section: str = "",
    group_index: bool = False,
) -> tuple[sql.Composed, bool]:
    """The statement of a page of runs matching `filt` (of its `section`, sections()),
    and whether it pages by finish time (finished states) rather than by id. A state with
    a queue reads an index keyed by them, so that every run it reads matches those: the
    page is exact at any depth; so does a state with a group when runs_live_group_idx and
    runs_finished_group_idx exist (`group_index`: `pgqueue runs search-index --by group`;
    in any queue, the queue then a filter of the group's runs), else a group's unfinished
    runs in a queue whose runs are `flagged` limited; and a state with a task when
    runs_live_task_idx and runs_finished_task_idx exist (`task_index`: `pgqueue runs
    search-index --by task`). A group with its indexes comes first: a group's runs are
    usually fewer than a task's or a queue's. With no state, a queue, a task or an indexed
    group reads the same indexes in sections (no_state_query). Other filters (a group
    elsewhere without its indexes, q, arg, a task without its indexes, no state and no
    queue, task or indexed group) apply to the runs read, at most SCAN a page."""
    state = filt.state
    by_group = filt.group is not None and group_index
    if state is None:
        return no_state_query(filt, flagged, task_index, section, group_index)
    if section:
        raise ValueError(f"a list with a state has no section {section!r}")
    if state in FINISHED_STATES:
        if by_group:
            name = "dashboard_runs_by_finish_group"
            return states_query(name, window=FINISHED_STATES, states=(state,)), True
        if filt.task is not None and task_index:
            name = "dashboard_runs_by_finish_task"
            return states_query(name, window=FINISHED_STATES, states=(state,)), True
        if filt.queue is not None:
            name = "dashboard_runs_by_finish_queue"
            return states_query(name, window=FINISHED_STATES, states=(state,)), True
        if state == RunState.FAILED:  # runs_failed_idx holds them alone
            return states_query("dashboard_runs_by_finish_failed", states=(state,)), True
        name = "dashboard_runs_by_finish"
        return states_query(name, window=FINISHED_STATES, states=(state,)), True
    if by_group:  # unfinished: group, state
        name = "dashboard_runs_live_group_any"
        return states_query(name, window=LIVE_STATES, states=(state,)), False
    grouped = filt.queue is not None and filt.group is not None and flagged
    if state == RunState.QUEUED and grouped:
        return states_query("dashboard_runs_queued_group"), False
    if state in LIVE_STATES and grouped:
        return states_query("dashboard_runs_live_group", window=LIVE_STATES), False
    if filt.task is not None and task_index:  # unfinished: task, state
        name = "dashboard_runs_live_task"
        return states_query(name, window=LIVE_STATES, states=(state,)), False
    if state == RunState.QUEUED:  # the backlog can be millions: a skip scan of its index
        if filt.queue is not None:
            return states_query("dashboard_runs_queued_queue"), False
        return states_query("dashboard_runs_queued"), False
    if filt.queue is not None:
        return states_query("dashboard_runs_live_queue", states=(state,)), False
    return states_query("dashboard_runs_live", states=(state,)), False


def no_state_query(
    filt: RunFilter, flagged: bool, task_index: bool, section: str, group_index: bool = False
) -> tuple[sql.Composed, bool]:
    """runs_query() of a list with no state. With a queue, a task or a group with its
    indexes (`group_index`) it has two sections. The unfinished runs: a group's through
    runs_live_group_idx when it exists (exact), else a task's through runs_live_task_idx
    when it exists (exact), else a group of a `flagged` queue through runs_group_order_idx
    (exact), else a queue's through its states' partial indexes, keyed by queue (exact),
    else, a task alone without its index, every queue's (the task a bounded filter of
    them). Then the finished runs, through runs_finished_group_idx (with `group_index`),
    runs_finished_task_idx (with `task_index`) or runs_finished_queue_idx: exact; a task
    alone without its index, every queue's (bounded). Without a queue, a task or an indexed
    group, the runs of every state along the primary key, the filters bounded."""
    by_group = filt.group is not None and group_index
    if sections(filt, group_index) != SECTIONS:
        if section:
            raise ValueError(f"this list has no section {section!r}")
        return states_query("dashboard_runs_by_id", states=STATES), False
    if section == FINISHED:
        if by_group:
            name = "dashboard_runs_by_finish_group"
        elif filt.task is not None and task_index:
            name = "dashboard_runs_by_finish_task"
        elif filt.queue is not None:
            name = "dashboard_runs_by_finish_queue"
        else:  # a task alone, without its index: the task a bounded filter
            name = "dashboard_runs_by_finish"
        return states_query(name, window=FINISHED_STATES, states=FINISHED_STATES), True
    if section != UNFINISHED:
        raise ValueError(f"a list with no state has sections {SECTIONS}, not {section!r}")
    if by_group:
        return states_query("dashboard_runs_unfinished_group", window=LIVE_STATES), False
    if filt.task is not None and task_index:
        return states_query("dashboard_runs_unfinished_task", window=LIVE_STATES), False
    if filt.queue is not None and filt.group is not None and flagged:
        return states_query("dashboard_runs_live_group", window=LIVE_STATES), False
    if filt.queue is not None:
        return states_query("dashboard_runs_unfinished_queue"), False
    return states_query("dashboard_runs_unfinished"), False


# -- reading ---------------------------------------------------------------------------


def overview(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Every queue's counts, limits and recent figures, its all-time totals of finished
    runs by state (`succeeded_total`...; `totals`: over every queue), and the last hour
    per minute."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_sql.query("no_jit"))
        queues = cur.execute(_sql.query("dashboard_queues")).fetchall()
        minutes = cur.execute(_sql.query("dashboard_throughput")).fetchall()
        now = cur.execute("SELECT now() AS now").fetchone()
        totals = cur.execute(_sql.query("dashboard_totals")).fetchall()
    assert now is not None
    for q in queues:
        q.pop("now", None)
        q["limits"] = limits_text(q)
    by_queue: dict[str, dict[str, int]] = {}
    for t in totals:
        by_queue.setdefault(t["queue"], {})[t["state"]] = int(t["n"])
    for q in queues:
        for state in FINISHED_STATES:
            q[f"{state.value}_total"] = by_queue.get(q["queue"], {}).get(state, 0)
    everything = {
        state.value: sum(n.get(state, 0) for n in by_queue.values()) for state in FINISHED_STATES
    }
    return {"now": now["now"], "queues": queues, "throughput": minutes, "totals": everything}


def limits_text(q: dict[str, Any]) -> list[str]:
    """A queue's limits in words, rate limits with their use (the overview's Limits)."""
    out = []
    if q["concurrency"]:
        out.append(f"{q['concurrency']} at once")
    if q["group_concurrency"]:
        out.append(f"{q['group_concurrency']} per group")
    if q["rate_limit"]:
        out.append(f"{q['rate_limit']} ({q['rate_used'] or 0} used)")
    if q["group_rate_limit"]:
        out.append(f"{q['group_rate_limit']} per group")
    if q["ordered"]:
        out.append("ordered groups")
    if q.get("group_weights"):
        named = ", ".join(f"{g} {w}" for g, w in sorted(q["group_weights"].items()))
        out.append(f"group weights {named} (others {q['default_group_weight']})")
    return out


FAILURE_SCAN = 20_000  # failed runs the Failures page groups, the newest first


def failures(conn: psycopg.Connection[Any], limit: int = 100) -> dict[str, Any]:
    """The newest FAILURE_SCAN failed runs grouped by task and error class, largest groups
    first, and how many failed runs there are in all (the tally's totals)."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_sql.query("no_jit"))
        groups = cur.execute(
            _sql.query("dashboard_failures"), {"scan": FAILURE_SCAN, "limit": limit}
        ).fetchall()
    scanned = int(groups[0]["scanned"]) if groups else 0
    for g in groups:
        del g["scanned"]
    return {"groups": groups, "scanned": scanned, "scan_limit": FAILURE_SCAN}


def list_runs(
    conn: psycopg.Connection[Any], filt: RunFilter, cursor: str | None, limit: int = PAGE_SIZE
) -> dict[str, Any]:
    """A page of runs, newest first, and the cursor of the next page (None: no more).
    A list in sections (sections()) fills a page from the next section once one ends; its
    cursor names the section it continues. Queued, scheduled and waiting runs carry
    `why`: what keeps each from running."""
    flagged = False
    state_ok = filt.state is None or filt.state in LIVE_STATES
    if state_ok and filt.queue is not None and filt.group is not None:
        row = conn.execute(_sql.query("dashboard_queue_flagged"), {"queue": filt.queue})
        found = row.fetchone()
        flagged = bool(found and found[0])
    task_index = filt.task is not None and search_indexes.ready(conn, "task")
    group_index = filt.group is not None and search_indexes.ready(conn, "group")
    # an argument filter with runs_args_idx: the index's matches, every one on the page;
    # a custom plan each time, so the planner weighs how many runs match
    indexed_arg = filt.arg is not None and search_indexes.ready(conn, "arguments")
    parts = ("",) if indexed_arg else sections(filt, group_index)
    section, before_at, before_id = parse_section_cursor(cursor, parts)
    runs: list[dict[str, Any]] = []
    scanned = 0
    next_cursor = None
    while True:
        if indexed_arg:
            query, by_finish = states_query("dashboard_runs_by_arg", states=STATES), False
        else:
            query, by_finish = runs_query(filt, flagged, task_index, section, group_index)
        if not section:  # one list: its cursor is of its own kind
            before_at, before_id = parse_cursor(cursor, by_finish)
        wanted = limit - len(runs)
        params = {
            **filt.params(),
            "state": filt.state,
            "limit": wanted,
            "scan": SCAN,
            "before_id": before_id,
        }
        if by_finish:
            params["before_at"] = before_at
        found, first = read_page(conn, query, params, prepare=False if indexed_arg else None)
        scanned += first["scanned"]
        runs += found
        if len(found) == wanted:
            last = found[-1]
            at = last["finished_at"] if by_finish else None
            next_cursor = make_cursor(at, last["id"], section)
            break
        if first["scanned"] == SCAN:
            next_cursor = make_cursor(first["last_at"], first["last_id"], section)
            break
        if section == parts[-1]:  # the list has ended
            break
        section = parts[parts.index(section) + 1]
        before_at, before_id = END, MAX_ID
    reasons = explain(conn, [r["id"] for r in runs if r["state"] in why.EXPLAINED])
    reasons |= stale(conn, [r["id"] for r in runs if r["state"] == RunState.RUNNING])
    for r in runs:
        r["why"] = reasons.get(r["id"])
    return {"runs": runs, "next": next_cursor, "scanned": scanned, "filter": filt.to_json()}


def read_page(
    conn: psycopg.Connection[Any], query: sql.Composed, params: dict[str, Any], prepare: bool | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The runs a dashboard_runs_* statement found, and its first row: how many runs it
    read (`scanned`) and where it ended (`last_at`, `last_id`)."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query, params, prepare=prepare).fetchall()
    found = [
        {k: v for k, v in r.items() if k not in ("scanned", "last_at", "last_id")}
        for r in rows
        if r["id"] is not None
    ]
    return found, rows[0]


def make_cursor(at: datetime | None, run_id: int, section: str = "") -> str:
    """`id`, or `finished_at~id` for a list by finish time; a section's is prefixed by
    its name and a colon (`unfinished:id`, `finished:finished_at~id`)."""
    position = f"{at.isoformat()}~{run_id}" if at is not None else str(run_id)
    return f"{section}:{position}" if section else position


def parse_cursor(cursor: str | None, by_finish: bool) -> tuple[datetime | None, int]:
    """(finished_at, id) to page after; the start is after everything."""
    if not cursor:
        return END, MAX_ID
    if not by_finish:
        return None, id_cursor(cursor, 0)
    at, _, run_id = cursor.rpartition("~")
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        raise bad_cursor(cursor) from None
    return when, id_cursor(run_id or "x", 0)


def parse_section_cursor(
    cursor: str | None, parts: tuple[str, ...]
) -> tuple[str, datetime | None, int]:
    """The section a page starts in and (finished_at, id) to page after in it: the first
    section from its start without a cursor. A list of one section ("") leaves its cursor
    to parse_cursor()."""
    if parts == ("",):
        return "", END, MAX_ID
    if not cursor:
        return parts[0], END, MAX_ID
    section, colon, position = cursor.partition(":")
    if not colon or section not in parts:
        raise BadRequest(
            f"invalid cursor {cursor[:40]!r}: this list reads its runs in sections "
            f"({', '.join(parts)}) and its cursor names one, as its pages' `next` does "
            "(a cursor from before that is no longer valid: start from the first page)"
        )
    at, run_id = parse_cursor(position, section == FINISHED)
    return section, at, run_id


def bad_cursor(cursor: str) -> BadRequest:
    return BadRequest(f"invalid cursor {cursor[:40]!r}: use the `next` of a page")


MAX_ID = 2**63 - 1  # bigint


END = datetime.fromisoformat("9999-12-31T23:59:59+00:00")


def explain(conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, list[str]]:
    """Why each of these runs is not running, by id (runs that are running or finished
    are left out)."""
    if not ids:
        return {}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_sql.query("dashboard_why"), {"ids": ids}).fetchall()
        backoffs = cur.execute(_sql.query("run_backoffs"), {"ids": ids}).fetchall()
    by_id = {r["id"]: r for r in rows}
    for b in backoffs:  # why.backoff_reasons
        row = by_id.get(b["id"])
        if row is not None:
            row["group_backoff_until" if b["scope"] == "group" else "backoff_until"] = b["until"]
    deep = [r for r in rows if r["ahead"] is not None and r["ahead"] >= why.AHEAD_EXACT]
    estimates = ahead_estimates(conn, deep[:MAX_ESTIMATES])
    for row, estimate in zip(deep, estimates, strict=False):
        row["ahead_estimate"] = max(why.AHEAD_EXACT, estimate)
    grouped = [r["id"] for r in rows if why.group_limited(r) and r["state"] == RunState.QUEUED]
    if grouped:
        found = conn.execute(_sql.query("dashboard_group_ahead"), {"ids": grouped}).fetchall()
        ahead = dict(found)
        for row in rows:
            row["group_ahead"] = ahead.get(row["id"])
    return {row["id"]: why.reasons(row) for row in rows}


MAX_ESTIMATES = 50  # runs of a page whose place past 1,000 the planner estimates


def ahead_estimates(conn: psycopg.Connection[Any], runs: list[dict[str, Any]]) -> list[int]:
    """The planner's estimate of the queued runs ahead of each of `runs` in its queue: a
    planning each (about 0.3 ms), sent in one pipeline (half the time of one round trip
    each: 9 ms instead of 17 for 50)."""
    query = _sql.query("dashboard_ahead_estimate")
    with conn.pipeline():
        cursors = [
            conn.execute(
                query,
                {"queue": run["queue"], "priority": run["priority"], "id": run["id"]},
                prepare=False,
            )
            for run in runs
        ]
    estimates = []
    for cur in cursors:
        plan = cur.fetchone()
        assert plan is not None
        estimates.append(int(plan[0][0]["Plan"]["Plan Rows"]))
    return estimates


def stale(conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, list[str]]:
    """What is wrong with each of these running runs whose lease has expired, by id."""
    if not ids:
        return {}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_sql.query("dashboard_stale"), {"ids": ids}).fetchall()
    return {row["id"]: why.stale_reasons(row) for row in rows}


def get_run(conn: psycopg.Connection[Any], run_id: int) -> dict[str, Any]:
    """Everything about one run: the row, its attempts' errors, its steps, its parent and
    child runs, what it waits for and who holds its lease."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        run = cur.execute(_sql.query("dashboard_run"), {"id": run_id}).fetchone()
        if run is None:
            raise RunNotFound(f"no run with id {run_id} (it may have been pruned)")
        errors = cur.execute(_sql.query("run_errors"), {"id": run_id}).fetchall()
        steps = cur.execute(_sql.query("run_steps"), {"id": run_id}).fetchall()
        children = cur.execute(
            _sql.query("dashboard_run_children"), {"id": run_id, "limit": MAX_CHILDREN}
        ).fetchall()
        parent = None
        if run["parent_id"] is not None:
            parent = cur.execute(_sql.query("get_run"), {"id": run["parent_id"]}).fetchone()
    now = run.pop("now")
    waits: dict[str, Any] | None = None
    if run["state"] == RunState.WAITING:
        deadline = run["run_at"] if run["run_at"].year < FAR_FUTURE_YEAR else None
        if run["wait_event"] is not None:
            waits = {"event": run["wait_event"], "key": run["wait_key"], "deadline": deadline}
        elif run["wait_run_id"] is not None:
            waits = {"child": run["wait_run_id"], "deadline": deadline}
        elif run.get("waiting_for"):  # its dependencies (task.options(after=...))
            waits = {"runs": run["waiting_for"], "deadline": None}
    return {
        **run,
        "now": now,
        "errors": errors,
        "steps": steps,
        "children": children,
        "children_truncated": len(children) == MAX_CHILDREN,
        "parent": {"id": parent["id"], "task": parent["task"], "state": parent["state"]}
        if parent
        else None,
        "waits_for": waits,
        "why": (explain(conn, [run_id]) | stale(conn, [run_id])).get(run_id),
        "audit": audit_of_run(conn, run_id),
    }


def get_queue(conn: psycopg.Connection[Any], name: str, limit: int = 100) -> dict[str, Any]:
    """One queue's figures, its groups (who holds the permits) and its live workers."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_sql.query("no_jit"))
        queue = cur.execute(_sql.query("dashboard_queue"), {"queue": name}).fetchone()
        assert queue is not None
        groups = cur.execute(
            _sql.query("dashboard_groups"), {"queue": name, "limit": limit}
        ).fetchall()
        workers = cur.execute(_sql.query("workers_live")).fetchall()
    totals = {"running": 0, "queued": 0, "scheduled": 0, "waiting": 0}
    queue["oldest_queued_seconds"] = None
    if groups:
        totals = {k: int(groups[0][f"total_{k}"]) for k in totals}
        queue["oldest_queued_seconds"] = groups[0]["oldest_queued_seconds"]
    for g in groups:
        for k in [k for k in g if k.startswith("total_") or k == "oldest_queued_seconds"]:
            del g[k]
    queue.update(totals)
    live = ("configured", "scheduled", "queued", "running", "waiting", "finished_last_hour")
    if not any(queue[k] for k in live):
        raise NotFound(
            f"queue {name!r} has no settings, no live runs and no run finished in the last hour"
        )
    return {
        **queue,
        "groups": groups,
        "groups_truncated": len(groups) == limit,
        "workers": [_worker(w) for w in workers if name in w["queues"]],
    }


def list_batches(
    conn: psycopg.Connection[Any], cursor: str | None, limit: int = PAGE_SIZE
) -> dict[str, Any]:
    """A page of batches, newest first, and the cursor of the next page (None: no more)."""
    before_id = id_cursor(cursor, MAX_ID)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _sql.query("dashboard_batches"), {"before_id": before_id, "limit": limit}
        ).fetchall()
    return {
        "batches": [_batch(b) for b in rows],
        "next": str(rows[-1]["id"]) if len(rows) == limit else None,
    }


def get_batch(
    conn: psycopg.Connection[Any], batch_id: int, cursor: str | None, limit: int = PAGE_SIZE
) -> dict[str, Any]:
    """One batch's counts and callback, and a page of its members in id order (the
    cursor of the next page: None when there are no more)."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        batch = cur.execute(_sql.query("dashboard_batch"), {"id": batch_id}).fetchone()
        if batch is None:
            raise NotFound(f"no batch with id {batch_id}")
        members = cur.execute(
            _sql.query("dashboard_batch_members"),
            {"id": batch_id, "after_id": id_cursor(cursor, 0), "limit": limit},
        ).fetchall()
    return {
        **_batch(batch),
        "members": members,
        "next": str(members[-1]["id"]) if len(members) == limit else None,
    }


def _batch(b: dict[str, Any]) -> dict[str, Any]:
    """A batch's row with `finished` (members in a terminal state) and `progress` (the
    percentage of its total; None while the batch is open)."""
    finished = b["succeeded"] + b["failed"] + b["canceled"]
    total = b["total"]
    progress = None if total is None else 100.0 if total == 0 else 100.0 * finished / total
    return {**b, "finished": finished, "progress": progress}


def id_cursor(cursor: str | None, start: int) -> int:
    """The id a page of runs, batches or members continues from (`start` for the first
    page)."""
    if not cursor:
        return start
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 19:
        raise bad_cursor(cursor)
    value = int(cursor)
    if value > MAX_ID:
        raise bad_cursor(cursor)
    return value


def list_workers(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        workers = cur.execute(_sql.query("workers_live")).fetchall()
    return {"workers": [_worker(w) for w in workers]}


def _worker(w: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": w["id"],
        "host": w["host"],
        "pid": w["pid"],
        "queues": w["queues"],
        "concurrency": w["concurrency"],
        "running": w["running"],
        "version": w["version"],
        "started_at": w["started_at"],
        "heartbeat_age_seconds": w["heartbeat_age_seconds"],
    }


def list_schedules(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return {"schedules": _schedules.list_all(conn)}


EXACT_UP_TO = 10_000  # a filter's count is exact up to this many runs, else an estimate


def count_runs(conn: psycopg.Connection[Any], filt: RunFilter) -> dict[str, Any] | None:
    """How many runs the list of `filt` holds: {"count": n, "exact": bool}. Exact when
    the planner expects at most EXACT_UP_TO and an index keyed by the filter answers it
    (a state with a queue; a state with a task or a group when `pgqueue runs search-index
    --by task` or `--by group` built its indexes); otherwise the planner's estimate,
    labelled as one.
    None for a text search (`q`), an argument or an error class, which no index answers."""
    if filt.q is not None or filt.arg is not None or filt.error_class is not None:
        return None
    states = (filt.state,) if filt.state is not None else STATES
    params = {"queue": filt.queue, "task": filt.task, "group": filt.group}
    row = conn.execute(states_query("dashboard_estimate", states=states), params, prepare=False)
    plan = row.fetchone()
    assert plan is not None
    estimate = int(plan[0][0]["Plan"]["Plan Rows"])
    # a state with a group or a task is keyed by them only in the indexes built on
    # request (runs_live_group_idx... runs_finished_task_idx); a group's answer whatever
    # the task
    indexed = filt.state is not None
    if filt.group is not None:
        indexed = indexed and search_indexes.ready(conn, "group")
    elif filt.task is not None:
        indexed = indexed and search_indexes.ready(conn, "task")
    if indexed and estimate <= EXACT_UP_TO:
        counted = conn.execute(
            states_query("dashboard_count", states=states),
            {**params, "cap": EXACT_UP_TO + 1},
            prepare=False,
        ).fetchone()
        assert counted is not None
        if counted[0] <= EXACT_UP_TO:
            return {"count": int(counted[0]), "exact": True}
        estimate = max(estimate, EXACT_UP_TO + 1)
    return {"count": estimate, "exact": False}


def pickers(conn: psycopg.Connection[Any], tasks: list[str]) -> dict[str, list[str]]:
    """The queue and task names the list's pickers offer (`tasks`: the App's registry)."""
    rows = conn.execute(_sql.query("dashboard_pickers")).fetchall()
    out: dict[str, set[str]] = {"queue": set(), "task": set(tasks)}
    for kind, name in rows:
        out[kind].add(name)
    return {"queues": sorted(out["queue"]), "tasks": sorted(out["task"])}


def count_matching(conn: psycopg.Connection[Any], action: str, filt: RunFilter) -> int:
    """How many runs a bulk `action` with this filter would act on."""
    return _bulk.count(conn, action, bulk_filter(action, filt))


# -- acting ----------------------------------------------------------------------------


def bulk_filter(action: str, filt: RunFilter) -> _bulk.Filter:
    """The dashboard's filter as a bulk action's (pgqueue.ops.bulk, shared with the CLI and
    App.cancel_where/retry_where). An empty filter means every run the action can reach,
    as the page's form says before it acts."""
    if filt.q is not None or filt.arg is not None:
        raise BadRequest("a bulk action takes state, queue, task and group filters, not q or arg")
    try:
        bulk = _bulk.Filter.of(
            state=filt.state,
            queue=filt.queue,
            task=filt.task,
            group=filt.group,
            error_class=filt.error_class,
            all_runs=True,
        )
        bulk.states_for(action)
    except _bulk.BulkError as exc:
        raise BadRequest(str(exc)) from None
    return bulk


def bulk(
    conn: psycopg.Connection[Any], action: str, filt: RunFilter, reason: str | None = None
) -> int:
    """Cancel or retry every run matching the filter, in batches; returns how many changed
    (a cancel stores `reason` in each run's cancel_reason)."""
    if action == "cancel":
        return _bulk.act(conn, action, bulk_filter(action, filt), reason=reason)
    return _bulk.act(conn, action, bulk_filter(action, filt))


def cancel(conn: psycopg.Connection[Any], run_id: int, reason: str | None = None) -> bool:
    return _operator.cancel(conn, run_id, children=False, reason=reason)


def retry(conn: psycopg.Connection[Any], run_id: int) -> bool:
    row = conn.execute(_sql.query("retry"), {"id": run_id}).fetchone()
    return bool(row and row[0])


def exists(conn: psycopg.Connection[Any], run_id: int) -> bool:
    return conn.execute(_sql.query("get_run"), {"id": run_id}).fetchone() is not None


def run_state(conn: psycopg.Connection[Any], run_id: int) -> str:
    """The run's state; RunNotFound if there is no such run."""
    with conn.cursor(row_factory=dict_row) as cur:
        run = cur.execute(_sql.query("get_run"), {"id": run_id}).fetchone()
    if run is None:
        raise RunNotFound(f"no run with id {run_id}")
    return str(run["state"])


def record(
    conn: psycopg.Connection[Any],
    actor: str,
    action: str,
    *,
    run_id: int | None = None,
    target: dict[str, Any] | None = None,
    count: int = 0,
    reason: str | None = None,
) -> None:
    """Add an operator's action to pgqueue.audit."""
    _audit.record(conn, actor, action, run_id=run_id, target=target, count=count, reason=reason)


def audit_of_run(conn: psycopg.Connection[Any], run_id: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_sql.query("audit_run"), {"id": run_id}).fetchall()


def list_audit(
    conn: psycopg.Connection[Any], cursor: str | None, limit: int = PAGE_SIZE
) -> dict[str, Any]:
    """A page of operator actions, newest first, and the cursor of the next page."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            _sql.query("audit_list"), {"before_id": id_cursor(cursor, MAX_ID), "limit": limit}
        ).fetchall()
    return {"actions": rows, "next": str(rows[-1]["id"]) if len(rows) == limit else None}


def run_state_or_none(conn: psycopg.Connection[Any], run_id: int) -> str | None:
    try:
        return run_state(conn, run_id)
    except RunNotFound:
        return None


def emit_event(conn: psycopg.Connection[Any], params: dict[str, Any]) -> int:
    """Emit an event with emit_event.sql's checked parameters (Dashboard.event_params)."""
    return _events.emit_event(conn, params)


def run_now(conn: psycopg.Connection[Any], run_id: int) -> bool:
    """Queue a scheduled run now; False if it is not scheduled."""
    row = conn.execute(_sql.query("run_now"), {"id": run_id}).fetchone()
    return bool(row and row[0])


def delete_runs(conn: psycopg.Connection[Any], ids: list[int]) -> list[int]:
    """Delete these runs if finished (not a child whose parent is not); the ids deleted."""
    rows = conn.execute(_sql.query("delete_runs"), {"ids": ids}).fetchall()
    return sorted(int(r[0]) for r in rows)


def set_queue_limits(conn: psycopg.Connection[Any], queue: str, values: dict[str, str]) -> None:
    """Store a queue's limits from the queue page's form (empty: no limit), checked as
    `pgqueue queues set` checks them."""

    def count(name: str) -> int | None:
        text = values.get(name, "").strip()
        if not text:
            return None
        if not text.isascii() or not text.isdigit() or len(text) > 9:
            raise BadRequest(f"{name} must be a whole number, or empty for no limit")
        return int(text)

    concurrency, group_concurrency = count("concurrency"), count("group_concurrency")
    rate = values.get("rate_limit", "").strip() or None
    group_rate = values.get("group_rate_limit", "").strip() or None
    ordered = values.get("ordered") in ("on", "true", "yes", "1")
    try:
        _registry.check_limits(queue, concurrency, group_concurrency, rate, group_rate, ordered)
    except (ValueError, UserError) as exc:
        raise BadRequest(str(exc)) from None
    _operator.set_limits(conn, queue, concurrency, group_concurrency, rate, group_rate, ordered)


def set_queue_paused(conn: psycopg.Connection[Any], queue: str, paused: bool) -> None:
    conn.execute(_sql.query("set_queue_paused"), {"queue": queue, "paused": paused})


def schedule_action(conn: psycopg.Connection[Any], name: str, action: str) -> dict[str, Any]:
    try:
        if action == "trigger":
            return {"run_id": _schedules.trigger(conn, name)}
        _schedules.set_paused(conn, name, action == "pause")
    except _schedules.UnknownSchedule as exc:
        raise NotFound(str(exc)) from None
    return {"paused": action == "pause"}
