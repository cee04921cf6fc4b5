"""Response bodies of the Responses API and Anthropic's Messages API, built from the SDKs' own types.

Each object is constructed through `sdk_model`, which refuses a field name the
SDK's model does not declare, then dumped to JSON as the SDK would read it
back: a field the SDK renames or drops breaks the tests instead of passing
unnoticed.  `openai_server` serves these for /v1/responses and /v1/messages.

A `Reply` (openai_server) says what the model answers; its `usage` is a flat
dict in the provider's own field names:

    Responses:  input_tokens, cached_tokens, cache_write_tokens, output_tokens, reasoning_tokens
    Anthropic:  input_tokens (the uncached part, as Anthropic reports it),
                cache_creation_input_tokens, cache_read_input_tokens,
                output_tokens, thinking_tokens

and its `reasoning` list becomes reasoning items (Responses, with encrypted
content) or thinking blocks (Anthropic, with a signature).
"""
from __future__ import annotations

import json
import time
from typing import Any

import anthropic.types as at
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseUsage,
)
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails


def sdk_model(cls, **fields: Any):
    """`cls(**fields)`, refusing any field name `cls` does not declare."""
    unknown = set(fields) - set(cls.model_fields)
    if unknown:
        raise AssertionError(f"{cls.__name__} has no field(s) {sorted(unknown)}: the SDK changed")
    return cls(**fields)


def _arguments(call: dict[str, Any]) -> str:
    arguments = call.get("arguments", {})
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _estimate(raw: bytes, reply) -> tuple[int, int]:
    output = len(reply.content or "") + sum(len(_arguments(c)) for c in reply.tool_calls)
    return len(raw) // 4, output // 4 + 1


def responses_json(number: int, request: dict[str, Any], raw: bytes, reply) -> dict[str, Any]:
    """A `Response` for `reply`, as JSON."""
    output: list[Any] = []
    for i, text in enumerate(reply.reasoning):
        output.append(sdk_model(ResponseReasoningItem, id=f"rs_{number}_{i}", type="reasoning",
                                summary=[sdk_model(Summary, type="summary_text", text=text)],
                                encrypted_content=f"enc:{number}:{i}:{text}", status="completed"))
    if reply.content:
        output.append(sdk_model(
            ResponseOutputMessage, id=f"msg_{number}", type="message", role="assistant", status="completed",
            content=[sdk_model(ResponseOutputText, type="output_text", text=reply.content, annotations=[])]))
    for i, call in enumerate(reply.tool_calls):
        output.append(sdk_model(ResponseFunctionToolCall, type="function_call", id=f"fc_{number}_{i}",
                                call_id=call.get("id", f"call_{number}_{i}"), name=call["name"],
                                arguments=_arguments(call), status="completed"))
    usage = None
    if not reply.omit_usage:
        prompt, completion = _estimate(raw, reply)
        spec = dict(reply.usage or {})
        inp, out = spec.get("input_tokens", prompt), spec.get("output_tokens", completion)
        usage = sdk_model(
            ResponseUsage, input_tokens=inp, output_tokens=out, total_tokens=inp + out,
            input_tokens_details=sdk_model(InputTokensDetails, cached_tokens=spec.get("cached_tokens", 0),
                                           cache_write_tokens=spec.get("cache_write_tokens", 0)),
            output_tokens_details=sdk_model(OutputTokensDetails, reasoning_tokens=spec.get("reasoning_tokens", 0)))
    response = sdk_model(
        Response, id=f"resp_{number}", object="response", created_at=float(int(time.time())),
        model=request.get("model", "m"), output=output, parallel_tool_calls=True,
        tool_choice=request.get("tool_choice", "auto"), tools=[], status="completed", usage=usage)
    return response.model_dump(mode="json", exclude_none=True)


def anthropic_json(number: int, request: dict[str, Any], raw: bytes, reply) -> dict[str, Any]:
    """A `Message` for `reply`, as JSON."""
    content: list[Any] = []
    for i, text in enumerate(reply.reasoning):
        content.append(sdk_model(at.ThinkingBlock, type="thinking", thinking=text, signature=f"sig:{number}:{i}"))
    if reply.content:
        content.append(sdk_model(at.TextBlock, type="text", text=reply.content))
    for i, call in enumerate(reply.tool_calls):
        content.append(sdk_model(at.ToolUseBlock, type="tool_use", id=call.get("id", f"toolu_{number}_{i}"),
                                 name=call["name"], input=json.loads(_arguments(call))))
    prompt, completion = _estimate(raw, reply)
    spec = dict(reply.usage or {})
    details = None
    if "thinking_tokens" in spec:
        details = sdk_model(at.OutputTokensDetails, thinking_tokens=spec["thinking_tokens"])
    usage = sdk_model(at.Usage, input_tokens=spec.get("input_tokens", prompt),
                      output_tokens=spec.get("output_tokens", completion),
                      cache_creation_input_tokens=spec.get("cache_creation_input_tokens", 0),
                      cache_read_input_tokens=spec.get("cache_read_input_tokens", 0),
                      output_tokens_details=details)
    message = sdk_model(at.Message, id=f"msg_{number}", type="message", role="assistant",
                        model=request.get("model", "m"), content=content,
                        stop_reason="tool_use" if reply.tool_calls else "end_turn", usage=usage)
    return message.model_dump(mode="json", exclude_none=True)
