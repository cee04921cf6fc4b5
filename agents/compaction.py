"""Context compaction, as the paper's agent runtime (Codex) does it near 272k tokens.

When the last call's prompt plus reply reached `episode.compact_at_tokens`
(the next prompt holds all of it and more), the next LLM call of the episode
is a compaction: the planner is sent the conversation plus one request to
summarise it, with the same tools (so a provider's prompt cache still holds
the prefix), and its text reply is the summary.  The call is counted against
the call budget and recorded in calls.jsonl with `action_kind = 'compaction'`.
The episode then continues from

    system prompt, task card (with its opening image), the summary,
    the newest exchange (the last assistant message and what answered it, images included)

so the planner still sees the result it is to act on; the images of the
summarised part are dropped.  The conversation before each compaction is kept
in the trace as transcript_before_compaction_NNN.json (NNN = the compaction's
call index).  `context_window` stays the hard limit.

Both interfaces get the same request and the same cut, from here.  A planner
with a `summarise(messages, tools) -> PlannerReply` method writes its own
summary (the scripted planner: a deterministic digest of the conversation,
`digest`, with estimated usage), so the mechanism runs offline.
"""
from __future__ import annotations

import json
from typing import Any

from agents.feedback import parse_success_line, parse_tool_success, success_line
from agents.planners.base import PlannerReply
from agents.records import CallRecord

#: The request that asks for the summary (the planner's last user message of a compaction call).
COMPACTION_REQUEST = (
    "The conversation is about to exceed the context limit and will be compacted. Write a summary "
    "that lets you continue the task without the earlier messages: the task, what you have done and "
    "observed (object names, positions, what worked and what failed), the current state of the robot "
    "and the scene, and what you plan to do next. Reply with the summary as plain text; do not call a tool."
)
#: How the summary is put back into the conversation.
SUMMARY_HEADER = "Summary of the episode so far (the earlier conversation was compacted to fit the context):\n\n"
#: Kept when a planner answers the request with no text.
NO_SUMMARY = "(The planner returned no summary.)"


def due(compact_at_tokens: int | None, calls: list[CallRecord], messages: list[dict[str, Any]]) -> bool:
    """Whether the next call should be a compaction."""
    if not compact_at_tokens or not calls:
        return False
    last = calls[-1]
    if last.action_kind == "compaction" or last.error is not None:
        return False  # one compaction at a time; never on a failed call's (zero) usage
    return last.input_tokens + last.output_tokens >= compact_at_tokens and _newest_exchange(messages) > 2


def ask(planner, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
    """The compaction call: the planner's own summary method, else one LLM call with the request appended."""
    summarise = getattr(planner, "summarise", None)
    if summarise is not None:
        return summarise(messages, tools)
    return planner.next(messages + [{"role": "user", "content": COMPACTION_REQUEST}], tools)


def apply(reply: PlannerReply, messages: list[dict[str, Any]], trace, call_index: int,
          image_refs: dict[str, str]) -> None:
    """Replace `messages` in place by the compacted conversation (the one before goes to the trace).

    The call's row is the episode's, with `action_kind = 'compaction'`.
    """
    trace.transcript(messages, image_refs, name=f"transcript_before_compaction_{call_index:03d}.json")
    summary = (reply.text or "").strip() or NO_SUMMARY
    cut = _newest_exchange(messages)
    messages[:] = messages[:2] + [{"role": "user", "content": SUMMARY_HEADER + summary}] + messages[cut:]


def _newest_exchange(messages: list[dict[str, Any]]) -> int:
    """Index of the last assistant message (the newest exchange starts there); 0 if none."""
    return max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=0)


def digest(messages: list[dict[str, Any]]) -> str:
    """A deterministic summary of a conversation: every action taken and the first line of its result.

    What an offline planner writes when asked to compact (it has no model to
    summarise with); an earlier summary in the conversation is carried over.
    """
    lines, results = [], {m.get("tool_call_id"): m.get("content") or "" for m in messages if m["role"] == "tool"}
    for m in messages[2:]:
        content = m.get("content")
        if m["role"] == "user" and isinstance(content, str) and content.startswith(SUMMARY_HEADER):
            lines.append(content[len(SUMMARY_HEADER):].strip())
        for call in m.get("tool_calls") or []:
            name, args = call["function"]["name"], call["function"]["arguments"]
            try:
                parsed = json.loads(args or "{}")
            except json.JSONDecodeError:
                parsed = args
            what = (parsed.get("code", "").strip().splitlines() or [""])[0] if name == "python" \
                and isinstance(parsed, dict) else json.dumps(parsed, sort_keys=True)
            text = results.get(call["id"]) or ""
            result = text.strip().splitlines()
            # The success flag ends a tool result (JSON) and a cell's output (its last line): keep it, in both.
            flag = parse_tool_success(text) if name != "python" else parse_success_line(text)
            tail = "" if flag is None else f" [{success_line(flag)}]"
            lines.append(f"- {name} {what[:160]} -> {result[0][:160] if result else '(no result)'}{tail}")
    return "Actions so far, with the first line of each result:\n" + "\n".join(lines)


def estimated_summary(planner, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
    """`summarise` for an offline planner with a usage estimator: `digest`, its tokens estimated."""
    text = digest(messages)
    usage, raw = planner.estimator.estimate(messages + [{"role": "user", "content": COMPACTION_REQUEST}],
                                            tools, [text])
    return PlannerReply(text=text, tool_calls=[], usage=usage, usage_source="estimated", raw_usage=raw)
