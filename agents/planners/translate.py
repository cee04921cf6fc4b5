"""What the Responses and Anthropic backends share when they translate the episode's chat conversation.

The episode keeps chat-completions messages (agents.planners.base); a backend
with another wire format rebuilds its request from them on every call and
must put back, in front of each earlier reply, what the provider asked it to
carry (Responses reasoning items, Anthropic thinking blocks).  `Carried`
keeps those by reply, found again from the assistant message the episode
appended for it.
"""
from __future__ import annotations

from typing import Any

from agents.planners.base import PlannerReply, ToolCall
from agents.planners.openai_planner import _MalformedResponse


def plain_text(content: Any) -> str:
    """The text of a message's content (a string, or the text parts of a list)."""
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content or ""


class Carried:
    """Provider items to send back with each earlier reply, by reply."""

    def __init__(self) -> None:
        self._items: dict[str, list[dict[str, Any]]] = {}

    @staticmethod
    def _key(first_call_id: str | None, text: str) -> str:
        return f"call:{first_call_id}" if first_call_id else f"text:{text}"

    def keep(self, calls: list[ToolCall], text: str, items: list[dict[str, Any]]) -> None:
        if items:
            self._items[self._key(calls[0].id if calls else None, text)] = items

    def for_message(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """Copies of the items kept for the reply this assistant message records ([] if none)."""
        calls = message.get("tool_calls") or []
        items = self._items.get(self._key(calls[0]["id"] if calls else None, message.get("content") or ""), [])
        return [dict(item) for item in items]


def provider_reply(planner, response: Any, text: str, calls: list[ToolCall], usage_of,
                   messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
    """The reply with the provider's usage (`usage_of` maps its dict to Usage), or an estimate if it sent none."""
    if getattr(response, "usage", None) is None:
        usage, raw = planner._estimate(messages, tools, [text, *calls])
        return PlannerReply(text=text, tool_calls=calls, usage=usage, usage_source="estimated", raw_usage=raw)
    # exclude_unset: the fields the server sent (extra ones included), not the SDK's defaults.
    raw = response.usage.model_dump(exclude_unset=True)
    # A rehearsal endpoint (`cellbench serve`) sends the estimator's numbers marked "estimated".
    source = "estimated" if raw.get("estimated") is True else "provider"
    return PlannerReply(text=text, tool_calls=calls, usage=usage_of(raw), usage_source=source, raw_usage=raw)


def not_json(response: Any) -> None:
    """Raise the retried malformed-response error for a body the SDK handed back as text."""
    if isinstance(response, str):
        raise _MalformedResponse(f"response is not JSON: {response[:120]!r}")
