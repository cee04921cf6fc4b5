"""A reply the provider cut at the output token limit is named as such to both agents, in one wording.

A long code cell is cut far more often than a tool call, so a bare "arguments
are not valid JSON" would tell the code agent less than the truth, and the
trace could not tell a model's broken JSON from the provider's limit.  Each
backend reads its provider's own marker (Chat Completions finish_reason
'length', Responses incomplete_details.reason 'max_output_tokens', Messages
stop_reason 'max_tokens') from the SDK's response types; the episode answers
both agents with feedback.TRUNCATED and records the call's exception as
TruncatedReply.
"""
from __future__ import annotations

import json

import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

import agents.episode as episode_mod
from agents.episode import EpisodeSpec, run_episode
from agents.feedback import TRUNCATED
from agents.planners.anthropic_planner import AnthropicPlanner
from agents.planners.base import PlannerReply, ToolCall
from agents.planners.openai_planner import OpenAIPlanner
from agents.planners.openai_responses_planner import OpenAIResponsesPlanner
from agents.records import Usage
from test_episode_protocol import StubRuntime

CUT = '{"code": "for attempt in range(3):\\n    r = robo.vla('  # what a cut-off call's arguments look like
URL = "http://127.0.0.1:9/v1"


def _chat(finish_reason: str) -> ChatCompletion:
    return ChatCompletion.model_validate({
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": finish_reason, "message": {
            "role": "assistant", "content": "",
            "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "python", "arguments": CUT}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


def _responses(reason: str | None) -> Response:
    return Response.model_validate({
        "id": "r", "object": "response", "created_at": 0, "model": "m", "parallel_tool_calls": False,
        "tool_choice": "auto", "tools": [], "status": "incomplete" if reason else "completed",
        "incomplete_details": {"reason": reason} if reason else None,
        "output": [{"type": "function_call", "id": "fc1", "call_id": "t1", "name": "python", "arguments": CUT}],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                  "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}})


def _message(stop_reason: str) -> Message:
    return Message.model_validate({
        "id": "m", "type": "message", "role": "assistant", "model": "m", "stop_reason": stop_reason,
        "content": [{"type": "text", "text": "for attempt in range(3):"}],
        "usage": {"input_tokens": 10, "output_tokens": 5}})


def test_each_backend_reads_its_providers_truncation_marker():
    chat = OpenAIPlanner(model="m", base_url=URL, api_key="k", max_retries=0)
    assert chat._reply(_chat("length"), [], []).truncated
    assert not chat._reply(_chat("tool_calls"), [], []).truncated
    responses = OpenAIResponsesPlanner(model="m", base_url=URL, api_key="k", max_retries=0)
    assert responses._reply(_responses("max_output_tokens"), [], []).truncated
    assert not responses._reply(_responses(None), [], []).truncated
    claude = AnthropicPlanner(model="m", base_url=URL, api_key="k", max_retries=0)
    assert claude._reply(_message("max_tokens"), [], []).truncated
    assert not claude._reply(_message("end_turn"), [], []).truncated


class CutOnce:
    """First reply cut at the limit (broken arguments, or text only), then finish."""

    name, model = "test-cut", "cut-v0"

    def __init__(self, agent: str, with_call: bool):
        self.agent, self.with_call, self.n, self.seen = agent, with_call, 0, []

    def next(self, messages, tools) -> PlannerReply:
        self.n += 1
        self.seen.append([dict(m) for m in messages])
        usage = Usage(input_tokens=100, output_tokens=10)
        if self.n == 1:
            name = "python" if self.agent == "code" else "move_to"
            calls = [ToolCall("c1", name, CUT)] if self.with_call else []
            return PlannerReply(text="" if self.with_call else "Let me write", tool_calls=calls, usage=usage,
                                usage_source="estimated", truncated=True)
        finish = ToolCall(f"c{self.n}", "finish", json.dumps({"status": "stuck", "summary": "cut"}))
        return PlannerReply(text="", tool_calls=[finish], usage=usage, usage_source="estimated")


@pytest.mark.parametrize("with_call", [True, False], ids=["broken-call", "text-only"])
def test_both_agents_are_told_their_reply_was_cut_in_the_same_words(monkeypatch, tmp_path, with_call):
    monkeypatch.setattr(episode_mod, "RuntimeClient", StubRuntime)
    answers = {}
    for agent in ("tool", "code"):
        planner = CutOnce(agent, with_call)
        spec = EpisodeSpec(benchmark="libero_pro", task="s/0", seed=0, agent=agent, ablation="no_vla", call_budget=4)
        out = tmp_path / agent
        run_episode(spec, planner, str(out))
        last = planner.seen[1][-1]
        answers[agent] = last["content"]
        row = json.loads((out / "calls.jsonl").read_text().splitlines()[0])
        assert row["exception"] == "TruncatedReply", row
    assert answers["tool"] == answers["code"] == TRUNCATED
