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


@pytest.fixture(scope="session")
def default_served():
    """What `llmflow serve` serves for the embedded model: the batching engine, default options."""
    from llmflow.server import load_served

    served = load_served(None)
    assert served.engine_name == "llama_cpp_batched"
    yield served
    served.llm.close()
