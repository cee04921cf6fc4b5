"""`cellbench view TRACE_DIR`: one episode trace as a single self-contained HTML page.

Everything is inlined (CSS, a few lines of JS, images as base64 data URLs) so
the page can be mailed, attached to an issue or opened offline.  The page
shows the episode header (task, agent, ablation, status, success, calls,
tokens), the opening prompt, then every LLM call in order: what the planner
said, the tool call or the code cell it ran, the primitives that executed,
what came back (text and images), and tokens so far.

The transcript and calls.jsonl are paired by position: the i-th assistant
message is call i.  A call that failed at the endpoint (`planner_error`) has a
row but no assistant message; it is shown with its error.
"""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from agents.errors import CellbenchError
from agents.trace import record_file

CSS = """
body { font: 14px/1.45 -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
main { max-width: 1100px; margin: 0 auto; padding: 16px 20px 60px; }
h1 { font-size: 20px; margin: 4px 0 2px; }
h2 { font-size: 16px; margin: 22px 0 8px; }
.instr { font-size: 15px; margin: 2px 0 12px; color: #333; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 6px 14px; background: #fff;
        border: 1px solid #d9dce3; border-radius: 6px; padding: 10px 14px; }
.grid div { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.grid b { display: block; font-size: 11px; text-transform: uppercase; letter-spacing: .04em; color: #6b7385; font-weight: 600; }
.card { background: #fff; border: 1px solid #d9dce3; border-radius: 6px; margin: 12px 0; padding: 10px 14px; }
.card h3 { font-size: 15px; margin: 0 0 6px; display: flex; flex-wrap: wrap; gap: 6px; align-items: center; }
.badge { font-size: 12px; font-weight: 600; border-radius: 10px; padding: 1px 8px; background: #e8eaf0; color: #333; }
.ok { background: #d8f3df; color: #135d2a; } .bad { background: #fbdcdc; color: #8a1c1c; } .warn { background: #fff0c8; color: #6d5200; }
.label { font-size: 11px; text-transform: uppercase; letter-spacing: .04em; color: #6b7385; margin: 8px 0 2px; font-weight: 600; }
.label .file { text-transform: none; letter-spacing: 0; font-family: Menlo, Consolas, 'DejaVu Sans Mono', monospace; }
.say { white-space: pre-wrap; font-style: italic; color: #2a3550; }
pre { background: #f7f8fa; border: 1px solid #e3e6ec; border-radius: 4px; padding: 8px 10px; margin: 0; overflow-x: auto;
      font: 12.5px/1.4 'SFMono-Regular', Menlo, Consolas, 'DejaVu Sans Mono', monospace; white-space: pre-wrap; word-break: break-word; }
pre.code { background: #f3f6fc; border-color: #cfd8ea; }
pre.out { max-height: 420px; overflow-y: auto; }
pre.err { background: #fdf1f1; border-color: #efc6c6; }
table { border-collapse: collapse; font-size: 12.5px; width: 100%; }
td, th { border-bottom: 1px solid #eceef2; padding: 2px 6px; text-align: left; vertical-align: top; }
th { color: #6b7385; font-weight: 600; font-size: 11px; text-transform: uppercase; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.args { font-family: Menlo, Consolas, 'DejaVu Sans Mono', monospace; font-size: 12px; word-break: break-all; }
.imgs { display: flex; flex-wrap: wrap; gap: 8px; }
figure { margin: 0; text-align: center; font-size: 11px; color: #555; }
img.thumb { width: 180px; height: auto; border: 1px solid #ccd; border-radius: 3px; cursor: zoom-in; image-rendering: auto; }
img.thumb.big { width: 512px; cursor: zoom-out; }
.tokens { font-size: 12px; color: #4a5265; margin-top: 8px; font-variant-numeric: tabular-nums; }
details > summary { cursor: pointer; color: #36538a; }
a { color: #36538a; text-decoration: none; }
"""

FAILED_BADGE = '<span class="badge bad">failed</span>'
JS = "document.addEventListener('click', e => { if (e.target.classList.contains('thumb')) e.target.classList.toggle('big'); });"


def main_view(args) -> int:
    out = render_file(args.trace_dir, args.out)
    print(out)
    return 0


def render_file(trace_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the HTML page of a trace; default TRACE_DIR/view.html.  Returns its path."""
    d = Path(trace_dir)
    if not (d / "calls.jsonl").exists() and record_file(d) is None:
        raise CellbenchError(f"{d} is not an episode trace directory (no episode.json or calls.jsonl)")
    path = Path(out) if out else d / "view.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(d))
    return path


# ---------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _load_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line of a killed run: show what there is
    return rows


def _pretty(text: str) -> str:
    """JSON results (tool agent) one key per line with short values inline; anything else unchanged."""
    s = text.strip()
    if s[:1] in "{[":
        try:
            return _compact(json.loads(s))
        except json.JSONDecodeError:
            pass
    return text


def _compact(obj: Any, indent: str = "") -> str:
    # json.dumps(indent=...) puts every list element on its own line: a 3-vector takes 5 lines.
    flat = json.dumps(obj)
    if not isinstance(obj, dict) or not obj or (len(flat) <= 60 and not indent == ""):
        return flat
    inner = indent + "  "
    lines = [f"{inner}{json.dumps(k)}: {_compact(v, inner)}" for k, v in obj.items()]
    return "{\n" + ",\n".join(lines) + "\n" + indent + "}"


def _fmt_int(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else _e(n)


class _Images:
    """Inlines trace images as data URLs, or (`inline=False`) links them by their path in the trace
    (the results browser puts the page beside a copy of the trace's images/)."""

    def __init__(self, d: Path, inline: bool = True):
        self.d = d
        self.inline = inline

    def figure(self, rel: str) -> str:
        p = self.d / rel
        name = Path(rel).stem.split("_", 2)[-1] if rel else "?"
        if not p.is_file():
            return f'<figure><div class="badge bad">missing image {_e(rel)}</div></figure>'
        if self.inline:
            mime = "image/png" if p.suffix.lower() == ".png" else "image/jpeg"
            src = f"data:{mime};base64,{base64.b64encode(p.read_bytes()).decode()}"
        else:
            src = Path(rel).as_posix()
        return (f'<figure><img class="thumb" alt="{_e(name)}" title="{_e(rel)} (click to enlarge)" '
                f'src="{_e(src)}" loading="lazy"><figcaption>{_e(name)}</figcaption></figure>')

    def block(self, refs: list[str]) -> str:
        return '<div class="imgs">' + "".join(self.figure(r) for r in refs) + "</div>" if refs else ""


def _content_parts(content: Any) -> tuple[str, list[str]]:
    """(text, image paths) of a transcript message's content."""
    if isinstance(content, list):
        text = "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
        refs = [p.get("path", "?") for p in content if p.get("type") == "image_ref"]
        return text, refs
    return (content or ""), []


def _group(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """Split the conversation into the opening and one group per assistant message (= per LLM call)."""
    opening, groups = [], []
    for m in messages:
        if m.get("role") == "assistant":
            groups.append([m])
        elif groups:
            groups[-1].append(m)
        else:
            opening.append(m)
    return opening, groups


def render(d: Path, inline_images: bool = True, nav: str = "") -> str:
    """The page of trace `d`; `inline_images=False` links images by their trace path instead of
    inlining them, `nav` is HTML put above the header (the results browser's way back)."""
    record = record_file(d)  # planner_error.json for an episode the endpoint never let finish
    episode = json.loads(record.read_text()) if record else None
    calls = _load_jsonl(d / "calls.jsonl")
    prims = _load_jsonl(d / "primitives.jsonl")
    messages = json.loads((d / "transcript.json").read_text()) if (d / "transcript.json").exists() else []
    images = _Images(d, inline_images)
    opening, groups = _group(messages)
    by_call: dict[int, list[dict[str, Any]]] = {}
    for p in prims:
        by_call.setdefault(p["call_index"], []).append(p)

    body = [nav, _header(d, episode, calls), _overview(calls), _opening(opening, images), "<h2>LLM calls</h2>"]
    so_far = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    for i in range(max(len(calls), len(groups))):
        call = calls[i] if i < len(calls) else None
        group = groups[i] if i < len(groups) else []
        if call:
            for k in so_far:
                so_far[k] += call.get(k, 0)
        body.append(_call_card(d, i + 1, call, group, by_call.get(i + 1, []), dict(so_far), images))
    if not calls and not groups:
        body.append("<p>No LLM calls were made.</p>")
    if episode and episode.get("error"):
        body.append(f'<h2>Episode error</h2><pre class="err">{_e(episode["error"])}</pre>')
    title = f"{episode['task']} · {episode['agent']} · {episode['ablation']}" if episode else d.name
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>"
        + "\n".join(body)
        + f"</main><script>{JS}</script></body></html>\n"
    )


def _header(d: Path, ep: dict[str, Any] | None, calls: list[dict[str, Any]]) -> str:
    if ep is None:
        return (f"<h1>{_e(d)}</h1><p class=\"badge warn\">incomplete trace: no episode.json "
                f"({len(calls)} calls recorded so far)</p>")
    status_cls = "ok" if ep["status"] == "solved" else ("warn" if ep["status"] == "planner_error" else "bad")
    items = [
        ("task", ep["task"]), ("seed", ep["seed"]), ("agent", ep["agent"]), ("ablation", ep["ablation"]),
        ("planner", f"{ep['planner']} / {ep['model']}"),
        ("status", f'<span class="badge {status_cls}">{_e(ep["status"])}</span>'),
        ("success", f'<span class="badge {"ok" if ep["success"] else "bad"}">{ep["success"]}</span>'),
        ("LLM calls", f"{ep['n_calls']} / {ep['call_budget']}"), ("solved at call", ep["solved_at_call"] or "–"),
        ("input tokens", _fmt_int(ep["input_tokens"])), ("cached input", _fmt_int(ep["cached_input_tokens"])),
        ("cache write", _fmt_int(ep["cache_write_tokens"])), ("output tokens", _fmt_int(ep["output_tokens"])),
        ("reasoning", _fmt_int(ep["reasoning_tokens"])), ("usage", ep["usage_source"]),
        ("images in prompts", ep["images_in_prompts"]), ("images returned", ep["images_returned"]),
        ("primitives (acting)", f"{ep['n_primitives']} ({ep['n_acting']})"), ("sim steps", ep["sim_steps"]),
        # The limit runs from the end of the scene build; wall_time_s includes the build.
        ("wall time (limit)", f"{ep['wall_time_s']:.1f} s ({ep['wall_clock_limit_s']:.0f} s)"),
    ]
    cells = "".join(
        f"<div><b>{_e(k)}</b>{v if isinstance(v, str) and v.startswith('<span') else _e(v)}</div>" for k, v in items
    )
    return (f"<h1>{_e(ep['task'])} · {_e(ep['agent'])} agent · {_e(ep['ablation'])}</h1>"
            f"<p class=\"instr\">{_e(ep['instruction'])}</p><div class=\"grid\">{cells}</div>")


def _action_label(c: dict[str, Any]) -> str:
    if c["action_kind"] == "tool":
        return c["tool_name"] or "?"
    if c["action_kind"] == "cell":
        return "cell"
    if c["action_kind"] == "malformed":
        return f"malformed {c.get('tool_name') or ''}".strip()
    return c["action_kind"]


def _overview(calls: list[dict[str, Any]]) -> str:
    if not calls:
        return ""
    rows, cum = [], 0
    for c in calls:
        cum += c["input_tokens"]
        flags = []
        if c.get("exception"):
            flags.append(f'<span class="badge bad">{_e(c["exception"])}</span>')
        if c.get("success_after"):
            flags.append('<span class="badge ok">solved</span>')
        rows.append(
            f'<tr><td><a href="#call-{c["call_index"]}">{c["call_index"]}</a></td><td>{_e(_action_label(c))}</td>'
            f'<td class="num">{c["n_primitives"]} ({c["n_acting"]})</td><td class="num">{c["images_returned"]}</td>'
            f'<td class="num">{_fmt_int(c["input_tokens"])}</td><td class="num">{_fmt_int(c["cached_input_tokens"])}</td>'
            f'<td class="num">{_fmt_int(c["output_tokens"])}</td><td class="num">{_fmt_int(cum)}</td>'
            f'<td>{" ".join(flags)}</td></tr>'
        )
    head = ("<tr><th>call</th><th>action</th><th class=num>primitives (acting)</th><th class=num>images back</th>"
            "<th class=num>input</th><th class=num>cached</th><th class=num>output</th>"
            "<th class=num>input so far</th><th></th></tr>")
    return f"<h2>Calls at a glance</h2><div class=\"card\"><table>{head}{''.join(rows)}</table></div>"


def _opening(opening: list[dict[str, Any]], images: _Images) -> str:
    out = ["<h2>Opening prompt</h2><div class=\"card\">"]
    for m in opening:
        text, refs = _content_parts(m.get("content"))
        if m.get("role") == "system":
            out.append(f"<details><summary>system prompt ({len(text):,} characters)</summary><pre>{_e(text)}</pre></details>")
        else:
            out.append(f'<div class="label">{_e(m.get("role"))}</div><pre>{_e(text)}</pre>{images.block(refs)}')
    out.append("</div>")
    return "".join(out)


def _call_card(d: Path, index: int, call: dict[str, Any] | None, group: list[dict[str, Any]],
               prims: list[dict[str, Any]], so_far: dict[str, int], images: _Images) -> str:
    badges = []
    if call:
        kind = call["action_kind"]
        badges.append(f'<span class="badge {"bad" if kind == "malformed" else ""}">{_e(_action_label(call))}</span>')
        if call.get("exception"):
            badges.append(f'<span class="badge bad">{_e(call["exception"])}</span>')
        if call.get("success_after"):
            badges.append('<span class="badge ok">task solved after this call</span>')
        if call.get("retries"):
            badges.append(f'<span class="badge warn">{call["retries"]} endpoint retries</span>')
        badges.append(f'<span class="badge">latency {call["latency_s"]:.2f} s</span>')
    out = [f'<div class="card" id="call-{index}"><h3>Call {index} {"".join(badges)}</h3>']

    assistant = group[0] if group else None
    if assistant is not None and assistant.get("content"):
        out.append(f'<div class="label">assistant</div><div class="say">{_e(assistant["content"])}</div>')
    tool_calls = (assistant or {}).get("tool_calls") or []
    if tool_calls:
        out.append(_action_block(d, index, call, tool_calls[0]))
        if len(tool_calls) > 1:
            names = ", ".join(t["function"]["name"] for t in tool_calls[1:])
            out.append(f'<div class="label">not executed (one tool call per reply)</div><pre>{_e(names)}</pre>')
    elif assistant is not None:
        out.append('<div class="label">action</div><pre class="err">(no tool call in the reply)</pre>')
    if call and call.get("error"):
        out.append(f'<div class="label">endpoint error</div><pre class="err">{_e(call["error"])}</pre>')

    if call and call["action_kind"] == "tool" and len(prims) == 1 and prims[0]["name"] == call.get("tool_name"):
        # One tool call = one primitive: a table would repeat the call line.
        p = prims[0]
        out.append(f'<div class="tokens">{"acting" if p["acting"] else "read-only"} · {p["sim_steps"]} sim steps · '
                   f'{p["wall_s"]:.2f} s{"" if p["ok"] else " · " + FAILED_BADGE}</div>')
    elif prims:
        rows = "".join(
            f'<tr><td>{p["seq"]}</td><td>{_e(p["name"])}{" *" if p["acting"] else ""}</td>'
            f'<td class="args">{_e(json.dumps(p["args"]))}</td>'
            f'<td>{"" if p["ok"] else FAILED_BADGE}</td>'
            f'<td class="num">{p["sim_steps"]}</td><td class="num">{p["wall_s"]:.2f} s</td></tr>'
            for p in prims
        )
        out.append('<div class="label">primitives executed (* acting)</div><table><tr><th>seq</th><th>primitive</th>'
                   f'<th>args</th><th></th><th class="num">sim steps</th><th class="num">wall</th></tr>{rows}</table>')

    if tool_calls and not any(m.get("role") == "tool" for m in group[1:]):
        out.append('<div class="label">result</div><pre class="err">(none: the episode ended while this call ran)</pre>')
    for m in group[1:]:
        text, refs = _content_parts(m.get("content"))
        if m.get("role") == "tool":
            cls = "out err" if call and call.get("exception") and m is group[1] else "out"
            label = "result" if m is group[1] else "tool reply"
            out.append(f'<div class="label">{label}</div><pre class="{cls}">{_e(_pretty(text))}</pre>')
        else:
            out.append(f'<div class="label">{_e(m.get("role"))}: {_e(text)}</div>' if text else "")
            out.append(images.block(refs))

    if call:
        out.append(
            f'<div class="tokens">this call: input {_fmt_int(call["input_tokens"])} · cached '
            f'{_fmt_int(call["cached_input_tokens"])} · output {_fmt_int(call["output_tokens"])} '
            f'({_e(call["usage_source"])}) — so far: input <b>{_fmt_int(so_far["input_tokens"])}</b> · cached '
            f'<b>{_fmt_int(so_far["cached_input_tokens"])}</b> · output <b>{_fmt_int(so_far["output_tokens"])}</b> · '
            f'images in this prompt {call["images_in_prompt"]}</div>'
        )
        out.append(_sources_line(call.get("input_sources")))
    out.append("</div>")
    return "".join(out)


#: Short names of the token sources (agents.records.InputSources) on a call card.
_SOURCE_NAMES = {"system": "system", "tools_api": "tools / API", "guide": "guide", "task": "task",
                 "images": "images", "history_assistant": "earlier assistant", "history_results": "earlier results",
                 "newest_observation": "newest observation"}


def _sources_line(sources: dict[str, int] | None) -> str:
    """This call's input tokens by source (schema v2 traces), counted with the estimator's tokenizer."""
    if not sources:
        return ""
    parts = " · ".join(f"{label} {_fmt_int(sources.get(key, 0))}" for key, label in _SOURCE_NAMES.items())
    return f'<div class="tokens">input by source: {parts} ({sources.get("n_images", 0)} images; counted ' \
           f'{_fmt_int(sources.get("total", 0))})</div>'


def _action_block(d: Path, index: int, call: dict[str, Any] | None, tc: dict[str, Any]) -> str:
    name, raw = tc["function"]["name"], tc["function"].get("arguments", "")
    cell = d / "cells" / f"cell_{index:03d}.py"
    if (call is None or call["action_kind"] == "cell") and cell.exists():
        return f'<div class="label">code cell <span class="file">cells/{cell.name}</span></div><pre class="code">{_e(cell.read_text())}</pre>'
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return f'<div class="label">tool call {_e(name)} (arguments are not valid JSON)</div><pre class="err">{_e(raw)}</pre>'
    if (name == "python" and (call is None or call["action_kind"] == "cell") and isinstance(args, dict)
            and isinstance(args.get("code"), str)):
        return f'<div class="label">code cell</div><pre class="code">{_e(args["code"])}</pre>'
    shown = json.dumps(args) if len(json.dumps(args)) < 100 else json.dumps(args, indent=1)
    return f'<div class="label">tool call</div><pre class="code">{_e(name)}({_e(shown)})</pre>'
