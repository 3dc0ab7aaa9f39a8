"""Benchmarks of SLiCS Explorer, run from the repository root as modules: ``python -m benchmarks.bench_fit``."""
