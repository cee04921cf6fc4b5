"""The `openai` planner runs a whole code-agent episode against the loopback OpenAI-compatible server.

The server's responder plays the model: it reads the conversation it is sent
(task card, last tool result) and answers with python cells — first one that
asks for two camera images, then the scripted planner's own cells (its
`CodeMind`, which sees only the conversation).  The real runtime and
simulator execute them.  Each reply reports a distinct usage, so the test can
check the trace records the provider's numbers exactly.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from agents.episode import EpisodeSpec, run_episode
from agents.planners.openai_planner import OpenAIPlanner
from agents.planners.scripted import CodeMind, _last_result, _text
from agents.schema import validate_trace
from openai_server import serve, tool_call

LOOK_CELL = "robo.show('agentview')\nrobo.show('frontview')\nprint('looked')"


class CellResponder:
    """Answers each chat-completions request with the next python cell; remembers the usage it reported."""

    def __init__(self):
        self.mind = None
        self.usages: list[dict] = []

    def __call__(self, body: dict) -> object:
        messages = body["messages"]
        n = len(self.usages) + 1
        if n == 1:
            name, args, text = "python", {"code": LOOK_CELL}, "First, look at the scene."
        else:
            if self.mind is None:
                self.mind = CodeMind(_text(messages[1]["content"]), has_vla=False)
            name, args, text = self.mind.step(_last_result(messages))
        usage = {"prompt_tokens": 3000 + 700 * n, "completion_tokens": 120 + n, "cached_tokens": 1024 * (n - 1),
                 "cache_write_tokens": 11 * n, "reasoning_tokens": 5 * n}
        self.usages.append(usage)
        return tool_call(name, args, content=text, usage=usage)


@pytest.fixture(scope="module")
def episode(tmp_path_factory):
    out = tmp_path_factory.mktemp("openai_episode")
    responder = CellResponder()
    with serve(responder) as server:
        planner = OpenAIPlanner(model="cellbench-test-model", base_url=server.base_url, api_key="sk-test", max_retries=0)
        try:
            spec = EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent="code",
                               ablation="no_vla_no_guides", call_budget=8)
            rec = run_episode(spec, planner, str(out))
        finally:
            planner.close()
        requests = list(server.requests)
        assert not server.responder_errors, server.responder_errors[0]
    return rec, out, requests, responder.usages


def _calls(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "calls.jsonl").read_text().splitlines()]


def test_openai_planner_solves_an_episode(episode):
    rec, out, requests, usages = episode
    assert rec.status == "solved" and rec.success, rec
    assert rec.planner == "openai" and rec.model == "cellbench-test-model"
    assert rec.n_calls == len(requests) == len(usages) >= 3
    assert validate_trace(out) == []
    # Every request carried the two tools of the code interface.
    assert all({t["function"]["name"] for t in r.tools} == {"python", "finish"} for r in requests)


def test_trace_records_the_providers_usage_exactly(episode):
    rec, out, _, usages = episode
    calls = _calls(out)
    for call, sent in zip(calls, usages):
        assert call["usage_source"] == "provider"
        assert call["input_tokens"] == sent["prompt_tokens"]
        assert call["cached_input_tokens"] == sent["cached_tokens"]
        assert call["cache_write_tokens"] == sent["cache_write_tokens"]
        assert call["output_tokens"] == sent["completion_tokens"]
        assert call["reasoning_tokens"] == sent["reasoning_tokens"]
        raw = call["raw_usage"]
        assert raw["prompt_tokens"] == sent["prompt_tokens"]
        assert raw["prompt_tokens_details"]["cached_tokens"] == sent["cached_tokens"]
    assert rec.usage_source == "provider"
    assert rec.input_tokens == sum(u["prompt_tokens"] for u in usages)
    assert rec.cached_input_tokens == sum(u["cached_tokens"] for u in usages)
    assert rec.cache_write_tokens == sum(u["cache_write_tokens"] for u in usages)
    assert rec.output_tokens == sum(u["completion_tokens"] for u in usages)


def test_images_are_sent_as_data_urls_and_match_the_trace(episode):
    _, out, requests, _ = episode
    calls = _calls(out)
    first, second = requests[0].images, requests[1].images
    assert len(first) == 1  # the opening camera image
    assert len(second) == 3  # plus the two the first cell showed
    assert all(u.startswith("data:image/png;base64,") for r in requests for u in r.images)
    assert [c["images_in_prompt"] for c in calls] == [len(r.images) for r in requests]
    assert calls[0]["images_returned"] == 2
    shown = sorted((out / "images").glob("call001_*.png"))
    assert [p.name.split("_", 2)[2] for p in shown] == ["agentview.png", "frontview.png"]
    sent = [base64.b64decode(u.split(",", 1)[1]) for u in second[1:]]
    assert sent == [p.read_bytes() for p in shown]
    # The transcript keeps file references, never the data URLs.
    transcript = (out / "transcript.json").read_text()
    assert "data:image" not in transcript and "images/call001_" in transcript
