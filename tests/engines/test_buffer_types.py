"""The AMX guard: llama.cpp builds that report AMX load models without extra buffer types, unless
the engine option `extra_buffers` says otherwise; both llama.cpp engines go through it."""

from __future__ import annotations

import logging

import pytest

from llmflow import LLM, FinishReason
from llmflow.engines.buffer_types import build_has_amx, decide_extra_buffers, extra_buffers_allowed

#: `llama_print_system_info()` of a native build on an Intel Xeon with AMX (Sapphire Rapids)
WITH_AMX = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)
#: ... and of the build `make` makes on the same machine
WITHOUT_AMX = WITH_AMX.replace("AMX_INT8 = 1 | ", "")
GUARD_LOG = "extra_buffers=true"


@pytest.mark.parametrize(("info", "expected"), [(WITH_AMX, True), (WITHOUT_AMX, False), ("", False)])
def test_amx_is_read_from_the_system_info(info, expected):
    assert build_has_amx(info) is expected


@pytest.mark.parametrize(
    ("info", "requested", "allowed"),
    [
        (WITH_AMX, None, False),  # the guard
        (WITHOUT_AMX, None, True),  # nothing to guard against: repacking stays on
        (WITH_AMX, True, True),  # the user opts back in
        (WITHOUT_AMX, False, False),  # or out
    ],
)
def test_the_option_overrides_the_guard(info, requested, allowed):
    assert extra_buffers_allowed(info, requested) is allowed


class _Library:
    """Only what the decision reads of the llama_cpp module."""

    def __init__(self, info: str):
        self._info = info

    def llama_print_system_info(self) -> bytes:
        return self._info.encode()


def test_the_guard_says_why_once_and_how_to_opt_back_in(caplog):
    with caplog.at_level(logging.WARNING, logger="llmflow.engines.buffer_types"):
        assert decide_extra_buffers(_Library(WITH_AMX), None) is False
        assert decide_extra_buffers(_Library(WITH_AMX), True) is True
        assert decide_extra_buffers(_Library(WITHOUT_AMX), None) is True
    [record] = caplog.records
    assert "AMX" in record.getMessage() and GUARD_LOG in record.getMessage()


ENGINES = {
    "llama_cpp": {"n_ctx": 512},
    "llama_cpp_batched": {"n_ctx": 512, "parallel": 2},
}


@pytest.fixture
def amx_build(monkeypatch):
    """The loaded llama.cpp reports AMX, as a native build on a Sapphire Rapids Xeon does."""
    import llama_cpp

    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: WITH_AMX.encode())


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_each_engine_generates_with_the_guard_active(engine, amx_build, caplog):
    with caplog.at_level(logging.WARNING, logger="llmflow.engines.buffer_types"):
        llm = LLM.load(engine=engine, engine_options=ENGINES[engine])
    try:
        assert llm.engine.options.extra_buffers is False
        assert any(GUARD_LOG in r.getMessage() for r in caplog.records)
        if engine == "llama_cpp":  # what llama.cpp itself was given
            assert llm.engine._llama.model_params.use_extra_bufts is False
        result = llm.generate("Tell me about Osaka.", {"temperature": 0.0, "max_tokens": 8})
        assert result.usage.completion_tokens > 0 and result.text
        assert result.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    finally:
        llm.close()


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_extra_buffers_option_wins_over_the_guard(engine, amx_build, caplog):
    with caplog.at_level(logging.WARNING, logger="llmflow.engines.buffer_types"):
        llm = LLM.load(engine=engine, engine_options={**ENGINES[engine], "extra_buffers": True})
    try:
        assert llm.engine.options.extra_buffers is True
        assert not caplog.records
    finally:
        llm.close()


def test_this_machines_build_keeps_its_extra_buffers():
    """`make`'s build has no AMX, so nothing is turned off by default on any CPU."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    llm = LLM.load(engine_options={"n_ctx": 256})
    try:
        assert llm.engine.options.extra_buffers is (not build_has_amx(info))
    finally:
        llm.close()
