"""pgqueue benchmarks, run by hand: `python -m bench.run all --repeat 3` (see RESULTS.md)."""
