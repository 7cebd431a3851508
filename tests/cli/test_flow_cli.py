"""`pgqueue queues set` with rate limits and ordered groups, and `pgqueue queues`
showing them with their current use."""

from __future__ import annotations

import json
from typing import Any

import pytest

import pgqueue
from tests.cli.helpers import assert_user_error, cli


def queue_row(capsys: Any, dsn: str, name: str) -> dict[str, Any]:
    code, out, _ = cli(capsys, "queues", "--dsn", dsn, "--json")
    assert code == 0
    return next(q for q in json.loads(out) if q["queue"] == name)


def test_queues_set_rate_limits_keeps_what_it_is_not_given(capsys: Any, dsn: str) -> None:
    code, out, _ = cli(
        capsys, "queues", "set", "api", "--rate-limit", "100/m", "--group-rate-limit", "5/s",
        "--dsn", dsn,
    )  # fmt: skip
    assert code == 0
    assert out.strip() == (
        "queue api: concurrency unlimited, group_concurrency unlimited, "
        "rate_limit 100/m, group_rate_limit 5/s"
    )
    assert cli(capsys, "queues", "set", "api", "--concurrency", "3", "--dsn", dsn)[0] == 0
    row = queue_row(capsys, dsn, "api")
    assert (row["concurrency"], row["rate_limit"], row["group_rate_limit"]) == (3, "100/m", "5/s")
    assert row["rate_used"] == 0 and row["ordered"] is False
    code, out, _ = cli(capsys, "queues", "--dsn", dsn)
    header = out.splitlines()[0]
    assert "LIMITS" in header and "max 3, 100/m (0 used), 5/s/group" in out
    assert max(len(line) for line in out.splitlines()) <= 120, out
    assert cli(capsys, "queues", "set", "api", "--rate-limit", "0", "--dsn", dsn)[0] == 0
    row = queue_row(capsys, dsn, "api")
    assert (row["rate_limit"], row["rate_used"], row["group_rate_limit"]) == (None, None, "5/s")


def test_queues_set_ordered(capsys: Any, dsn: str, app: pgqueue.App) -> None:
    code, out, _ = cli(
        capsys, "queues", "set", "feed", "--group-concurrency", "1", "--ordered", "--dsn", dsn
    )
    assert code == 0 and out.strip().endswith(", ordered")
    assert queue_row(capsys, dsn, "feed")["ordered"] is True
    with app.connection() as c:
        assert c.execute("SELECT ordered FROM pgqueue.queues WHERE name = 'feed'").fetchone() == (
            True,
        )
    assert cli(capsys, "queues", "set", "feed", "--unordered", "--dsn", dsn)[0] == 0
    assert queue_row(capsys, dsn, "feed")["ordered"] is False


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--rate-limit", "100"], "rate_limit must look like N/s, N/m or N/h"),
        (["--rate-limit", "5/d"], "(e.g. '100/m'), not '5/d'"),
        (["--group-rate-limit", "x/s"], "group_rate_limit must look like"),
        (["--rate-limit", f"{2**31}/s"], "N must be 1 to 2147483647"),
        (["--ordered"], "ordered=True needs group_concurrency=1"),
        (["--ordered", "--group-concurrency", "2"], "needs group_concurrency=1"),
    ],
)
def test_queues_set_refuses_bad_flow_limits_in_one_line(
    capsys: Any, dsn: str, args: list[str], fragment: str
) -> None:
    assert_user_error(cli(capsys, "queues", "set", "q", *args, "--dsn", dsn), fragment)


def test_queues_set_group_weights(capsys: Any, dsn: str, app: pgqueue.App) -> None:
    assert cli(capsys, "queues", "set", "api", "--concurrency", "6", "--dsn", dsn)[0] == 0
    code, out, _ = cli(
        capsys, "queues", "set", "api", "--group-weight", "gold=3", "--group-weight",
        "silver=2", "--dsn", dsn,
    )  # fmt: skip
    assert code == 0
    assert out.strip().endswith(", weights gold=3 silver=2 *=1"), out
    # repeatable and merged: one weight changes, the default too, the rest is kept
    code, out, _ = cli(
        capsys, "queues", "set", "api", "--group-weight", "gold=5", "--default-group-weight",
        "2", "--dsn", dsn,
    )  # fmt: skip
    assert code == 0
    assert app.group_weights("api") == {
        "concurrency": 6,
        "group_concurrency": None,
        "group_weights": {"gold": 5, "silver": 2},
        "default_group_weight": 2,
    }
    code, out, _ = cli(capsys, "queues", "--dsn", dsn)
    assert "max 6, weights gold=5 silver=2 *=2" in out
    assert max(len(line) for line in out.splitlines()) <= 120, out
    row = queue_row(capsys, dsn, "api")
    assert (row["group_weights"], row["default_group_weight"]) == ({"gold": 5, "silver": 2}, 2)
    # the permits they share out stay while there are weights
    assert_user_error(
        cli(capsys, "queues", "set", "api", "--concurrency", "0", "--dsn", dsn),
        "queue 'api' has group weights, which share out its permits: keep a concurrency",
    )
    # cleared one by one; the last one gone, no weights
    assert cli(capsys, "queues", "set", "api", "--clear-group-weight", "gold", "--dsn", dsn)[0] == 0
    assert queue_row(capsys, dsn, "api")["group_weights"] == {"silver": 2}
    # weights and the limit they share go in one command
    code, _, _ = cli(
        capsys, "queues", "set", "api", "--no-group-weights", "--concurrency", "0", "--dsn", dsn
    )
    assert code == 0
    row = queue_row(capsys, dsn, "api")
    assert (row["group_weights"], row["concurrency"]) == (None, None)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--group-weight", "gold"], "'gold' is not GROUP=N"),
        (["--group-weight", "gold=x"], "'gold=x' is not GROUP=N"),
        (["--group-weight", "gold=0"], "group_weights['gold'] must be 1 to 1000, not 0"),
        (["--group-weight", "gold=5000"], "must be 1 to 1000, not 5000"),
        (["--default-group-weight", "0"], "default_group_weight must be 1 to 1000, not 0"),
    ],
)
def test_queues_set_refuses_bad_group_weights_in_one_line(
    capsys: Any, dsn: str, args: list[str], fragment: str
) -> None:
    assert cli(capsys, "queues", "set", "q", "--concurrency", "4", "--dsn", dsn)[0] == 0
    assert_user_error(cli(capsys, "queues", "set", "q", *args, "--dsn", dsn), fragment)


def test_group_weights_need_a_stored_permit_limit(capsys: Any, dsn: str) -> None:
    assert_user_error(
        cli(capsys, "queues", "set", "new", "--group-weight", "gold=3", "--dsn", dsn),
        "queue 'new': group_weights share out a queue's permits: give it concurrency=N",
    )
    assert cli(capsys, "queues", "set", "rated", "--rate-limit", "5/s", "--dsn", dsn)[0] == 0
    assert_user_error(
        cli(capsys, "queues", "set", "rated", "--group-weight", "gold=3", "--dsn", dsn),
        "group_weights share out a queue's permits: give it concurrency=N",
    )
