"""One real episode per agent against a local open model (marker `llm`, deselected by default).

    make local-llm && make test-llm      # or: benchmarks/local_llm.sh start; pytest -m llm

The planner settings are configs/local_llm.yaml's (vision off, calls written
as text); the server is CELLBENCH_LLM_URL (default http://127.0.0.1:8080/v1).
When no server answers, the tests fail and say how to start one: asked for
and not run is not a pass.
"""
from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest
import yaml

from agents.episode import EpisodeSpec, run_episode
from agents.planners.openai_planner import OpenAIPlanner
from agents.schema import validate_trace

pytestmark = pytest.mark.llm

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "local_llm.yaml"


@pytest.fixture(scope="module")
def planner_cfg():
    cfg = yaml.safe_load(CONFIG.read_text())["planner"]
    cfg["base_url"] = os.environ.get("CELLBENCH_LLM_URL", cfg["base_url"])
    health = cfg["base_url"].rstrip("/").removesuffix("/v1") + "/health"
    try:
        urllib.request.urlopen(health, timeout=10).read()
    except OSError as e:
        pytest.fail(f"no local model server at {cfg['base_url']} ({e}): run `make local-llm` "
                    f"(or benchmarks/local_llm.sh start), or set CELLBENCH_LLM_URL")
    return cfg


@pytest.mark.parametrize("agent", ["tool", "code"])
def test_one_real_episode_per_agent(agent, planner_cfg, tmp_path):
    planner = OpenAIPlanner.from_config(planner_cfg, api_key=os.environ.get("OPENAI_API_KEY") or "local")
    spec = EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent=agent,
                       ablation="no_vla", call_budget=4, wall_clock_s=300)
    try:
        rec = run_episode(spec, planner, str(tmp_path))
    finally:
        planner.close()
    calls = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert rec.status in ("solved", "gave_up", "call_budget", "wall_clock"), (rec.status, rec.error)
    assert rec.usage_source == "provider" and rec.input_tokens > 0
    assert sum(c["images_withheld"] for c in calls) >= 1 and rec.images_in_prompts == 0
    # The model's calls are read from its text and reach the simulator (a primitive, a cell or finish).
    assert any(c["tool_call_source"] == "text" and c["action_kind"] in ("tool", "cell", "finish") for c in calls)
    assert validate_trace(str(tmp_path)) == []
