"""Benchmarks of gpu-tenant-operator against the scripts a user would write; see docs/performance.md."""
