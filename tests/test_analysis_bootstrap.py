"""Uncertainty: the paired cluster bootstrap, medians and the Wilcoxon test, and run-to-run variance over repeats.

Expected numbers are worked out by hand in the comments.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer

from analysis import figures, stats
from analysis.bootstrap import Bootstrap, cluster_ids
from analysis.ingest import ingest_traces
from analysis.report import build_tables, load_report_data, write_tables
from test_analysis_stats import FLAT, calls, row, study  # noqa: F401  (study: the module fixture)
from trace_factory import write_pair


def frame(**columns) -> pd.DataFrame:
    n = len(next(iter(columns.values())))
    return pd.DataFrame({"comparison": ["full"] * n, "benchmark": ["libero_pro"] * n, **columns})


def test_tasks_are_resampled_as_clusters():
    # Two tasks x 50 seeds.  Tool solves nothing; code solves every seed of task A and none of task B:
    # delta = 0.5.  Drawing two tasks: (A, A) 1/4 -> delta 1, (B, B) 1/4 -> 0, (A, B) 1/2 -> 0.5, so the
    # 95% interval is [0, 1].  Drawing the 100 instances one by one would give about 0.5 +- 0.1.
    tasks = ["libero_spatial_swap/0"] * 50 + ["libero_spatial_swap/1"] * 50
    paired = frame(task=tasks, tool_success=[False] * 100, code_success=[True] * 50 + [False] * 50)
    s = row(stats.success_table(paired), benchmark="libero_pro")
    assert s["delta_pts"] == 50.0
    assert (s["delta_boot_low_pts"], s["delta_boot_high_pts"]) == (0.0, 100.0)
    # With each seed its own task, the same outcomes give a narrow interval around 50 points.
    paired["task"] = [f"libero_spatial_swap/{i}" for i in range(100)]
    s = row(stats.success_table(paired), benchmark="libero_pro")
    assert 35 < s["delta_boot_low_pts"] < 50 < s["delta_boot_high_pts"] < 65


def test_bootstrap_is_seeded_from_config_and_its_resamples_are_paired():
    config = {"analysis": {"bootstrap_resamples": 500, "bootstrap_seed": 7, "confidence": 0.9}}
    boot = Bootstrap.from_config(config)
    assert (boot.resamples, boot.seed, boot.confidence) == (500, 7, 0.9)
    assert Bootstrap.from_config({}) == Bootstrap(2000, 0, 0.95)
    values = np.arange(12, dtype=float)
    clusters = np.repeat(np.arange(4), 3)
    a = boot.totals(clusters, {"v": values, "w": 2 * values}, "row")
    assert a["v"].shape == (500,)
    assert np.array_equal(a["v"], boot.totals(clusters, {"v": values}, "row")["v"])  # same row, same draws
    assert not np.array_equal(a["v"], Bootstrap(500, 8).totals(clusters, {"v": values}, "row")["v"])
    assert not np.array_equal(a["v"], boot.totals(clusters, {"v": values}, "another row")["v"])
    # Both columns come from the same draws (paired): w is exactly twice v in every resample.
    assert np.array_equal(a["w"], 2 * a["v"])
    # Every resample draws 4 tasks of 3 instances: 12 instances.
    assert np.array_equal(boot.totals(clusters, {"n": np.ones(12)}, "row")["n"], np.full(500, 12.0))
    # The cluster of an instance is (benchmark, task): the same task name in two groups is two clusters.
    ids = cluster_ids(pd.DataFrame({"benchmark": ["a", "a", "b"], "task": ["t/0", "t/0", "t/0"]}))
    assert list(ids) == [0, 0, 1]


def test_jointly_solved_intervals_medians_and_wilcoxon(study):  # noqa: F811
    j = row(stats.jointly_solved_table(study.paired), benchmark="libero_pro")
    # Jointly solved: i0 (tool 10 calls x 30k, code 5 x 10k) and i1 (tool 20 x 30k, code 5 x 20k).
    # Medians of two values are their means: calls 15 and 5, tokens 450k and 75k.
    assert (j["tool_llm_calls_median"], j["code_llm_calls_median"]) == (15, 5)
    assert (j["tool_input_tokens_median"], j["code_input_tokens_median"]) == (450_000, 75_000)
    # Resamples of the two tasks: (i0, i0) ratio 300k/50k = 6, (i1, i1) 600k/100k = 6, mixed 900k/150k = 6:
    # the token ratio is 6 in every resample.  Calls: (i0, i0) 20/10 = 2, (i1, i1) 40/10 = 4, mixed 3.
    assert (j["input_tokens_ratio_ci_low"], j["input_tokens_ratio_ci_high"]) == pytest.approx((6, 6))
    assert (j["llm_calls_ratio_ci_low"], j["llm_calls_ratio_ci_high"]) == pytest.approx((2, 4))
    # Tokens per call: (i0, i0) 30k/10k = 3, (i1, i1) 30k/20k = 1.5, mixed 30k/15k = 2.
    assert (j["tokens_per_call_ratio_ci_low"], j["tokens_per_call_ratio_ci_high"]) == pytest.approx((1.5, 3))
    # Wilcoxon signed-rank, exact: both differences positive (250k, 500k): p = 2 x (1/2)^2 = 0.5.
    assert j["input_tokens_wilcoxon_p"] == pytest.approx(0.5)
    assert stats.wilcoxon_p(np.array([5.0, 5.0]), np.array([5.0, 5.0])) == 1.0
    d = row(stats.token_decomposition(study.paired), benchmark="libero_pro")
    assert (d["llm_calls_ratio_ci_low"], d["llm_calls_ratio_ci_high"]) == pytest.approx((2, 4))


def test_tables_say_what_their_intervals_are(study, tmp_path):  # noqa: F811
    tables = {t.name: t for t in build_tables(study)}
    for name in ("main_results", "success", "jointly_solved", "decomposition"):
        assert "paired bootstrap over instances, tasks resampled as clusters" in tables[name].note, name
        assert "2,000 resamples, seed 0" in tables[name].note, name
    assert {"delta_ci_low_pts", "delta_boot_low_pts", "input_tokens_ratio_ci_low",
            "input_tokens_wilcoxon_p"} <= set(tables["main_results"].frame.columns)
    # One repeat: the repeat tables are there, empty.
    assert tables["repeat_variability"].frame.empty and tables["by_repeat"].frame.empty
    write_tables(list(tables.values()), tmp_path)
    assert "bootstrap CI of input_tokens_ratio, low end" in (tmp_path / "jointly_solved.md").read_text()


def _bars_with_errors(ax) -> int:
    return sum(1 for c in ax.containers if isinstance(c, BarContainer) and c.errorbar is not None)


def test_figures_1_and_5_draw_error_bars(study):  # noqa: F811
    fig = figures.fig1_success(study)
    assert [_bars_with_errors(ax) for ax in fig.axes[:3]] == [2, 2, 2]
    figures.plt.close(fig)
    fig = figures.fig5_decomposition(study)
    assert _bars_with_errors(fig.axes[0]) == 3
    figures.plt.close(fig)


# ---------------------------------------------------------------------------
# Repeats: a small R = 3 grid
#
# Tasks T0-T3 (libero_spatial_swap/0..3) x seeds 0, 1 x repeats 0, 1, 2: 8 instances per repeat.
#   tool solves T0 always, T1 in repeat 0 only, T2 and T3 never;
#   code solves T0 and T1 always, T2 in repeats 1 and 2, T3 never.
# Tool calls: 4 x 30k tokens; code: 2 calls x 10k (T0) or 4 calls x 10k (T1, T2).

def _solves(agent: str, task: int, repeat: int) -> bool:
    if agent == "tool":
        return task == 0 or (task == 1 and repeat == 0)
    return task in (0, 1) or (task == 2 and repeat > 0)


@pytest.fixture(scope="module")
def repeats(tmp_path_factory):
    root = tmp_path_factory.mktemp("repeats") / "episodes"
    for task in range(4):
        for seed in (0, 1):
            for repeat in range(3):
                sides = {}
                for agent, n, tokens in (("tool", 4, 30_000), ("code", 2 if task == 0 else 4, 10_000)):
                    solved = _solves(agent, task, repeat)
                    sides[agent] = dict(calls=calls(n, tokens), success=solved, solved_at_call=n if solved else None,
                                        status=None if solved else "call_budget")
                write_pair(root, task=f"libero_spatial_swap/{task}", seed=seed, repeat=repeat, **sides)
    db = root.parent / "t.duckdb"
    ingest_traces(root, db)
    return load_report_data(db, FLAT, Bootstrap(resamples=400, seed=1))


def test_repeat_variability(repeats):
    v = stats.repeat_variability_table(repeats.paired)
    tool = row(v, benchmark="libero_pro", agent="tool")
    code = row(v, benchmark="libero_pro", agent="code")
    # Instances whose outcome changes between repeats: tool T1's two seeds, code T2's: 2 of 8 each.
    assert (tool["n_instances"], tool["n_repeats"], tool["outcome_varies_pct"]) == (8, 3, 25.0)
    assert code["outcome_varies_pct"] == 25.0
    # Success per repeat: tool 4/8, 2/8, 2/8 = 50, 25, 25 %: mean 33.3, sd sqrt((16.7^2 + 2 x 8.3^2) / 2) = 14.43.
    assert tool["success_pct_mean"] == pytest.approx(100 / 3)
    assert tool["success_pct_sd"] == pytest.approx(np.sqrt(((50 - 100 / 3) ** 2 + 2 * (25 - 100 / 3) ** 2) / 2))
    assert (tool["success_pct_min"], tool["success_pct_max"]) == (25.0, 50.0)
    # Code: 4/8, 6/8, 6/8 = 50, 75, 75 %.
    assert (code["success_pct_mean"], code["success_pct_min"], code["success_pct_max"]) == (
        pytest.approx(200 / 3), 50.0, 75.0)


def test_mcnemar_and_bootstrap_per_repeat_and_pooled(repeats):
    b = stats.by_repeat_table(repeats.paired, repeats.bootstrap)
    got = {r["repeat"]: r for r in b[b["benchmark"] == "libero_pro"].to_dict("records")}
    assert list(got) == ["0", "1", "2", "pooled"]
    # Repeat 0: both agents solve T0 and T1: no discordant pair, p = 1.
    assert (got["0"]["only_code"], got["0"]["only_tool"], got["0"]["mcnemar_p"]) == (0, 0, 1.0)
    # Repeats 1 and 2: code alone solves T1 and T2 (4 instances): p = 2/2^4 = 0.125.
    for r in ("1", "2"):
        assert (got[r]["only_code"], got[r]["only_tool"], got[r]["mcnemar_p"]) == (4, 0, pytest.approx(0.125))
    # Pooled: 8 discordant pairs, all code: p = 2/2^8.
    assert (got["pooled"]["n_instances"], got["pooled"]["only_code"]) == (24, 8)
    assert got["pooled"]["mcnemar_p"] == pytest.approx(2 / 256)
    # Jointly solved input tokens, tool / code.  Repeat 0: T0, T1 x 2 seeds: 4 x 120k / (2 x 20k + 2 x 40k) = 4.
    # Repeat 1: T0 only: 240k / 40k = 6, one task, so every resample gives 6.
    # Pooled: 8 x 120k / (6 x 20k + 2 x 40k) = 960k / 200k = 4.8.
    assert got["0"]["input_tokens_ratio"] == pytest.approx(4)
    assert (got["1"]["input_tokens_ratio"], got["1"]["input_tokens_ratio_ci_low"],
            got["1"]["input_tokens_ratio_ci_high"]) == pytest.approx((6, 6, 6))
    assert got["pooled"]["input_tokens_ratio"] == pytest.approx(4.8)
    # Pooled, tasks resampled: T0 alone gives 6 (its seeds and repeats move together), T0 and T1 less.
    assert got["pooled"]["input_tokens_ratio_ci_low"] < 4.8 < got["pooled"]["input_tokens_ratio_ci_high"] <= 6
    # The pooled success row is the success table itself (same rows, same statistic).
    s = row(stats.success_table(repeats.paired, repeats.bootstrap), benchmark="libero_pro")
    assert (s["delta_pts"], s["mcnemar_p"]) == (got["pooled"]["delta_pts"], got["pooled"]["mcnemar_p"])
