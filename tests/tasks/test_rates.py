"""Rate limits as written ("100/m") and declared (app.queue): pgqueue.tasks.rates, no database."""

from __future__ import annotations

import pytest

import pgqueue
from pgqueue.tasks.rates import Rate, parse_rate


@pytest.mark.parametrize(
    ("text", "rate"),
    [("20/s", Rate(20, 1)), ("100/m", Rate(100, 60)), (" 5 / h ", Rate(5, 3600)), (None, None)],
)
def test_rates_parse(text: str | None, rate: Rate | None) -> None:
    assert parse_rate("rate_limit", text) == rate


@pytest.mark.parametrize(
    ("value", "error", "fragment"),
    [
        ("100", pgqueue.InvalidArguments, "must look like N/s, N/m or N/h (e.g. '100/m')"),
        ("0/s", pgqueue.OutOfRange, "N must be 1 to"),
        ("1/d", pgqueue.InvalidArguments, "not '1/d'"),
        (100, pgqueue.InvalidArguments, "must be a string like '100/m'"),
    ],
)
def test_app_queue_refuses_a_bad_rate_in_one_line(
    value: object, error: type[Exception], fragment: str
) -> None:
    app = pgqueue.App("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(error, match="queue 'api': rate_limit") as exc:
        app.queue("api", rate_limit=value)  # type: ignore[arg-type]
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_ordered_needs_one_run_per_group() -> None:
    app = pgqueue.App("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(pgqueue.InvalidArguments, match="ordered=True needs group_concurrency=1"):
        app.queue("feed", ordered=True)
    config = app.queue("feed", group_concurrency=1, ordered=True, group_rate_limit="5/s")
    assert (config.ordered, config.group_rate_limit, str(Rate(5, 1))) == (True, "5/s", "5/s")
