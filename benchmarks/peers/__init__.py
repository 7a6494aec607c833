"""Peer servers that benchmarks compare llmflow against (built or found outside the repository)."""
