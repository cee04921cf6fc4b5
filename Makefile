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

.PHONY: help setup reproduce test test-all figures clean distclean

help:
	@echo "make reproduce   set up, run the grid of config.yaml, then tables and figures"
	@echo "make test        set up, run the tests"
	@echo "make test-all    the tests, the slow end-to-end ones included"
	@echo "make figures     tables and figures again from the traces on disk (no episodes)"
	@echo "make setup       create $(VENV) and install cellbench into it (editable)"
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
	$(BIN)/pytest -q -m ""

figures: setup
	$(BIN)/snakemake figures

clean:
	rm -rf results/traces.duckdb results/traces.duckdb.wal results/tables figures

distclean: clean
	rm -rf results logs .snakemake
