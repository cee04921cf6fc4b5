"""The results browser (`cellbench browse`), opened in a real headless Chromium from file://.

A small grid of real-schema traces (two instances, both agents, two ablations
and images on demand) is ingested and turned into a site; Chromium then loads
the index (its episode table is drawn by JavaScript from data/episodes.js) and
a pair page.  Chromium is Debian's `chromium` (.ci/run installs it); where no
Chromium is installed the browser tests skip, saying so.
"""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pytest
from PIL import Image

import trace_factory as tf
from analysis.browse import align_calls
from analysis.ingest import ingest_traces

REPO = Path(__file__).resolve().parents[1]
INSTANCES = [("libero_spatial_swap/0", 0), ("libero_object_swap/1", 0)]
CELL = "r = robo.locate('plate_1')\nrobo.grasp('akita_black_bowl_1')\nrobo.place_on('plate_1')\nprint(r)\n"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium on PATH (Debian: apt-get install -y chromium; .ci/run installs it)")


def _png(path: Path, color) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), color).save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())


def _grid(root: Path) -> list[Path]:
    """Every episode of the small grid, as trace directories (tool: one primitive per call; code: one cell)."""
    dirs = []
    for task, seed in INSTANCES:
        for ablation in ("full", "no_vla", "images_on_demand"):
            names = ["locate", "grasp", "place_on"]
            tool = tf.write_episode(
                root, agent="tool", task=task, seed=seed, ablation=ablation, success=True, solved_at_call=3,
                calls=[tf.call(i, input_tokens=1500 * i, cached=1024 * (i > 1), images_returned=1,
                               tool_name=n, success_after=i == 3) for i, n in enumerate(names, 1)],
                primitives=[tf.primitive(i, i - 1, n) for i, n in enumerate(names, 1)])
            for i in range(4):
                _png(tool / "images" / f"call{i:03d}_{i:04d}_agentview.png", (40 * i, 90, 160))
            dirs.append(tool)
            if ablation == "images_on_demand":
                continue
            code = tf.write_episode(
                root, agent="code", task=task, seed=seed, ablation=ablation, success=True, solved_at_call=1,
                calls=[tf.call(1, input_tokens=2500, action_kind="cell", n_primitives=3, n_acting=2,
                               success_after=True), tf.call(2, input_tokens=2700, action_kind="finish")],
                primitives=[tf.primitive(1, k, n) for k, n in enumerate(names)], cells={1: CELL})
            _png(code / "images" / "call000_0000_agentview.png", (200, 60, 60))
            dirs.append(code)
    return dirs


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("browse")
    traces = _grid(base / "episodes")
    ingest_traces(base / "episodes", base / "traces.duckdb")
    config = tf.write_config(base / "config.yaml")
    out = base / "site"
    proc = subprocess.run([sys.executable, "-m", "agents.cli", "browse", "--db", str(base / "traces.duckdb"),
                           "--out", str(out), "--config", str(config), "--figures", str(base / "no-figures")],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out, traces


def _run_chromium(*args: str) -> subprocess.CompletedProcess:
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": os.environ.get("HOME", "/tmp")})


def _console(proc: subprocess.CompletedProcess) -> list[str]:
    """What the page wrote to the console (our pages write nothing: any line is a script error)."""
    return [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("href", "src") and value:
                self.links.append(value)


def _unresolved(page: Path, markup: str) -> list[str]:
    parser = _Links()
    parser.feed(markup)
    bad = []
    for link in parser.links:
        parsed = urlparse(link)
        if parsed.scheme in ("http", "https"):
            bad.append(f"{link} (a network link in a static site)")
        elif parsed.scheme in ("", "file") and not link.startswith(("#", "data:")):
            target = (page.parent / unquote(parsed.path)).resolve()
            if not target.is_file():
                bad.append(link)
    return bad


def test_index_lists_every_episode_and_every_link_resolves(site):
    out, traces = site
    proc = _run_chromium("--dump-dom", (out / "index.html").as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _console(proc) == []
    dom = proc.stdout
    rows = re.search(r'<div id="episodes">(.*?)</table>', dom, re.S).group(1)
    assert rows.count("<tr>") - 1 == len(traces)  # the header row, then one per episode
    for trace in traces:
        rel = trace.relative_to(out.parent / "episodes").as_posix()
        assert f'href="episodes/{rel}/index.html"' in dom, rel
    assert f"1–{len(traces)} of {len(traces)}" in dom
    pairs = re.search(r'<div id="pairs">(.*?)</table>', dom, re.S).group(1)
    assert pairs.count("pair page") == len(INSTANCES) * 3  # full, no_vla, images_on_demand
    # Every link of the drawn index, and of every page of the site, is a file of the site.
    assert _unresolved(out / "index.html", dom) == []
    pages = sorted(out.rglob("*.html"))
    assert len(pages) == 1 + len(traces) + len(INSTANCES) * 3
    problems = {p.relative_to(out).as_posix(): bad for p in pages if (bad := _unresolved(p, p.read_text()))}
    assert problems == {}


def test_pair_page_renders_both_timelines_and_its_plot(site, tmp_path):
    out, _ = site
    page = out / "pairs" / "no_vla" / "libero_pro" / "libero_spatial_swap" / "0" / "seed0.html"
    proc = _run_chromium("--dump-dom", page.as_uri())
    assert proc.returncode == 0 and _console(proc) == []
    dom = proc.stdout
    assert 'class="tokens-tool"' in dom and 'class="tokens-code"' in dom  # token lines of both agents
    assert 'class="dollars-tool"' in dom and 'class="dollars-code"' in dom
    assert dom.count('class="box-tool"') == 3 and dom.count('class="box-code"') == 2  # one box per call
    # The cell sits beside the three tool calls whose primitives it ran too (one row).
    row = re.search(r'<tr><td>(<div class="call" id="tool-1">.*?)</tr>', dom, re.S).group(1)
    assert 'id="tool-2"' in row and 'id="tool-3"' in row and 'id="code-1"' in row and "robo.grasp" in row

    shot = tmp_path / "pair.png"
    proc = _run_chromium("--window-size=1300,900", f"--screenshot={shot}", page.as_uri())
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50  # not a blank page
    pixels = np.asarray(image).reshape(-1, 3).astype(int)

    def near(rgb):
        return bool((np.abs(pixels - np.array(rgb)).max(axis=1) <= 12).any())

    assert near((0xd9, 0x5f, 0x02)) and near((0x1b, 0x9e, 0x77))  # both agents' colours were drawn


def test_cells_line_up_with_the_tool_calls_they_replaced():
    def prims(spec):
        return [{"name": n, "call_index": c} for c, n in spec]

    tool = prims([(1, "locate"), (2, "grasp"), (3, "state"), (4, "place_on"), (5, "locate")])
    code = prims([(1, "locate"), (1, "grasp"), (1, "place_on"), (2, "locate")])
    rows = align_calls(tool, code, [1, 2, 3, 4, 5, 6], [1, 2])
    assert rows == [([1], [1, 2, 4]), ([], [3]), ([2], [5]), ([], [6])]
    # Nothing in common: every call keeps its own row, order kept on both sides.
    assert align_calls(prims([(1, "a")]), prims([(1, "b")]), [1], [1]) == [([], [1]), ([1], [])]
