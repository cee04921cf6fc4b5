# cellbench: `make reproduce` runs the default grid end to end, `make test`
# runs the tests.  Both first build the project's venv (python3 -m venv, then
# an editable install), so a fresh checkout needs nothing else.

VENV ?= .venv
PYTHON ?= python3
CORES ?= all
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Headless rendering (the simulator draws with EGL, no display needed).
export MUJOCO_GL ?= egl

.PHONY: help setup reproduce test test-all figures clean distclean local-llm local-llm-grid local-llm-stop test-llm

help:
	@echo "make reproduce   set up, run the grid of config.yaml, then tables and figures"
	@echo "make test        set up, run the tests"
	@echo "make test-all    the tests, the slow end-to-end ones included"
	@echo "make figures     tables and figures again from the traces on disk (no episodes)"
	@echo "make setup       create $(VENV) and install cellbench into it (editable)"
	@echo "make local-llm   build llama-server, fetch a small open model and start it (README: A local open model)"
	@echo "make local-llm-grid  that model on configs/local_llm.yaml's grid, in $(LLM_GRID)"
	@echo "make clean       remove the database, tables and figures (traces stay)"
	@echo "make distclean   remove results/ (traces too), logs/ and .snakemake/"

setup: $(STAMP)

# Reinstall only when pyproject.toml is newer than the last install; the
# install is editable, so code changes need none.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	touch $@

reproduce: setup
	$(BIN)/snakemake --cores $(CORES)

test: setup
	$(BIN)/pytest -q

test-all: setup
	$(BIN)/pytest -q -m "not llm"

figures: setup
	$(BIN)/snakemake figures

clean:
	rm -rf results/traces.duckdb results/traces.duckdb.wal results/tables figures

distclean: clean
	rm -rf results logs .snakemake

# A local open model (README, "A local open model"): none of this is part of
# the default install, the tests or CI.  The build (~20 min on 2 cores) and
# the weights (1.1 GB) land in the git-ignored .cache/local_llm.
LLM_GRID ?= .cache/local_llm/grid
LLM_KEY = OPENAI_API_KEY=$${OPENAI_API_KEY:-local}
# LLM_MODEL=0.5b: the smaller model, configs/local_llm_0.5b.yaml over the grid, 4 episodes at once.
export LLM_MODEL ?= 1.5b
LLM_CONFIGS = $(CURDIR)/configs/local_llm.yaml $(if $(filter 0.5b,$(LLM_MODEL)),$(CURDIR)/configs/local_llm_0.5b.yaml)
LLM_CORES ?= $(if $(filter 0.5b,$(LLM_MODEL)),4,2)
export LLM_SLOTS ?= $(LLM_CORES)

local-llm: setup
	benchmarks/local_llm.sh build
	benchmarks/local_llm.sh start

# Its own working directory, so its traces, database and tables never mix with
# the default grid's; config.yaml is linked in because configs merge over it.
local-llm-grid: local-llm
	mkdir -p $(LLM_GRID)
	ln -sf $(CURDIR)/config.yaml $(LLM_GRID)/config.yaml
	$(LLM_KEY) PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/snakemake -s $(CURDIR)/Snakefile -d $(LLM_GRID) \
	  --configfile $(LLM_CONFIGS) --cores $(LLM_CORES)

local-llm-stop:
	benchmarks/local_llm.sh stop

# One real episode per agent against the running server (pytest marker llm).
test-llm: setup
	$(LLM_KEY) $(BIN)/pytest -q -m llm
