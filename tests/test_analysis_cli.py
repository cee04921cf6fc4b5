"""The analysis verbs through `agents.cli.main`: ingest, sql, report, figures, and their user errors."""
from __future__ import annotations

import pytest

from agents.cli import main
from trace_factory import call, write_config, write_pair


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A results folder with two libero_pro instances (one jointly solved), a config, an ingested db."""
    d = tmp_path_factory.mktemp("cli")
    root = d / "results" / "episodes"
    write_pair(root, tool=dict(success=True, solved_at_call=3, calls=[call(k, 20_000 * k, images_returned=3) for k in (1, 2, 3)]),
               code=dict(success=True, solved_at_call=1, calls=[call(1, 25_000, action_kind="cell")],
                         cells={1: "robo.move_to([0, 0, 1])\n"}))
    write_pair(root, task="libero_spatial_swap/1", tool=dict(success=False), code=dict(success=True, solved_at_call=1))
    write_config(d / "config.yaml")
    return d


@pytest.fixture
def in_workdir(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    return workdir


def test_ingest_then_sql_table_and_csv(in_workdir, capsys):
    assert main(["ingest"]) == 0
    assert "ingest: 4 episodes in results/traces.duckdb" in capsys.readouterr().err
    assert main(["sql", "SELECT agent, sum(success::INT) AS solved FROM episodes GROUP BY agent ORDER BY agent"]) == 0
    table = capsys.readouterr().out
    assert "solved" in table and "│ code" in table and "│ tool" in table
    assert main(["sql", "--csv", "SELECT agent, sum(success::INT) AS solved FROM episodes GROUP BY agent ORDER BY agent"]) == 0
    assert capsys.readouterr().out == "agent,solved\ncode,2\ntool,1\n"
    # The config's price_model (astra) prices the views: tool call 1 is 20k uncached input
    # tokens + 100 output = 20k*10/1e6 + 100*50/1e6 = 0.2 + 0.005.
    assert main(["sql", "--csv", "SELECT round(dollars, 6) AS d FROM call_dollars c JOIN episodes e USING (trace_dir) "
                 "WHERE e.agent = 'tool' AND e.success AND c.call_index = 1"]) == 0
    assert capsys.readouterr().out == "d\n0.205\n"


def test_ingest_prices_the_views_from_the_config_it_is_given(in_workdir, capsys):
    # The same call under another config's price_model: flat bills 10 $/M per input token, nothing else.
    write_config(in_workdir / "other.yaml", price_model="flat")
    assert main(["ingest", "--db", "flat.duckdb", "--config", "other.yaml"]) == 0
    assert main(["sql", "--db", "flat.duckdb", "--csv",
                 "SELECT round(dollars, 6) AS d FROM call_dollars c JOIN episodes e USING (trace_dir) "
                 "WHERE e.agent = 'tool' AND e.success AND c.call_index = 1"]) == 0
    assert capsys.readouterr().out.endswith("d\n0.2\n")
    assert main(["ingest", "--db", "flat.duckdb", "--config", "missing.yaml"]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_sql_errors_are_user_errors(in_workdir, capsys):
    main(["ingest"])
    capsys.readouterr()
    assert main(["sql", "DELETE FROM episodes"]) == 2
    assert "read-only" in capsys.readouterr().err
    assert main(["sql", "SELECT 1", "--db", "nowhere/traces.duckdb"]) == 2
    err = capsys.readouterr().err
    assert "database nowhere/traces.duckdb not found" in err and "cellbench ingest" in err


def test_report_and_figures(in_workdir, capsys):
    main(["ingest"])
    assert main(["report", "--out", "tables"]) == 0
    for name in ("main_results", "success", "jointly_solved", "decomposition", "budget_first_reach", "cost",
                 "cell_stats", "endings", "only_one_solved", "images_on_demand", "planner_errors"):
        assert (in_workdir / "tables" / f"{name}.csv").stat().st_size > 0
        assert (in_workdir / "tables" / f"{name}.md").read_text().startswith("# ")
    assert (in_workdir / "tables" / "budget_curves.csv").stat().st_size > 0
    assert main(["report", "--out", "tables", "--price", "gpt-9"]) == 2
    assert "unknown price model 'gpt-9'; known: astra, cheap, flat" in capsys.readouterr().err

    assert main(["figures", "--out", "figs", "--price", "cheap"]) == 0
    for name in ("fig1_success", "fig3_budget_cutoff", "fig3_budget_cutoff_llm_calls", "fig3_budget_cutoff_dollars",
                 "fig5_decomposition", "fig6_timeline", "fig7_tokens_per_call"):
        png, pdf = in_workdir / "figs" / f"{name}.png", in_workdir / "figs" / f"{name}.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 5_000


@pytest.fixture(scope="module")
def two_comparisons(tmp_path_factory):
    """An ingested database with two comparisons: `full` (both solve at call 1) and `no_vla`
    (tool calling needs 6 calls, code cells 2), and a config."""
    d = tmp_path_factory.mktemp("comparisons")
    root = d / "results" / "episodes"
    write_pair(root, tool=dict(success=True, solved_at_call=1, calls=[call(1, 3_000)]),
               code=dict(success=True, solved_at_call=1, calls=[call(1, 3_400, action_kind="cell")]))
    for task in ("libero_spatial_swap/0", "libero_spatial_swap/1"):
        write_pair(root, ablation="no_vla", task=task,
                   tool=dict(success=True, solved_at_call=6,
                             calls=[call(k, 4_000 * k, images_returned=k % 2) for k in range(1, 7)]),
                   code=dict(success=True, solved_at_call=2,
                             calls=[call(k, 3_500 * k, action_kind="cell", n_primitives=9) for k in (1, 2)]))
    write_config(d / "config.yaml")
    assert main(["ingest", "--results", str(root), "--db", str(d / "traces.duckdb"),
                 "--config", str(d / "config.yaml")]) == 0
    return d


FIGURE_NAMES = ("fig1_success", "fig3_budget_cutoff", "fig3_budget_cutoff_llm_calls", "fig3_budget_cutoff_dollars",
                "fig5_decomposition", "fig6_timeline", "fig7_tokens_per_call", "fig8_input_sources")


def test_figures_per_comparison_and_one_comparison(two_comparisons, capsys):
    d = two_comparisons
    common = ["--db", str(d / "traces.duckdb"), "--config", str(d / "config.yaml")]
    assert main(["figures", "--out", str(d / "figs"), *common]) == 0
    # 8 figures x PNG and PDF x 2 comparisons.
    assert "wrote 32 files" in capsys.readouterr().err
    # The main comparison (full) in --out itself, as before; every other one in a folder of its name.
    assert sorted(p.name for p in (d / "figs").iterdir() if p.is_dir()) == ["no_vla"]
    for folder in (d / "figs", d / "figs" / "no_vla"):
        assert sorted(p.name for p in folder.iterdir() if p.is_file()) == sorted(
            f"{n}.{ext}" for n in FIGURE_NAMES for ext in ("png", "pdf"))
    assert (d / "figs" / "fig1_success.png").read_bytes() != (d / "figs" / "no_vla" / "fig1_success.png").read_bytes()

    # --comparison draws that one alone into --out, byte for byte what the full run drew for it.
    assert main(["figures", "--out", str(d / "only"), "--comparison", "no_vla", *common]) == 0
    assert sorted(p.name for p in (d / "only").iterdir()) == sorted(p.name for p in (d / "figs" / "no_vla").iterdir())
    for p in (d / "only").iterdir():
        assert p.read_bytes() == (d / "figs" / "no_vla" / p.name).read_bytes(), p.name

    capsys.readouterr()
    assert main(["figures", "--out", str(d / "bad"), "--comparison", "no_guides", *common]) == 2
    err = capsys.readouterr().err
    assert "cellbench figures: error: no comparison 'no_guides'" in err and "present: full, no_vla" in err
    assert not (d / "bad").exists()


def test_call_axes_have_integer_ticks_and_fig3_labels_sit_off_their_lines(two_comparisons):
    import matplotlib.pyplot as plt

    from analysis import figures
    from analysis.cost import choose_price_table, load_config
    from analysis.report import load_report_data

    price = choose_price_table(load_config(two_comparisons / "config.yaml"), None)
    data = load_report_data(two_comparisons / "traces.duckdb", price)
    for comparison, longest in (("full", 1), ("no_vla", 6)):
        for draw in (figures.fig6_timeline, figures.fig7_tokens_per_call):
            fig = draw(data, comparison=comparison)
            fig.canvas.draw()
            for ax in fig.axes:
                if ax.get_xlabel() == "LLM call":
                    ticks = ax.get_xticks()
                    assert list(ticks) == [int(t) for t in ticks] and ticks[0] == 1 and ticks[-1] == longest
                    assert ax.get_xlim() == (0.5, longest + 0.5)
            plt.close(fig)
        fig = figures.fig3_budget_cutoff(data, comparison=comparison)
        labels = [t for t in fig.axes[0].texts if hasattr(t, "xyann")]
        assert len(labels) == 2 and all(abs(t.xyann[0]) >= 4 for t in labels)
        plt.close(fig)
