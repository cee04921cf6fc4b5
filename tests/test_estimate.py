"""`cellbench estimate` and the price library: projections from hand-made pilot traces, checked by hand."""
from __future__ import annotations

import pytest

from agents.cli import main
from agents.errors import CellbenchError
from analysis.estimate import load_grid_config, pilot_episodes, project, projection_line
from analysis.price_library import library_table, resolve_price_table
from trace_factory import call, write_config, write_episode

GRID = """\
benchmarks:
  libero_pro: {tasks: [libero_spatial_swap/0, libero_goal_swap/1, libero_10_swap/0], seeds: [0, 1], call_budget: 40}
  bimanual: {tasks: [TwoArmLift/0], seeds: [0, 1, 2, 3], call_budget: 40, ablations: [full]}
ablations: [full, no_vla]
"""


@pytest.fixture
def pilot(tmp_path):
    """Two tool/full pilot episodes (one long-context call), one code/full, one planner error."""
    root = tmp_path / "results" / "episodes"
    # 1: two calls, 3000 input of which 1000 cached, 200 output.
    write_episode(root, agent="tool", task="libero_spatial_swap/0",
                  calls=[call(1, 1000, 0, 0, 100), call(2, 2000, 1000, 0, 100)])
    # 2: one call over astra's 272k tier: 300000 input (all uncached), 100 output.
    write_episode(root, agent="tool", task="libero_goal_swap/1", calls=[call(1, 300000, 0, 0, 100)])
    write_episode(root, agent="code", task="libero_spatial_swap/0", calls=[call(1, 5000, 4000, 500, 300)])
    write_episode(root, agent="code", task="libero_goal_swap/1", status="planner_error",
                  calls=[call(1, 9_000_000, 0, 0, 0)])
    base = write_config(tmp_path / "config.yaml")
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID)
    return root, base, grid


def test_projection_matches_a_hand_computation(pilot):
    root, base, grid = pilot
    config, sources = load_grid_config(str(base), [str(grid)])
    assert [str(s) for s in sources] == [str(base), str(grid)]
    tables = [resolve_price_table(config, "astra"), resolve_price_table(config, "cheap")]
    frame = pilot_episodes(root, tables)
    assert len(frame) == 3  # the planner error is no pilot
    cells = {(c.benchmark, c.agent, c.ablation): c for c in project(config, frame)}
    # libero_pro: 3 tasks x 2 seeds = 6 episodes per cell; bimanual 4, full only.
    assert {k: c.episodes for k, c in cells.items()} == {
        ("libero_pro", "tool", "full"): 6, ("libero_pro", "tool", "no_vla"): 6,
        ("libero_pro", "code", "full"): 6, ("libero_pro", "code", "no_vla"): 6,
        ("bimanual", "tool", "full"): 4, ("bimanual", "code", "full"): 4}
    tool = cells[("libero_pro", "tool", "full")]
    assert tool.basis == "pilot (2)"
    # Astra ($/M: 10 in, 1 cached, 50 out; above 272k input x2, output x1.5):
    #   episode 1: (2000 x 10 + 1000 x 1 + 200 x 50) / 1e6      = 0.031
    #   episode 2: (300000 x 10 x 2 + 100 x 50 x 1.5) / 1e6     = 6.0075
    assert sorted(tool.pilot["$ astra"].round(6)) == [0.031, 6.0075]
    assert 6 * tool.pilot["$ astra"].mean() == pytest.approx(6 * (0.031 + 6.0075) / 2)
    # Cheap (1 in, 0.1 cached, 5 out, no tier): episode 1 = (2000 + 100 + 1000) / 1e6 = 0.0031.
    assert min(tool.pilot["$ cheap"]) == pytest.approx(0.0031)
    # Code: 500 uncached x 10 + 4000 x 1 + 500 written x 12.5 + 300 x 50 = 30250 -> 0.03025.
    code = cells[("libero_pro", "code", "full")]
    assert list(code.pilot["$ astra"]) == [pytest.approx(0.03025)]
    # No pilot for no_vla: the agent's other ablations stand in; bimanual borrows libero_pro's.
    assert cells[("libero_pro", "tool", "no_vla")].basis == "proxy: tool, every ablation (2)"
    assert cells[("bimanual", "tool", "full")].basis == "proxy: libero_pro (2)"


def test_cli_prints_the_table_under_two_price_tables(pilot, capsys):
    root, base, grid = pilot
    assert main(["estimate", "--config", str(base), "--configfile", str(grid), "--results", str(root),
                 "--price", "astra", "--price", "claude-sonnet-4-5"]) == 0
    out = capsys.readouterr().out
    assert "32 episodes" in out and "usage ESTIMATED" in out
    assert "claude-sonnet-4-5 from genai-prices" in out and "astra from config" in out
    total = next(line for line in out.splitlines() if line.startswith("total"))
    # Astra: 6 x mean(tool) x 3 tool cells (two of them proxies) ... summed over every cell.
    tool_mean, code_mean = (0.031 + 6.0075) / 2, 0.03025
    expected = (6 + 6 + 4) * tool_mean + (6 + 6 + 4) * code_mean
    assert f"${expected:,.2f}" in total
    line = projection_line(load_grid_config(str(base), [str(grid)])[0], str(root))
    assert line.startswith("cellbench: projected for 32 episodes under astra:") and f"${expected:,.2f}" in line


def test_cli_without_traces_says_what_to_do(tmp_path, capsys):
    base = write_config(tmp_path / "config.yaml")
    assert main(["estimate", "--config", str(base), "--results", str(tmp_path / "none")]) == 1
    assert "run a pilot first" in capsys.readouterr().err


def test_price_library_tables_and_their_tiers():
    claude = library_table("claude-sonnet-4-5")
    t = claude.table
    assert claude.origin.startswith("genai-prices ") and "anthropic/claude-sonnet-4-5" in claude.origin
    # Anthropic's list prices: $3 in, $0.30 read, $3.75 write (1.25x), $15 out; above 200k, input x2, output x1.5.
    assert (t.input, t.cached_input, t.cache_write, t.output) == (3.0, 0.3, 3.75, 15.0)
    assert (t.long_context_threshold, t.long_context_input_multiplier, t.long_context_output_multiplier) == \
        (200000, 2.0, 1.5)
    gpt = library_table("gpt-4.1").table
    assert gpt.cache_write == gpt.input == 2.0 and gpt.long_context_threshold is None
    with pytest.raises(CellbenchError, match="not in genai-prices"):
        library_table("no-such-model-anywhere")


def test_config_prices_win_over_the_library(tmp_path):
    from agents.config import load_config

    config = load_config(write_config(tmp_path / "config.yaml"))
    config["prices"]["gpt-4.1"] = {**config["prices"]["cheap"]}
    source = resolve_price_table(config, "gpt-4.1")
    assert source.origin == "config" and source.table.input == 1


def test_snakemake_prints_the_projection_for_a_paid_planner_only(workflow_copy, snakemake):
    root = workflow_copy / "results" / "episodes"
    write_episode(root, agent="tool", calls=[call(1, 1000, 0, 0, 100)])  # $0.015 under gpt-6-astra
    write_episode(root, agent="code", calls=[call(1, 2000, 0, 0, 100)])  # $0.025
    (workflow_copy / "paid.yaml").write_text("planner: {name: openai-responses, model: gpt-5, "
                                             "reasoning_effort: high}\n")
    paid = snakemake(workflow_copy, "-n", "--configfile", "paid.yaml")
    assert paid.returncode == 0, paid.stdout[-2000:]
    from agents.config import episode_grid, load_config

    grid = episode_grid(load_config(workflow_copy / "config.yaml"))
    n_tool, n_code = (sum(e["agent"] == a for e in grid) for a in ("tool", "code"))
    line = next(x for x in paid.stdout.splitlines() if x.startswith("cellbench: projected"))
    assert line.startswith(f"cellbench: projected for {len(grid)} episodes under gpt-6-astra:")
    assert f"${n_tool * 0.015 + n_code * 0.025:.2f}" in line and "usage ESTIMATED" in line
    scripted = snakemake(workflow_copy, "-n")
    assert scripted.returncode == 0 and "cellbench: projected" not in scripted.stdout


def test_report_bills_under_a_library_model_and_says_where_its_prices_came_from(tmp_path, capsys):
    from analysis.cost import choose_price_table
    from analysis.ingest import ingest_traces
    from analysis.report import load_report_data, build_tables
    from agents.config import load_config

    config = load_config(write_config(tmp_path / "config.yaml"))
    table = choose_price_table(config, "claude-sonnet-4-5")  # not in the config's prices
    assert (table.input, table.cache_write) == (3.0, 3.75)
    root = tmp_path / "episodes"
    for agent in ("tool", "code"):
        write_episode(root, agent=agent, success=True, solved_at_call=1,
                      calls=[call(1, 10000, 8000, 1000, 500, success_after=True)])
    ingest_traces(root, tmp_path / "t.duckdb")
    data = load_report_data(tmp_path / "t.duckdb", table)
    main_table = next(t for t in build_tables(data) if t.name == "main_results")
    assert "from genai-prices 0.2.3 (anthropic/claude-sonnet-4-5)" in main_table.note
    # 1000 uncached x 3 + 8000 x 0.30 + 1000 x 3.75 + 500 x 15 = 16650 per million.
    assert data.paired["tool_dollars"].iloc[0] == pytest.approx(0.01665)


def test_price_model_may_name_a_library_model(tmp_path):
    from agents.config import load_config

    path = write_config(tmp_path / "config.yaml", price_model="claude-sonnet-4-5")
    assert load_config(path)["price_model"] == "claude-sonnet-4-5"
    with pytest.raises(CellbenchError, match="price_model: 'gpt-7' has no price table"):
        load_config(write_config(tmp_path / "bad.yaml", price_model="gpt-7"))


def test_ingest_prices_the_database_under_a_library_price_model(tmp_path):
    from analysis.cost import price_tables
    from analysis.ingest import ingest_traces
    from analysis.report import open_database
    from agents.config import load_config

    config = load_config(write_config(tmp_path / "config.yaml", price_model="claude-sonnet-4-5"))
    tables = price_tables(config)
    assert set(tables) == {"astra", "cheap", "flat", "claude-sonnet-4-5"}
    root = tmp_path / "episodes"
    write_episode(root, agent="tool", calls=[call(1, 10000, 8000, 1000, 500)])
    ingest_traces(root, tmp_path / "t.duckdb", prices=(tables, config["price_model"]))
    (dollars,) = open_database(str(tmp_path / "t.duckdb")).execute("SELECT dollars FROM instances").fetchone()
    assert dollars == pytest.approx(0.01665)  # as in the report test above, by hand
