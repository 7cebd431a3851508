"""Django admin: pgqueue runs, read-only, with cancel and retry actions."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from pgqueue.contrib.django import conf
from pgqueue.contrib.django.models import Run


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

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Cancel selected runs", permissions=["view"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        app = conf.get_app()
        ids = list(queryset.values_list("id", flat=True))
        done = [i for i in ids if app.cancel(i)]
        self._report(request, "canceled", done, ids, "had already finished")

    @admin.action(description="Retry selected runs", permissions=["view"])
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


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in sorted(ids)[:20])
    return shown + (" ..." if len(ids) > 20 else "")
