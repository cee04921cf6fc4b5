# cellbench: `make reproduce` runs the whole comparison, `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed
CORES  ?= all
export MUJOCO_GL ?= egl

.PHONY: setup reproduce figures test test-all clean

setup: $(STAMP)

# Reinstall only when the package definition changed.
$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e .
	touch $(STAMP)

reproduce: setup
	$(VENV)/bin/snakemake --cores $(CORES)

figures: setup
	$(VENV)/bin/snakemake figures --cores 1

test: setup
	$(VENV)/bin/pytest -q

test-all: setup
	$(VENV)/bin/pytest -q -m ""

clean:
	rm -rf results figures logs .snakemake
