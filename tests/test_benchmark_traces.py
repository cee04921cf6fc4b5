"""The synthetic traces of benchmarks/ingest_scale.py are real traces: they validate, and ingest reads them.

The scale benchmark is only meaningful while its generator writes what the
harness writes; a schema change that the generator misses fails here, not
in a 10^5-episode run.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import duckdb

from agents.schema import validate_trace
from analysis.ingest import ingest_traces

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("ingest_scale", ROOT / "benchmarks" / "ingest_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_traces_validate_and_ingest(tmp_path):
    gen = _generator()
    episodes = gen.grid(18)  # two instances: 5 tool + 4 code episodes each
    gen._write_chunk((str(tmp_path), episodes))
    dirs = [gen.trace_dir(tmp_path, *e) for e in episodes]
    for d in dirs:
        assert validate_trace(d) == [], d
    code_dirs = [d for d, e in zip(dirs, episodes) if e[3] == "code"]
    assert all((d / "cells" / "stats.json").exists() for d in code_dirs)
    summary = ingest_traces(tmp_path, tmp_path / "t.duckdb")
    assert not summary.problems
    con = duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True)
    n_episodes, = con.execute("SELECT count(*) FROM episodes").fetchone()
    n_cells, texts = con.execute("SELECT count(*), count(DISTINCT code) FROM cells").fetchone()
    con.close()
    assert n_episodes == len(episodes)
    assert n_cells >= len(code_dirs) and texts == n_cells  # unique cell texts by default
