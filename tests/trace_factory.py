"""Hand-made episode trace directories for the analysis tests (the current schema of agents/records.py).

Every record goes through the dataclasses of `agents.records`, so a field the
writer would refuse cannot sneak into a test trace.  Totals on episode.json are
sums of the call rows written here (bookkeeping of the fixture, not the
analysis under test).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents.records import CallRecord, EpisodeRecord, PrimitiveRecord, to_json_dict

ACTING = {"move_to", "move_by", "rotate_wrist", "set_gripper", "close_gripper",
          "open_gripper", "release", "grasp", "vla"}


def call(call_index: int, input_tokens: int = 1000, cached: int = 0, write: int = 0, output: int = 100,
         *, images_returned: int = 0, n_primitives: int = 1, n_acting: int = 1,
         success_after: bool = False, action_kind: str = "tool", **overrides: Any) -> CallRecord:
    """One LLM call row with the token numbers a test cares about up front."""
    rec = CallRecord(
        call_index=call_index, started_at=1000.0 + call_index, latency_s=1.5,
        input_tokens=input_tokens, cached_input_tokens=cached, cache_write_tokens=write,
        output_tokens=output, reasoning_tokens=0, usage_source="estimated",
        raw_usage={"prompt_tokens": input_tokens}, images_in_prompt=0,
        images_returned=images_returned, action_kind=action_kind,
        tool_name="move_to" if action_kind == "tool" else None,
        tool_args={"x": 0.1} if action_kind == "tool" else None,
        cell_hash="abc" if action_kind == "cell" else None,
        n_primitives=n_primitives, n_acting=n_acting, exception=None, success_after=success_after,
    )
    return replace(rec, **overrides)


def primitive(call_index: int, seq: int, name: str, ok: bool = True, acting: bool | None = None) -> PrimitiveRecord:
    return PrimitiveRecord(call_index=call_index, seq=seq, name=name, args={},
                           acting=(name in ACTING) if acting is None else acting,
                           ok=ok, result={"ok": ok}, sim_steps=10, wall_s=0.1)


def trace_dir_for(root: Path, benchmark: str, ablation: str, agent: str, task: str, seed: int,
                  repeat: int = 0) -> Path:
    d = Path(root) / benchmark / ablation / agent / task / f"seed{seed}"
    return d / f"r{repeat}" if repeat else d  # as agents.config.episode_grid names it


def write_episode(root: Path, *, agent: str, benchmark: str = "libero_pro",
                  task: str = "libero_spatial_swap/0", seed: int = 0, ablation: str = "full",
                  repeat: int = 0, success: bool = False, solved_at_call: int | None = None,
                  status: str | None = None, calls: list[CallRecord] | None = None,
                  primitives: list[PrimitiveRecord] | None = None, cells: dict[int, str] | None = None,
                  complete: bool = True, trace_dir: Path | None = None, **overrides: Any) -> Path:
    """Write one trace directory; `complete=False` leaves out episode.json (an episode still running)."""
    calls = calls if calls is not None else [call(1)]
    primitives = primitives or []
    d = trace_dir or trace_dir_for(root, benchmark, ablation, agent, task, seed, repeat)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "calls.jsonl", "w") as f:
        for c in calls:
            f.write(json.dumps(to_json_dict(c)) + "\n")
    with open(d / "primitives.jsonl", "w") as f:
        for p in primitives:
            f.write(json.dumps(to_json_dict(p)) + "\n")
    if cells:
        (d / "cells").mkdir(exist_ok=True)
        for idx, code in cells.items():
            (d / "cells" / f"cell_{idx:03d}.py").write_text(code)
    if not complete:
        return d
    ep = EpisodeRecord(
        benchmark=benchmark, suite=task.split("/")[0], task=task, seed=seed, agent=agent,
        ablation=ablation, planner="scripted", model="scripted-v1", instruction="put the bowl on the plate",
        success=success, solved_at_call=solved_at_call,
        status=status or ("solved" if success else "call_budget"), n_calls=len(calls),
        input_tokens=sum(c.input_tokens for c in calls),
        cached_input_tokens=sum(c.cached_input_tokens for c in calls),
        cache_write_tokens=sum(c.cache_write_tokens for c in calls),
        output_tokens=sum(c.output_tokens for c in calls), reasoning_tokens=0,
        usage_source="estimated", images_in_prompts=0,
        images_returned=sum(c.images_returned for c in calls),
        n_primitives=sum(c.n_primitives for c in calls), n_acting=sum(c.n_acting for c in calls),
        sim_steps=0, wall_time_s=12.0, started_at=1000.0, finished_at=1012.0, call_budget=40,
        wall_clock_limit_s=7200.0, config_hash="cfg", code_version="test",
        package_versions={"duckdb": "2.0"}, repeat=repeat,
    )
    ep = replace(ep, **overrides)
    (d / "episode.json").write_text(json.dumps(to_json_dict(ep)))
    return d


def write_pair(root: Path, *, tool: dict | None = None, code: dict | None = None, **common: Any) -> tuple[Path, Path]:
    """Both agents' episodes on one instance; `tool`/`code` hold per-agent keyword arguments."""
    t = write_episode(root, agent="tool", **{**common, **(tool or {})})
    c = write_episode(root, agent="code", **{**common, **(code or {})})
    return t, c


CONFIG_TEMPLATE = """\
benchmarks:
  libero_pro: {{tasks: [libero_spatial_swap/0], seeds: [0], call_budget: 40}}
agents: [tool, code]
ablations: [full]
planner: {{name: scripted, model: scripted-v1}}
price_model: {price_model}
prices:
  astra: {{input: 10, cached_input: 1, cache_write: 12.5, output: 50,
          long_context_threshold: 272000, long_context_input_multiplier: 2,
          long_context_output_multiplier: 1.5}}
  cheap: {{input: 1, cached_input: 0.1, output: 5}}
  flat: {{input: 10, cached_input: 0, output: 0}}
"""


def write_config(path: Path, price_model: str = "astra") -> Path:
    """A valid project config with three price tables ($/M tokens):
    astra (the paper's prices, long-context tier at 272k: input x2, output x1.5),
    cheap (no cache-write price: writes billed at its input price), flat (10 per input token, nothing else)."""
    path = Path(path)
    path.write_text(CONFIG_TEMPLATE.format(price_model=price_model))
    return path
