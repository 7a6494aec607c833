"""Start llama-cpp-python's example batching server (`examples/server/server.py` of its repository,
given by path, never copied here) with a config file.

The example imports `llama_cpp.mtmd_cpp` at the top, which fails on a llama-cpp-python built
without its multimodal library (as llmflow builds it). Text-only serving never calls it, so when
that import fails this launcher registers an empty stand-in module first; any multimodal call then
fails loudly instead of the whole server.

    python -m benchmarks.peers.example_server SERVER_PY -C config.json
"""

from __future__ import annotations

import importlib
import runpy
import sys
import types


class _NoMultimodal(types.ModuleType):
    def __getattr__(self, name: str):
        raise RuntimeError(f"llama_cpp.mtmd_cpp.{name}: this llama-cpp-python has no multimodal library")


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m benchmarks.peers.example_server SERVER_PY -C CONFIG")
    try:
        importlib.import_module("llama_cpp.mtmd_cpp")
    except (ImportError, OSError, FileNotFoundError):
        import llama_cpp

        stand_in = _NoMultimodal("llama_cpp.mtmd_cpp")
        sys.modules["llama_cpp.mtmd_cpp"] = stand_in
        llama_cpp.mtmd_cpp = stand_in
    sys.argv = sys.argv[1:]  # the example sees its own command line
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
