"""Fixtures shared across the suite."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def embedded_llm():
    """The embedded SmolLM2 model, loaded once for the whole session."""
    from llmflow import LLM

    llm = LLM.load()
    yield llm
    llm.close()
