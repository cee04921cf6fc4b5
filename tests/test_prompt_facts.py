"""Both rendered prompts carry every fact that is not interface-specific, in every benchmark x ablation (no simulator).

The facts come from one source (`robots.api_docs.shared_facts`); this test
renders the system prompt and tools each agent is sent, exactly as the
episode builds them, and checks each fact is in both, word for word, plus
anchors of the facts themselves (so a fact dropped from the source fails
too), and that no prompt tells the tool agent to use a `show` it lacks.
"""
from __future__ import annotations

import json

import pytest

from agents.episode import ABLATION_EFFECTS, EpisodeSpec, render_prompt
from agents.feedback import TASK_COMPLETE, TASK_SUCCESS_KEY, success_line
from robots.api_docs import shared_facts
from robots.factory import BENCHMARKS, TWO_ARM_BENCHMARKS
from robots.guides import load_guide

#: What the facts must say, whatever their wording: world frame, surface heights, workspace,
#: error conventions, the success flag and the refusal after success.
ANCHORS = ("World frame: metres, z up", "about 0.9", "about 0.45", "about 0 in", "measure it with `locate`",
           "[-0.6, -0.6, -0.05]", "[0.6, 0.6, 1.5]", "ValueError", "with its type and message", "episode goes on",
           "success check", TASK_COMPLETE)


def _card(benchmark: str, guides: bool) -> dict:
    arms = ["right", "left"] if benchmark in TWO_ARM_BENCHMARKS else ["right"]
    return {"instruction": "put the bowl on the plate", "objects": ["bowl_1", "plate_1"],
            "cameras": ["agentview", "robot0_eye_in_hand", "frontview"], "arms": arms,
            "guide": load_guide(benchmark) if guides else None}


def _render(benchmark: str, ablation: str, agent: str) -> tuple[str, list[dict]]:
    effects = ABLATION_EFFECTS[ablation]
    spec = EpisodeSpec(benchmark=benchmark, task="t/0", seed=0, agent=agent, ablation=ablation)
    caps = ("vla",) if effects["vla"] else ()
    system, tools, _ = render_prompt(spec, _card(benchmark, effects["guides"]), caps, effects)
    return system, tools


CASES = [(b, a) for b in BENCHMARKS for a in ABLATION_EFFECTS]


@pytest.mark.parametrize("benchmark,ablation", CASES, ids=[f"{b}-{a}" for b, a in CASES])
def test_every_shared_fact_is_in_both_prompts(benchmark, ablation):
    tool_system, tool_tools = _render(benchmark, ablation, "tool")
    # The code agent has no images_on_demand: its nearest arm is full (the same robot, VLA and guides).
    code_system, _ = _render(benchmark, "full" if ablation == "images_on_demand" else ablation, "code")
    for fact in shared_facts():
        assert fact in tool_system, f"tool prompt lacks: {fact[:80]}"
        assert fact in code_system, f"code prompt lacks: {fact[:80]}"
    for anchor in ANCHORS:
        assert anchor in tool_system and anchor in code_system, anchor
    # The form of the success flag each interface returns is named in its prompt.
    assert f'"{TASK_SUCCESS_KEY}"' in tool_system and success_line(True) in code_system


@pytest.mark.parametrize("benchmark,ablation", CASES, ids=[f"{b}-{a}" for b, a in CASES])
def test_the_tool_agent_is_told_of_show_only_where_it_has_the_tool(benchmark, ablation):
    system, tools = _render(benchmark, ablation, "tool")
    has_show = any(t["function"]["name"] == "show" for t in tools)
    assert has_show == ABLATION_EFFECTS[ablation]["images_on_demand"]
    text = system + json.dumps(tools)
    assert ("show(" in text) == has_show, "the tool agent's prompt mentions show() but has no show tool"


@pytest.mark.parametrize("benchmark,ablation", CASES, ids=[f"{b}-{a}" for b, a in CASES])
def test_the_vla_is_named_only_where_it_exists(benchmark, ablation):
    """A no-VLA ablation's prompts must not promise a VLA: neither the tool agent's text nor its tools, nor the
    code agent's API reference."""
    has_vla = ABLATION_EFFECTS[ablation]["vla"]
    tool_system, tools = _render(benchmark, ablation, "tool")
    assert ("VLA" in tool_system) == has_vla
    assert any(t["function"]["name"] == "vla" for t in tools) == has_vla
    code_system, _ = _render(benchmark, "full" if ablation == "images_on_demand" else ablation, "code")
    assert ("robo.vla(" in code_system) == has_vla
