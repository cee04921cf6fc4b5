"""Which call format a local model keeps to: the opening request of real episodes, sent in each planner mode.

    benchmarks/local_llm.sh start
    python benchmarks/local_llm_formats.py TRACE_DIR [TRACE_DIR ...] [--base-url URL] [--out replies.json]

Each TRACE_DIR is an episode trace (tool or code agent; its transcript's
system prompt and task message are the request).  For each one the script
sends, through the `openai` planner itself:

  native           tools field, tool_choice left to the server
  native_required  tools field, tool_choice "required"
  text             no tools field, calls written as text (agents/textcalls.py)
  text_constrained the same with the calls' JSON schema as response_format

and prints, per mode: native tool calls in the reply, calls read from its
text, output tokens and seconds.  `--out` keeps the raw replies (to become
parser fixtures).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.episode import FINISH_TOOL, PYTHON_TOOL  # noqa: E402
from agents.planners.openai_planner import OpenAIPlanner  # noqa: E402
from agents.textcalls import parse_calls, tool_names  # noqa: E402

MODES = {
    "native": {},
    "native_required": {"tool_choice": "required"},
    "text": {"tool_calls": "text"},
    "text_constrained": {"tool_calls": "text", "constrain_calls": True},
}


def opening(trace_dir: Path) -> tuple[str, list[dict], list[dict]]:
    """(agent, the first request's messages, its tools) of an episode trace."""
    from robots.api_docs import tool_schemas

    episode = json.loads((trace_dir / "episode.json").read_text())
    messages = json.loads((trace_dir / "transcript.json").read_text())[:2]
    # Images were withheld (vision: false) or are dropped here: the probe is about the call format.
    messages[1]["content"] = [p for p in messages[1]["content"] if p.get("type") == "text"]
    if episode["agent"] == "code":
        tools = [PYTHON_TOOL, FINISH_TOOL]
    else:
        tools = tool_schemas(("vla",) if episode["ablation"] in ("full", "no_guides") else ()) + [FINISH_TOOL]
    return episode["agent"], messages, tools


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--model", default="local-1.5b")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        ap.error(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
    kept = []
    print(f"{'agent':6} {'mode':17} {'native':>6} {'text':>5} {'out_tok':>7} {'s':>6}  first call")
    for trace in args.traces:
        agent, messages, tools = opening(trace)
        for mode in modes:
            options = MODES[mode]
            planner = OpenAIPlanner(args.model, base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "local"),
                                    temperature=0.2, max_output_tokens=args.max_tokens, max_tokens_param="max_tokens",
                                    max_retries=1, **options)
            t0 = time.monotonic()
            reply = planner.next(messages, tools)
            seconds = time.monotonic() - t0
            planner.close()
            native = sum(c.source == "native" for c in reply.tool_calls)
            from_text = parse_calls(reply.text, tool_names(tools))
            first = reply.tool_calls[0] if reply.tool_calls else None
            label = f"{first.name}({first.source})" if first else "-"
            print(f"{agent:6} {mode:17} {native:6d} {len(from_text):5d} {reply.usage.output_tokens:7d} {seconds:6.1f}  {label}")
            kept.append({"trace": str(trace), "agent": agent, "mode": mode, "content": reply.text,
                         "native_calls": [{"name": c.name, "arguments": c.arguments} for c in reply.tool_calls
                                          if c.source == "native"],
                         "usage": reply.raw_usage, "seconds": round(seconds, 1)})
    if args.out:
        args.out.write_text(json.dumps(kept, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
