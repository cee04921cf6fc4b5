"""The `openai-responses` planner: OpenAI's Responses API, reasoning carried from turn to turn.

The episode keeps its conversation as chat-completions messages (agents.planners.base);
this planner translates it into Responses input items on every call:

    system message                  → `instructions`
    user text / image_url parts     → `input_text` / `input_image` parts
    assistant text                  → an assistant message
    assistant tool_calls            → `function_call` items (call_id, name, arguments)
    tool message                    → a `function_call_output` item

Reasoning items the model returned with a reply are put back in front of that
reply's items on later calls (as the API asks when the client manages the
context).  With `store: false` (the default: nothing is kept server-side) they
go back whole, with the `encrypted_content` the request `include`s whenever
reasoning is on (as OpenAI's stateless examples pass `response.output` back).

`reasoning_effort` becomes `reasoning.effort`; temperature / top_p are left out
when it is set (sampling_for_reasoning).  Usage:

    input_tokens                                   → input_tokens (whole prompt)
    input_tokens_details.cached_tokens             → cached_input_tokens
    output_tokens                                  → output_tokens
    output_tokens_details.reasoning_tokens         → reasoning_tokens

Retries, error classification and the usage estimate for a server that
reports none are OpenAIPlanner's own (same SDK, same errors).
"""
from __future__ import annotations

from typing import Any

from agents.planners.base import PlannerReply, ToolCall
from agents.planners.openai_planner import CONFIG_KEYS, OpenAIPlanner, _MalformedResponse
from agents.planners.translate import Carried, not_json, plain_text, provider_reply
from agents.records import Usage

#: `planner:` keys of this backend: the chat planner's, less the chat-only token field and the text
#: tool-call modes (Responses models call functions natively), plus `store`.
RESPONSES_CONFIG_KEYS = (CONFIG_KEYS - {"max_tokens_param", "tool_calls", "constrain_calls"}) | {"store"}


class OpenAIResponsesPlanner(OpenAIPlanner):
    """Planner over `client.responses.create` (see the module docstring)."""

    name = "openai-responses"
    config_keys = RESPONSES_CONFIG_KEYS

    def __init__(self, model: str, *, store: bool = False, **options: Any):
        super().__init__(model, **options)
        self.store = store
        self._carried = Carried()  # reasoning items of each earlier reply

    @property
    def reasoning_on(self) -> bool:
        return self.reasoning_effort not in (None, "none")

    def request_params(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The keyword arguments of `responses.create` for this call."""
        instructions, items = self.input_items(messages)
        params: dict[str, Any] = {"model": self.model, "input": items, "store": self.store}
        if instructions:
            params["instructions"] = instructions
        if tools:
            params["tools"] = [_function_tool(t) for t in tools]
            if self.tool_choice is not None:
                params["tool_choice"] = _tool_choice(self.tool_choice)
            if self.parallel_tool_calls is not None:
                params["parallel_tool_calls"] = self.parallel_tool_calls
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.top_p is not None:
            params["top_p"] = self.top_p
        if self.max_output_tokens is not None:
            params["max_output_tokens"] = self.max_output_tokens
        if self.reasoning_effort is not None:
            params["reasoning"] = {"effort": self.reasoning_effort}
        if self.reasoning_on and not self.store:
            params["include"] = ["reasoning.encrypted_content"]
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    def _create(self, params: dict[str, Any]) -> Any:
        return self.client.responses.create(**params)

    # ------------------------------------------------------------------

    def input_items(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        """(instructions, input items) for a chat-completions conversation."""
        instructions: list[str] = []
        items: list[dict[str, Any]] = []
        for m in messages:
            role, content = m["role"], m.get("content")
            if role in ("system", "developer"):
                if not items:
                    instructions.append(plain_text(content))
                else:
                    items.append({"role": "developer", "content": plain_text(content)})
            elif role == "user":
                items.append({"role": "user", "content": _input_parts(content)})
            elif role == "assistant":
                calls = m.get("tool_calls") or []
                items += self._carried.for_message(m)
                if content:
                    items.append({"role": "assistant", "content": plain_text(content)})
                for c in calls:
                    items.append({"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                                  "arguments": c["function"]["arguments"] or ""})
            elif role == "tool":
                items.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                              "output": plain_text(content)})
            else:
                raise ValueError(f"unknown message role {role!r}")
        return "\n\n".join(instructions), items

    def _reply(self, response: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
        not_json(response)
        output = getattr(response, "output", None)
        if output is None:
            raise _MalformedResponse("response has no output")
        text_parts: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[dict[str, Any]] = []
        try:
            for item in output:
                kind = getattr(item, "type", None)
                if kind == "reasoning":
                    reasoning.append(self._carry(item))
                elif kind == "function_call":
                    calls.append(ToolCall(id=item.call_id, name=item.name, arguments=item.arguments or ""))
                elif kind == "message":
                    text_parts += [p.text for p in item.content if getattr(p, "type", None) == "output_text"]
        except AttributeError as exc:
            raise _MalformedResponse(f"malformed output item: {exc}") from exc
        text = "".join(text_parts)
        self._carried.keep(calls, text, reasoning)
        reply = provider_reply(self, response, text, calls, usage_from_responses, messages, tools)
        details = getattr(response, "incomplete_details", None)
        reply.truncated = getattr(details, "reason", None) == "max_output_tokens"
        return reply

    @staticmethod
    def _carry(item: Any) -> dict[str, Any]:
        """A reasoning output item as an input item for the next calls (id, summary, encrypted content)."""
        return item.model_dump(exclude_none=True, exclude={"status"})


def usage_from_responses(raw: dict[str, Any]) -> Usage:
    """`Usage` from a Responses usage object (as a dict); missing fields count 0."""
    inp = raw.get("input_tokens_details") or {}
    out = raw.get("output_tokens_details") or {}
    return Usage(
        input_tokens=raw.get("input_tokens") or 0,
        cached_input_tokens=inp.get("cached_tokens") or 0,
        cache_write_tokens=inp.get("cache_write_tokens") or 0,
        output_tokens=raw.get("output_tokens") or 0,
        reasoning_tokens=out.get("reasoning_tokens") or 0,
    )


def _input_parts(content: Any) -> list[dict[str, Any]] | str:
    if not isinstance(content, list):
        return content or ""
    parts = []
    for p in content:
        if p.get("type") == "text":
            parts.append({"type": "input_text", "text": p["text"]})
        elif p.get("type") == "image_url":
            image = p["image_url"]
            parts.append({"type": "input_image", "image_url": image["url"], "detail": image.get("detail", "auto")})
        else:
            raise ValueError(f"unknown content part type {p.get('type')!r}")
    return parts


def _function_tool(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool["function"]
    # strict false: our schemas have optional arguments, which strict mode forbids.
    return {"type": "function", "name": fn["name"], "description": fn.get("description", ""),
            "parameters": fn.get("parameters", {"type": "object", "properties": {}}), "strict": False}


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, dict) and "function" in choice:  # chat form {"type": "function", "function": {"name"}}
        return {"type": "function", "name": choice["function"]["name"]}
    return choice


__all__ = ["OpenAIResponsesPlanner", "usage_from_responses", "RESPONSES_CONFIG_KEYS"]
