"""The openai-responses and anthropic planners (and the chat planner's reasoning settings) against
the loopback server, whose bodies are the SDKs' own types: request wire format, reasoning carried
between turns, usage mapping, dollars of a hand-worked call, retries."""
from __future__ import annotations

import json
import warnings

import duckdb
import pytest

from agents.episode import FINISH_TOOL, PYTHON_TOOL
from agents.errors import CellbenchError
from agents.planners.anthropic_planner import AnthropicPlanner
from agents.planners.base import ContextOverflow
from agents.planners.openai_planner import OpenAIPlanner
from agents.planners.openai_responses_planner import OpenAIResponsesPlanner
from agents.play import make_planner
from analysis.cost import PriceTable, call_dollars
from openai_server import Fault, Reply, serve, tool_call

OPENING = [
    {"role": "system", "content": "You drive a robot."},
    {"role": "user", "content": [
        {"type": "text", "text": "Task: put the bowl on the plate"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"}},
    ]},
]
TOOLS = [PYTHON_TOOL, FINISH_TOOL]


def _continue(messages, reply, result="printed 1", image=True):
    """The conversation after `reply`, as agents.episode appends it (tool result, then images)."""
    out = messages + [{"role": "assistant", "content": reply.text or None, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in reply.tool_calls]}]
    out += [{"role": "tool", "tool_call_id": c.id, "content": result} for c in reply.tool_calls]
    if image:
        out.append({"role": "user", "content": [
            {"type": "text", "text": "Images you requested:"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"}}]})
    return out


def _dollars(usage, table: PriceTable) -> float:
    """One call's dollars as the report computes them (analysis.cost's SQL over a calls row)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE calls (trace_dir VARCHAR, call_index INT, input_tokens BIGINT, "
                "cached_input_tokens BIGINT, cache_write_tokens BIGINT, output_tokens BIGINT)")
    con.execute("INSERT INTO calls VALUES ('t', 1, ?, ?, ?, ?)",
                [usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens, usage.output_tokens])
    return float(call_dollars(con, table)["dollars"].iloc[0])


# -- Responses ---------------------------------------------------------------------------------

def test_responses_wire_format_reasoning_carried_and_usage():
    usage = {"input_tokens": 12000, "cached_tokens": 9000, "output_tokens": 700, "reasoning_tokens": 400}
    replies = iter([
        tool_call("python", {"code": "print(1)"}, content="Looking first.", reasoning=["plan: look"], usage=usage),
        tool_call("finish", {"status": "done", "summary": "ok"}, reasoning=["done"]),
    ])
    with serve(lambda body: next(replies)) as server:
        planner = OpenAIResponsesPlanner(model="gpt-test", base_url=server.base_url, api_key="sk-test",
                                         reasoning_effort="high", max_retries=0)
        first = planner.next(OPENING, TOOLS)
        second = planner.next(_continue(OPENING, first), TOOLS)
        assert not server.responder_errors, server.responder_errors[0]
        body1, body2 = server.requests[0].body, server.requests[1].body
    assert server.requests[0].path == "/v1/responses"
    assert body1["instructions"] == "You drive a robot."
    assert body1["reasoning"] == {"effort": "high"} and body1["store"] is False
    assert body1["include"] == ["reasoning.encrypted_content"]
    assert [t["name"] for t in body1["tools"]] == ["python", "finish"]
    assert body1["tools"][0]["parameters"] == PYTHON_TOOL["function"]["parameters"]
    assert [p["type"] for p in body1["input"][0]["content"]] == ["input_text", "input_image"]
    assert body1["input"][0]["content"][1]["image_url"].startswith("data:image/png;base64,")
    # The reply: text, the function call, and the provider's usage mapped field by field.
    assert first.text == "Looking first."
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [("python", {"code": "print(1)"})]
    assert first.usage_source == "provider"
    u = first.usage
    assert (u.input_tokens, u.cached_input_tokens, u.cache_write_tokens, u.output_tokens, u.reasoning_tokens) == \
        (12000, 9000, 0, 700, 400)
    assert first.raw_usage["input_tokens_details"]["cached_tokens"] == 9000
    # Turn 2 carries turn 1's reasoning item (with its id and encrypted content) before its function call.
    kinds = [item.get("type", item.get("role")) for item in body2["input"]]
    assert kinds == ["user", "reasoning", "assistant", "function_call", "function_call_output", "user"]
    reasoning = body2["input"][1]
    assert reasoning["encrypted_content"].startswith("enc:") and reasoning["id"] == "rs_1_0"
    assert body2["input"][3]["call_id"] == body2["input"][4]["call_id"] == first.tool_calls[0].id
    assert second.tool_calls[0].name == "finish"
    # Hand-worked: 3000 uncached x $10 + 9000 cached x $1 + 700 output x $50, per million.
    table = PriceTable("t", input=10.0, cached_input=1.0, cache_write=12.5, output=50.0,
                       long_context_threshold=None, long_context_input_multiplier=1, long_context_output_multiplier=1)
    assert _dollars(first.usage, table) == pytest.approx((3000 * 10 + 9000 * 1 + 700 * 50) / 1e6)
    assert _dollars(first.usage, table) == pytest.approx(0.074)


def test_reasoning_effort_leaves_sampling_options_out_with_a_warning():
    with serve(lambda body: "ok") as server:
        with pytest.warns(UserWarning, match="temperature"):
            planner = OpenAIResponsesPlanner(model="m", base_url=server.base_url, api_key="k",
                                             reasoning_effort="low", temperature=0.0, top_p=0.9)
        planner.next(OPENING, TOOLS)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no reasoning: sampling options are sent, silently
            plain = OpenAIResponsesPlanner(model="m", base_url=server.base_url, api_key="k", temperature=0.0)
        plain.next(OPENING, TOOLS)
        body, plain_body = server.requests[0].body, server.requests[1].body
    assert "temperature" not in body and "top_p" not in body and body["reasoning"] == {"effort": "low"}
    assert plain_body["temperature"] == 0.0 and "reasoning" not in plain_body and "include" not in plain_body


def test_chat_planner_sends_reasoning_effort_and_ignores_reasoning_content():
    # vLLM / SGLang with a reasoning parser: reasoning_content beside content, no prompt_tokens_details.
    usage = {"prompt_tokens": 900, "completion_tokens": 80, "total_tokens": 980,
             "prompt_tokens_details": None, "completion_tokens_details": None}
    with serve(lambda body: tool_call("finish", {"status": "done", "summary": "s"}, content="Done.",
                                      reasoning=["the bowl is on the plate"], usage=usage)) as server:
        with pytest.warns(UserWarning):
            planner = OpenAIPlanner(model="qwen", base_url=server.base_url, api_key="k",
                                    reasoning_effort="medium", temperature=0.6)
        reply = planner.next(OPENING, TOOLS)
        body = server.requests[0].body
    assert body["reasoning_effort"] == "medium" and "temperature" not in body
    assert reply.text == "Done." and reply.usage_source == "provider"
    assert (reply.usage.input_tokens, reply.usage.cached_input_tokens, reply.usage.reasoning_tokens) == (900, 0, 0)


def test_unknown_reasoning_effort_is_a_clear_error():
    with pytest.raises(CellbenchError, match="reasoning_effort"):
        OpenAIResponsesPlanner(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", reasoning_effort="huge")


# -- Anthropic ---------------------------------------------------------------------------------

def _claude(server, **kw):
    return AnthropicPlanner(model="claude-test", base_url=server.anthropic_base_url, api_key="sk-ant-test",
                            backoff_base_s=0.0, **kw)


def test_anthropic_wire_format_caching_thinking_and_usage():
    usage = {"input_tokens": 150, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 10000,
             "output_tokens": 500, "thinking_tokens": 320}
    replies = iter([
        tool_call("python", {"code": "print(1)"}, content="I look.", reasoning=["where is the bowl?"], usage=usage),
        tool_call("finish", {"status": "done", "summary": "ok"}),
    ])
    with serve(lambda body: next(replies), api_key="sk-ant-test") as server:
        planner = _claude(server, reasoning_effort="minimal")
        first = planner.next(OPENING, TOOLS)
        planner.next(_continue(OPENING, first), TOOLS)
        assert not server.responder_errors, server.responder_errors[0]
        body1, body2 = server.requests[0].body, server.requests[1].body
    assert server.requests[0].path == "/v1/messages"
    # Breakpoints: system, the last tool, the newest turn's last block.
    assert body1["system"] == [{"type": "text", "text": "You drive a robot.", "cache_control": {"type": "ephemeral"}}]
    assert [t["name"] for t in body1["tools"]] == ["python", "finish"]
    assert "cache_control" not in body1["tools"][0] and body1["tools"][1]["cache_control"] == {"type": "ephemeral"}
    assert body1["tools"][0]["input_schema"] == PYTHON_TOOL["function"]["parameters"]
    assert body1["thinking"] == {"type": "adaptive"} and body1["output_config"] == {"effort": "low"}
    image = body1["messages"][0]["content"][1]
    assert image["type"] == "image" and image["source"] == {"type": "base64", "media_type": "image/png",
                                                            "data": "iVBORw0KGgo="}
    assert image["cache_control"] == {"type": "ephemeral"}
    # Usage normalised to the whole prompt: 150 + 2000 + 10000.
    u = first.usage
    assert (u.input_tokens, u.cached_input_tokens, u.cache_write_tokens, u.output_tokens, u.reasoning_tokens) == \
        (12150, 10000, 2000, 500, 320)
    assert first.raw_usage["cache_creation_input_tokens"] == 2000
    # Turn 2: thinking block back unchanged (signature), tool_result + images as ONE user turn.
    roles = [m["role"] for m in body2["messages"]]
    assert roles == ["user", "assistant", "user"]
    assistant = body2["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["thinking", "text", "tool_use"]
    assert assistant[0]["signature"].startswith("sig:") and assistant[0]["thinking"] == "where is the bowl?"
    assert assistant[2]["input"] == {"code": "print(1)"} and assistant[2]["id"] == first.tool_calls[0].id
    last_turn = body2["messages"][2]["content"]
    assert [b["type"] for b in last_turn] == ["tool_result", "text", "image"]
    assert last_turn[0]["tool_use_id"] == first.tool_calls[0].id
    assert [("cache_control" in b) for b in last_turn] == [False, False, True]
    # The first turn's breakpoint moved on: only the newest turn has one.
    assert not any("cache_control" in b for b in body2["messages"][0]["content"])
    # Hand-worked under Claude-style prices ($3 in, $0.30 cached, $3.75 write = 1.25x, $15 out):
    # 150 x 3 + 10000 x 0.30 + 2000 x 3.75 + 500 x 15 = 450 + 3000 + 7500 + 7500 = 18450 per million.
    table = PriceTable("claude", input=3.0, cached_input=0.3, cache_write=3.75, output=15.0,
                       long_context_threshold=None, long_context_input_multiplier=1, long_context_output_multiplier=1)
    assert _dollars(first.usage, table) == pytest.approx(0.01845)


def test_anthropic_without_reasoning_sends_sampling_in_the_body_and_no_thinking():
    with serve(lambda body: "ok") as server:
        planner = _claude(server, temperature=0.0, cache=False)
        reply = planner.next(OPENING, TOOLS)
        body = server.requests[0].body
    assert reply.text == "ok" and reply.tool_calls == []
    assert body["temperature"] == 0.0 and "thinking" not in body
    assert not any("cache_control" in b for b in body["system"] + body["tools"] + body["messages"][0]["content"])


@pytest.mark.parametrize("fault", [Fault.overloaded(), Fault.rate_limit(retry_after=0.01), "500", "drop", Fault.hang(3)])
def test_anthropic_transient_errors_are_retried_and_counted(fault):
    with serve(lambda body: "ok", faults=[fault]) as server:
        planner = AnthropicPlanner(model="claude-test", base_url=server.anthropic_base_url, api_key="k",
                                   backoff_base_s=0.0, timeout_s=1.0)
        reply = planner.next(OPENING, TOOLS)
    assert reply.text == "ok" and reply.retries == 1 and len(reply.retry_errors) == 1
    if isinstance(fault, Fault) and fault.status == 529:
        assert reply.retry_errors[0].startswith("OverloadedError 529: Overloaded")


def test_anthropic_retry_after_is_honoured_and_prompt_too_long_is_context_overflow():
    slept = []
    with serve(lambda body: "ok", faults=[Fault.rate_limit(retry_after=7)]) as server:
        planner = AnthropicPlanner(model="c", base_url=server.anthropic_base_url, api_key="k", sleep=slept.append)
        planner.next(OPENING, TOOLS)
    assert slept == [7.0]
    too_long = Fault.error(400, "prompt is too long: 210000 tokens > 200000 maximum")
    with serve(lambda body: "ok", faults=[too_long]) as server:
        planner = AnthropicPlanner(model="c", base_url=server.anthropic_base_url, api_key="k")
        with pytest.raises(ContextOverflow, match="prompt is too long"):
            planner.next(OPENING, TOOLS)


def test_responses_retries_a_429_and_a_timeout():
    with serve(lambda body: "ok", faults=[Fault.rate_limit(retry_after=0.0), Fault.hang(3)]) as server:
        planner = OpenAIResponsesPlanner(model="m", base_url=server.base_url, api_key="k", backoff_base_s=0.0,
                                         timeout_s=1.0)
        reply = planner.next(OPENING, TOOLS)
    assert reply.text == "ok" and reply.retries == 2
    assert reply.retry_errors[0].startswith("RateLimitError 429") and "Timeout" in reply.retry_errors[1]


# -- config and factory ------------------------------------------------------------------------

def test_factory_builds_each_backend_with_its_own_key_variable(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.setenv("MY_KEY", "sk-mine")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    claude = make_planner({"name": "anthropic", "model": "claude-x", "reasoning_effort": "high"})
    assert isinstance(claude, AnthropicPlanner) and claude.client.api_key == "sk-ant"
    gpt = make_planner({"name": "openai-responses", "model": "gpt-x", "api_key_env": "MY_KEY", "store": True})
    assert isinstance(gpt, OpenAIResponsesPlanner) and gpt.client.api_key == "sk-mine" and gpt.store
    for chat_only in ({"max_tokens_param": "max_tokens"}, {"tool_calls": "text"}):
        with pytest.raises(CellbenchError, match=next(iter(chat_only))):
            make_planner({"name": "openai-responses", "model": "gpt-x", "api_key_env": "MY_KEY", **chat_only})
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(CellbenchError, match="ANTHROPIC_API_KEY"):
        make_planner({"name": "anthropic", "model": "claude-x"})


def test_config_schema_accepts_the_new_planner_keys():
    from agents.config import validate_config

    base = {"benchmarks": {"libero_pro": {"tasks": ["libero_spatial_swap/0"], "seeds": [0], "call_budget": 5}},
            "agents": ["tool"], "ablations": ["full"], "prices": {"m": {"input": 1, "cached_input": 0.1, "output": 2}},
            "price_model": "m"}
    validate_config({**base, "planner": {"name": "anthropic", "model": "claude", "reasoning_effort": "high",
                                         "cache": True}})
    validate_config({**base, "planner": {"name": "openai-responses", "model": "gpt", "reasoning_effort": "xhigh",
                                         "store": False}})
    with pytest.raises(CellbenchError, match="reasoning_effort"):
        validate_config({**base, "planner": {"name": "openai", "model": "gpt", "reasoning_effort": "extreme"}})


def test_anthropic_thinking_budget_for_models_without_adaptive_thinking():
    with serve(lambda body: "ok") as server:
        with pytest.warns(UserWarning, match="temperature"):
            planner = _claude(server, thinking_budget_tokens=4096, max_output_tokens=16000, temperature=1.0)
        planner.next(OPENING, TOOLS)
        body = server.requests[0].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096} and body["max_tokens"] == 16000
    assert "output_config" not in body and "temperature" not in body
    with pytest.raises(CellbenchError, match="thinking_budget_tokens"):
        AnthropicPlanner(model="c", api_key="k", thinking_budget_tokens=9000, max_output_tokens=8192)
