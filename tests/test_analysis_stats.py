"""The paired statistics on a hand-made study, every expected number worked out by hand in the comments.

The study (libero_pro, 8 paired instances, seed 0; every call has no cached
tokens and no output, so under the `flat` price table -- 10 $/M input --
dollars = input tokens x 1e-5):

  inst  tool                                   code
  i0    solved at 10 of 10 calls x 30k         solved at 3 of 5 calls x 10k
  i1    solved at 15 of 20 calls x 30k         solved at 5 of 5 calls x 20k
  i2    solved at 4 of 4 calls x 30k           call_budget, 6 calls x 10k
  i3    call_budget, 5 x 30k                   solved at 2 of 2 calls x 10k
  i4    call_budget, 5 x 30k                   solved at 2 of 2 x 10k
  i5    context_overflow, 5 x 30k              solved at 2 of 2 x 10k
  i6    gave_up, 5 x 30k                       solved at 2 of 2 x 10k
  i7    error, 3 x 30k                         gave_up, 2 x 10k
  i8    planner_error (excluded)               solved at 1 of 1 x 10k
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agents.errors import CellbenchError
from analysis import stats
from analysis.cost import PriceTable
from analysis.ingest import ingest_traces
from analysis.report import build_tables, load_report_data
from trace_factory import call, primitive, write_episode, write_pair

FLAT = PriceTable("flat", input=10, cached_input=0, cache_write=0, output=0, long_context_threshold=None,
                  long_context_input_multiplier=1, long_context_output_multiplier=1)


def calls(n: int, tokens: int) -> list:
    return [call(k, tokens, output=0) for k in range(1, n + 1)]


def tool_side(n, solved_at=None, status=None):
    return dict(calls=calls(n, 30_000), success=solved_at is not None, solved_at_call=solved_at, status=status)


def code_side(n, tokens=10_000, solved_at=None, status=None, **extra):
    return dict(calls=calls(n, tokens), success=solved_at is not None, solved_at_call=solved_at, status=status, **extra)


STUDY = [
    (tool_side(10, 10), code_side(5, solved_at=3, primitives=[
        primitive(1, 0, "move_to"), primitive(1, 1, "grasp"), primitive(2, 2, "move_by"), primitive(2, 3, "show")],
        cells={1: "r = robo.move_to([0, 0, 1])\nif r.reached:\n    robo.grasp('bowl')\n",
               2: "ok = robo.move_by(0, 0, 0.1)\nif not ok:\n    robo.show('agentview')\n"})),
    (tool_side(20, 15), code_side(5, 20_000, solved_at=5)),
    (tool_side(4, 4), code_side(6, status="call_budget")),
    (tool_side(5, status="call_budget"), code_side(2, solved_at=2)),
    (tool_side(5, status="call_budget"), code_side(2, solved_at=2)),
    (tool_side(5, status="context_overflow"), code_side(2, solved_at=2)),
    (tool_side(5, status="gave_up"), code_side(2, solved_at=2)),
    (tool_side(3, status="error"), code_side(2, status="gave_up")),
    (dict(status="planner_error", error="endpoint 503"), code_side(1, solved_at=1)),
]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study") / "episodes"
    for i, (tool, code) in enumerate(STUDY):
        write_pair(root, task=f"libero_spatial_swap/{i}", tool=tool, code=code)
    db = root.parent / "t.duckdb"
    ingest_traces(root, db)
    return load_report_data(db, FLAT)


def row(frame, **where):
    mask = np.logical_and.reduce([frame[k] == v for k, v in where.items()])
    (record,) = frame[mask].to_dict("records")
    return record


def test_success_counts_and_exact_mcnemar(study):
    s = row(stats.success_table(study.paired), benchmark="libero_pro")
    # i8 (planner_error) is not paired: 8 instances.  Tool solved i0-i2 (3/8),
    # code i0, i1, i3-i6 (6/8): delta = 75 - 37.5 = 37.5 points.
    assert (s["n_instances"], s["both"], s["only_tool"], s["only_code"], s["neither"]) == (8, 2, 1, 4, 1)
    assert s["tool_success_pct"] == 37.5 and s["code_success_pct"] == 75.0 and s["delta_pts"] == 37.5
    # 5 discordant pairs, 4 vs 1: p = 2 * P(X <= 1 | n=5, 1/2) = 2 * (1 + 5) / 32 = 0.375.
    assert s["mcnemar_p"] == pytest.approx(0.375)
    assert stats.mcnemar_exact_p(0, 0) == 1.0


def test_exact_conditional_interval_by_hand():
    # only code b = 4, only tool c = 1, n = 8: d = 5 discordant, delta = (d/n)(2 pi - 1) with pi = b/d.
    # Clopper-Pearson for 4 of 5: the upper end solves P(X >= 5 | pi) = pi^5 = 0.025 -> pi = 0.975^(1/5);
    # the lower end solves P(X >= 4 | pi) = 5 pi^4 - 4 pi^5 = 0.025.
    low, high = stats.exact_conditional_ci(only_tool=1, only_code=4, n=8)
    assert high == pytest.approx(5 / 8 * (2 * 0.975 ** 0.2 - 1))
    pi_low = (low / (5 / 8) + 1) / 2
    assert 5 * pi_low ** 4 - 4 * pi_low ** 5 == pytest.approx(0.025)
    assert np.isnan(stats.exact_conditional_ci(0, 0, 8)[0])


def test_success_interval_agrees_with_the_exact_mcnemar_test():
    # The row: 4 instances only code solved, none only tool: exact p = 2/16 = 0.125.  An
    # interval that excludes 0 there (Newcombe's did, from 4 neither on) reads "significant" beside it.
    for neither in (0, 4, 20):
        low, high = stats.exact_conditional_ci(only_tool=0, only_code=4, n=4 + neither)
        assert low < 0 < high, neither
    for only_tool in range(0, 12):
        for only_code in range(0, 12):
            p = stats.mcnemar_exact_p(only_tool, only_code)
            low, high = stats.exact_conditional_ci(only_tool, only_code, n=only_tool + only_code + 10)
            if only_tool + only_code:
                assert (low > 0 or high < 0) == (p < 0.05), (only_tool, only_code, p, low, high)


def test_success_table_interval_on_a_small_study(tmp_path):
    root = tmp_path / "episodes"
    for i in range(8):  # 4 only code, 4 neither
        write_pair(root, task=f"libero_spatial_swap/{i}", tool=tool_side(5, status="call_budget"),
                   code=code_side(2, solved_at=2) if i < 4 else code_side(2, status="call_budget"))
    ingest_traces(root, tmp_path / "t.duckdb")
    s = row(stats.success_table(load_report_data(tmp_path / "t.duckdb", FLAT).paired), benchmark="libero_pro")
    assert (s["only_code"], s["only_tool"], s["mcnemar_p"]) == (4, 0, pytest.approx(0.125))
    assert s["delta_ci_low_pts"] < 0 < s["delta_ci_high_pts"]


def test_jointly_solved_means_and_decomposition(study):
    j = row(stats.jointly_solved_table(study.paired), benchmark="libero_pro")
    # Jointly solved: i0, i1.  Calls tool (10 + 20)/2 = 15, code (5 + 5)/2 = 5.
    # Tokens tool (300k + 600k)/2 = 450k, code (50k + 100k)/2 = 75k.
    # Dollars = tokens x 1e-5: tool 4.5, code 0.75.  Ratios of totals: 30/10 = 3, 900k/150k = 6, 9/1.5 = 6.
    assert (j["n_jointly_solved"], j["tool_llm_calls"], j["code_llm_calls"]) == (2, 15, 5)
    assert (j["tool_input_tokens"], j["code_input_tokens"]) == (450_000, 75_000)
    assert j["tool_dollars"] == pytest.approx(4.5) and j["code_dollars"] == pytest.approx(0.75)
    assert (j["llm_calls_ratio"], j["input_tokens_ratio"], j["dollars_ratio"]) == pytest.approx((3, 6, 6))
    d = row(stats.token_decomposition(study.paired), benchmark="libero_pro")
    # Tokens per call: tool 900k/30 = 30k, code 150k/10 = 15k -> 2; 3 x 2 = 6.
    assert (d["llm_calls_ratio"], d["tokens_per_call_ratio"], d["input_tokens_ratio"]) == pytest.approx((3, 2, 6))


def test_budget_cutoff(study):
    p = study.paired.sort_values("task")
    # Cumulative input tokens through the solving call.  Tool: i0 10 x 30k = 300k,
    # i1 15 x 30k = 450k, i2 4 x 30k = 120k.  Code: i0 3 x 10k = 30k, i1 5 x 20k = 100k,
    # i3-i6 2 x 10k = 20k each.
    assert list(p["tool_tokens_at_solve"].fillna(-1)) == [300_000, 450_000, 120_000, -1, -1, -1, -1, -1]
    assert list(p["code_tokens_at_solve"].fillna(-1)) == [30_000, 100_000, -1, 20_000, 20_000, 20_000, 20_000, -1]
    # One point: at B = 100k the tool agent has solved nothing yet (0/8); code has all six
    # (100k <= 100k counts): 6/8.  At B = 25k code has the four 20k ones: 4/8.
    at = {a: p[f"{a}_tokens_at_solve"].to_numpy(dtype=float) for a in ("tool", "code")}
    assert list(stats.success_at_budget(at["tool"], 8, np.array([100_000.0]))) == [0.0]
    assert list(stats.success_at_budget(at["code"], 8, np.array([25_000.0, 100_000.0]))) == [0.5, 0.75]
    reach, curves = stats.budget_cutoff_tables(study.paired)
    r = row(reach, benchmark="libero_pro", measure="input_tokens")
    # Tool's final success is 3 of 8: tool reaches it at its 3rd cheapest solve (450k),
    # code at its 3rd cheapest (20k): ratio 22.5.
    assert (r["tool_budget"], r["code_budget"], r["budget_ratio"]) == (450_000, 20_000, 22.5)
    r = row(reach, benchmark="libero_pro", measure="llm_calls")
    # Solving calls: tool 10, 15, 4 -> 15; code 3, 5, 2, 2, 2, 2 -> 3rd smallest is 2; 15/2 = 7.5.
    assert (r["tool_budget"], r["code_budget"], r["budget_ratio"]) == (15, 2, 7.5)
    r = row(reach, benchmark="libero_pro", measure="dollars")
    # Dollars = tokens x 1e-5: 4.5 and 0.2.
    assert (r["tool_budget"], r["code_budget"]) == pytest.approx((4.5, 0.2))
    grid = curves[(curves["benchmark"] == "libero_pro") & (curves["measure"] == "input_tokens")]
    # Solve costs span 20k..450k: the log grid runs over whole decades, 1e4 .. 1e6.
    assert grid["budget"].min() == pytest.approx(1e4) and grid["budget"].max() == pytest.approx(1e6)
    assert grid["tool_success_pct"].iloc[-1] == 37.5 and grid["code_success_pct"].iloc[-1] == 75.0


def test_only_one_solved_and_endings(study):
    o = row(stats.only_one_solved_table(study.paired), benchmark="libero_pro")
    # Only code solved i3-i6; tool ended call_budget twice (exhausted its LLM-call budget: 2),
    # context_overflow (another limit, before the call budget: 1) and gave_up (before any limit: 1).
    # Only tool solved i2; code ended call_budget.
    assert (o["only_code"], o["tool_lost_on_call_budget"], o["tool_lost_on_other_limit"],
            o["tool_ended_before_budget"], o["tool_other_ending"]) == (4, 2, 1, 1, 0)
    assert (o["only_tool"], o["code_lost_on_call_budget"], o["code_lost_on_other_limit"],
            o["code_ended_before_budget"]) == (1, 1, 0, 0)
    e = row(stats.endings_table(study.episodes), benchmark="libero_pro", agent="tool")
    # Nine tool episodes, one a planner_error: left out of the denominator and counted beside it.
    # Of the other eight: solved 3, call_budget 2, context_overflow, gave_up, error 1 each.
    assert (e["n_episodes"], e["n_planner_errors"]) == (8, 1)
    assert e["solved_pct"] == 100 * 3 / 8 and e["call_budget_pct"] == 100 * 2 / 8
    assert e["context_overflow_pct"] == e["gave_up_pct"] == e["error_pct"] == 100 / 8
    assert "planner_error_pct" not in e
    c = row(stats.endings_table(study.episodes), benchmark="libero_pro", agent="code")
    assert (c["n_episodes"], c["n_planner_errors"], c["solved_pct"]) == (9, 0, 100 * 7 / 9)


def test_only_one_solved_instances_lists_both_endings(study):
    t = stats.only_one_solved_instances(study.paired)
    got = [(r["task"], r["solved_by"], r["tool_status"], r["tool_n_calls"], r["code_status"], r["code_n_calls"],
            None if pd.isna(r["code_solved_at_call"]) else r["code_solved_at_call"]) for r in t.to_dict("records")]
    assert got == [
        ("libero_spatial_swap/3", "code", "call_budget", 5, "solved", 2, 2),
        ("libero_spatial_swap/4", "code", "call_budget", 5, "solved", 2, 2),
        ("libero_spatial_swap/5", "code", "context_overflow", 5, "solved", 2, 2),
        ("libero_spatial_swap/6", "code", "gave_up", 5, "solved", 2, 2),
        ("libero_spatial_swap/2", "tool", "solved", 4, "call_budget", 6, None),
    ]
    tables = {table.name: table for table in build_tables(study)}
    assert tables["only_one_solved_instances"].frame.equals(t)


def test_cell_stats_and_cost(study):
    c = row(stats.cell_stats_table(study.paired, study.cells, study.calls), benchmark="libero_pro")
    # Two cells (i0): cell 1 ran move_to + grasp under a guard on r (guarded chain),
    # cell 2 ran move_by + show, the show under `if not ok` (single step, conditional image).
    assert (c["n_cells"], c["acting_per_cell"], c["two_or_more_acting_pct"]) == (2, 1.5, 50.0)
    assert (c["guarded_chain_pct"], c["single_step_pct"], c["conditional_image_request_pct"],
            c["requests_image_pct"], c["retry_pct"]) == (50.0, 50.0, 50.0, 50.0, 0.0)
    # Every tool call of the factory ran one acting primitive.
    assert c["tool_acting_per_call"] == 1.0
    k = row(stats.cost_table(study.paired), benchmark="libero_pro")
    # Tool calls: 10+20+4+5+5+5+5+3 = 57 calls x 30k = 1.71M tokens = $17.10 over 8 episodes.
    # Code: 5x10k + 5x20k + 6x10k + 4 x 2x10k + 2x10k = 310k tokens = $3.10 over 5+5+6+8+2 = 26 calls.
    assert k["tool_dollars_total"] == pytest.approx(17.10) and k["code_dollars_total"] == pytest.approx(3.10)
    assert k["tool_dollars_per_call"] == pytest.approx(0.3) and k["code_dollars_per_call"] == pytest.approx(3.10 / 26)
    assert k["tool_dollars_per_success"] == pytest.approx(17.10 / 3)
    assert k["dollars_ratio"] == pytest.approx(17.10 / 3.10)


def test_every_table_builds_and_planner_errors_are_listed(study):
    tables = {t.name: t.frame for t in build_tables(study)}
    assert list(tables["planner_errors"]["task"]) == ["libero_spatial_swap/8"]
    assert tables["images_on_demand"].empty
    assert set(tables["main_results"]["benchmark"]) == {"libero_pro", "All"}


def strict_failure(tmp_path, build) -> str:
    root = tmp_path / "episodes"
    build(root)
    db = tmp_path / "t.duckdb"
    ingest_traces(root, db)
    with pytest.raises(CellbenchError) as err:
        load_report_data(db, FLAT)
    return str(err.value)


def test_duplicate_episode_fails_naming_the_instance(tmp_path):
    def build(root):
        write_pair(root)
        write_episode(root, agent="tool", trace_dir=root / "copy" / "seed0")
    message = strict_failure(tmp_path, build)
    assert "libero_pro libero_spatial_swap/0 seed 0 [full]: duplicate tool episodes" in message
    assert str(tmp_path / "episodes" / "copy" / "seed0") in message


def test_missing_partner_fails_naming_the_instance(tmp_path):
    def build(root):
        write_pair(root)
        write_episode(root, agent="code", task="libero_spatial_swap/3", seed=2, repeat=1)
    message = strict_failure(tmp_path, build)
    assert "libero_pro libero_spatial_swap/3 seed 2 repeat 1 [full]: no tool episode to pair with" in message


def test_images_on_demand_pairs_with_code_in_full(tmp_path):
    root = tmp_path / "episodes"
    write_pair(root, tool=dict(success=True, solved_at_call=1), code=dict(success=True, solved_at_call=1))
    write_episode(root, agent="tool", ablation="images_on_demand", success=False)
    # Code in full on an instance the on-demand ablation did not run: not a problem.
    write_pair(root, task="libero_spatial_swap/1")
    db = tmp_path / "t.duckdb"
    ingest_traces(root, db)
    data = load_report_data(db, FLAT)
    on_demand = data.paired[data.paired["comparison"] == "images_on_demand"]
    assert list(zip(on_demand["tool_ablation"], on_demand["code_ablation"])) == [("images_on_demand", "full")]
    t8 = row(stats.images_on_demand_table(data.paired), benchmark="libero_pro")
    assert (t8["n_instances"], t8["tool_full_success_pct"], t8["tool_on_demand_success_pct"],
            t8["code_full_success_pct"], t8["n_all_solved"]) == (1, 100.0, 0.0, 100.0, 0)
    # An on-demand tool episode without its code partner in full is an error.
    write_episode(root, agent="tool", ablation="images_on_demand", task="libero_spatial_swap/7")
    ingest_traces(root, db)
    with pytest.raises(CellbenchError, match=r"libero_spatial_swap/7 seed 0 \[images_on_demand\]: no code episode"):
        load_report_data(db, FLAT)
