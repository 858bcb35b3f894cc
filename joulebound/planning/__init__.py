"""Clock plans: the choice problem, its solvers (per-kernel knapsack, switch-aware search),
the plan object, the trace simulator and the study that ties them together."""
