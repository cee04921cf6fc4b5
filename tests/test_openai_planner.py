"""The openai planner through the real `openai` SDK against a loopback OpenAI-compatible server."""
from __future__ import annotations

import base64
import io
import json
import random

import pytest
from PIL import Image

from agents.errors import CellbenchError
from agents.planners.base import ContextOverflow, PlannerError, ToolCall
from agents.planners.openai_planner import OpenAIPlanner, usage_from_openai
from agents.usage import UsageEstimator
from openai_server import Fault, serve, text_reply, tool_call

KEY = "sk-cellbench-test"
TOOLS = [{
    "type": "function",
    "function": {
        "name": "move_to",
        "description": "Move the gripper to a point.",
        "parameters": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
    },
}]
MESSAGES = [{"role": "system", "content": "You control a robot."}, {"role": "user", "content": "Pick up the bowl."}]


def planner(server, **options) -> OpenAIPlanner:
    options = {"timeout_s": 2.0, "backoff_base_s": 0.001, "max_retries": 3, **options}
    return OpenAIPlanner("test-model", base_url=server.base_url, api_key=KEY, **options)


def png_data_url(width: int = 8, height: int = 6) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 30)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


# --------------------------------------------------------------------------
# Replies and usage


def test_tool_call_reply_is_parsed():
    with serve(lambda request: tool_call("move_to", {"x": 0.25}, content="moving")) as server:
        reply = planner(server).next(MESSAGES, TOOLS)
    assert reply.text == "moving"
    assert len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert isinstance(call, ToolCall) and call.name == "move_to"
    assert json.loads(call.arguments) == {"x": 0.25}
    assert call.id.startswith("call_")
    assert (reply.retries, reply.retry_errors, reply.usage_source) == (0, [], "provider")
    assert reply.latency_s > 0


def test_malformed_arguments_come_back_raw():
    with serve(lambda request: tool_call("move_to", '{"x": 0.2')) as server:
        reply = planner(server).next(MESSAGES, TOOLS)
    assert reply.tool_calls[0].arguments == '{"x": 0.2'


def test_usage_is_recorded_exactly_as_reported():
    usage = {"prompt_tokens": 12345, "cached_tokens": 11264, "cache_write_tokens": 512,
             "completion_tokens": 321, "reasoning_tokens": 100}
    with serve(lambda request: text_reply("done", usage=usage)) as server:
        reply = planner(server).next(MESSAGES, TOOLS)
    assert reply.usage.input_tokens == 12345
    assert reply.usage.cached_input_tokens == 11264
    assert reply.usage.cache_write_tokens == 512
    assert reply.usage.output_tokens == 321
    assert reply.usage.reasoning_tokens == 100
    assert reply.usage.uncached_input_tokens == 12345 - 11264 - 512
    assert reply.raw_usage == {
        "prompt_tokens": 12345,
        "completion_tokens": 321,
        "total_tokens": 12666,
        "prompt_tokens_details": {"cached_tokens": 11264, "audio_tokens": 0, "cache_write_tokens": 512},
        "completion_tokens_details": {"reasoning_tokens": 100, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    }


@pytest.mark.parametrize(
    "raw, written",
    [
        ({"prompt_tokens": 10, "prompt_tokens_details": {"cache_write_tokens": 7}}, 7),
        ({"prompt_tokens": 10, "prompt_tokens_details": {"cache_creation_tokens": 6}}, 6),
        ({"prompt_tokens": 10, "cache_creation_input_tokens": 5}, 5),
        ({"prompt_tokens": 10, "prompt_tokens_details": None, "completion_tokens_details": None}, 0),
    ],
)
def test_cache_write_field_names(raw, written):
    assert usage_from_openai(raw).cache_write_tokens == written
    assert usage_from_openai(raw).input_tokens == 10


def test_server_without_usage_gets_an_estimate():
    with serve(lambda request: tool_call("move_to", {"x": 1}, omit_usage=True)) as server:
        reply = planner(server).next(MESSAGES, TOOLS)
    assert reply.usage_source == "estimated"
    assert reply.usage.input_tokens == UsageEstimator().prompt_tokens(MESSAGES, TOOLS)
    assert reply.usage.output_tokens > 0


# --------------------------------------------------------------------------
# The request


def test_request_carries_the_configured_options_and_the_key():
    image = png_data_url()
    messages = MESSAGES + [{"role": "user", "content": [
        {"type": "text", "text": "agentview:"}, {"type": "image_url", "image_url": {"url": image}}]}]
    with serve(lambda request: text_reply("ok"), api_key=KEY) as server:
        planner(server, temperature=0.3, top_p=0.9, max_output_tokens=777, tool_choice="required",
                parallel_tool_calls=False, extra_body={"top_k": 20, "chat_template_kwargs": {"x": 1}},
                ).next(messages, TOOLS)
        sent = server.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = sent.body
    assert body["model"] == "test-model"
    assert (body["temperature"], body["top_p"], body["tool_choice"]) == (0.3, 0.9, "required")
    assert body["max_completion_tokens"] == 777 and "max_tokens" not in body
    assert body["parallel_tool_calls"] is False
    assert body["top_k"] == 20 and body["chat_template_kwargs"] == {"x": 1}  # extra_body is merged in
    assert body["tools"] == TOOLS
    assert sent.images == [image]
    assert body["messages"] == messages


def test_unset_options_are_left_out_and_max_tokens_param_is_configurable():
    with serve() as server:
        planner(server, max_output_tokens=50, max_tokens_param="max_tokens").next(MESSAGES, [])
        body = server.requests[-1].body
    assert body["max_tokens"] == 50 and "max_completion_tokens" not in body
    for key in ("temperature", "top_p", "tool_choice", "tools", "parallel_tool_calls"):
        assert key not in body


def test_wrong_key_is_a_planner_error_without_retries():
    with serve(api_key="sk-right") as server:
        bad = OpenAIPlanner("m", base_url=server.base_url, api_key="sk-wrong", backoff_base_s=0.001)
        with pytest.raises(PlannerError, match="401") as caught:
            bad.next(MESSAGES, TOOLS)
        assert len(server.requests) == 1
    assert caught.value.retries == 0 and len(caught.value.errors) == 1


# --------------------------------------------------------------------------
# Faults


@pytest.mark.parametrize(
    "fault, error",
    [
        ("429", "RateLimitError 429"),
        ("500", "InternalServerError 500"),
        ("502", "InternalServerError 502"),
        ("503", "InternalServerError 503"),
        (Fault.hang(1.5), "APITimeoutError"),
        ("drop", "APIConnectionError"),
        ("garbage", "JSONDecodeError"),
        ("garbage_text", "response is not JSON"),
        ("no_choices", "no choices"),
    ],
)
def test_each_transient_fault_is_retried_and_counted(fault, error):
    with serve(lambda request: tool_call("move_to", {"x": 1}), faults=[fault]) as server:
        reply = planner(server, timeout_s=0.3).next(MESSAGES, TOOLS)
        assert len(server.requests) == 2
    assert reply.tool_calls[0].name == "move_to"
    assert reply.retries == 1
    assert len(reply.retry_errors) == 1 and error in reply.retry_errors[0]


def test_several_faults_in_a_row_are_all_counted():
    with serve(faults=["503", "drop", "429"]) as server:
        reply = planner(server).next(MESSAGES, TOOLS)
    assert reply.retries == 3 and len(reply.retry_errors) == 3


def test_persistent_failure_raises_planner_error_with_the_count():
    with serve(faults=["503"] * 10) as server:
        with pytest.raises(PlannerError) as caught:
            planner(server, max_retries=3).next(MESSAGES, TOOLS)
        assert len(server.requests) == 4  # one try + 3 retries: the SDK itself retried nothing
    assert caught.value.retries == 3
    assert len(caught.value.errors) == 4
    assert all("503" in error for error in caught.value.errors)


def test_context_length_error_is_context_overflow_without_retries():
    with serve(faults=["context_length"]) as server:
        with pytest.raises(ContextOverflow, match="maximum context length"):
            planner(server).next(MESSAGES, TOOLS)
        assert len(server.requests) == 1


def test_vllm_style_context_error_without_a_code():
    fault = Fault.error(400, "This model's maximum context length is 32768 tokens. However, you "
                             "requested 40000 tokens (39000 in the messages, 1000 in the completion).")
    with serve(faults=[fault]) as server:
        with pytest.raises(ContextOverflow):
            planner(server).next(MESSAGES, TOOLS)


def test_backoff_is_exponential_with_jitter_and_honours_retry_after():
    delays: list[float] = []
    with serve(faults=["500", "500", "500", Fault.rate_limit(retry_after=2.5)]) as server:
        reply = planner(server, max_retries=5, backoff_base_s=1.0, backoff_max_s=10.0,
                        sleep=delays.append, rng=random.Random(0)).next(MESSAGES, TOOLS)
    assert reply.retries == 4
    for attempt, delay in enumerate(delays[:3]):
        assert 0.5 * 2**attempt <= delay <= 2**attempt
    assert delays[3] == 2.5


# --------------------------------------------------------------------------
# Configuration


def test_from_config_block(monkeypatch):
    monkeypatch.setenv("MY_GATEWAY_KEY", KEY)
    with serve(api_key=KEY) as server:
        cfg = {"name": "openai", "model": "gpt-test", "base_url": server.base_url, "temperature": 0.0,
               "top_p": None, "max_output_tokens": 128, "tool_choice": "auto", "extra_body": {"seed": 1},
               "max_retries": 2, "timeout_s": 5, "api_key_env": "MY_GATEWAY_KEY"}
        built = OpenAIPlanner.from_config(cfg)
        built.next(MESSAGES, TOOLS)
        body = server.requests[-1].body
    assert (built.model, built.max_retries, built.timeout_s) == ("gpt-test", 2, 5)
    assert body["temperature"] == 0.0 and "top_p" not in body and body["seed"] == 1


def test_from_config_rejects_unknown_keys_and_missing_model():
    with pytest.raises(CellbenchError, match="temprature"):
        OpenAIPlanner.from_config({"name": "openai", "model": "m", "temprature": 0.1}, api_key=KEY)
    with pytest.raises(CellbenchError, match="model"):
        OpenAIPlanner.from_config({"name": "openai"}, api_key=KEY)


def test_endpoint_and_key_from_the_environment(monkeypatch):
    with serve(api_key=KEY) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        reply = OpenAIPlanner("m").next(MESSAGES, TOOLS)
    assert reply.text == "ok"


def test_missing_key_is_a_user_facing_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(CellbenchError, match="OPENAI_API_KEY"):
        OpenAIPlanner("m", base_url="http://127.0.0.1:9/v1")


# --------------------------------------------------------------------------
# A scripted conversation


def test_responder_can_script_an_episode_from_tool_results():
    """The responder reads the last tool result and picks the next call, as a model would."""

    def responder(request):
        last = request["messages"][-1]
        if last["role"] != "tool":
            return tool_call("move_to", {"x": 0.1})
        x = json.loads(last["content"])["x"]
        if x >= 0.3:
            return tool_call("finish", {"success": True})
        return tool_call("move_to", {"x": round(x + 0.1, 1)})

    messages = list(MESSAGES)
    with serve(responder) as server:
        agent = planner(server)
        names = []
        for _ in range(10):
            reply = agent.next(messages, TOOLS)
            call = reply.tool_calls[0]
            names.append(call.name)
            if call.name == "finish":
                break
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": call.arguments})
        assert len(server.requests) == 4
    assert names == ["move_to", "move_to", "move_to", "finish"]


def test_responder_may_return_a_full_completion_or_a_fault():
    raw = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
           "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "raw"}}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
    answers = iter([Fault.server_error(502), raw])
    with serve(lambda request: next(answers)) as server:
        reply = planner(server).next(MESSAGES, TOOLS)
        assert server.requests[0].fault.status == 502
    assert (reply.text, reply.retries, reply.usage.input_tokens, reply.raw_usage) == (
        "raw", 1, 3, {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})
