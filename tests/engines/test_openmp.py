"""llama.cpp's OpenMP threads: a generation hands its thread's team back when it ends, so that
callers from many threads never pile up teams (more OpenMP threads than cores slows every
forward pass down)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from llmflow.engines.openmp import release_thread_team


def _os_threads() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/task")}


def test_release_is_harmless_without_a_team():
    before = _os_threads()
    release_thread_team()
    release_thread_team()
    assert _os_threads() == before  # it neither starts nor leaves threads


def test_generations_from_many_threads_leave_no_teams_behind(embedded_llm):
    params = {"temperature": 0.0, "max_tokens": 4}
    embedded_llm.generate("Hi", params)  # this thread's team, if any, is handed back at the end
    before = len(_os_threads())
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: embedded_llm.generate("Hi", params).text, range(8)))
        during = len(_os_threads())  # the pool's own 4 threads, and no OpenMP team per thread
    assert len(set(answers)) == 1
    assert during <= before + 4
