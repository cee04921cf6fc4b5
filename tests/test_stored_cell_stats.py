"""Stored cell statistics (cells/stats.json): the trace writer stores them, ingest uses them only when current.

The file is a cache of `analysis.cellstats` computed where the episode ran.
These tests write a code-agent trace through the real `TraceWriter`, then
check that ingest gives the same cells table with and without the file, that
it really reads the file when it is current (a planted value shows up), and
that it recomputes from the cell text when the file is stale: other
definitions, an edited cell, other executed primitives, or garbage.
"""
from __future__ import annotations

import json

import duckdb
import pytest

from agents.records import EpisodeRecord
from agents.trace import TraceWriter
from analysis.cellstats import STORED_STATS_FILE, cell_hash, episode_cell_stats
from analysis.ingest import ingest_traces
from trace_factory import call, primitive, trace_dir_for, write_episode

CELLS = {
    1: "def place(n):\n    for _ in range(3):\n        g = robo.grasp(n)\n        if g.ok:\n            return True\n"
       "    return False\n",
    2: "ok = place('bowl')\nif not ok:\n    robo.show('agentview')\nr = robo.move_to([0.1, 0.0, 1.0])\n"
       "if r.reached:\n    robo.release()\n",
    3: "print(robo.state(",  # does not parse
}
EXECUTED = [(1, "grasp"), (2, "grasp"), (2, "move_to"), (2, "release"), (3, "state")]
STATS_COLUMNS = ("call_index", "parses", "n_primitives", "n_acting", "acting_sites", "guarded_chain", "retry",
                 "own_perception", "helper_defined", "helper_reused", "conditional_image_request", "single_step",
                 "requests_image")


@pytest.fixture
def trace(tmp_path):
    """A code-agent trace written by TraceWriter (records from the factory's dataclasses)."""
    root = tmp_path / "results" / "episodes"
    d = trace_dir_for(root, "libero_pro", "full", "code", "libero_spatial_swap/0", 0)
    # The factory's episode record (totals summed over the same calls) as the writer's input.
    calls = [call(i, action_kind="cell", n_primitives=sum(1 for c, _ in EXECUTED if c == i),
                  n_acting=sum(1 for c, n in EXECUTED if c == i and n != "state"),
                  cell_hash=cell_hash(CELLS[i])) for i in CELLS]
    prims = [primitive(c, seq, name) for seq, (c, name) in enumerate(EXECUTED)]
    scratch = write_episode(tmp_path / "scratch", agent="code", calls=calls, primitives=prims)
    record = EpisodeRecord(**json.loads((scratch / "episode.json").read_text()))
    writer = TraceWriter(d)
    for c in calls:
        writer.cell(c.call_index, CELLS[c.call_index])
        for p in prims:
            if p.call_index == c.call_index:
                writer.primitive(p)
        writer.call(c)
    writer.finish(record)
    return root, d


def cells_table(root, db):
    ingest_traces(root, db)
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(f"SELECT {', '.join(STATS_COLUMNS)} FROM cells ORDER BY call_index").fetchall()


def edit_stored(d, change):
    path = d / "cells" / STORED_STATS_FILE
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_the_writer_stores_what_ingest_would_compute(trace, tmp_path):
    root, d = trace
    stored = json.loads((d / "cells" / STORED_STATS_FILE).read_text())
    assert [row["call_index"] for row in stored["cells"]] == [1, 2, 3]
    with_file = cells_table(root, tmp_path / "a.duckdb")
    (d / "cells" / STORED_STATS_FILE).unlink()
    without = cells_table(root, tmp_path / "b.duckdb")
    assert with_file == without
    # And both are the statistics of the cells (the analysis's own function on the same inputs).
    executed: dict[int, list] = {}
    for c, name in EXECUTED:
        executed.setdefault(c, []).append((name, name != "state"))
    expected = episode_cell_stats(sorted(CELLS.items()), executed)
    assert [row[1:] for row in without] == [tuple(getattr(s, f) for f in STATS_COLUMNS[1:]) for s in expected]
    assert without[0][STATS_COLUMNS.index("retry")] and not without[2][STATS_COLUMNS.index("parses")]


def planted(doc):
    doc["cells"][2]["helper_reused"] = True  # cell 3 does not parse: computed, it is False


def test_a_current_file_is_what_ingest_reads(trace, tmp_path):
    root, d = trace
    edit_stored(d, planted)
    assert cells_table(root, tmp_path / "a.duckdb")[2][STATS_COLUMNS.index("helper_reused")] is True


@pytest.mark.parametrize("stale", ["definitions", "edited cell", "executed", "garbage", "missing cell"])
def test_a_stale_file_is_recomputed(trace, tmp_path, stale):
    root, d = trace

    def change(doc):
        planted(doc)
        if stale == "definitions":
            doc["definitions"] = "0" * 16
        elif stale == "executed":
            doc["cells"][2]["executed"] = []
        elif stale == "missing cell":
            del doc["cells"][0]
        elif stale == "garbage":
            doc["cells"][2]["n_acting"] = "two"
    edit_stored(d, change)
    if stale == "edited cell":
        (d / "cells" / "cell_003.py").write_text("print(robo.state())\n")
    rows = cells_table(root, tmp_path / "a.duckdb")
    assert rows[2][STATS_COLUMNS.index("helper_reused")] is False
    if stale == "edited cell":
        assert rows[2][STATS_COLUMNS.index("parses")] is True


def test_an_unreadable_file_is_recomputed(trace, tmp_path):
    root, d = trace
    (d / "cells" / STORED_STATS_FILE).write_text('{"definitions": ')
    rows = cells_table(root, tmp_path / "a.duckdb")
    (d / "cells" / STORED_STATS_FILE).unlink()
    assert rows == cells_table(root, tmp_path / "b.duckdb")
