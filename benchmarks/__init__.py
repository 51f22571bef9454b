"""Benchmarks that print measured or predicted ratios; run each as python -m benchmarks.<name>."""
