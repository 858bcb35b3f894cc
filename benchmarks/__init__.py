"""joulebound benchmarks (``make bench``); results go to docs/benchmarks.md."""
