"""The dashboard's pages and JSON endpoints (docs/dashboard.md), registered with core.route: each
takes the Dashboard, the Request and the path's match, and returns a Response."""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
from typing import Any

from pgqueue.dashboard import charts, data
from pgqueue.dashboard.core import (
    Dashboard,
    Problem,
    Request,
    Response,
    confirmed,
    form,
    form_list,
    int_param,
    is_form,
    json_response,
    local_url,
    redirect,
    request_json,
    route,
)
from pgqueue.dashboard.formats import quote
from pgqueue.errors import RunNotFound
from pgqueue.states import RunState

# -- pages and endpoints ---------------------------------------------------------------


# An idle tab's live refresh may cost the database this many seconds a minute: a page's
# script waits refresh_after(what reading its live part took) between two fetches.
REFRESH_BUDGET = 0.2
# the time measured is the part's database reads; a quarter more keeps the request as a
# whole (rendering, the pool) within the budget too
MARGIN = 1.25
LEAST_REFRESH = {"overview": 2, "run": 2, "queue": 5}
MOST_REFRESH = 300


def refresh_after(seconds: float, page: str) -> int:
    """Seconds between two refreshes of a live part whose database reads took
    `seconds`."""
    wanted = math.ceil(seconds * MARGIN * 60 / REFRESH_BUDGET)
    return max(LEAST_REFRESH[page], min(MOST_REFRESH, wanted))


def live(
    d: Dashboard, req: Request, template: str, page: str, context: dict[str, Any], took: float
) -> Response:
    """A page with a live part, or (under /parts/) the part alone, with X-Refresh-After."""
    refresh = refresh_after(took, page)
    resp = d.page(req, template, {**context, "refresh": refresh})
    resp.headers.append(("x-refresh-after", str(refresh)))
    return resp


@route("GET", "/")
def overview_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    context, took = overview_context(d)
    return live(d, req, "overview.html", "overview", context, took)


@route("GET", "/parts/overview")
def overview_part(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """The live part of the overview, which the page's script fetches again and again."""
    context, took = overview_context(d)
    return live(d, req, "overview_part.html", "overview", context, took)


def overview_context(d: Dashboard) -> tuple[dict[str, Any], float]:
    with d.db() as conn:
        start = time.monotonic()  # the database's part, not the pool's connecting
        view = data.overview(conn)
        took = time.monotonic() - start
    return {**view, "charts": charts.overview(view["throughput"], view["now"])}, took


@route("GET", "/api/queues")
def queues_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        return json_response(data.overview(conn))


def run_filter(req: Request) -> data.RunFilter:
    return data.RunFilter.from_mapping(dict(req.query))


@route("GET", "/runs")
def runs_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    filt = run_filter(req)
    with d.db() as conn:
        digits = filt.q is not None and filt.q.isascii() and filt.q.isdigit()
        run_id = int(filt.q) if filt.q and digits and len(filt.q) <= 18 else None
        if run_id is not None and data.exists(conn, run_id):  # an id, however old: its page
            return redirect(f"{req.root}/runs/{run_id}")
        page = data.list_runs(conn, filt, req.query.get("cursor"))
        count = data.count_runs(conn, filt)
        pickers = data.pickers(conn, d.tasks)
    query = filt.to_json()
    next_url = None
    if page["next"]:
        next_url = f"{req.root}/runs?" + urllib.parse.urlencode({**query, "cursor": page["next"]})
    return d.page(
        req,
        "runs.html",
        {
            **page,
            **pickers,
            "f": filt,
            "count": count,
            "next_url": next_url,
            "first": not req.query.get("cursor"),
        },
    )


@route("GET", "/go")
def go_to_run(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """The "go to run #" box: the run's page, or 404."""
    text = req.query.get("run", "").strip().lstrip("#")
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise Problem(400, "run must be a run's id (digits)")
    with d.db() as conn:
        if not data.exists(conn, int(text)):
            raise RunNotFound(f"no run with id {int(text)} (it may have been pruned)")
    return redirect(f"{req.root}/runs/{int(text)}")


@route("GET", "/api/runs")
def runs_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    limit = int_param(req, "limit", data.PAGE_SIZE, 1, 500)
    with d.db() as conn:
        return json_response(
            data.list_runs(conn, run_filter(req), req.query.get("cursor"), limit=limit)
        )


@route("GET", "/api/runs/count")
def runs_count_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """How many runs a bulk action would reach (the page asks before it acts), or without
    an action how many a list's filter holds: {"count": n, "exact": false} is the
    planner's estimate."""
    action = req.query.get("action", "")
    with d.db() as conn:
        if not action:
            return json_response(data.count_runs(conn, run_filter(req)))
        return json_response({"count": data.count_matching(conn, action, run_filter(req))})


@route("GET", r"/runs/(\d{1,18})")
def run_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    context, took = run_context(d, int(m[1]))
    return live(d, req, "run.html", "run", context, took)


@route("GET", r"/parts/runs/(\d{1,18})")
def run_part(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """The live part of a run's page (progress, why, lease, steps, attempts)."""
    context, took = run_context(d, int(m[1]))
    return live(d, req, "run_part.html", "run", context, took)


def run_context(d: Dashboard, run_id: int) -> tuple[dict[str, Any], float]:
    with d.db() as conn:
        start = time.monotonic()
        run = data.get_run(conn, run_id)
        took = time.monotonic() - start
    context = {"run": run, "timeline": charts.timeline(run["steps"]), "tree": tree(run)}
    return context, took


@route("GET", r"/api/runs/(\d{1,18})")
def run_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        return json_response(data.get_run(conn, int(m[1])))


@route("POST", r"/api/runs/(\d{1,18})/(cancel|retry)")
def run_action(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """Cancel or retry one run. A form asks first (confirm.html); retrying a run that
    succeeded runs its task again, so the form wants the run's id typed and a script
    {"rerun_succeeded": true}. Recorded in the audit log with its reason."""
    run_id, action = int(m[1]), m[2]
    reason = action_reason(req)
    with d.db() as conn:
        state = data.run_state(conn, run_id)
        rerun = action == "retry" and state == RunState.SUCCEEDED
        typed = form(req).get("typed", "").strip()
        typed_ok = not (rerun and is_form(req)) or typed == str(run_id)
        if not confirmed(req) or not typed_ok:
            verb = "Cancel" if action == "cancel" else "Retry"
            lines = [f"{verb} run {run_id} (now {state})?"]
            if rerun:
                lines.append(
                    "This run succeeded: retrying it runs its task again, with the same "
                    "arguments (a payment would be taken twice)."
                )
            return ask(
                d,
                req,
                title=f"{verb} run {run_id}",
                lines=lines,
                action_url=f"/api/runs/{run_id}/{action}",
                button=f"{verb} run {run_id}",
                danger=action == "cancel" or rerun,
                typed=f"Type the run's id, {run_id}, to retry it" if rerun else None,
                error="the id typed is not this run's" if confirmed(req) else None,
            )
        if rerun and not is_form(req) and request_json(req).get("rerun_succeeded") is not True:
            raise Problem(
                409,
                f"run {run_id} succeeded: retrying it runs its task again; "
                'send {"rerun_succeeded": true} to do so',
            )
        cancel = action == "cancel"
        done = data.cancel(conn, run_id, reason) if cancel else data.retry(conn, run_id)
        if done:
            data.record(conn, req.actor, action, run_id=run_id, count=1, reason=reason)
    key = "canceled" if action == "cancel" else "retried"
    return d.acted(req, {"id": run_id, key: done})


MAX_SELECTED = 500
SELECTED_ACTIONS = {
    "cancel": "Cancel",
    "retry": "Retry",
    "run_now": "Run now",
    "delete": "Delete",
}


@route("POST", r"/api/runs/(\d{1,18})/(run_now|delete)")
def run_more_action(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """Run a scheduled run now; delete a finished run. Each asks first and is recorded."""
    run_id, action = int(m[1]), m[2]
    reason = action_reason(req)
    with d.db() as conn:
        state = data.run_state(conn, run_id)
        if not confirmed(req):
            what = {
                "run_now": f"Queue run {run_id} now, instead of at its due time?",
                "delete": f"Delete run {run_id}, its steps and its errors? It cannot come back.",
            }[action]
            label = SELECTED_ACTIONS[action]
            return ask(
                d,
                req,
                title=f"{label}: run {run_id} (now {state})",
                lines=[what],
                action_url=f"/api/runs/{run_id}/{action}",
                button=f"{label}: run {run_id}",
                danger=action == "delete",
            )
        if action == "run_now":
            done = data.run_now(conn, run_id)
        else:
            done = data.delete_runs(conn, [run_id]) == [run_id]
        if done:
            data.record(conn, req.actor, action, run_id=run_id, count=1, reason=reason)
    return d.acted(req, {"id": run_id, action: done})


@route("POST", "/api/runs/selected")
def selected_action(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """One action on the runs selected in a list (form: `ids` repeated or comma-separated,
    `action`; JSON: {"ids": [...], "action": ...}): each run as its own action would, runs
    it does not apply to left alone (a retry leaves succeeded runs: retry those one by
    one). Asks first, with how many; recorded as one entry."""
    if is_form(req):
        texts, action = form_list(req, "ids"), form(req).get("action", "")
    else:
        body = request_json(req)
        given = body.get("ids") or []
        if not isinstance(given, list):
            raise Problem(400, 'expected {"action": ..., "ids": [run ids]}')
        texts, action = [str(i) for i in given], body.get("action", "")
    if action not in SELECTED_ACTIONS:
        raise Problem(400, f"action must be one of {', '.join(SELECTED_ACTIONS)}")
    if not texts or not all(t.isascii() and t.isdigit() and len(t) <= 18 for t in texts):
        raise Problem(400, "select at least one run (ids: run ids)")
    ids = sorted({int(t) for t in texts})
    if len(ids) > MAX_SELECTED:
        raise Problem(400, f"at most {MAX_SELECTED} runs at a time")
    reason = action_reason(req)
    label = SELECTED_ACTIONS[action]
    if not confirmed(req):
        fields = {"action": action, "ids": ",".join(map(str, ids))}
        fields["next"] = local_url(form(req).get("next", ""), req.root)
        noun = "run" if len(ids) == 1 else "runs"
        lines = [
            f"{label}: {len(ids)} selected {noun} ({', '.join(map(str, ids[:20]))}"
            f"{', ...' if len(ids) > 20 else ''})?"
        ]
        if action == "retry":
            lines.append("Succeeded runs among them are left alone: retry those one by one.")
        return ask(
            d,
            req,
            title=f"{label}: {len(ids)} {noun}",
            lines=lines,
            action_url="/api/runs/selected",
            button=f"{label}: {len(ids)} {noun}",
            danger=action in ("cancel", "delete"),
            count=len(ids),
            fields=fields,
        )
    with d.db() as conn:
        if action == "delete":
            changed = len(data.delete_runs(conn, ids))
        else:
            changed = 0
            for run_id in ids:
                if action == "cancel":
                    changed += data.cancel(conn, run_id, reason)
                elif action == "run_now":
                    changed += data.run_now(conn, run_id)
                elif data.run_state_or_none(conn, run_id) in ("failed", "canceled"):
                    changed += data.retry(conn, run_id)
        data.record(
            conn,
            req.actor,
            f"selected_{action}",
            target={"ids": ids[:MAX_SELECTED]},
            count=changed,
            reason=reason,
        )
    return d.acted(req, {"action": action, "count": changed})


def ask(
    d: Dashboard,
    req: Request,
    *,
    title: str,
    lines: list[str],
    action_url: str,
    button: str,
    danger: bool = True,
    count: int | None = None,
    reason: bool = True,
    typed: str | None = None,
    error: str | None = None,
    fields: dict[str, str] | None = None,
) -> Response:
    """The confirmation page of an action: what it does (with how many runs, for a bulk
    action), a reason field, and a form that posts it again, confirmed."""
    if fields is None:
        skip = ("csrf", "confirmed", "typed", "reason")
        fields = {k: v for k, v in form(req).items() if k not in skip}
    back = local_url(fields.get("next", ""), req.root)
    return d.page(
        req,
        "confirm.html",
        {
            "title": title,
            "lines": lines,
            "action_url": action_url,
            "button": button,
            "danger": danger,
            "count": count,
            "reason": reason,
            "given_reason": form(req).get("reason"),
            "typed": typed is not None,
            "typed_label": typed,
            "error": error,
            "fields": fields,
            "back": back,
        },
    )


def action_reason(req: Request) -> str | None:
    """An action's optional reason: the form's `reason` field, or {"reason": ...} in a
    JSON body (any other body, such as an empty multipart one, gives none)."""
    kind = req.headers.get("content-type", "")
    if kind.startswith("application/x-www-form-urlencoded"):
        return form(req).get("reason") or None
    if not kind.startswith("application/json"):
        return None
    reason = request_json(req).get("reason")
    if reason is not None and not isinstance(reason, str):
        raise Problem(400, "reason must be a string")
    return reason or None


@route("POST", "/api/runs/bulk")
def bulk_action(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    body = request_json(req)
    action = body.get("action")
    filt_values = body.get("filter", {})
    if not isinstance(action, str) or not isinstance(filt_values, dict):
        raise Problem(400, 'expected {"action": "cancel"|"retry", "filter": {...}}')
    filt = data.RunFilter.from_mapping(filt_values)
    reason = action_reason(req)
    with d.db() as conn:
        if not confirmed(req):
            return ask_bulk(d, req, conn, action, filt)
        count = data.bulk(conn, action, filt, reason)
        data.record(
            conn, req.actor, f"bulk_{action}", target=filt.to_json(), count=count, reason=reason
        )
    return d.acted(req, {"action": action, "count": count})


def ask_bulk(d: Dashboard, req: Request, conn: Any, action: str, filt: data.RunFilter) -> Response:
    """A bulk action's confirmation page, with the exact count of the runs it reaches."""
    count = data.count_matching(conn, action, filt)
    described = ", ".join(f"{k} {v}" for k, v in filt.to_json().items()) or "no filter"
    noun = "run" if count == 1 else "runs"
    fields = {"action": action, **filt.to_json()}
    given = form(req).get("next") or req.query.get("next") or ""
    fields["next"] = local_url(given, req.root)
    return ask(
        d,
        req,
        title=f"{action.capitalize()} {count:,} {noun}",
        lines=[f"{action.capitalize()} every run that matches {described}?"],
        action_url="/api/runs/bulk",
        button=f"{action.capitalize()} {count:,} {noun}",
        danger=action == "cancel",
        count=count,
        fields=fields,
    )


@route("GET", "/confirm")
def confirm_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """The confirmation page of a bulk action, linked to (the Failures page's retries)."""
    action = req.query.get("action", "")
    if action not in ("cancel", "retry"):
        raise Problem(400, "action must be cancel or retry")
    if d.read_only:
        raise Problem(403, "this dashboard is read-only")
    with d.db() as conn:
        return ask_bulk(d, req, conn, action, run_filter(req))


@route("GET", "/queues/([^/]{1,512})")
def queue_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        start = time.monotonic()
        queue = data.get_queue(conn, name_of(m[1]))
        took = time.monotonic() - start
    return live(d, req, "queue.html", "queue", {"q": queue}, took)


@route("GET", "/parts/queues/([^/]{1,512})")
def queue_part(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """The live part of a queue's page (figures, groups, workers)."""
    with d.db() as conn:
        start = time.monotonic()
        queue = data.get_queue(conn, name_of(m[1]))
        took = time.monotonic() - start
    return live(d, req, "queue_part.html", "queue", {"q": queue}, took)


@route("GET", "/api/queues/([^/]{1,512})")
def queue_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        return json_response(data.get_queue(conn, name_of(m[1])))


@route("POST", "/api/queues/([^/]{1,512})/(pause|resume)")
def queue_action(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    name, paused = name_of(m[1]), m[2] == "pause"
    if not confirmed(req):
        verb = "Pause" if paused else "Resume"
        effect = (
            "no worker claims its runs until it is resumed"
            if paused
            else "workers claim its runs again"
        )
        return ask(
            d,
            req,
            title=f"{verb} queue {name}",
            lines=[f"{verb} queue {name}? {effect.capitalize()}."],
            action_url=f"/api/queues/{quote(name)}/{m[2]}",
            button=f"{verb} queue {name}",
            danger=paused,
        )
    reason = action_reason(req)
    with d.db() as conn:
        data.set_queue_paused(conn, name, paused)
        data.record(conn, req.actor, m[2], target={"queue": name}, count=1, reason=reason)
    return d.acted(req, {"queue": name, "paused": paused})


@route("GET", "/failures")
def failures_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        return d.page(req, "failures.html", data.failures(conn))


@route("GET", "/api/failures")
def failures_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        return json_response(data.failures(conn))


@route("POST", "/api/queues/([^/]{1,512})/limits")
def queue_limits_action(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """Change a queue's limits (the queue page's form; JSON: the same names as strings):
    as `pgqueue queues set`, empty means no limit; workers apply it at their next claim."""
    name = name_of(m[1])
    names = ("concurrency", "group_concurrency", "rate_limit", "group_rate_limit", "ordered")
    if is_form(req):
        values = {k: v for k, v in form(req).items() if k in names}
    else:
        body = request_json(req)
        values = {k: "" if body.get(k) is None else str(body[k]) for k in names}
    if not confirmed(req):
        shown = ", ".join(f"{k} {v or 'none'}" for k, v in values.items() if k != "ordered")
        ordered = " ordered groups" if values.get("ordered") else ""
        return ask(
            d,
            req,
            title=f"Change the limits of queue {name}",
            lines=[f"Set {shown}{ordered} for queue {name}? Workers apply it at once."],
            action_url=f"/api/queues/{quote(name)}/limits",
            button=f"Change queue {name}",
            danger=False,
        )
    reason = action_reason(req)
    with d.db() as conn:
        data.set_queue_limits(conn, name, values)
        data.record(
            conn, req.actor, "limits", target={"queue": name, **values}, count=1, reason=reason
        )
    return d.acted(req, {"queue": name, "limits": values})


@route("POST", "/api/events")
def emit_event_action(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    """Emit an event (name, key, JSON payload) as app.emit_event does: wakes every
    workflow waiting for it. Asks first; recorded (with the run whose page sent it)."""
    if is_form(req):
        values = form(req)
        event, key, payload = (
            values.get("event", ""),
            values.get("key", ""),
            values.get("payload", ""),
        )
        run_text = values.get("run_id", "")
    else:
        body = request_json(req)
        event, key = str(body.get("event") or ""), str(body.get("key") or "")
        payload = json.dumps(body.get("payload"))
        run_text = str(body.get("run_id") or "")
    run_id = (
        int(run_text) if run_text.isascii() and run_text.isdigit() and len(run_text) <= 18 else None
    )
    params = d.event_params(event, key, payload)
    if not confirmed(req):
        return ask(
            d,
            req,
            title=f"Emit event {event}",
            lines=[
                f"Emit event {event}{' key ' + key if key else ''} with payload "
                f"{payload.strip() or 'null'}? Every workflow waiting for it wakes."
            ],
            action_url="/api/events",
            button=f"Emit {event}",
            danger=False,
        )
    reason = action_reason(req)
    with d.db() as conn:
        event_id = data.emit_event(conn, params)
        data.record(
            conn,
            req.actor,
            "emit_event",
            run_id=run_id,
            target={"event": event, "key": key or None},
            count=1,
            reason=reason,
        )
    return d.acted(req, {"event": event, "key": key or None, "id": event_id})


@route("GET", "/workers")
def workers_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        return d.page(req, "workers.html", data.list_workers(conn))


@route("GET", "/api/workers")
def workers_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        return json_response(data.list_workers(conn))


@route("GET", "/schedules")
def schedules_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        return d.page(req, "schedules.html", data.list_schedules(conn))


@route("GET", "/api/schedules")
def schedules_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        return json_response(data.list_schedules(conn))


@route("POST", "/api/schedules/([^/]{1,512})/(trigger|pause|resume)")
def schedule_action(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    name, action = name_of(m[1]), m[2]
    if not confirmed(req):
        what = {
            "trigger": f"Run schedule {name}'s task now, once, besides its ticks?",
            "pause": f"Pause schedule {name}? Its ticks enqueue nothing until it is resumed.",
            "resume": f"Resume schedule {name}?",
        }[action]
        return ask(
            d,
            req,
            title=f"{action.capitalize()} schedule {name}",
            lines=[what],
            action_url=f"/api/schedules/{quote(name)}/{action}",
            button=f"{action.capitalize()} schedule {name}",
            danger=action == "pause",
        )
    reason = action_reason(req)
    with d.db() as conn:
        result = data.schedule_action(conn, name, action)
        data.record(
            conn,
            req.actor,
            f"schedule_{action}",
            run_id=result.get("run_id"),
            target={"schedule": name},
            count=1,
            reason=reason,
        )
    return d.acted(req, {"schedule": name, **result})


@route("GET", "/audit")
def audit_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        page = data.list_audit(conn, req.query.get("cursor"))
    return d.page(req, "audit.html", {**page, "first": not req.query.get("cursor")})


@route("GET", "/api/audit")
def audit_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    limit = int_param(req, "limit", data.PAGE_SIZE, 1, 500)
    with d.db() as conn:
        return json_response(data.list_audit(conn, req.query.get("cursor"), limit=limit))


@route("GET", "/batches")
def batches_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        page = data.list_batches(conn, req.query.get("cursor"))
    return d.page(req, "batches.html", {**page, "first": not req.query.get("cursor")})


@route("GET", "/api/batches")
def batches_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    limit = int_param(req, "limit", data.PAGE_SIZE, 1, 500)
    with d.db() as conn:
        return json_response(data.list_batches(conn, req.query.get("cursor"), limit=limit))


@route("GET", r"/batches/(\d{1,18})")
def batch_page(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    with d.db() as conn:
        batch = data.get_batch(conn, int(m[1]), req.query.get("cursor"))
    return d.page(req, "batch.html", {"b": batch, "first": not req.query.get("cursor")})


@route("GET", r"/api/batches/(\d{1,18})")
def batch_api(d: Dashboard, req: Request, m: re.Match[str]) -> Response:
    limit = int_param(req, "limit", data.PAGE_SIZE, 1, 500)
    with d.db() as conn:
        return json_response(data.get_batch(conn, int(m[1]), req.query.get("cursor"), limit=limit))


def name_of(segment: str) -> str:
    """A queue's or schedule's name from its (percent-encoded) path segment."""
    try:
        name = urllib.parse.unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise Problem(400, "the name in the path is not UTF-8") from None
    if "\x00" in name or len(name.encode()) > 512:
        raise Problem(400, "the name in the path holds a NUL character or is over 512 bytes")
    return name


def tree(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The children rows nested under their parents (depth-first order for the page)."""
    by_parent: dict[int, list[dict[str, Any]]] = {}
    for child in run["children"]:
        by_parent.setdefault(child["parent_id"], []).append(child)
    out: list[dict[str, Any]] = []

    def walk(parent: int, depth: int) -> None:
        for child in by_parent.get(parent, []):
            out.append({**child, "depth": depth})
            walk(child["id"], depth + 1)

    walk(run["id"], 0)
    return out
