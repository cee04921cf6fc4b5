"""The `anthropic` planner: Claude through the `anthropic` SDK's Messages API, with prompt caching.

The episode's chat-completions conversation is translated on every call:

    system message          → `system` (one text block)
    user text / image_url   → text blocks / base64 image blocks
    assistant message       → the reply's thinking blocks (kept as received, signature included),
                              its text, and one `tool_use` block per tool call
    tool message            → a `tool_result` block in the next user turn
                              (consecutive user-side messages become one turn, as the API requires)

Caching as Claude Code does it: `cache_control` breakpoints on the system
prompt, on the last tool (so system + tools are one cached prefix) and on the
last block of the newest turn, so each call reads the whole earlier history
from the cache and writes only what the last turn added.  Anthropic bills
those writes (1.25x input for the 5-minute cache), so they are kept apart:

    input_tokens + cache_creation_input_tokens + cache_read_input_tokens → input_tokens
                                                   (cellbench's whole-prompt convention)
    cache_read_input_tokens                        → cached_input_tokens
    cache_creation_input_tokens                    → cache_write_tokens
    output_tokens                                  → output_tokens (thinking included)
    output_tokens_details.thinking_tokens          → reasoning_tokens

`reasoning_effort` turns on adaptive thinking with `output_config.effort`
(minimal counts as low; none disables thinking); `thinking_budget_tokens`
asks for extended thinking with a fixed budget instead (models without
adaptive thinking).  Temperature / top_p are
not parameters of SDK 2.x's `messages.create`: without thinking they go in
the request body, with thinking they are left out (sampling_for_reasoning).

The key comes from `ANTHROPIC_API_KEY` (or `planner.api_key_env`), the
endpoint from `base_url` or `ANTHROPIC_BASE_URL`.  Retries are
OpenAIPlanner's loop over anthropic's errors: 408/409/429 (Retry-After
honoured), 5xx and 529 overloaded, timeouts and dropped connections; a
"prompt is too long" 400 raises ContextOverflow.
"""
from __future__ import annotations

import json
import os
import random
import time
from typing import Any, Callable

import anthropic

from agents.errors import CellbenchError
from agents.planners.base import PlannerReply, ToolCall
from agents.planners.openai_planner import OpenAIPlanner, _MalformedResponse, sampling_for_reasoning
from agents.planners.translate import Carried, not_json, plain_text, provider_reply
from agents.records import Usage

#: `planner:` keys of this backend.
ANTHROPIC_CONFIG_KEYS = frozenset({
    "name", "model", "base_url", "api_key_env", "temperature", "top_p", "max_output_tokens", "tool_choice",
    "parallel_tool_calls", "extra_body", "max_retries", "timeout_s", "backoff_base_s", "backoff_max_s",
    "reasoning_effort", "cache", "thinking_budget_tokens",
})

#: cellbench's reasoning_effort → the API's `output_config.effort`.
EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "max"}

#: The Messages API needs max_tokens; this when the config sets none.
DEFAULT_MAX_TOKENS = 8192

#: A cache breakpoint (5-minute cache).
_BREAKPOINT = {"cache_control": {"type": "ephemeral"}}


class AnthropicPlanner(OpenAIPlanner):
    """Planner over `anthropic.Anthropic().messages.create` (see the module docstring)."""

    name = "anthropic"
    config_keys = ANTHROPIC_CONFIG_KEYS
    default_endpoint = "the Anthropic API"
    status_error = anthropic.APIStatusError
    transient_errors = (anthropic.APIConnectionError, anthropic.APIResponseValidationError)

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        extra_body: dict[str, Any] | None = None,
        reasoning_effort: str | None = None,
        thinking_budget_tokens: int | None = None,
        cache: bool = True,
        max_retries: int = 6,
        timeout_s: float = 600.0,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ):
        api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not api_key:
            raise CellbenchError("the anthropic planner needs an API key: set ANTHROPIC_API_KEY "
                                 "(or name another variable in planner.api_key_env)")
        effort = reasoning_effort
        if thinking_budget_tokens is not None:
            if not 1024 <= thinking_budget_tokens < (max_output_tokens or DEFAULT_MAX_TOKENS):
                raise CellbenchError(f"planner.thinking_budget_tokens must be at least 1024 and below "
                                     f"max_output_tokens ({max_output_tokens or DEFAULT_MAX_TOKENS}), "
                                     f"not {thinking_budget_tokens}")
            if effort in (None, "none"):
                effort = "high"  # a thinking budget is reasoning too: the sampling options go
        sampling = sampling_for_reasoning(self.name, effort, temperature=temperature, top_p=top_p)
        self.model = model
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        self.temperature, self.top_p = sampling["temperature"], sampling["top_p"]
        self.reasoning_effort = reasoning_effort
        self.thinking_budget_tokens = thinking_budget_tokens
        self.max_output_tokens = max_output_tokens or DEFAULT_MAX_TOKENS
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self.extra_body = dict(extra_body or {})
        self.cache = cache
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._estimator = None
        self._carried = Carried()  # thinking blocks of each earlier reply
        self.client = anthropic.Anthropic(api_key=api_key, base_url=self.base_url, timeout=timeout_s, max_retries=0)

    def request_params(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The keyword arguments of `messages.create` for this call."""
        system, turns = self.turns(messages)
        params: dict[str, Any] = {"model": self.model, "max_tokens": self.max_output_tokens, "messages": turns}
        if system:
            params["system"] = [{"type": "text", "text": system, **self._breakpoint()}]
        if tools:
            params["tools"] = [_tool(t) for t in tools]
            params["tools"][-1].update(self._breakpoint())
            choice = _tool_choice(self.tool_choice, self.parallel_tool_calls)
            if choice is not None:
                params["tool_choice"] = choice
        if self.cache and turns:
            turns[-1]["content"][-1].update(self._breakpoint())
        if self.thinking_budget_tokens is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget_tokens}
        elif self.reasoning_effort == "none":
            params["thinking"] = {"type": "disabled"}
        elif self.reasoning_effort is not None:
            params["thinking"] = {"type": "adaptive"}
        if self.reasoning_effort not in (None, "none"):
            params["output_config"] = {"effort": EFFORTS[self.reasoning_effort]}
        body = dict(self.extra_body)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if body:
            params["extra_body"] = body
        return params

    def _breakpoint(self) -> dict[str, Any]:
        return {"cache_control": dict(_BREAKPOINT["cache_control"])} if self.cache else {}

    def _create(self, params: dict[str, Any]) -> Any:
        return self.client.messages.create(**params)

    # ------------------------------------------------------------------

    def turns(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        """(system text, alternating user/assistant turns) for a chat-completions conversation."""
        system: list[str] = []
        turns: list[dict[str, Any]] = []

        def add(role: str, blocks: list[dict[str, Any]]) -> None:
            if not blocks:
                return
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"] += blocks
            else:
                turns.append({"role": role, "content": blocks})

        for m in messages:
            role, content = m["role"], m.get("content")
            if role in ("system", "developer"):
                system.append(plain_text(content))
            elif role == "user":
                add("user", _user_blocks(content))
            elif role == "assistant":
                calls = m.get("tool_calls") or []
                blocks = self._carried.for_message(m)
                if content:
                    blocks.append({"type": "text", "text": plain_text(content)})
                for c in calls:
                    blocks.append({"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                                   "input": _arguments(c["function"]["arguments"])})
                if calls or content:  # an empty reply is left out: the API refuses empty turns
                    add("assistant", blocks)
            elif role == "tool":
                add("user", [{"type": "tool_result", "tool_use_id": m["tool_call_id"],
                              "content": plain_text(content) or "(no output)"}])
            else:
                raise ValueError(f"unknown message role {role!r}")
        return "\n\n".join(system), turns

    def _reply(self, message: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
        not_json(message)
        content = getattr(message, "content", None)
        if content is None:
            raise _MalformedResponse("response has no content")
        text_parts: list[str] = []
        calls: list[ToolCall] = []
        thinking: list[dict[str, Any]] = []
        try:
            for block in content:
                kind = getattr(block, "type", None)
                if kind in ("thinking", "redacted_thinking"):
                    thinking.append(block.model_dump(exclude_none=True))
                elif kind == "text":
                    text_parts.append(block.text)
                elif kind == "tool_use":
                    calls.append(ToolCall(id=block.id, name=block.name, arguments=json.dumps(block.input)))
        except AttributeError as exc:
            raise _MalformedResponse(f"malformed content block: {exc}") from exc
        text = "".join(text_parts)
        self._carried.keep(calls, text, thinking)
        reply = provider_reply(self, message, text, calls, usage_from_anthropic, messages, tools)
        reply.truncated = getattr(message, "stop_reason", None) == "max_tokens"
        return reply


def usage_from_anthropic(raw: dict[str, Any]) -> Usage:
    """`Usage` from a Messages usage object (as a dict), input normalised to the whole prompt."""
    read = raw.get("cache_read_input_tokens") or 0
    write = raw.get("cache_creation_input_tokens") or 0
    details = raw.get("output_tokens_details") or {}
    return Usage(
        input_tokens=(raw.get("input_tokens") or 0) + read + write,
        cached_input_tokens=read,
        cache_write_tokens=write,
        output_tokens=raw.get("output_tokens") or 0,
        reasoning_tokens=details.get("thinking_tokens") or 0,
    )


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for p in content:
        if p.get("type") == "text":
            if p["text"]:
                blocks.append({"type": "text", "text": p["text"]})
        elif p.get("type") == "image_url":
            url = p["image_url"]["url"]
            if url.startswith("data:"):
                header, _, data = url.partition(",")
                media_type = header[len("data:"):].split(";")[0]
                blocks.append({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
            else:
                blocks.append({"type": "image", "source": {"type": "url", "url": url}})
        else:
            raise ValueError(f"unknown content part type {p.get('type')!r}")
    return blocks


def _arguments(text: str) -> dict[str, Any]:
    """A tool call's arguments as the object tool_use needs (Claude's own are always JSON objects)."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool["function"]
    return {"name": fn["name"], "description": fn.get("description", ""),
            "input_schema": fn.get("parameters", {"type": "object", "properties": {}})}


def _tool_choice(choice: str | dict[str, Any] | None, parallel: bool | None) -> dict[str, Any] | None:
    """An OpenAI-style tool_choice (auto / required / none / a named function) in Anthropic's form."""
    if choice is None and parallel is None:
        return None
    if isinstance(choice, dict):
        name = choice.get("function", {}).get("name") or choice.get("name")
        out: dict[str, Any] = {"type": "tool", "name": name}
    else:
        out = {"type": {"required": "any", None: "auto"}.get(choice, choice)}
    if parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


__all__ = ["AnthropicPlanner", "usage_from_anthropic", "ANTHROPIC_CONFIG_KEYS"]
