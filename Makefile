# `make demo` and `make test` both set up the same idempotent .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint clean

setup: $(STAMP)

# torch first: on CPU-only machines `torch==2.13.0` takes the local CPU wheel; pulling
# torch through a dependency would fetch several GB of CUDA packages instead.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: setup
	$(PY) scripts/demo.py

test: setup
	$(PY) -m pytest -q

lint: setup
	$(PY) -m ruff check diversed tests scripts

clean:
	rm -rf outputs multirun
