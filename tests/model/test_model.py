"""The lease protocol's model (tests/model/lease.pml), checked by SPIN: the protocol as
pgqueue runs it satisfies every property, each broken variant yields a counterexample,
and every SQL file a model action stands for exists. The verifier's output goes into the
test log (pytest -s, or the captured output of a failure)."""

from __future__ import annotations

import os

import pytest

from tests.model import spin

# Every statement the protocol is made of, as the model names them.
PROTOCOL = {
    "sql/claim_limited.sql",
    "sql/renew_leases.sql",
    "sql/complete.sql",
    "sql/rescue_expired.sql",
    "sql/hold_zombie_permit.sql",
    "sql/release_zombie_permit.sql",
    "sql/functions/cancel.sql",
    "sql/functions/claim_limited.sql",
}


@pytest.fixture(scope="module", autouse=True)
def spin_installed() -> None:
    if not spin.available():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("spin and gcc are needed in CI (.ci/run installs spin)")
        pytest.skip("spin or gcc is not installed (apt-get install -y spin)")


def test_every_sql_file_the_model_names_exists() -> None:
    named = spin.sql_references()
    assert set(named) == PROTOCOL, set(named) ^ PROTOCOL
    missing = [ref for ref in named if not (spin.ROOT / ref).is_file()]
    assert not missing, f"renamed or gone: {missing}: update tests/model/lease.pml"


def test_the_name_check_sees_a_missing_file() -> None:
    text = spin.MODEL.read_text().replace("sql/complete.sql", "sql/completed.sql")
    named = spin.sql_references(text)
    assert "sql/completed.sql" in named
    assert not (spin.ROOT / "sql/completed.sql").exists()


@pytest.mark.parametrize("check", ["safety", "liveness"])
def test_the_protocol_satisfies_every_property(check: str) -> None:
    verdict = spin.verify(check)
    print(verdict)
    assert verdict.holds, str(verdict)
    assert "states, stored" in verdict.output


@pytest.mark.parametrize(
    ("variant", "check", "broken"),
    [
        ("NOFENCE", "safety", "assertion violated"),
        ("EARLYPERMIT", "safety", "assertion violated"),
        ("NORESCUE", "liveness", "acceptance cycle"),
    ],
)
def test_each_broken_variant_has_a_counterexample(variant: str, check: str, broken: str) -> None:
    verdict = spin.verify(check, variant)
    print(verdict)
    assert not verdict.holds
    assert broken in verdict.output
    assert verdict.trail  # the counterexample, replayed
