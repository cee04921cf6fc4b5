# Validation, the episode grid and the helpers the rules share.
#
# Nothing here assumes a shared local process: on a cluster every job re-reads
# this file on its node, so everything a job needs travels as files and
# command-line arguments.

import glob
import hashlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

# The installed cellbench comes first; the checkout's own packages are the
# fallback for a snakemake that is not the venv's.
sys.path.append(workflow.basedir)

from agents.config import (
    benchmark_groups,
    config_hash,
    episode_grid,
    episode_settings_hash,
    task_problems,
    validate_config,
)
from agents.errors import CellbenchError
from agents.records import ABLATIONS, AGENTS


# ---------------------------------------------------------------- validation
# Ours first: it names the file and the key path ("config.yaml:
# benchmarks.libero_pro: unknown key 'seedz'").  Then Snakemake's own, as the
# workflow template does; both read workflow/schemas/config.schema.yaml and
# both fill its defaults in.
def _config_sources():
    cli = list(workflow.overwrite_configfiles)
    return [f for f in workflow.configfiles if f not in cli] + cli


try:
    validate_config(config, sources=_config_sources() or ["config"])
except CellbenchError as e:
    raise WorkflowError(f"invalid config:\n{e}") from None
validate(config, "../schemas/config.schema.yaml")
# Task ids the benchmark does not have: one error naming them all now, rather
# than one failed job per episode later.  The main process only: a cluster
# job re-reading this file need not pay the import again.
if workflow.is_main_process:
    _unknown = task_problems(config, _config_sources() or ["config"])
    if _unknown:
        raise WorkflowError("invalid config:\n" + "\n".join(_unknown))

EPISODES = episode_grid(config)
# Each episode's record: the file that marks it complete.
EPISODE_FILES = [f"{e['trace_dir']}/episode.json" for e in EPISODES]

# A paid planner: the grid's projected bill, from the traces on disk, before
# any episode runs (dry runs too).  `cellbench estimate` prints it per cell.
if workflow.is_main_process and config["planner"]["name"] != "scripted":
    from analysis.estimate import projection_line

    try:
        print(projection_line(config), file=sys.stderr)
    except CellbenchError as e:
        print(f"cellbench: no cost projection: {e}", file=sys.stderr)


# ------------------------------------------------------------- killed runs
# Snakemake's own locks (.snakemake/locks) outlive a run killed with SIGKILL,
# and the same command then refuses to start until `--unlock`.  So the main
# process also holds an flock on .snakemake/cellbench.lock for its whole
# life, which the kernel drops however the process ends: a run that gets it
# knows no other run is alive in this directory, and any Snakemake locks
# left are stale.  Jobs (on a cluster node, or a group's subprocesses) never
# touch either.
def _take_run_lock():
    if not workflow.is_main_process:
        return None
    import fcntl

    os.makedirs(".snakemake", exist_ok=True)
    fd = os.open(".snakemake/cellbench.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        # Another run is alive (Snakemake's own lock check then speaks), or
        # the filesystem has no flock (stale locks then need `--unlock`).
        os.close(fd)
        return None
    stale = glob.glob(".snakemake/locks/*")
    for path in stale:
        os.remove(path)
    if stale:
        print("cellbench: removed the locks of an earlier run that was killed; "
              "its unfinished episodes run again", file=sys.stderr)
    return fd  # held open until this process ends


RUN_LOCK = _take_run_lock()

# Every job inherits the main process's name, and an episode whose run has
# died (this process killed alone, its jobs left running) stops by itself:
# agents/runwatch.py.  A new run's episode waits for the old one's trace
# lock (agents/trace.py), so no trace is ever written by two runs.
if workflow.is_main_process:
    from agents.runwatch import RUN_ENV, run_token

    os.environ[RUN_ENV] = run_token()


# ---------------------------------------------------------- effective config
# `--configfile configs/paper.yaml` is merged over config.yaml, and `--config`
# can override single keys, so no file on disk holds what actually runs.  We
# write the merged config once, named by its hash: runs with different
# configs (a dry run of the paper grid during a quick run, say) never
# overwrite a file another run's jobs are reading, and a cluster node
# re-parsing this file finds the same name already written.
CONFIG_HASH = config_hash(config)
EFFECTIVE_CONFIG = f"results/configs/{CONFIG_HASH[:16]}.yaml"


def _write_effective_config(path):
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"# The merged config of one snakemake run (sha256 {CONFIG_HASH}).\n")
        yaml.safe_dump(config, f, sort_keys=False)
    os.replace(tmp, path)


_write_effective_config(EFFECTIVE_CONFIG)


# ------------------------------------------------------------- the commands
# Jobs call the `cellbench` console script.  Where none is on PATH, use the
# one installed next to this interpreter, so `.venv/bin/snakemake` works
# without an activated venv (jobs inherit the environment, on a cluster too).
_bindir = os.path.dirname(sys.executable)
if shutil.which("cellbench") is None and os.path.exists(os.path.join(_bindir, "cellbench")):
    os.environ.update(PATH=os.pathsep.join([_bindir, os.environ.get("PATH", "")]))


# The analysis code's digest is a tracked param of ingest, report and figures:
# after a change to a plot or a table, `snakemake figures` redraws them.
def _analysis_code_digest():
    spec = importlib.util.find_spec("analysis")
    h = hashlib.sha256()
    for root in spec.submodule_search_locations if spec else []:
        for py in sorted(Path(root).rglob("*.py")):
            h.update(py.relative_to(root).as_posix().encode())
            h.update(py.read_bytes())
    return h.hexdigest()[:16]


ANALYSIS_CODE = _analysis_code_digest()


# --------------------------------------------------- figures without episodes
# `snakemake figures` (and report, ingest) must work from the traces on disk
# and never start an episode, even when the grid in config has grown or the
# planner settings changed since the traces were written.  Snakemake only
# knows what was asked for once it builds the DAG, so input functions decide:
#   * the database rules then ingest the traces that exist (a trace newer than
#     the database is re-ingested: plain mtime semantics);
#   * the episode rule gets an input that never exists, so it cannot produce
#     anything: Snakemake then takes the existing traces as source files
#     instead of re-checking their provenance (params, code) against today's
#     config.  A plain `snakemake` builds the whole grid first.
DATABASE = "results/traces.duckdb"
DATABASE_TARGETS = {"ingest", "report", "figures", DATABASE, "results/tables"}
NO_EPISODES = "results/.episodes-not-requested"


def episodes_requested():
    settings = getattr(workflow, "dag_settings", None)
    targets = {os.path.normpath(t) for t in (settings.targets if settings else ())}
    return not targets or not targets <= DATABASE_TARGETS


def episode_gate(wildcards):
    return [] if episodes_requested() else [NO_EPISODES]


def ingest_inputs(wildcards):
    if episodes_requested():
        return EPISODE_FILES
    # planner_error.json: an episode the LLM endpoint never let finish (listed by the report).
    traces = sorted(glob.glob("results/episodes/**/episode.json", recursive=True)
                    + glob.glob("results/episodes/**/planner_error.json", recursive=True))
    if not traces and not os.path.exists(DATABASE):
        raise WorkflowError(
            f"no traces under results/episodes and no {DATABASE} yet: "
            "run `snakemake` (or `make reproduce`) first"
        )
    return traces


# ------------------------------------------------------- episode parameters
def _group(wildcards):
    try:
        return config["benchmarks"][wildcards.benchmark]
    except KeyError:
        raise WorkflowError(
            f"benchmark group {wildcards.benchmark!r} is not in the config"
        ) from None


def call_budget(wildcards):
    return _group(wildcards)["call_budget"]


def episode_settings(wildcards):
    _group(wildcards)
    return episode_settings_hash(config, wildcards.benchmark)


def repeat_index(wildcards):
    return int(wildcards.repeat_dir[2:] or 0)


def episode_runtime_min(wildcards):
    # The episode's own watchdog stops it at wall_clock_s; the margin covers
    # simulator start-up and the trace write.
    return int(config["episode"]["wall_clock_s"] // 60) + 10
