"""Handing back the OpenMP threads that llama.cpp leaves behind in a calling thread.

llama.cpp built with OpenMP (llama-cpp-python's usual build, on libgomp) keeps a team of worker
threads for every thread that ever ran a forward pass, until that thread ends. Once a process holds
more OpenMP threads than cores, libgomp stops spinning between parallel regions and every forward
pass pays thread wake-ups: decoding measured 2.5x slower on 2 cores. An engine that decodes in
its callers' threads (a pool of in-process callers, a benchmark's main thread) gets there after a
few requests, unless each generation hands its thread's team back when it ends; the next one
builds a team again (one thread start, far below a millisecond).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

#: OpenMP 5's omp_pause_soft: free the threads, keep what can be rebuilt
_OMP_PAUSE_SOFT = 1


def release_thread_team() -> None:
    """Free the OpenMP worker threads the calling thread keeps. A no-op unless libgomp is already
    loaded in this process (a llama.cpp built without OpenMP, or with another runtime)."""
    pause = _omp_pause_resource_all()
    if pause is not None:
        pause(_OMP_PAUSE_SOFT)


def _omp_pause_resource_all() -> Any:
    """Looked up each time (a few microseconds a generation): libgomp may load after a first call."""
    if os.name != "posix":
        return None
    try:  # RTLD_NOLOAD: only a libgomp that llama.cpp already brought in
        library = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    return getattr(library, "omp_pause_resource_all", None)
