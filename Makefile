# Two commands on a fresh machine: `make demo` and `make test`. Both build .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# llama-cpp-python builds from source; the multimodal part is not needed and costs a quarter of the build.
export CMAKE_ARGS ?= -DLLAVA_BUILD=OFF

.PHONY: demo test lint bench install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,bench,compare,transformers,spark]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) -m llmflow.demo

lint: install
	$(PY) -m ruff check llmflow tests benchmarks
	$(PY) -m ruff format --check llmflow tests benchmarks

test: install lint
	$(PY) -m pytest -q

# every CPU benchmark (BENCH_ARGS: names, --quick, --example-server PATH), then BENCHMARKS.md's tables
bench: install
	$(PY) -m benchmarks run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .demo
