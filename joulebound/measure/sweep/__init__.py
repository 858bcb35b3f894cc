"""Sweep runner: real BERT/GPT training across shapes, strategies and GPU counts (torchrun)."""
