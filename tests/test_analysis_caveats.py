"""Ablations a planner cannot react to are labelled as such: the scripted planner reads neither guides nor images,
so its no_guides and images_on_demand rows change only token counts, and the tables and figures say so."""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis import figures
from analysis.ingest import ingest_traces
from analysis.report import load_report_data, write_report
from test_analysis_stats import FLAT
from trace_factory import call, write_episode, write_pair

ROOT = Path(__file__).resolve().parent.parent


def study(tmp_path: Path, planner: str):
    root = tmp_path / planner / "episodes"
    solved = dict(success=True, solved_at_call=2, calls=[call(1, 2_000), call(2, 3_000)], planner=planner)
    for ablation in ("full", "no_guides"):
        write_pair(root, ablation=ablation, tool=solved, code=solved)
    write_episode(root, agent="tool", ablation="images_on_demand", **solved)
    db = root.parent / "t.duckdb"
    ingest_traces(root, db)
    return db


def caveat_texts(fig) -> list[str]:
    """The figure's scripted-planner notes, line breaks undone."""
    return [" ".join(t.get_text().split()) for t in fig.texts if t.get_text().startswith("Scripted planner:")]


def test_scripted_planner_tables_open_with_what_its_ablations_cannot_show(tmp_path):
    written, _ = write_report(study(tmp_path, "scripted"), tmp_path / "tables", FLAT)
    for md in (p for p in written if p.suffix == ".md"):
        text = md.read_text()
        assert "**Planner: scripted**" in text and "`no_guides`, `images_on_demand` change only token counts" in text, md


@pytest.mark.parametrize("comparison, says", [
    ("no_guides", "reads no operating guide, so no_guides changes only the prompts' token counts"),
    ("images_on_demand", "reads no images, so images on demand change only tool calling's token counts"),
])
def test_scripted_planner_figures_of_inert_ablations_say_so(tmp_path, comparison, says):
    data = load_report_data(study(tmp_path, "scripted"), FLAT)
    for name in figures.FIGURES:
        fig = figures.draw(data, name, comparison)
        (text,) = caveat_texts(fig)
        assert says in text, name
        figures.plt.close(fig)
    # The main comparison (full) makes no such claim.
    for comparison in ("full", None):
        fig = figures.draw(data, "fig1_success", comparison)
        assert caveat_texts(fig) == []
        figures.plt.close(fig)


def test_a_planner_that_reads_guides_gets_no_caveat(tmp_path):
    db = study(tmp_path, "openai")
    written, data = write_report(db, tmp_path / "tables", FLAT)
    assert not any("Planner: scripted" in p.read_text() for p in written if p.suffix == ".md")
    fig = figures.draw(data, "fig5_decomposition", "no_guides")
    assert caveat_texts(fig) == []
    figures.plt.close(fig)


def test_readme_says_the_scripted_planner_ablations_change_only_tokens():
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert ("reads neither operating guides nor images, so `no_guides` and `images_on_demand` change only "
            "token counts") in readme
