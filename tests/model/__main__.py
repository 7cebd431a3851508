"""`python -m tests.model`: SPIN on the lease protocol's model (tests/model/lease.pml):
safety (every assertion, every reachable state) and liveness (every run terminates,
under weak fairness). Prints the verifier's output; exit status 0 when every property
holds, 1 otherwise (with the counterexample), 2 when spin or gcc is missing.

    python -m tests.model                  # the protocol as pgqueue runs it
    python -m tests.model --variant NOFENCE   # a broken one: expect a counterexample
"""

from __future__ import annotations

import argparse
import sys

from tests.model import spin


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.model", description=__doc__)
    p.add_argument("--variant", choices=spin.VARIANTS)
    args = p.parse_args(argv)
    if not spin.available():
        print("spin and gcc are needed: apt-get install -y spin gcc", file=sys.stderr)
        return 2
    verdicts = [spin.verify(check, args.variant) for check in ("safety", "liveness")]
    for v in verdicts:
        print(v)
    return 0 if all(v.holds for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
