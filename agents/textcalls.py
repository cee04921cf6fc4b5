"""Tool calls written as text: the one parser, prompt note and conversation form both agents share.

Small open models served locally often do not emit their chat template's
native tool-call tags: they write the call into the reply's text, as a fenced
```json block, bare JSON, or (for code) a ```python block.  With
`planner.tool_calls: text` the planner sends no `tools` field; the system
prompt gets `instructions(tools)` (how to write a call, and each tool's
schema), earlier calls and results are rendered as plain text
(`to_text_conversation`), and the reply is read by `parse_calls`.  With
`native`, `no_call_message` still reads a reply that holds no native call, so
a call written as text gets a nudge that says so.

Everything here depends only on the tool list, never on which agent asked:
the tool agent (one tool per primitive) and the code agent (`python`) get the
same note, the same parser and the same messages.  The one agent-specific
rule is the issue's: a ```python block is the body of a `python` call, which
only the code agent's tool list has.

What the parser accepts, in order of preference:
  1. fenced blocks (```json, ```tool_call, or unlabelled) and <tool_call>
     tags holding {"name": ..., "arguments": {...}} (also "parameters", an
     OpenAI-style {"function": {...}} wrapper, and arguments given as a
     JSON string); there any name is a call, so a tool that does not exist
     is answered "unknown tool", as a native call to it is;
  2. the same object bare in the text;
  3. when no JSON call was found and `python` is a tool: each ```python block
     (the CodeAct convention), as the `code` of a `python` call.
JSON is read tolerantly: Python-style triple-quoted strings, single quotes,
True/False/None, trailing commas.  A block that names a known tool but cannot
be read becomes a call whose arguments are the raw text, so the episode
answers it exactly as it answers malformed native arguments.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

#: `planner.tool_calls` values.
MODES = ("native", "text")

NO_CALL = "Reply with exactly one tool call."

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_TRIPLE = re.compile(r'("""|\'\'\')(.*?)\1', re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_NAME = re.compile(r"""["']name["']\s*:\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")
_JSON_LANGS = ("", "json", "json5", "tool_call", "tool", "javascript", "js")
_PYTHON_LANGS = ("python", "py", "python3")


@dataclass
class TextCall:
    """One call found in a reply's text."""

    name: str
    arguments: str
    """JSON text of the arguments object (or, for a call that could not be read, the raw text)."""
    start: int
    """Where in the reply the call's text begins."""


def parse_calls(text: str, tool_names: Iterable[str] | None = None) -> list[TextCall]:
    """Every call written in `text`, in order; `tool_names` None accepts any name."""
    if not text:
        return []
    names = None if tool_names is None else set(tool_names)
    known = (lambda n: True) if names is None else (lambda n: n in names)
    calls: list[TextCall] = []
    covered: list[tuple[int, int]] = []
    python_blocks: list[TextCall] = []
    for m in _FENCE.finditer(text):
        lang, body = m.group(1).lower(), m.group(2)
        covered.append(m.span())
        if lang in _PYTHON_LANGS:
            found = _objects_in(body, m.start(2), known, fenced=True)
            if found:
                calls.extend(found)  # a model that labels its JSON call "python"
            elif body.strip():
                python_blocks.append(TextCall("python", json.dumps({"code": body.strip("\n")}), m.start()))
        elif lang in _JSON_LANGS or _NAME.search(body):
            calls.extend(_objects_in(body, m.start(2), known, fenced=True))
    for m in _TAG.finditer(text):
        if not _inside(m.start(), covered):
            covered.append(m.span())
            calls.extend(_objects_in(m.group(1), m.start(1), known, fenced=True))
    if not calls:
        calls = [c for c in _objects_in(text, 0, known) if not _inside(c.start, covered)]
    if not calls and python_blocks and known("python"):
        calls = python_blocks
    return sorted(calls, key=lambda c: c.start)


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in spans)


def _objects_in(chunk: str, offset: int, known, fenced: bool = False) -> list[TextCall]:
    """The calls among the JSON-ish objects that start in `chunk` (outermost ones only).

    In a fenced block or tag, {"name": ..., "arguments": {...}} is a call whatever the name, so a
    tool that does not exist is answered "unknown tool" as a native call to it is; bare in prose,
    only a known name makes a call.
    """
    calls: list[TextCall] = []
    pos = 0
    while True:
        start = chunk.find("{", pos)
        if start < 0:
            return calls
        end = _matching_brace(chunk, start)
        candidate = chunk[start:end]
        obj = _load(candidate)
        call = _as_call(obj, known, fenced) if obj is not None else None
        if call is not None:
            calls.append(TextCall(call[0], call[1], offset + start))
            pos = end
            continue
        if obj is None:
            named = _NAME.search(candidate)
            if named and (known(named.group(1)) or fenced) and _looks_like_call(candidate):
                # Names a tool but does not parse: hand the raw text on, to be answered as malformed.
                calls.append(TextCall(named.group(1), candidate.strip(), offset + start))
                pos = end
                continue
        pos = start + 1


def _looks_like_call(candidate: str) -> bool:
    return bool(re.search(r"""["'](arguments|parameters|args)["']\s*:""", candidate))


def _matching_brace(s: str, start: int) -> int:
    """Index after the brace closing the one at `start` (strings, triple quotes included, skipped); len(s) if none."""
    depth, i, n = 0, start, len(s)
    while i < n:
        c = s[i]
        if s.startswith('"""', i) or s.startswith("'''", i):
            close = s.find(s[i:i + 3], i + 3)
            if close < 0:
                return n
            i = close + 3
            continue
        if c in "\"'":
            i += 1
            while i < n and s[i] != c:
                if s[i] == "\\":
                    i += 1
                elif s[i] == "\n" and c == "'":  # an apostrophe in prose, not a string
                    break
                i += 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _load(candidate: str) -> Any:
    """The object `candidate` writes, read as JSON, then tolerantly; None if it cannot be read."""
    try:
        return json.loads(candidate)
    except ValueError:
        pass
    fixed = _TRIPLE.sub(lambda m: json.dumps(m.group(2).strip("\n")), candidate)
    fixed = _TRAILING_COMMA.sub(r"\1", fixed)
    try:
        return json.loads(fixed)
    except ValueError:
        pass
    try:
        return ast.literal_eval(re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False",
                                                                  re.sub(r"\bnull\b", "None", fixed))))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _as_call(obj: Any, known, any_name: bool = False) -> tuple[str, str] | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # {"type": "function", "function": {"name", "arguments"}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not (known(name) or (any_name and "arguments" in obj)):
        return None
    args = next((obj[k] for k in ("arguments", "parameters", "args") if k in obj), {})
    if isinstance(args, str):  # OpenAI's wire form: the arguments as a JSON string
        loaded = _load(args)
        if not isinstance(loaded, dict):
            return name, args
        args = loaded
    if not isinstance(args, dict):
        return name, json.dumps(args)
    return name, json.dumps(args, ensure_ascii=False)


# ---------------------------------------------------------------------------
# What the model is told, and how the conversation is rendered for it


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def instructions(tools: list[dict[str, Any]]) -> str:
    """The system prompt's note on writing calls as text, with each tool's schema."""
    lines = [
        "# How to call a tool",
        "",
        "Write exactly one tool call per reply, as a fenced JSON object with the tool's name and its arguments:",
        "",
        "```json",
        '{"name": "<tool name>", "arguments": {<argument>: <value>, ...}}',
        "```",
        "",
    ]
    if "python" in tool_names(tools):
        lines += ["To call `python` you may instead write the cell as one fenced ```python block: "
                  "the block is the `code` argument.", ""]
    lines += ["The result comes back in the next message. The tools:", ""]
    for tool in tools:
        fn = tool["function"]
        lines.append(f"- {fn['name']}: {fn.get('description', '').strip()}")
        lines.append(f"  arguments schema: {json.dumps(fn.get('parameters', {}), separators=(',', ':'))}")
    return "\n".join(lines)


def render_call(name: str, arguments: str) -> str:
    """A call as the note asks for it (for an assistant turn that holds no text of its own)."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return f'```json\n{{"name": {json.dumps(name)}, "arguments": {arguments}}}\n```'
    return "```json\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n```"


def to_text_conversation(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with no native tool calls in it, for an endpoint used with tool_calls: text.

    The system prompt gains `instructions(tools)`; an assistant turn keeps its
    text (the call as the model wrote it), or the call rendered as text when
    it has none; a tool result becomes a user message naming the tool; user
    messages in a row are joined, for templates that want turns to alternate.
    """
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for m in messages:
        role = m.get("role")
        if role == "system":
            out.append({"role": "system", "content": f"{m.get('content') or ''}\n\n{instructions(tools)}"})
        elif role == "assistant":
            text = m.get("content") or ""
            for call in m.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
            if not text.strip() and m.get("tool_calls"):
                text = "\n".join(render_call(c["function"]["name"], c["function"]["arguments"])
                                 for c in m["tool_calls"])
            out.append({"role": "assistant", "content": text})
        elif role == "tool":
            name = names.get(m.get("tool_call_id"), "the tool")
            _append_user(out, f"Result of {name}:\n{m.get('content') or ''}")
        else:
            _append_user(out, m.get("content") or "")
    return out


def _append_user(out: list[dict[str, Any]], content: Any) -> None:
    if not out or out[-1]["role"] != "user":
        out.append({"role": "user", "content": content})
        return
    prev = out[-1]["content"]
    if isinstance(prev, str) and isinstance(content, str):
        out[-1] = {"role": "user", "content": f"{prev}\n\n{content}"}
        return
    as_parts = lambda c: c if isinstance(c, list) else [{"type": "text", "text": c}]  # noqa: E731
    out[-1] = {"role": "user", "content": as_parts(prev) + as_parts(content)}


def no_call_message(text: str, mode: str, tools: list[dict[str, Any]]) -> str:
    """What the episode answers to a reply that holds no usable tool call, the same for both agents."""
    names = tool_names(tools)
    if mode == "text":
        how = 'a fenced JSON object {"name": ..., "arguments": {...}}'
        if "python" in names:
            how += ", or a fenced ```python block as the code of python"
        return f"Your reply has no tool call. Write exactly one, as {how}."
    written = parse_calls(text, names)
    if written:
        return (f"Your reply has no tool call; it contains what looks like a call to {written[0].name} "
                f"written as text: call the tool instead.")
    return NO_CALL


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call to any of `tools`, for a server that constrains its output to it."""
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "name": {"const": t["function"]["name"]},
                    "arguments": t["function"].get("parameters") or {"type": "object"},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for t in tools
        ]
    }


__all__ = ["MODES", "NO_CALL", "TextCall", "parse_calls", "instructions", "render_call", "to_text_conversation",
           "no_call_message", "call_schema", "tool_names"]
