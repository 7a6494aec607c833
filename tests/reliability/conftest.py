"""Reliability tests: real servers (in a thread, or `llmflow serve` in a child process) on
127.0.0.1, and the scripts of `benchmarks/` run in short versions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmflow.server import ServedModel

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))


@pytest.fixture(scope="session")
def served_llm(default_served) -> ServedModel:
    """The engine `llmflow serve` uses by default."""
    return default_served
