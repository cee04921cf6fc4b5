"""The report's sandbox table and the cells' left_api column, from traces as the episodes write them."""
from __future__ import annotations

import pytest

from agents.sandbox import LAYERS
from analysis.cost import PriceTable
from analysis.ingest import ingest_traces
from analysis.report import build_tables, load_report_data
from trace_factory import call, write_pair

FLAT = PriceTable("flat", input=10, cached_input=0, cache_write=0, output=0, long_context_threshold=None,
                  long_context_input_multiplier=1.0, long_context_output_multiplier=1.0)
ALL = {layer: True for layer in LAYERS} | {"mode": "best_effort", "landlock_abi": 7, "unavailable": {}}
NO_LANDLOCK = ALL | {"filesystem": False, "tcp": False, "scopes": False, "landlock_abi": 0,
                     "unavailable": {"filesystem": "Landlock is not available in this kernel"}}
BENIGN = "s = robo.state()\nprint(s.eef_pos)"


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("sandbox") / "episodes"
    cell = dict(action_kind="cell", tool_name="python")
    for i, (layers, noticed) in enumerate([(ALL, None), (ALL, ["socket"]), (NO_LANDLOCK, None), (None, None)]):
        code = dict(sandbox=layers, cell_worker_restarts=i % 2, cells={1: BENIGN},
                    calls=[call(1, **cell, left_api=noticed)])
        write_pair(root, task=f"libero_spatial_swap/{i}", code=code)
    db = root.parent / "t.duckdb"
    ingest_traces(root, db)
    return {t.name: t.frame for t in build_tables(load_report_data(db, FLAT))}


def test_episodes_are_counted_per_layer(tables):
    frame = tables["sandbox"].set_index("layer")
    assert list(frame.index) == list(LAYERS)
    assert (frame["n_code_episodes"] == 4).all() and (frame["n_no_record"] == 1).all()
    assert frame.loc["filesystem", "n_applied"] == 2 and frame.loc["filesystem", "n_not_applied"] == 1
    assert frame.loc["seccomp", "n_applied"] == 3 and frame.loc["seccomp", "applied_pct"] == 100.0


def test_a_cell_the_worker_saw_leave_the_api_is_flagged(tables):
    # Four benign-looking cells; the worker noticed one of them open a socket.
    [row] = tables["cell_stats"].query("benchmark == 'libero_pro'").to_dict("records")
    assert row["n_cells"] == 4 and row["left_api_pct"] == 25.0
