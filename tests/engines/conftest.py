"""Fixtures the llama.cpp engine tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", params=["llama_cpp", "llama_cpp_batched"])
def engine_name(request) -> str:
    """Each test that takes it runs on both llama.cpp engines, one engine per module at a time."""
    return request.param
