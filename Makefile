# `make demo` and `make test` both set up the same idempotent .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint clean

# bubblewrap is the code sandbox's strongest layer (diversed/execution.py): installed where apt-get
# and root allow; without it the other layers run and say what is not enforced.
setup: $(STAMP)
	@if ! command -v bwrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap >/dev/null 2>&1; } || true; \
	  fi; \
	  command -v bwrap >/dev/null || echo "bubblewrap not installed (Debian: apt-get install bubblewrap):" \
	    "the code sandbox runs without namespaces and warns"; \
	fi

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
