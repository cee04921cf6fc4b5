"""The planner seam: one LLM call in, one reply (text + tool calls + usage) out.

Conversations are OpenAI chat-completions messages (list of dicts).  Images in
user/tool content are `{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`
parts.  Both agents talk to planners through tools: the tool agent gets one
schema per primitive plus `finish`, the code agent gets `python(code)` plus
`finish`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agents.errors import CellbenchError
from agents.records import Usage


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str
    """Raw JSON text as the model wrote it (may be malformed)."""
    source: str = "native"
    """'native' (the API's tool_calls field) or 'text' (read from the reply's text, `agents.textcalls`)."""


@dataclass
class PlannerReply:
    text: str
    tool_calls: list[ToolCall]
    usage: Usage
    usage_source: str
    """'provider' (from the response) or 'estimated' (scripted planner)."""
    raw_usage: dict[str, Any] = field(default_factory=dict)
    latency_s: float = 0.0
    retries: int = 0
    """Transient endpoint errors retried before this reply."""
    retry_errors: list[str] = field(default_factory=list)
    truncated: bool = False
    """The provider cut the reply at the output token limit (finish_reason 'length', status incomplete,
    stop_reason 'max_tokens'): its tool call may be incomplete. Both agents are told so in one wording."""


class PlannerError(RuntimeError):
    """The endpoint kept failing: the episode ends as `planner_error`."""

    def __init__(self, message: str, retries: int = 0, errors: list[str] | None = None):
        super().__init__(message)
        self.retries = retries
        self.errors = errors or []


class RequestRejected(PlannerError):
    """The provider refused the request for what the conversation holds (a 4xx other than auth,
    rate limit or a missing model): the episode ends as `error` with the provider's message, not
    as `planner_error` - rerunning would send the same conversation and meet the same refusal.
    (A subclass so that code catching PlannerError still sees every endpoint failure; the episode
    loop catches this one first.)"""


class PlannerConfigError(CellbenchError):
    """The endpoint cannot serve this planner setting (e.g. images to a text-only model): a
    configuration error naming the key to change, never retried and never an episode."""


class ContextOverflow(RuntimeError):
    """The prompt no longer fits the model's context window."""


class Planner(Protocol):
    name: str
    model: str

    def next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
        """Make one LLM call and return its reply."""
        ...
