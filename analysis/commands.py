"""The analysis verbs of the `cellbench` CLI: ingest, report, figures, browse, sql, select (dispatched from agents/cli.py)."""
from __future__ import annotations

import argparse
import csv
import shutil
import sys
from pathlib import Path

import duckdb

from agents.errors import CellbenchError
from analysis.cost import PriceTable, choose_price_table, load_config, price_tables

#: The config `ingest` reads prices from when the CLI gives it none.
DEFAULT_CONFIG = "config.yaml"


def _price_table(args: argparse.Namespace) -> PriceTable:
    return choose_price_table(load_config(args.config), args.price, source=str(args.config))


def _bootstrap(args: argparse.Namespace):
    """The config's interval settings (`analysis` section)."""
    from analysis.bootstrap import Bootstrap

    return Bootstrap.from_config(load_config(args.config))


def cmd_ingest(args: argparse.Namespace) -> int:
    """Load every complete trace below --results into --db.

    Exit 0 even when corrupt traces were skipped (they are listed on stderr);
    with --strict (the workflow's ingest) any skipped corrupt trace makes it
    exit 1, so tables never silently leave an episode out.
    Prices for the database's dollar views come from --config when the CLI
    has it, else from ./config.yaml when that exists.
    """
    from analysis.ingest import ingest_traces, print_summary

    config_path = getattr(args, "config", None) or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
    prices = None
    if config_path:
        config = load_config(config_path)
        prices = (price_tables(config, source=str(config_path)), config.get("price_model"))
    else:
        print(f"ingest: no {DEFAULT_CONFIG}: dollar columns of the database views stay empty "
              "(the report prices calls itself)", file=sys.stderr)
    summary = ingest_traces(args.results, args.db, prices=prices)
    print_summary(summary)
    return 1 if getattr(args, "strict", False) and summary.problems else 0


def cmd_report(args: argparse.Namespace) -> int:
    from analysis.report import write_report

    written, data = write_report(args.db, args.out, _price_table(args), _bootstrap(args))
    n_errors = len(data.planner_errors)
    print(f"report: wrote {len(written)} files to {args.out} ({len(data.paired)} paired instances"
          + (f"; {n_errors} planner_error episodes left out, listed in planner_errors.md" if n_errors else "")
          + ")", file=sys.stderr)
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from analysis.figures import write_figures

    written = write_figures(args.db, args.out, _price_table(args), comparison=getattr(args, "comparison", None),
                            bootstrap=_bootstrap(args))
    print(f"figures: wrote {len(written)} files to {args.out}", file=sys.stderr)
    return 0


def cmd_browse(args: argparse.Namespace) -> int:
    """The static results browser (analysis/browse.py) into --out."""
    from analysis.browse import build_site, print_summary

    print_summary(build_site(args.db, args.out, _price_table(args), figures_dir=args.figures,
                             bootstrap=_bootstrap(args)))
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    """Run one SQL statement on the database, read-only; a table on stdout, or CSV with --csv."""
    from analysis.report import open_database

    con = open_database(args.db)
    try:
        try:
            relation = con.sql(args.query)
        except duckdb.Error as e:
            raise CellbenchError(f"query failed: {e}") from None
        if relation is None:
            return 0
        if args.csv:
            # Python values, not a DataFrame: sums stay integers, NULL stays empty.
            writer = csv.writer(sys.stdout, lineterminator="\n")
            writer.writerow(relation.columns)
            writer.writerows(relation.fetchall())
        else:
            # DuckDB's own box table; every row, and every column unless a terminal is narrower.
            width = shutil.get_terminal_size((200, 24)).columns if sys.stdout.isatty() else 100_000
            relation.show(max_width=width, max_rows=2**62)
    finally:
        con.close()
    return 0


def cmd_select(args: argparse.Namespace) -> int:
    """Print the episode.json path of every episode of the database matching an SQL condition on the
    episodes table, one a line: what `snakemake --forcerun $(cellbench select ...)` runs again."""
    from analysis.report import open_database

    con = open_database(args.db)
    try:
        try:
            rows = con.execute(f"SELECT trace_dir FROM episodes WHERE ({args.condition}) ORDER BY trace_dir").fetchall()
        except duckdb.Error as e:
            raise CellbenchError(f"condition {args.condition!r} failed on the episodes table: {e}") from None
    finally:
        con.close()
    for (trace_dir,) in rows:
        print(f"{trace_dir}/episode.json")
    print(f"cellbench select: {len(rows)} episode{'s' * (len(rows) != 1)} where {args.condition}", file=sys.stderr)
    return 0
