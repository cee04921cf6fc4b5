"""The `openai` planner: one chat-completions call per step to any OpenAI-compatible endpoint, with our own retries.

Works with OpenAI itself and with servers that speak its API (vLLM, SGLang,
gateways).  The endpoint comes from `base_url` or `OPENAI_BASE_URL`, the key
from `api_key` or `OPENAI_API_KEY` (any non-empty string for servers without
auth).  The conversation already carries images as data-URL parts; it is sent
unchanged.

Usage is the provider's, mapped onto `Usage` (OpenAI's convention: cached and
cache-write tokens are part of `prompt_tokens`):

    prompt_tokens                                   → input_tokens
    prompt_tokens_details.cached_tokens             → cached_input_tokens
    prompt_tokens_details.cache_write_tokens        → cache_write_tokens  (OpenAI SDK name)
      or prompt_tokens_details.cache_creation_tokens,
      or cache_creation_input_tokens (top level; Anthropic-style gateways)
    completion_tokens                               → output_tokens
    completion_tokens_details.reasoning_tokens      → reasoning_tokens

and the usage object is kept as received (`raw_usage`).  A server that
reports no usage at all gets an estimate from `agents.usage`, marked
`usage_source='estimated'`.

Retries are ours, not the SDK's (it is built with `max_retries=0`), so each
one is counted in the reply: 408/409/429/5xx, timeouts, dropped connections,
bodies that are not JSON and responses without a usable choice are retried
with exponential backoff and jitter (a Retry-After header is honoured up to
`backoff_max_s`).  Other 4xx are not retried: a context-length 400 raises
`ContextOverflow`; a 400/413/415/422 that the conversation causes (a bad
request: rerunning would send it again) raises `RequestRejected` with the
provider's message, and the episode ends as `error`; the rest (401/403 keys,
404 a model name, ...) raise `PlannerError`: fix the setting, rerun.
"""
from __future__ import annotations

import os
import random
import re
import time
import warnings
from typing import Any, Callable

import openai

from agents.errors import CellbenchError
from agents import textcalls
from agents.planners.base import (ContextOverflow, PlannerConfigError, PlannerError, PlannerReply,
                                  RequestRejected, ToolCall)
from agents.records import Usage

#: HTTP statuses worth another try: timeouts, lock conflicts, rate limits, server faults.
RETRY_STATUSES = frozenset({408, 409, 429})
#: HTTP statuses the request's content causes (bad request, too large, unsupported media, unprocessable).
CONVERSATION_STATUSES = frozenset({400, 413, 415, 422})

#: Provider wordings of "the prompt does not fit" (OpenAI, vLLM, SGLang, Anthropic-style gateways).
_CONTEXT_LENGTH = re.compile(
    r"context[_ ]length|maximum context|context window|prompt is too long|too many (input )?tokens"
    r"|input is too long|exceeds the (model's )?(maximum|max)",
    re.IGNORECASE,
)

#: The keys of a `planner:` config block this planner understands.
CONFIG_KEYS = frozenset({
    "name", "model", "base_url", "api_key_env", "temperature", "top_p", "max_output_tokens",
    "max_tokens_param", "tool_choice", "parallel_tool_calls", "extra_body", "max_retries",
    "timeout_s", "backoff_base_s", "backoff_max_s", "reasoning_effort", "vision", "tool_calls",
    "constrain_calls",
})

#: Server wordings of "this model reads no images" (llama.cpp, vLLM, gateways).
_NO_VISION = re.compile(
    r"image input is not supported|does not support (image|vision|multimodal)|images? (are|is) not supported"
    r"|not a multimodal model|vision is not (supported|enabled)|multimodal is not supported",
    re.IGNORECASE,
)

#: `planner.reasoning_effort` values (OpenAI's scale; each backend maps them to its own field).
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def sampling_for_reasoning(planner: str, effort: str | None, **sampling: Any) -> dict[str, Any]:
    """The sampling options to send: all of them, or, when reasoning is on, none (with a warning).

    Reasoning models reject temperature / top_p, so they are left out rather
    than sent and refused on every call.
    """
    if effort is not None and effort not in REASONING_EFFORTS:
        raise CellbenchError(f"planner.reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, "
                             f"not {effort!r}")
    given = {k: v for k, v in sampling.items() if v is not None}
    if effort in (None, "none") or not given:
        return sampling
    warnings.warn(f"{planner} planner: reasoning_effort={effort} is set, so {', '.join(sorted(given))} "
                  f"(which reasoning models reject) will not be sent", stacklevel=3)
    return {k: None for k in sampling}


class _MalformedResponse(Exception):
    """A 200 response we cannot use (not JSON, no choices): transient, like a 5xx."""


class OpenAIPlanner:
    """Planner over the `openai` SDK's chat completions (see the module docstring)."""

    name = "openai"
    config_keys = CONFIG_KEYS
    #: Where errors say the calls went when no base_url is set.
    default_endpoint = "the OpenAI API"
    #: The SDK's HTTP-status error, and its other errors worth a retry (no connection, timeout, bad body).
    status_error: type[Exception] = openai.APIStatusError
    transient_errors: tuple[type[Exception], ...] = (openai.APIConnectionError, openai.APIResponseValidationError)

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        max_tokens_param: str = "max_completion_tokens",
        tool_choice: str | dict[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        extra_body: dict[str, Any] | None = None,
        max_retries: int = 6,
        timeout_s: float = 600.0,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        reasoning_effort: str | None = None,
        vision: bool = True,
        tool_calls: str = "native",
        constrain_calls: bool = False,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ):
        """`None` leaves a sampling option out of the request (the server's default).

        `max_tokens_param`: the request field for `max_output_tokens`;
        OpenAI wants `max_completion_tokens`, some servers only `max_tokens`.
        `reasoning_effort` is sent as the request's `reasoning_effort`
        (temperature and top_p are then left out).
        `vision: False`: the model reads no images (the episode sends a
        text note in place of each one).  `tool_calls: text`: no `tools`
        field; calls are written and read as text (`agents.textcalls`);
        `constrain_calls` then sends the calls' JSON schema as
        `response_format`, so a server with grammar-constrained decoding
        (llama.cpp, vLLM) cannot leave the format.
        """
        if tool_calls not in textcalls.MODES:
            raise CellbenchError(f"planner.tool_calls must be one of {', '.join(textcalls.MODES)}, "
                                 f"not {tool_calls!r}")
        if constrain_calls and tool_calls != "text":
            raise CellbenchError("planner.constrain_calls needs planner.tool_calls: text "
                                 "(native calls are constrained by the server's tool_choice)")
        self.vision = bool(vision)
        self.tool_calls = tool_calls
        self.constrain_calls = bool(constrain_calls)
        self._text_calls = 0
        if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
            raise CellbenchError(f"planner.max_tokens_param must be max_completion_tokens or max_tokens, "
                                 f"not {max_tokens_param!r}")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            raise CellbenchError(
                "the openai planner needs an API key: set OPENAI_API_KEY (any non-empty string "
                "for a local server without auth)"
            )
        self.model = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        sampling = sampling_for_reasoning(self.name, reasoning_effort, temperature=temperature, top_p=top_p)
        self.temperature = sampling["temperature"]
        self.top_p = sampling["top_p"]
        self.reasoning_effort = reasoning_effort
        self.max_output_tokens = max_output_tokens
        self.max_tokens_param = max_tokens_param
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self.extra_body = dict(extra_body or {})
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._estimator = None  # built only if a server reports no usage
        self.client = openai.OpenAI(api_key=api_key, base_url=self.base_url, timeout=timeout_s, max_retries=0)

    @classmethod
    def from_config(cls, cfg: dict[str, Any], *, api_key: str | None = None, **overrides: Any) -> "OpenAIPlanner":
        """Build from a `planner:` config block, e.g.

            planner: {name: openai, model: gpt-4o, base_url: null, temperature: 0.0,
                      top_p: null, max_output_tokens: 4096, tool_choice: auto,
                      extra_body: {}, max_retries: 6, timeout_s: 600}

        Optional too: api_key_env (the variable holding the key, default
        OPENAI_API_KEY), max_tokens_param, parallel_tool_calls,
        backoff_base_s, backoff_max_s.  Unknown keys are an error.
        """
        unknown = sorted(set(cfg) - cls.config_keys)
        if unknown:
            raise CellbenchError(f"planner: unknown key(s) {', '.join(unknown)} for the {cls.name} planner; "
                                 f"known: {', '.join(sorted(cls.config_keys))}")
        if cfg.get("name", cls.name) != cls.name:
            raise CellbenchError(f"planner.name is {cfg['name']!r}, not {cls.name!r}")
        if not cfg.get("model"):
            raise CellbenchError(f"planner.model is required for the {cls.name} planner")
        options = {k: v for k, v in cfg.items() if k not in ("name", "api_key_env") and v is not None}
        if api_key is None and cfg.get("api_key_env"):
            api_key = os.environ.get(cfg["api_key_env"])
            if not api_key:
                raise CellbenchError(f"planner.api_key_env names {cfg['api_key_env']}, which is not set")
        options.update(overrides)
        return cls(api_key=api_key, **options)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self.client.close()

    # ------------------------------------------------------------------

    def request_params(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create` for this call."""
        params: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.tool_calls == "text":
            params["messages"] = textcalls.to_text_conversation(messages, tools)
            if self.constrain_calls and tools:
                params["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "tool_call", "strict": True, "schema": textcalls.call_schema(tools)}}
        elif tools:
            params["tools"] = tools
            if self.tool_choice is not None:
                params["tool_choice"] = self.tool_choice
            if self.parallel_tool_calls is not None:
                params["parallel_tool_calls"] = self.parallel_tool_calls
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.top_p is not None:
            params["top_p"] = self.top_p
        if self.max_output_tokens is not None:
            params[self.max_tokens_param] = self.max_output_tokens
        if self.reasoning_effort is not None:
            params["reasoning_effort"] = self.reasoning_effort
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    def _create(self, params: dict[str, Any]) -> Any:
        """Send one request (a subclass speaks another API through the same retries)."""
        return self.client.chat.completions.create(**params)

    def next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
        """One LLM call, retried on transient errors.

        `latency_s` is the wall time of the whole call, retries and backoff
        included; `retries` counts the failed attempts before the reply.
        Raises ContextOverflow, RequestRejected for a request the provider
        refuses for its content, or PlannerError once `max_retries` retries
        have failed (its `retries` = retries made, `errors` = every failure).
        """
        params = self.request_params(messages, tools)
        errors: list[str] = []
        started = time.monotonic()
        for attempt in range(self.max_retries + 1):
            try:
                completion = self._create(params)
                reply = self._reply(completion, messages, tools)
            # ValueError: a body labelled JSON that does not parse (json.JSONDecodeError).
            except (self.status_error, *self.transient_errors, _MalformedResponse, ValueError) as exc:
                errors.append(_describe(exc))
                retry_after = self._classify(exc, errors)
            else:
                reply.latency_s = time.monotonic() - started
                reply.retries = attempt
                reply.retry_errors = errors
                return reply
            if attempt < self.max_retries:
                self._sleep(self._backoff(attempt, retry_after))
        raise PlannerError(
            f"{self.model} at {self.base_url or self.default_endpoint} failed {len(errors)} times; last: {errors[-1]}",
            retries=self.max_retries,
            errors=errors,
        )

    def _classify(self, exc: Exception, errors: list[str]) -> float | None:
        """Return the server's Retry-After (or None) for a transient error; raise for the others."""
        if not isinstance(exc, self.status_error):
            return None  # connection, timeout, unparseable body, no choices: transient
        status = exc.status_code
        if _NO_VISION.search(_error_message(exc)):
            raise PlannerConfigError(
                f"{self.model} at {self.base_url or self.default_endpoint} reads no images "
                f"({errors[-1]}): set planner.vision: false to send a text note in place of each image"
            ) from exc
        if status in RETRY_STATUSES or status >= 500:
            return _retry_after(exc.response.headers)
        if _is_context_length(exc):
            raise ContextOverflow(errors[-1]) from exc
        if status in CONVERSATION_STATUSES:
            raise RequestRejected(f"{self.model} rejected the request: {errors[-1]}", retries=len(errors) - 1,
                                  errors=errors) from exc
        raise PlannerError(f"{self.model}: {errors[-1]}", retries=len(errors) - 1, errors=errors) from exc

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.backoff_max_s)
        # Exponential, with jitter in [50%, 100%] so parallel episodes do not retry in lockstep.
        delay = min(self.backoff_base_s * 2**attempt, self.backoff_max_s)
        return delay * (0.5 + 0.5 * self._rng.random())

    def _reply(self, completion: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
        if isinstance(completion, str):  # the SDK hands back non-JSON bodies as text
            raise _MalformedResponse(f"response is not JSON: {completion[:120]!r}")
        choices = getattr(completion, "choices", None)
        if not choices:
            raise _MalformedResponse("response has no choices")
        message = getattr(choices[0], "message", None)
        if message is None:
            raise _MalformedResponse("response choice has no message")
        try:
            calls = [
                ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "")
                for call in (message.tool_calls or [])
            ]
        except AttributeError as exc:
            raise _MalformedResponse(f"malformed tool call: {exc}") from exc
        text = message.content or ""
        if self.tool_calls == "text" and not calls:
            calls = [self._text_call(c) for c in textcalls.parse_calls(text, textcalls.tool_names(tools))]
        if completion.usage is None:
            usage, raw = self._estimate(messages, tools, [text, *calls])
            return PlannerReply(text=text, tool_calls=calls, usage=usage, usage_source="estimated", raw_usage=raw)
        # exclude_unset: the fields the server sent (extra ones included), not the SDK's defaults.
        raw = completion.usage.model_dump(exclude_unset=True)
        # A rehearsal endpoint (`cellbench serve`) sends the estimator's numbers marked "estimated".
        source = "estimated" if raw.get("estimated") is True else "provider"
        return PlannerReply(text=text, tool_calls=calls, usage=usage_from_openai(raw),
                            usage_source=source, raw_usage=raw,
                            truncated=getattr(choices[0], "finish_reason", None) == "length")

    def _text_call(self, call: textcalls.TextCall) -> ToolCall:
        self._text_calls += 1
        return ToolCall(id=f"text_call_{self._text_calls}", name=call.name, arguments=call.arguments, source="text")

    def _estimate(self, messages, tools, output) -> tuple[Usage, dict[str, Any]]:
        from agents.usage import UsageEstimator

        if self._estimator is None:
            self._estimator = UsageEstimator()
        return self._estimator.estimate(messages, tools, output)


def usage_from_openai(raw: dict[str, Any]) -> Usage:
    """`Usage` from a chat-completions usage object (as a dict); missing fields count 0."""
    prompt = raw.get("prompt_tokens_details") or {}
    completion = raw.get("completion_tokens_details") or {}
    write = (prompt.get("cache_write_tokens") or prompt.get("cache_creation_tokens")
             or raw.get("cache_creation_input_tokens") or 0)
    return Usage(
        input_tokens=raw.get("prompt_tokens") or 0,
        cached_input_tokens=prompt.get("cached_tokens") or 0,
        cache_write_tokens=write,
        output_tokens=raw.get("completion_tokens") or 0,
        reasoning_tokens=completion.get("reasoning_tokens") or 0,
    )


def _describe(exc: Exception) -> str:
    if getattr(exc, "status_code", None) is not None:  # openai's or anthropic's APIStatusError
        return f"{type(exc).__name__} {exc.status_code}: {_error_message(exc)}"
    return f"{type(exc).__name__}: {exc}"


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc.message)


def _is_context_length(exc: openai.APIStatusError) -> bool:
    if exc.status_code not in (400, 413, 422):
        return False
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body) if isinstance(body, dict) else {}
    code = error.get("code") if isinstance(error, dict) else None
    return code == "context_length_exceeded" or bool(_CONTEXT_LENGTH.search(_error_message(exc)))


def _retry_after(headers: Any) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (number form); None if absent or a date."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return float(value) * scale
            except ValueError:
                return None
    return None


__all__ = ["OpenAIPlanner", "usage_from_openai", "CONFIG_KEYS", "REASONING_EFFORTS", "sampling_for_reasoning"]
