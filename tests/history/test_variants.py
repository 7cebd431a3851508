"""Proof that the history checker can fail: short chaos scenarios against broken variants
of three statements (tests.history.variants), each next to the same scenario on the real
statements. The checker's verdict of every run is printed into the test log."""

from __future__ import annotations

import pytest

from pgqueue.db import sql as _sql
from tests.chaos.harness import Chaos
from tests.history import scenarios, variants

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def found(c: Chaos) -> set[str]:
    """The invariants the checker found violated (its report is in the log already)."""
    return {v.invariant for v in c.violations}


@pytest.mark.parametrize("variant", sorted(variants.VARIANTS))
def test_each_variant_changes_its_statement(variant: str) -> None:
    name, breaker = variants.VARIANTS[variant]
    assert breaker(_sql.query(name)) != _sql.query(name)


def test_leases_cut_short_outcomes_are_fenced_out(dsn: str) -> None:
    c = scenarios.leases_cut_short(dsn)
    assert found(c) == set()
    assert c.row.duplicates > 0  # the cut leases were rescued and their runs ran again


def test_checker_reports_outcomes_accepted_without_the_lease_check(dsn: str) -> None:
    # more cuts than the real run's three: each stale outcome is a race the body must win
    # against its worker's lease keeper (which, once it knows, sends nothing)
    c = scenarios.leases_cut_short(dsn, "no-fence", cuts=5)
    assert "fence" in found(c)


def test_timed_out_bodies_keep_their_permits(dsn: str) -> None:
    c = scenarios.timeouts_in_a_limited_queue(dsn)
    assert found(c) == set()
    assert c.row.sem_max == c.row.sem_limit  # the limit was reached, not exceeded


def test_checker_reports_a_permit_released_before_the_body_ends(dsn: str) -> None:
    c = scenarios.timeouts_in_a_limited_queue(dsn, "early-permit")
    assert "limit" in found(c)


def test_checker_reports_a_claim_without_skip_locked(dsn: str) -> None:
    c = scenarios.steady(dsn, "no-skip-locked")
    assert "lease" in found(c)
