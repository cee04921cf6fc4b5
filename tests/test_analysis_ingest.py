"""Ingest: complete traces load whole, incomplete and corrupt ones are skipped and named, re-ingest is idempotent."""
from __future__ import annotations

import json
import os

import duckdb
import pytest

from agents.errors import CellbenchError
from analysis.ingest import find_trace_dirs, ingest_traces
from trace_factory import call, primitive, write_episode, write_pair


def rows(db, sql):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def counts(db):
    return {t: rows(db, f"SELECT count(*) FROM {t}")[0][0] for t in ("episodes", "calls", "primitives", "cells")}


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results" / "episodes"
    # One pair: tool 3 calls / 2 primitives, code 2 calls / 3 primitives / 2 cells.
    write_pair(root, tool=dict(calls=[call(1), call(2), call(3)],
                               primitives=[primitive(1, 0, "move_to"), primitive(2, 1, "locate")]),
               code=dict(calls=[call(1, action_kind="cell"), call(2, action_kind="cell")],
                         primitives=[primitive(1, 0, "move_to"), primitive(1, 1, "grasp"), primitive(2, 2, "show")],
                         cells={1: "r = robo.move_to([0, 0, 1])\nif r.reached:\n    robo.grasp('x')\n",
                                2: "robo.show('agentview')\n"}))
    return root


def test_complete_traces_load_whole(results, tmp_path):
    db = tmp_path / "t.duckdb"
    summary = ingest_traces(results, db)
    assert (summary.loaded, summary.total, summary.problems, summary.incomplete) == (2, 2, [], [])
    # 3 + 2 calls, 2 + 3 primitives, 2 cells.
    assert counts(db) == {"episodes": 2, "calls": 5, "primitives": 5, "cells": 2}
    # Nested objects stay JSON; key columns ride on every child row.
    assert rows(db, "SELECT agent, raw_usage->>'prompt_tokens', tool_args->>'x' FROM calls "
                    "WHERE call_index = 1 ORDER BY agent") == [("code", "1000", None), ("tool", "1000", "0.1")]
    assert rows(db, "SELECT package_versions->>'duckdb' FROM episodes LIMIT 1") == [("2.0",)]
    assert rows(db, "SELECT call_index, n_acting, guarded_chain, requests_image FROM cells ORDER BY 1") == [
        (1, 2, True, False), (2, 0, False, True)]
    trace_dir = rows(db, "SELECT trace_dir FROM episodes WHERE agent = 'tool'")[0][0]
    assert trace_dir == os.path.join(str(results), "libero_pro/full/tool/libero_spatial_swap/0/seed0")


def test_incomplete_directory_is_reported_and_skipped(results, tmp_path):
    running = write_episode(results, agent="tool", task="libero_spatial_swap/1", complete=False)
    complete, incomplete = find_trace_dirs(results)
    assert incomplete == [str(running)] and len(complete) == 2
    db = tmp_path / "t.duckdb"
    summary = ingest_traces(results, db)
    assert summary.incomplete == [str(running)]
    assert rows(db, "SELECT count(*) FROM calls WHERE task = 'libero_spatial_swap/1'") == [(0,)]


@pytest.mark.parametrize("damage, where", [
    (lambda d: (d / "calls.jsonl").write_text((d / "calls.jsonl").read_text()[:-40]), "calls.jsonl:3"),
    # A blank line is skipped but still counted: the bad row is named by its line in the file.
    (lambda d: (d / "calls.jsonl").write_text("\n".join(
        (lambda ls: ls[:2] + [""] + [ls[2][:-40]])((d / "calls.jsonl").read_text().splitlines()))), "calls.jsonl:4"),
    (lambda d: (d / "episode.json").write_text('{"benchmark": "libero_pro", '), "episode.json"),
    (lambda d: (d / "primitives.jsonl").write_text(
        json.dumps({**json.loads((d / "primitives.jsonl").read_text().splitlines()[0]), "acting": "yes"}) + "\n"),
     "primitives.jsonl:1"),
])
def test_corrupt_trace_is_named_and_skipped_whole(results, tmp_path, damage, where):
    tool_dir = results / "libero_pro/full/tool/libero_spatial_swap/0/seed0"
    damage(tool_dir)
    db = tmp_path / "t.duckdb"
    summary = ingest_traces(results, db)
    assert len(summary.problems) == 1 and str(tool_dir / where) in summary.problems[0]
    # Nothing of the broken episode is in any table; its partner loaded.
    assert counts(db) == {"episodes": 1, "calls": 2, "primitives": 3, "cells": 2}


def test_missing_field_is_named(results, tmp_path):
    d = results / "libero_pro/full/code/libero_spatial_swap/0/seed0"
    episode = json.loads((d / "episode.json").read_text())
    del episode["status"]
    (d / "episode.json").write_text(json.dumps(episode))
    summary = ingest_traces(results, tmp_path / "t.duckdb")
    assert summary.problems == [f"{d / 'episode.json'}: missing field 'status'"]


def test_reingest_is_idempotent_and_incremental(results, tmp_path):
    db = tmp_path / "t.duckdb"
    ingest_traces(results, db)
    before = counts(db)
    again = ingest_traces(results, db)
    assert (again.loaded, again.unchanged, again.removed, again.rebuilt) == (0, 2, 0, False)
    assert counts(db) == before

    # A rerun rewrites a trace: only it reloads, with its new contents.
    write_episode(results, agent="tool", calls=[call(1), call(2)])
    os.utime(results / "libero_pro/full/tool/libero_spatial_swap/0/seed0/episode.json", ns=(1, 1))
    changed = ingest_traces(results, db)
    assert (changed.loaded, changed.unchanged) == (1, 1)
    assert rows(db, "SELECT count(*) FROM calls WHERE agent = 'tool'") == [(2,)]

    # A repeat one level deeper is found; a deleted trace disappears.
    write_episode(results, agent="tool", repeat=1)
    for f in (results / "libero_pro/full/code/libero_spatial_swap/0/seed0").rglob("*"):
        if f.is_file():
            f.unlink()
    later = ingest_traces(results, db)
    assert (later.loaded, later.removed, later.total) == (1, 1, 2)
    assert rows(db, "SELECT agent, repeat FROM episodes ORDER BY ALL") == [("tool", 0), ("tool", 1)]
    assert counts(db)["cells"] == 0


def test_another_results_folder_rebuilds(results, tmp_path):
    db = tmp_path / "t.duckdb"
    ingest_traces(results, db)
    other = tmp_path / "other"
    write_episode(other, agent="code", task="libero_spatial_swap/5")
    summary = ingest_traces(other, db)
    assert summary.rebuilt and rows(db, "SELECT task FROM episodes") == [("libero_spatial_swap/5",)]


def test_missing_results_folder_is_a_user_error(tmp_path):
    with pytest.raises(CellbenchError, match="results folder .*nowhere not found"):
        ingest_traces(tmp_path / "nowhere", tmp_path / "t.duckdb")


def test_planner_errors_are_kept_apart(results, tmp_path):
    write_pair(results, task="libero_spatial_swap/1", tool=dict(status="planner_error", error="endpoint 503"))
    db = tmp_path / "t.duckdb"
    ingest_traces(results, db)
    assert rows(db, "SELECT task, agent, error FROM planner_errors") == [("libero_spatial_swap/1", "tool", "endpoint 503")]
    assert rows(db, "SELECT count(*) FROM instances WHERE task = 'libero_spatial_swap/1'") == [(1,)]
    # Its instance is not paired, and not a pairing problem either.
    assert rows(db, "SELECT task FROM paired") == [("libero_spatial_swap/0",)]
    assert rows(db, "SELECT count(*) FROM pairing_problems") == [(0,)]
