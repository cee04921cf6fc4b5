"""Shared pytest fixtures: the repository root, scratch copies of the workflow, snakemake."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    """The checkout under test."""
    return REPO


@pytest.fixture(scope="session")
def new_workflow(tmp_path_factory):
    """Make a scratch copy of the workflow (no results/, logs/ or .snakemake/), so a
    test's snakemake runs never touch real results; returns its directory."""
    def make() -> Path:
        dest = tmp_path_factory.mktemp("wf")
        for name in ("Snakefile", "config.yaml", "workflow", "configs"):
            src = REPO / name
            (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
        (dest / "profiles").symlink_to("workflow/profiles")
        return dest
    return make


@pytest.fixture
def workflow_copy(new_workflow) -> Path:
    """A fresh scratch copy of the workflow for one test."""
    return new_workflow()


@pytest.fixture(scope="session")
def snakemake():
    """Run the venv's snakemake in a directory; stdout and stderr come back together."""
    exe = Path(sys.executable).parent / "snakemake"

    def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(exe), *args], cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300)
    return run


@pytest.fixture(scope="session")
def runtime_server():
    """A RuntimeServer in this process over a real LIBERO-PRO scene (libero_spatial_swap/0, seed 0, VLA on),
    shared by the tests that compare a primitive's tool result with its cell output (one scene build)."""
    from agents.runtime import RuntimeServer

    srv = RuntimeServer()
    srv.init({"benchmark": "libero_pro", "task": "libero_spatial_swap/0", "seed": 0, "capabilities": ("vla",),
              "guides": False, "image_size": 128, "auto_cameras_by_arms": {}, "initial_cameras": ()})
    yield srv
    close = getattr(srv.namespace, "close", None)
    if close is not None:
        close()  # the cell worker process, where cells run in one
