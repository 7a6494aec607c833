"""Whether llama.cpp may put a model's weights in its extra CPU buffer types (AMX, repack).

A llama.cpp compiled with `-march=native` on an Intel Xeon with AMX (Sapphire Rapids and later;
what `pip install llama-cpp-python` builds there) includes an AMX matrix path that crashes at the
first decode of quantized models (llama.cpp issue 20824). llmflow's own build leaves AMX out
(`scripts/build_llama_cpp.py`); for any other build, the llama.cpp engines load the model without
extra buffer types when the library reports AMX. That keeps AMX code from running, and on such a
build also gives up the repacking of Q4_0/Q8_0 weights, since llama.cpp offers one switch for both.
"""

from __future__ import annotations

import logging
import re
from typing import Any

logger = logging.getLogger(__name__)

_AMX = re.compile(r"\bAMX_INT8\s*=\s*1\b")


def build_has_amx(system_info: str) -> bool:
    """Whether `llama_print_system_info()` says the CPU backend was compiled with AMX."""
    return _AMX.search(system_info) is not None


def extra_buffers_allowed(system_info: str, requested: bool | None) -> bool:
    """The user's choice when there is one, else: allowed unless the build has AMX."""
    if requested is not None:
        return requested
    return not build_has_amx(system_info)


def decide_extra_buffers(llama_cpp: Any, requested: bool | None) -> bool:
    """`extra_buffers_allowed` for the loaded llama.cpp library, saying why when it refuses."""
    system_info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    allowed = extra_buffers_allowed(system_info, requested)
    if requested is None and not allowed:
        logger.warning(
            "llama.cpp was built with AMX, whose matrix path crashes on some Intel Xeons (llama.cpp "
            "issue 20824): loading the model without extra buffer types. The engine option "
            "extra_buffers=true turns them back on."
        )
    return allowed
