"""`cellbench browse` over a paper-sized grid of synthetic episodes: how long, and how big the index is.

    .venv/bin/python benchmarks/browse_scale.py [--episodes 5400] [--dir DIR]

Writes the synthetic traces of benchmarks/ingest_scale.py (real trace
layout and schema, paired 9 episodes per instance; no images), ingests them,
then builds the site twice in child processes: cold (every page drawn) and
again with nothing changed (episode pages kept).  Prints wall times, the
index's size with its data scripts (what a browser loads to list every
episode: goal a few MB) and the whole site's size.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import ingest_scale  # noqa: E402

BIN = Path(sys.executable).parent


def _size(paths) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def _timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=5400)
    ap.add_argument("--dir", type=Path, default=None, help="keep the traces, database and site here")
    args = ap.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="cellbench-browse-scale-"))
    try:
        results, db, site = base / "episodes", base / "traces.duckdb", base / "site"
        episodes = ingest_scale.grid(args.episodes)
        if not results.exists():
            print(f"generated {len(episodes):,} episodes in {ingest_scale.generate(results, episodes, 2):.1f} s")
        cellbench = str(BIN / "cellbench")
        ingest = _timed([cellbench, "ingest", "--results", str(results), "--db", str(db),
                         "--config", str(ROOT / "config.yaml")])
        shutil.rmtree(site, ignore_errors=True)
        browse = [cellbench, "browse", "--db", str(db), "--out", str(site), "--config", str(ROOT / "config.yaml")]
        cold, warm = _timed(browse), _timed(browse)
        index = _size([site / "index.html", *(site / "data").glob("*.js")])
        total = _size(site.rglob("*"))
        pages = sum(1 for _ in site.rglob("*.html"))
        print(f"{len(episodes):,} episodes: ingest {ingest:.1f} s; browse cold {cold:.1f} s, again {warm:.1f} s; "
              f"{pages:,} pages; index + data scripts {index / 1e6:.2f} MB (goal: a few MB); site {total / 1e6:.1f} MB")
        import os

        print(f"load average at the end: {os.getloadavg()[0]:.1f} on {len(os.sched_getaffinity(0))} CPUs")
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
