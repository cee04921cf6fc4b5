"""Whole episodes through the openai-responses and anthropic planners against the loopback server.

The server's responder plays the model: it reads each request in the API's
own wire format (Responses input items, Anthropic turns), hands the newest
tool result to the scripted planner's mind (which sees only what the request
holds) and answers with its next tool call, plus a reasoning item / thinking
block and a distinct usage.  The real runtime and simulator execute the
calls.  Checked: the episode solves, every calls.jsonl row holds the usage
the provider reported mapped to cellbench's fields, the reasoning of earlier
turns goes back to the provider, and the report's dollars match a hand
computation.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.episode import EpisodeSpec, run_episode
from agents.planners.anthropic_planner import AnthropicPlanner
from agents.planners.openai_responses_planner import OpenAIResponsesPlanner
from agents.planners.scripted import make_mind
from agents.schema import validate_trace
from analysis.cost import PriceTable
from openai_server import serve, tool_call

#: Claude-style list prices ($/M): the test's hand computation uses these numbers.
PRICES = PriceTable("hand", input=3.0, cached_input=0.3, cache_write=3.75, output=15.0,
                    long_context_threshold=None, long_context_input_multiplier=1.0, long_context_output_multiplier=1.0)


def _responses_view(body):
    """(system, task text, chat-format tools, newest tool result) of a Responses request."""
    items = body["input"]
    task = "\n".join(p["text"] for p in items[0]["content"] if p["type"] == "input_text")
    tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                               "parameters": t["parameters"]}} for t in body["tools"]]
    last = None
    for item in reversed(items):
        if item.get("type") == "function_call_output":
            last = item["output"]
            break
        if item.get("type") in ("function_call", "reasoning") or item.get("role") == "assistant":
            break
    return body["instructions"], task, tools, last


def _anthropic_view(body):
    """The same of a Messages request."""
    turns = body["messages"]
    task = "\n".join(b["text"] for b in turns[0]["content"] if b["type"] == "text")
    tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                               "parameters": t["input_schema"]}} for t in body["tools"]]
    last = None
    if len(turns) > 1 and turns[-1]["role"] == "user":
        results = [b for b in turns[-1]["content"] if b["type"] == "tool_result"]
        last = results[0]["content"] if results else None
    return body["system"][0]["text"], task, tools, last


def _responses_usage(n):
    return {"input_tokens": 4000 + 500 * n, "cached_tokens": 1024 * (n - 1), "output_tokens": 150 + n,
            "reasoning_tokens": 7 * n}


def _anthropic_usage(n):
    return {"input_tokens": 100 + n, "cache_creation_input_tokens": 600 + 10 * n,
            "cache_read_input_tokens": 3000 * (n - 1), "output_tokens": 200 + n, "thinking_tokens": 50 + n}


class MindModel:
    """The model behind the endpoint: the scripted mind, fed from the request alone."""

    def __init__(self, view, usage):
        self.view, self.usage = view, usage
        self.mind = None
        self.usages: list[dict] = []

    def __call__(self, body):
        system, task, tools, last = self.view(body)
        if self.mind is None:
            self.mind = make_mind(system, task, tools)
        name, args, text = self.mind.step(last)
        usage = self.usage(len(self.usages) + 1)
        self.usages.append(usage)
        return tool_call(name, args, content=text or None, usage=usage, reasoning=[f"thought {len(self.usages)}"])


BACKENDS = {
    "openai-responses": (_responses_view, _responses_usage,
                         lambda s: OpenAIResponsesPlanner(model="gpt-test", base_url=s.base_url, api_key="sk-test",
                                                          reasoning_effort="high", max_retries=0)),
    "anthropic": (_anthropic_view, _anthropic_usage,
                  lambda s: AnthropicPlanner(model="claude-test", base_url=s.anthropic_base_url, api_key="sk-test",
                                             reasoning_effort="high", max_retries=0)),
}
#: Both agents on both backends; the default run keeps one episode per backend (and per agent).
CASES = [("openai-responses", "tool", "full"), ("anthropic", "code", "no_vla"),
         pytest.param(("openai-responses", "code", "no_vla"), marks=pytest.mark.slow),
         pytest.param(("anthropic", "tool", "full"), marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=CASES, ids="-".join)
def episode(request, tmp_path_factory):
    backend, agent, ablation = request.param
    view, usage, make = BACKENDS[backend]
    out = tmp_path_factory.mktemp(f"{backend}_{agent}")
    model = MindModel(view, usage)
    with serve(model) as server:
        planner = make(server)
        try:
            spec = EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent=agent,
                               ablation=ablation, call_budget=12)
            rec = run_episode(spec, planner, str(out))
        finally:
            planner.close()
        assert not server.responder_errors, server.responder_errors[0]
        requests = [r.body for r in server.requests]
    return backend, agent, rec, out, requests, model.usages


def _calls(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "calls.jsonl").read_text().splitlines()]


def test_episode_solves_with_provider_usage(episode):
    backend, agent, rec, out, requests, usages = episode
    assert rec.success and rec.planner == backend, rec
    assert rec.n_calls == len(requests) == len(usages) >= 2
    assert rec.usage_source == "provider"
    assert validate_trace(out) == []


def test_calls_hold_the_providers_usage_mapped(episode):
    backend, _, rec, out, _, usages = episode
    for row, sent in zip(_calls(out), usages):
        assert row["usage_source"] == "provider"
        if backend == "anthropic":
            whole = sent["input_tokens"] + sent["cache_creation_input_tokens"] + sent["cache_read_input_tokens"]
            expected = (whole, sent["cache_read_input_tokens"], sent["cache_creation_input_tokens"],
                        sent["output_tokens"], sent["thinking_tokens"])
            assert row["raw_usage"]["cache_creation_input_tokens"] == sent["cache_creation_input_tokens"]
        else:
            expected = (sent["input_tokens"], sent["cached_tokens"], 0, sent["output_tokens"],
                        sent["reasoning_tokens"])
            assert row["raw_usage"]["output_tokens_details"]["reasoning_tokens"] == sent["reasoning_tokens"]
        assert (row["input_tokens"], row["cached_input_tokens"], row["cache_write_tokens"], row["output_tokens"],
                row["reasoning_tokens"]) == expected
    assert rec.cached_input_tokens == sum(r["cached_input_tokens"] for r in _calls(out))


def test_earlier_reasoning_goes_back_to_the_provider(episode):
    backend, agent, _, _, requests, _ = episode
    for k, body in enumerate(requests):
        if backend == "anthropic":
            thinking = [b for t in body["messages"] if t["role"] == "assistant" for b in t["content"]
                        if b["type"] == "thinking"]
            assert [b["thinking"] for b in thinking] == [f"thought {i + 1}" for i in range(k)]
            assert all(b["signature"] for b in thinking)
            marks = sum("cache_control" in b for b in body["system"] + body["tools"]) + \
                sum("cache_control" in b for t in body["messages"] for b in t["content"])
            assert marks == 3  # system, last tool, newest turn
        else:
            reasoning = [i for i in body["input"] if i.get("type") == "reasoning"]
            assert [r["summary"][0]["text"] for r in reasoning] == [f"thought {i + 1}" for i in range(k)]
            assert all(r["encrypted_content"] for r in reasoning)
    if agent == "tool":  # the camera images after the first move reach the provider as image parts
        assert len(_images(requests[1])) > len(_images(requests[0])) >= 1


def _images(body):
    items = body.get("input") or body["messages"]
    return [p for i in items if isinstance(i.get("content"), list) for p in i["content"]
            if p.get("type") in ("input_image", "image")]


def test_report_dollars_match_a_hand_computation(episode, tmp_path):
    from analysis.ingest import ingest_traces
    from analysis.report import open_database

    backend, agent, _, out, _, usages = episode
    root = tmp_path / "episodes"
    shutil.copytree(out, root / "libero_pro" / "one")
    db = tmp_path / "t.duckdb"
    ingest_traces(root, db, prices=({"hand": PRICES}, "hand"))
    con = open_database(str(db))
    (dollars,) = con.execute("SELECT dollars FROM instances").fetchone()
    hand = 0.0
    for u in usages:  # $/M: 3 uncached, 0.30 cache read, 3.75 cache write, 15 output
        if backend == "anthropic":
            hand += (u["input_tokens"] * 3 + u["cache_read_input_tokens"] * 0.3
                     + u["cache_creation_input_tokens"] * 3.75 + u["output_tokens"] * 15) / 1e6
        else:
            hand += ((u["input_tokens"] - u["cached_tokens"]) * 3 + u["cached_tokens"] * 0.3
                     + u["output_tokens"] * 15) / 1e6
    assert dollars == pytest.approx(hand, rel=1e-9)
