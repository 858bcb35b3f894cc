"""Workloads: analytic transformer kernel traces, torch.profiler capture and Kineto import."""
