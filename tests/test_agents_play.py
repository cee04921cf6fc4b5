"""`cellbench play` end to end for both agents on one real instance, then `cellbench view` on the traces.

libero_spatial_swap/0 seed 0 with the scripted planner and no VLA or guides:
both agents solve it, and code cells need fewer LLM calls than tool calling
(the paper's headline effect).  The numbers are read from the traces.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents.schema import validate_trace

CLI = str(Path(sys.executable).parent / "cellbench")
TASK = "libero_spatial_swap/0"


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("play")
    out = {}
    for agent in ("code", "tool"):
        d = root / agent
        r = _cli("play", "--task", TASK, "--seed", "0", "--agent", agent, "--ablation", "no_vla_no_guides",
                 "--out", str(d))
        assert r.returncode == 0, r.stdout[-3000:]
        assert re.search(rf"agent={agent} ablation=no_vla_no_guides: solved success=True", r.stdout), r.stdout[-2000:]
        out[agent] = d
    return out


def _episode(d: Path) -> dict:
    return json.loads((d / "episode.json").read_text())


def _n_call_rows(d: Path) -> int:
    return len((d / "calls.jsonl").read_text().splitlines())


def test_both_traces_validate(traces):
    for agent, d in traces.items():
        assert validate_trace(d) == [], agent
        ep = _episode(d)
        assert ep["agent"] == agent and ep["status"] == "solved" and ep["success"]
        assert ep["usage_source"] == "estimated"


def test_code_agent_needs_fewer_llm_calls(traces):
    code, tool = _n_call_rows(traces["code"]), _n_call_rows(traces["tool"])
    assert code == _episode(traces["code"])["n_calls"] and tool == _episode(traces["tool"])["n_calls"]
    assert code < tool, (code, tool)
    # ...and fewer input tokens over the episode.
    assert _episode(traces["code"])["input_tokens"] < _episode(traces["tool"])["input_tokens"]


def test_tool_agent_gets_camera_images_after_moves_and_code_only_when_asked(traces):
    tool_calls = [json.loads(x) for x in (traces["tool"] / "calls.jsonl").read_text().splitlines()]
    for c in tool_calls:
        assert c["images_returned"] == (3 if c["n_acting"] else 0), c
    assert _episode(traces["code"])["images_returned"] == 0  # the scripted cells never call robo.show when all goes well


def test_view_writes_a_self_contained_page(traces):
    for agent, d in traces.items():
        r = _cli("view", str(d), timeout=60)
        assert r.returncode == 0, r.stdout
        page = (d / "view.html").read_text()
        ep = _episode(d)
        assert page.startswith("<!DOCTYPE html>")
        for text in (ep["task"], ep["instruction"], f"{agent} agent", "no_vla_no_guides", "solved"):
            assert text in page, text
        # Every image is inlined; nothing is fetched from elsewhere.
        n_images = len(list((d / "images").glob("*.png")))
        assert page.count('src="data:image/png;base64,') == n_images > 0
        assert not re.search(r'(src|href)="(?!data:|#)', page)
        assert "<link" not in page and "@import" not in page
        assert page.count('class="card" id="call-') == ep["n_calls"]
    code_page = (traces["code"] / "view.html").read_text()
    assert "robo.locate" in code_page and "cells/cell_001.py" in code_page
    tool_page = (traces["tool"] / "view.html").read_text()
    assert "move_to(" in tool_page and "Camera images after the move" in tool_page


def test_view_to_another_file(traces, tmp_path):
    out = tmp_path / "page.html"
    r = _cli("view", str(traces["code"]), "--out", str(out), timeout=60)
    assert r.returncode == 0 and out.exists() and r.stdout.strip() == str(out)


def test_view_of_a_non_trace_is_a_clean_error(tmp_path):
    r = _cli("view", str(tmp_path), timeout=60)
    assert r.returncode == 2 and "not an episode trace directory" in r.stdout
