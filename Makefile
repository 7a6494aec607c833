# Two commands on a fresh machine: `make demo` and `make test`.
#
# `make demo` installs the core only: llmflow, MLflow, the embedded model and llama-cpp-python.
# `make test` adds what the tests need (torch, transformers, pyspark, Playwright, ...) to the same
# .venv, and Java and Chromium from Debian's packages where it can. Each step leaves a marker in
# .venv, so running one command after the other reinstalls nothing.
#
# llama-cpp-python is compiled by scripts/build_llama_cpp.py, not by pip's default build: pip would
# compile llama.cpp with -march=native, which on Intel Xeons with AMX turns on llama.cpp's AMX
# matrix path, and that path crashes at the first decode (llama.cpp issue 20824). The script names
# the CPU's instruction sets itself (GGML_NATIVE=OFF; AVX2, AVX512, VNNI, BF16... as the CPU has
# them; AMX off; the Q4_0/Q8_0 weight repack stays on) and keeps the wheel in ~/.cache/llmflow, so
# it is compiled once per machine. Extra CMake flags can be passed in CMAKE_ARGS.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TEST_EXTRAS := test,bench,compare,transformers,spark,gateway,ray
# prints a line whenever a step has been quiet for a few seconds (pip is, while it installs torch)
HEARTBEAT := $(PYTHON) scripts/heartbeat.py

.PHONY: demo test lint docs bench install install-test system-packages clean

$(VENV)/.core: pyproject.toml scripts/build_llama_cpp.py
	@echo "==> Creating $(VENV) with the core of llmflow (about 2 minutes, plus the llama.cpp build)"
	$(PYTHON) -m venv $(VENV)
	$(HEARTBEAT) "upgrading pip" -- $(PY) -m pip install --quiet --upgrade pip
	$(PYTHON) scripts/build_llama_cpp.py --python $(PY)
	@echo "==> Installing llmflow, MLflow and the embedded model"
	$(HEARTBEAT) "installing llmflow and MLflow" -- $(PY) -m pip install -e .
	touch $@

$(VENV)/.test: $(VENV)/.core
	@echo "==> Adding what the tests need: torch (CPU), transformers, pyspark, Playwright, ... (about 3 minutes, 2 GB)"
	$(HEARTBEAT) "installing the test extras" -- $(PY) -m pip install -e ".[$(TEST_EXTRAS)]"
	touch $@

install: $(VENV)/.core

install-test: $(VENV)/.test

system-packages:
	@scripts/system_packages.sh

demo: install
	$(PY) -m llmflow.demo

# ruff, then the documentation: every link between the pages of docs/ must resolve (site/ is ignored)
lint: install-test
	$(PY) -m ruff check llmflow tests benchmarks scripts
	$(PY) -m ruff format --check llmflow tests benchmarks scripts
	$(PY) -m mkdocs build --strict --quiet --site-dir site

# -rs: every skipped test says why
test: install-test system-packages lint
	@echo "==> Running the tests (about 10 minutes on 2 cores)"
	$(PY) -m pytest -q -rs

# every CPU benchmark (BENCH_ARGS: names, --quick, --example-server PATH), then the documents' numbers
bench: install-test
	$(PY) -m benchmarks run $(BENCH_ARGS)

# the documentation as a local site, rebuilt as docs/ changes
docs: install-test
	$(PY) -m mkdocs serve

clean:
	rm -rf $(VENV) .demo site
