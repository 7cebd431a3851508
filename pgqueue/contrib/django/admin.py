"""Django admin: pgqueue runs, read-only, with cancel and retry actions.

Permissions: `pgqueue.view_run` (or staff with it) lists and shows runs; the actions need
`pgqueue.change_run` (the permission the dashboard's actions need too). Nobody adds, edits
or deletes runs here: pgqueue changes them (cancel and retry go through the App)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from pgqueue.contrib.django import conf
from pgqueue.contrib.django.models import Run
from pgqueue.ops.inspect import wait_text


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "id",
        "task",
        "queue",
        "state",
        "attempt",
        "max_attempts",
        "created_at",
        "finished_at",
        "short_error",
    )
    list_filter = ("queue", "state", "task")
    search_fields = ("id",)
    search_help_text = "A run id, or an idempotency key."
    ordering = ("-id",)
    show_full_result_count = False  # count(*) over a large history is slow; skip it
    list_per_page = 50
    actions = ("cancel_runs", "retry_runs")
    readonly_fields = ("parent", "children", "attempts", "steps")
    fieldsets = (
        (None, {"fields": ("task", "queue", "state", "priority", "attempt", "max_attempts")}),
        (
            "Arguments and outcome",
            {"fields": ("args", "kwargs", "result", "error", "progress", "cancel_reason")},
        ),
        ("Workflow", {"fields": ("parent", "children", "steps")}),
        ("Attempts", {"fields": ("attempts",)}),
        (
            "Timing and lease",
            {
                "fields": (
                    "run_at",
                    "created_at",
                    "started_at",
                    "finished_at",
                    "timeout_seconds",
                    "worker_id",
                    "lease_expires_at",
                )
            },
        ),
        ("Keys", {"fields": ("group_key", "idempotency_key")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return super().get_queryset(request).using(conf.database_alias())

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Run], search_term: str
    ) -> tuple[QuerySet[Run], bool]:
        term = search_term.strip().lstrip("#")
        if not term:
            return queryset, False
        if term.isdigit():
            return queryset.filter(id=int(term)), False
        return queryset.filter(idempotency_key=term), False

    @admin.display(description="error")
    def short_error(self, run: Run) -> str:
        text = run.error or ""
        return text if len(text) <= 80 else text[:77] + "..."

    @admin.display(description="parent run")
    def parent(self, run: Run) -> SafeString | str:
        return _link(run.parent_id) if run.parent_id is not None else "-"

    @admin.display(description="child runs")
    def children(self, run: Run) -> SafeString | str:
        found = list(
            Run.objects.using(conf.database_alias())
            .filter(parent_id=run.id)
            .order_by("id")
            .values_list("id", "task", "state")[: MAX_CHILDREN + 1]
        )
        if not found:
            return "-"
        shown = format_html_join(
            "", "<li>{} {} ({})</li>", ((_link(i), task, state) for i, task, state in found)
        )
        more = "<li>...</li>" if len(found) > MAX_CHILDREN else ""
        return format_html("<ul>{}{}</ul>", shown, SafeString(more))

    @admin.display(description="errors of each attempt")
    def attempts(self, run: Run) -> SafeString | str:
        errors = conf.get_app().run_errors(run.id)
        if not errors:
            return "-"
        return format_html_join(
            "",
            "<div><strong>attempt {} ({}, {})</strong>: {}<pre>{}</pre></div>",
            (
                (e["attempt"], e["kind"], e["created_at"], e["message"], e["traceback"] or "")
                for e in errors
            ),
        )

    @admin.display(description="steps")
    def steps(self, run: Run) -> SafeString | str:
        steps = conf.get_app().run_steps(run.id)
        if not steps:
            return "-"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    s["name"],
                    s["state"],
                    s["attempt"],
                    "" if s["seconds"] is None else f"{s['seconds']:.3f} s",
                    wait_text(s) or "",
                    s["error"] or "",
                )
                for s in steps
            ),
        )
        head = "".join(
            f"<th>{h}</th>" for h in ("name", "state", "attempt", "took", "waited for", "error")
        )
        head = f"<tr>{head}</tr>"
        return format_html("<table>{}{}</table>", SafeString(head), rows)

    def has_act_permission(self, request: HttpRequest) -> bool:
        """Cancel and retry: pgqueue.change_run, as for the dashboard's actions."""
        user: Any = request.user
        return bool(user.has_perm("pgqueue.change_run"))

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Cancel selected runs", permissions=["act"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        app = conf.get_app()
        ids = list(queryset.values_list("id", flat=True))
        done = [i for i in ids if app.cancel(i)]
        self._report(request, "canceled", done, ids, "had already finished")

    @admin.action(description="Retry selected runs", permissions=["act"])
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        app = conf.get_app()
        ids = list(queryset.values_list("id", flat=True))
        done = [i for i in ids if app.retry(i)]
        self._report(request, "queued again", done, ids, "had not finished")

    def _report(
        self, request: HttpRequest, verb: str, done: list[int], ids: list[int], why: str
    ) -> None:
        if done:
            self.message_user(request, f"{len(done)} run(s) {verb}: {_ids(done)}")
        skipped = sorted(set(ids) - set(done))
        if skipped:
            self.message_user(
                request, f"{len(skipped)} run(s) {why}: {_ids(skipped)}", messages.WARNING
            )


MAX_CHILDREN = 100  # shown on a run's page


def _link(run_id: int) -> SafeString:
    url = reverse("admin:pgqueue_run_change", args=[run_id])
    return format_html('<a href="{}">#{}</a>', url, run_id)


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in sorted(ids)[:20])
    return shown + (" ..." if len(ids) > 20 else "")
