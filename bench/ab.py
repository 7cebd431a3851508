"""Two trees of pgqueue against each other: interleaved rounds of bench.compare, pgqueue alone.

    python -m bench.ab --tree old=/path/to/old --tree new=/path/to/new --rounds 20
    python -m bench.ab --tree old=... --tree new=... --report-only   # the table again

Each tree is a checkout with its own venv (`<tree>/.venv`, `pip install -e '.[bench]'`), so
each runs its own code, SQL and bench.compare. Rounds go A B B A A B B A ...: a drift of
the machine's speed over the run hits both trees alike. Each round is `python -m
bench.compare --libs pgqueue --repeat 1` (plus --args), from a fresh database, under the
bench lock. The table gives, per measure, each tree's median over its rounds and the
median of the per-pair ratios (the two rounds of an A B or B A pair ran back to back), with
the range of those ratios. For a rate, a ratio above 1 is faster; for a latency, lower.
Raw rounds: <out>/r<N>-<name>/compare.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LATENCIES = ("p50", "p95", "p99", "chain_p50", "chain_p95", "flow_p50", "flow_p95")
NAMES = {
    "bulk": "bulk enqueue, jobs/s",
    "single": "single enqueue, jobs/s",
    "process": "no-op processing, 1 process, jobs/s",
    "process2": "no-op processing, 2 processes, jobs/s",
    "deep": "60k queued, 1 process, jobs/s",
    "deep2": "60k queued, 2 processes, jobs/s",
    "deep_c100": "60k queued, --concurrency 100, 1 process, jobs/s",
    "deep2_c100": "60k queued, --concurrency 100, 2 processes, jobs/s",
    "p50": "idle pickup p50, ms",
    "p95": "idle pickup p95, ms",
    "p99": "idle pickup p99, ms",
    "chain": "4-task chains, chains/s",
    "chain_p50": "4-task chain end to end p50, ms",
    "chain_p95": "4-task chain end to end p95, ms",
    "flow": "4-step workflows, workflows/s",
    "flow_p50": "4-step workflow end to end p50, ms",
    "flow_p95": "4-step workflow end to end p95, ms",
    "backlog": "500k backlog in another queue, jobs/s",
    "backlog_ratio": "backlog / no backlog",
}


def order(names: list[str], rounds: int) -> list[str]:
    """A B B A A B B A ... (rounds per tree each)."""
    a, b = names
    seq: list[str] = []
    while len(seq) < 2 * rounds:
        seq += [a, b] if len(seq) % 4 == 0 else [b, a]
    return seq


def run(trees: dict[str, Path], rounds: int, out: Path, args: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(order(list(trees), rounds), 1):
        tree = trees[name]
        command = [
            "flock", "/tmp/pgqueue-bench.lock", str(tree / ".venv" / "bin" / "python"),
            "-m", "bench.compare", "--libs", "pgqueue", "--repeat", "1",
            "--out", str(out / f"r{i}-{name}"), *args,
        ]  # fmt: skip
        print(f"round {i} {name}: {shlex.join(command)}", flush=True)
        with open(out / f"r{i}-{name}.log", "w") as log:
            subprocess.run(command, cwd=tree, stdout=log, stderr=subprocess.STDOUT, check=True)


def load(out: Path) -> list[tuple[str, str, dict[str, float]]]:
    """(started, tree, values) of every round, in the order they ran."""
    rounds = []
    for path in out.glob("r*-*/compare.json"):
        name = path.parent.name.split("-", 1)[1]
        data = json.loads(path.read_text())
        results = data["results"]["pgqueue"]
        values = {k: v[0] for k, v in results.items() if isinstance(v, list) and v}
        rounds.append((data["started"], name, values))
    return sorted(rounds, key=lambda r: r[0])


def pair(rounds: list[tuple[str, str, dict[str, float]]]) -> list[tuple[Any, Any]]:
    """Rounds of the two trees that ran back to back, each round in one pair at most."""
    pairs = []
    i = 0
    while i < len(rounds) - 1:
        if rounds[i][1] != rounds[i + 1][1]:
            pairs.append((rounds[i], rounds[i + 1]))
            i += 2
        else:
            i += 1
    return pairs


def report(names: list[str], out: Path) -> str:
    a, b = names
    rounds = load(out)
    pairs = pair(rounds)
    lines = [
        f"| measure | {a} | {b} | {b} / {a}, median of {len(pairs)} pairs (range) |",
        "| --- | --- | --- | --- |",
    ]
    for key, label in NAMES.items():
        side = {n: [r[2][key] for r in rounds if r[1] == n and key in r[2]] for n in names}
        if not side[a] or not side[b]:
            continue
        ratios = []
        for x, y in pairs:
            by = {x[1]: x[2], y[1]: y[2]}
            if key in by.get(a, {}) and key in by.get(b, {}) and by[a][key]:
                ratios.append(by[b][key] / by[a][key])
        if not ratios:
            continue
        lines.append(
            f"| {label} | {statistics.median(side[a]):,.2f} | {statistics.median(side[b]):,.2f}"
            f" | **{statistics.median(ratios):.3f}** ({min(ratios):.2f} to {max(ratios):.2f}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tree", action="append", required=True, help="name=path, twice")
    p.add_argument("--rounds", type=int, default=10, help="rounds per tree")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "ab")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("compare_args", nargs="*", help="more bench.compare options, after --")
    opts = p.parse_args(argv)
    trees = {}
    for spec in opts.tree:
        name, _, path = spec.partition("=")
        trees[name] = Path(path).resolve()
    if len(trees) != 2:
        sys.exit("bench.ab: give exactly two --tree name=path")
    if not opts.report_only:
        run(trees, opts.rounds, opts.out, opts.compare_args)
    print(report(list(trees), opts.out))


if __name__ == "__main__":
    main()
