"""Reproducible benchmarks: one folder per question, run as ``python -m benchmarks.<name>``."""
