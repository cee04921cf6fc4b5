"""Episode endings through `run_episode` with the real runtime child and a real scene.

A tiny test planner replays a fixed list of tool calls (a seam, like the
scripted planner, but it never solves the task), so each test exercises one
ending: call budget, wall clock, malformed calls then `finish`, runtime crash.
Each test builds one scene (~10-20 s); the wall-clock test also waits out its
limit.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from agents.episode import EpisodeSpec, run_episode
from agents.planners.base import PlannerReply, ToolCall
from agents.records import Usage
from agents.schema import validate_trace
from agents.view import render_file

TASK = "libero_spatial_swap/0"


class ListPlanner:
    """Replays (name, raw JSON arguments) tool calls; repeats the last one when the list runs out."""

    name = "test-list"
    model = "list-v0"

    def __init__(self, calls: list[tuple[str, str]]):
        self.calls = calls
        self.n = 0
        self.first_call_at: float | None = None
        self.seen: list[list[dict]] = []

    def next(self, messages, tools) -> PlannerReply:
        if self.first_call_at is None:
            self.first_call_at = time.monotonic()
        self.seen.append([dict(m) for m in messages])
        name, args = self.calls[min(self.n, len(self.calls) - 1)]
        self.n += 1
        usage = Usage(input_tokens=100 * self.n, cached_input_tokens=50, output_tokens=10)
        return PlannerReply(text=f"step {self.n}", tool_calls=[ToolCall(f"t{self.n}", name, args)], usage=usage,
                            usage_source="estimated", raw_usage={"prompt_tokens": 100 * self.n})


def spec(agent: str, **kw) -> EpisodeSpec:
    return EpisodeSpec(benchmark="libero_pro", task=TASK, seed=0, agent=agent, ablation="no_vla_no_guides",
                       image_size=128, n_images=1, **kw)


def rows(d: Path, name: str) -> list[dict]:
    return [json.loads(x) for x in (d / name).read_text().splitlines()]


def test_call_budget(tmp_path):
    planner = ListPlanner([("state", "{}")])
    rec = run_episode(spec("tool", call_budget=3), planner, str(tmp_path))
    assert rec.status == "call_budget" and not rec.success
    assert rec.n_calls == 3 and planner.n == 3
    assert [c["tool_name"] for c in rows(tmp_path, "calls.jsonl")] == ["state"] * 3
    assert rec.input_tokens == 100 + 200 + 300  # totals are the sum of the calls
    # Tool calling runs no cell worker: no sandbox record, no restarts.
    assert rec.sandbox is None and rec.cell_worker_restarts == 0
    assert validate_trace(tmp_path) == []


def test_malformed_calls_are_answered_counted_and_the_episode_goes_on(tmp_path):
    planner = ListPlanner([
        ("fly_to_the_moon", "{}"),                      # unknown tool
        ("move_to", '{"xyz": [0.1, 0.2'),               # arguments are not JSON
        ("move_to", '{"xyz": "up"}'),                   # wrong argument
        ("python", '{"code": "print(1)"}'),             # the other interface's tool
        ("state", "{}"),
        ("finish", '{"status": "stuck", "summary": "testing"}'),
    ])
    rec = run_episode(spec("tool"), planner, str(tmp_path))
    assert rec.status == "gave_up" and not rec.success and rec.n_calls == 6
    calls = rows(tmp_path, "calls.jsonl")
    assert [c["action_kind"] for c in calls] == ["malformed"] * 4 + ["tool", "finish"]
    assert calls[0]["exception"] == "UnknownTool" and calls[1]["exception"] == "JSONDecodeError"
    assert calls[2]["exception"] == "ValueError" and calls[3]["exception"] == "UnknownTool"
    assert calls[1]["tool_args"] is None and calls[2]["tool_args"] == {"xyz": "up"}
    # Each error reached the planner as the reply to its tool call, and the next call went ahead.
    replies = [m for m in planner.seen[-1] if m["role"] == "tool"]
    assert len(replies) == 5
    assert "fly_to_the_moon" in replies[0]["content"] and replies[0]["content"].startswith("Error")
    assert "not a valid JSON object" in replies[1]["content"]
    assert replies[2]["content"].startswith("Error") and "xyz" in replies[2]["content"]
    assert "unknown tool" in replies[3]["content"]
    assert json.loads(replies[4]["content"])["gripper_width_m"] >= 0
    # The rejected move_to is on record as a failed primitive; it returned no camera images.
    assert [(p["name"], p["ok"]) for p in rows(tmp_path, "primitives.jsonl")] == [("move_to", False), ("state", True)]
    # Refused for its argument, it moved nothing: not counted as acting.
    assert rows(tmp_path, "primitives.jsonl")[0]["acting"] is False and calls[2]["n_acting"] == 0
    assert [c["images_returned"] for c in calls] == [0] * 6
    assert validate_trace(tmp_path) == []
    page = render_file(tmp_path).read_text()
    assert page.count(">malformed") >= 4 and "arguments are not valid JSON" in page and "gave_up" in page


def test_code_agent_malformed_cell_then_finish(tmp_path):
    planner = ListPlanner([
        ("python", '{"source": "print(1)"}'),          # wrong argument name
        ("python", '{"code": "x = 41\\nx + 1"}'),
        ("finish", '{"status": "stuck", "summary": "testing"}'),
    ])
    rec = run_episode(spec("code"), planner, str(tmp_path))
    assert rec.status == "gave_up" and rec.n_calls == 3
    calls = rows(tmp_path, "calls.jsonl")
    assert [c["action_kind"] for c in calls] == ["malformed", "cell", "finish"]
    assert calls[0]["exception"] == "TypeError"
    tool_replies = [m["content"] for m in planner.seen[-1] if m["role"] == "tool"]
    assert tool_replies == ["Error: python needs a string argument 'code'.", "42\n"]
    assert (tmp_path / "cells" / "cell_002.py").read_text() == "x = 41\nx + 1"
    assert not (tmp_path / "cells" / "cell_001.py").exists()
    assert validate_trace(tmp_path) == []


def test_endless_cell_ends_on_the_wall_clock(tmp_path):
    limit = 6.0
    planner = ListPlanner([("python", json.dumps({"code": "while True:\n    pass"}))])
    rec = run_episode(spec("code", wall_clock_s=limit), planner, str(tmp_path))
    ended = time.monotonic()
    assert rec.status == "wall_clock" and not rec.success
    # The call that never came back was still made (and billed): it has its row.
    assert rec.n_calls == 1
    [row] = rows(tmp_path, "calls.jsonl")
    assert row["action_kind"] == "cell" and row["exception"] == "RuntimeTimeout" and row["input_tokens"] == 100
    # The clock starts after the scene is built, i.e. just before the first LLM call.
    elapsed = ended - planner.first_call_at
    assert limit - 0.5 <= elapsed <= limit + 8, elapsed
    assert (tmp_path / "cells" / "cell_001.py").exists()
    assert validate_trace(tmp_path) == []
    page = render_file(tmp_path).read_text()
    assert "while True:" in page and "wall_clock" in page and "RuntimeTimeout" in page


def _crash_the_runtime_when(flag: Path) -> None:
    """SIGSEGV to this process's runtime child (the simulator) once `flag` exists."""
    deadline = time.monotonic() + 300
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if ppid == os.getpid() and b"agents.runtime" in cmdline:
            os.kill(int(entry), signal.SIGSEGV)


def test_runtime_crash_ends_with_error_and_the_parent_survives(tmp_path):
    # A cell cannot take the simulator down (its own worker restarts: test_runtime_isolation); the
    # simulator crashing while a cell waits on it still ends the episode with `error`.
    code = "import time\nopen('waiting', 'w').close()\ntime.sleep(120)"
    planner = ListPlanner([("python", json.dumps({"code": code}))])
    pid = os.getpid()
    threading.Thread(target=_crash_the_runtime_when, args=(tmp_path / "work" / "waiting",), daemon=True).start()
    rec = run_episode(spec("code"), planner, str(tmp_path))
    assert os.getpid() == pid
    assert rec.status == "error" and not rec.success
    assert "killed by SIGSEGV" in rec.error
    [row] = rows(tmp_path, "calls.jsonl")
    assert row["action_kind"] == "cell" and row["exception"] == "RuntimeDied"
    assert json.loads((tmp_path / "episode.json").read_text())["status"] == "error"
    assert validate_trace(tmp_path) == []


class RepliesPlanner(ListPlanner):
    """Replays whole replies: each a list of (name, raw JSON arguments) tool calls, possibly none or several."""

    def next(self, messages, tools) -> PlannerReply:
        self.seen.append([dict(m) for m in messages])
        calls = [ToolCall(f"t{self.n}_{k}", name, args) for k, (name, args) in enumerate(self.calls[self.n])]
        self.n += 1
        return PlannerReply(text="", tool_calls=calls, usage=Usage(input_tokens=100, output_tokens=10),
                            usage_source="estimated")


def test_only_the_first_tool_call_of_a_reply_runs_and_the_count_is_recorded(tmp_path):
    planner = RepliesPlanner([
        [("state", "{}"), ("move_to", '{"xyz": [0.0, 0.0, 1.2]}'), ("state", "{}")],
        [],
        [("finish", '{"status": "stuck", "summary": "testing"}')],
    ])
    rec = run_episode(spec("tool"), planner, str(tmp_path))
    assert rec.status == "gave_up" and rec.n_calls == 3
    calls = rows(tmp_path, "calls.jsonl")
    assert [c["tool_calls_in_reply"] for c in calls] == [3, 0, 1]
    assert [c["action_kind"] for c in calls] == ["tool", "none", "finish"]
    assert [p["name"] for p in rows(tmp_path, "primitives.jsonl")] == ["state"]  # the move never ran
    answers = {m["tool_call_id"]: m["content"] for m in planner.seen[1] if m["role"] == "tool"}
    assert json.loads(answers["t0_0"])["gripper_width_m"] >= 0
    assert answers["t0_1"] == answers["t0_2"] == "Not executed: one tool call per reply."
    assert planner.seen[2][-1] == {"role": "user", "content": "Reply with exactly one tool call."}
    assert validate_trace(tmp_path) == []
