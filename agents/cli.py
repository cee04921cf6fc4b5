"""The `cellbench` command line: one subcommand per verb, each implemented in its own module."""
from __future__ import annotations

import argparse
import os
import sys

from agents.errors import CellbenchError

# Headless rendering by default; a user with a display may override it.
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

DEFAULT_DB = "results/traces.duckdb"


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cellbench", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("api", help="print the code agent's API reference (Markdown)")
    s.add_argument("--benchmark", default="libero_pro")
    s.add_argument("--ablation", default="full", help="no_vla / no_vla_no_guides leave the vla primitive out")
    s.add_argument("--tools", action="store_true", help="print the tool agent's JSON tool schemas instead")

    s = sub.add_parser("play", help="run one episode and write its trace directory")
    s.add_argument("--benchmark", default="libero_pro")
    s.add_argument("--task", required=True, help="suite/index, e.g. libero_spatial_swap/0")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--agent", choices=["tool", "code"], required=True)
    s.add_argument("--ablation", default="full")
    s.add_argument("--planner", default=None, help="scripted | openai | openai-responses | anthropic (default: from config)")
    s.add_argument("--model", default=None)
    s.add_argument("--config", default=None, help="config.yaml for planner, budgets and episode settings")
    s.add_argument("--call-budget", type=int, default=None)
    s.add_argument("--wall-clock", type=float, default=None, help="episode wall-clock limit, seconds")
    s.add_argument("--repeat", type=int, default=0)
    s.add_argument("--out", required=True, help="the episode's own trace directory")

    s = sub.add_parser("view", help="write a self-contained HTML page of one episode")
    s.add_argument("trace_dir")
    s.add_argument("--out", default=None, help="HTML file (default: TRACE_DIR/view.html)")

    s = sub.add_parser("tasks", help="print the task registry")
    s.add_argument("--benchmark", default=None)

    s = sub.add_parser("estimate", help="project a grid's LLM calls, tokens and dollars from the traces on disk",
                       description="Before any episode runs: the grid of config.yaml (with each --configfile "
                                   "merged over it, as snakemake does) projected from the complete traces below "
                                   "--results, per benchmark x agent x ablation, under each --price table.")
    s.add_argument("--config", default="config.yaml", help="the base config (snakemake's configfile)")
    s.add_argument("--configfile", action="append", default=[], metavar="FILE",
                   help="merged over --config, later ones winning (e.g. configs/paper.yaml)")
    s.add_argument("--price", action="append", default=[], metavar="MODEL",
                   help="price table to bill under (repeatable): a prices: key, else a genai-prices model")
    s.add_argument("--results", default="results/episodes", help="where the pilot traces are")

    s = sub.add_parser("serve", help="an OpenAI-compatible endpoint answering with the scripted planner (rehearsal)",
                       description="Chat Completions at http://HOST:PORT/v1 whose replies are the scripted "
                                   "planner's, with injected latency and failures; usage is estimated and marked so.")
    s.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to serve other machines (SLURM nodes)")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--model", default="scripted-v1")
    s.add_argument("--latency-s", type=float, default=0.0, help="seconds from request to reply")
    s.add_argument("--jitter-s", type=float, default=0.0, help="latency drawn uniformly from latency +- jitter")
    s.add_argument("--fail-rate", type=float, default=0.0, help="fraction of requests answered with an error")
    s.add_argument("--fail-statuses", default="429,500,503", help="statuses drawn for injected errors")
    s.add_argument("--retry-after-s", type=float, default=1.0, help="Retry-After of an injected 429")
    s.add_argument("--seed", type=int, default=0, help="seed of the latency and failure draws")
    s.add_argument("--quiet", action="store_true", help="no line per request on stderr")

    s = sub.add_parser("ingest", help="load every complete trace into DuckDB")
    s.add_argument("--results", default="results/episodes")
    s.add_argument("--db", default=DEFAULT_DB)
    s.add_argument("--strict", action="store_true",
                   help="exit 1 if a complete trace was skipped as corrupt (the workflow's ingest does)")
    s.add_argument("--config", default=None,
                   help="config whose prices the database's dollar views use (default: ./config.yaml if present)")

    s = sub.add_parser("report", help="write the analysis tables (CSV + Markdown)")
    s.add_argument("--db", default=DEFAULT_DB)
    s.add_argument("--out", default="results/tables")
    s.add_argument("--config", default="config.yaml")
    s.add_argument("--price", default=None, help="price table (model name in config) to bill under")

    s = sub.add_parser("figures", help="draw every figure from the database",
                       description="The main comparison's figures in --out, "
                                   "every other comparison's in --out/COMPARISON/.")
    s.add_argument("--db", default=DEFAULT_DB)
    s.add_argument("--out", default="figures")
    s.add_argument("--config", default="config.yaml")
    s.add_argument("--price", default=None)
    s.add_argument("--comparison", default=None, metavar="NAME",
                   help="draw only this comparison (e.g. no_vla), into --out itself")

    s = sub.add_parser("browse", help="write the static results browser (open OUT/index.html from disk)")
    s.add_argument("--db", default=DEFAULT_DB)
    s.add_argument("--out", default="results/site")
    s.add_argument("--figures", default="figures", help="figures folder whose PNGs the index shows (if present)")
    s.add_argument("--config", default="config.yaml")
    s.add_argument("--price", default=None)

    s = sub.add_parser("sql", help="run SQL over the traces database")
    s.add_argument("query")
    s.add_argument("--db", default=DEFAULT_DB)
    s.add_argument("--csv", action="store_true", help="CSV output instead of a table")

    s = sub.add_parser("select", help="print the episode.json of each episode matching an SQL condition",
                       description="For redoing them: snakemake --forcerun $(cellbench select \"status = 'error'\")")
    s.add_argument("condition", help="an SQL condition on the episodes table, e.g. \"status = 'error'\"")
    s.add_argument("--db", default=DEFAULT_DB)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    cmd = args.command
    try:
        if cmd == "api":
            from robots.api_docs import main_api

            return main_api(args)
        if cmd == "play":
            from agents.play import main_play

            return main_play(args)
        if cmd == "view":
            from agents.view import main_view

            return main_view(args)
        if cmd == "tasks":
            from robots.registry import main_tasks

            return main_tasks(args)
        if cmd == "estimate":
            from analysis.estimate import main_estimate

            return main_estimate(args)
        if cmd == "serve":
            from agents.serve import main_serve

            return main_serve(args)
        if cmd in ("ingest", "report", "figures", "browse", "sql", "select"):
            from analysis import commands

            return getattr(commands, f"cmd_{cmd}")(args)
    except CellbenchError as e:
        print(f"cellbench {cmd}: error: {e}", file=sys.stderr)
        return 2
    raise AssertionError(cmd)


if __name__ == "__main__":
    sys.exit(main())
