"""Benchmarks of llmflow: `python -m benchmarks run [NAME...]`, `python -m benchmarks render`."""
