"""Ingest writes in batches: an ingest that dies keeps the batches it finished, and the next one loads the rest.

(benchmarks/ingest_scale.py measures why batches: one transaction over 10^5
traces held ~2 GB; batches of 5,000 hold under 600 MB at the same speed.)
"""
from __future__ import annotations

import duckdb
import pytest

from analysis import ingest
from trace_factory import write_pair


def test_a_killed_ingest_keeps_finished_batches_and_the_next_loads_the_rest(tmp_path, monkeypatch):
    results = tmp_path / "episodes"
    for seed in range(3):
        write_pair(results, seed=seed)  # 6 traces
    db = tmp_path / "t.duckdb"
    monkeypatch.setattr(ingest, "_CHUNK", 2)
    monkeypatch.setattr(ingest, "_COMMIT_EVERY", 2)
    real_write, calls = ingest._write_traces, []

    def dies_on_the_second_batch(con, traces):
        calls.append(len(traces))
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        real_write(con, traces)

    monkeypatch.setattr(ingest, "_write_traces", dies_on_the_second_batch)
    with pytest.raises(KeyboardInterrupt):
        ingest.ingest_traces(results, db, workers=1)
    con = duckdb.connect(str(db), read_only=True)
    kept = con.execute("SELECT count(*) FROM episodes").fetchone()[0]
    manifest = con.execute("SELECT count(*) FROM ingest_manifest").fetchone()[0]
    views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    con.close()
    assert kept == manifest == 2  # the first batch, whole: rows and manifest together
    assert "paired" in views  # readers find a usable database

    monkeypatch.setattr(ingest, "_write_traces", real_write)
    summary = ingest.ingest_traces(results, db, workers=1)
    assert (summary.loaded, summary.unchanged, summary.total) == (4, 2, 6)
