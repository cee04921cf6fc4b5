"""The episode loop's protocol around success, endings and billed calls, over a stand-in runtime (one seam).

`run_episode` is real; the runtime child is replaced by `StubRuntime`, which
answers `init`, `call_tool`, `exec_cell` and `success` from a script (the
benchmark's check turns true after a given call), so each rule of the loop
is checked in milliseconds without a scene: the episode goes on after the
first success unless `stop_on_success`, `solved_at_call` is the call after
which the check first held, the status rule, the check read after a
wall-clock ending, the call that trips the context window on record.
The interfaces' own texts are checked on a real scene in test_agents_cells
and test_feedback_parity.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import agents.episode as episode_mod
from agents.episode import EpisodeSpec, run_episode
from agents.planners.base import PlannerReply, ToolCall
from agents.records import Usage
from agents.runtime import ActionResult, RuntimeDied, RuntimeTimeout


class _Proc:
    def __init__(self):
        self.alive = True

    def poll(self):
        return None if self.alive else -9


class StubRuntime:
    """Stands in for RuntimeClient: the check holds from call `solved_after` on; `timeout_on` raises the clock."""

    solved_after: int | None = None
    timeout_on: int | None = None
    die_on: int | None = None

    def __init__(self, trace_dir, limits=None):
        self.proc = _Proc()
        self.deadline = float("inf")
        self.n_actions = 0
        self.solved = False

    def start_clock(self, wall_clock_s):
        pass

    def request(self, verb, *args):
        if verb == "init":
            card = {"suite": "s", "task": "s/0", "instruction": "put the bowl on the plate",
                    "objects": ["bowl", "plate"], "cameras": ["agentview"], "arms": ["right"], "guide": None}
            return {"card": card, "images": []}
        if verb == "success":
            return self.solved
        if verb in ("call_tool", "exec_cell"):
            self.n_actions += 1
            if self.solved_after is not None and self.n_actions >= self.solved_after:
                self.solved = True
            if self.timeout_on is not None and self.n_actions == self.timeout_on:
                raise RuntimeTimeout("wall clock exhausted")
            if self.die_on is not None and self.n_actions == self.die_on:
                raise RuntimeDied("call_tool failed in the runtime: KeyError: 'eef'")
            row = {"name": "move_to", "args": {}, "acting": True, "ok": True, "result": {}, "sim_steps": 5,
                   "wall_s": 0.0, "seq": self.n_actions - 1}
            return ActionResult(f"acted; Task success: {self.solved}", [], [row], self.solved, None, False)
        raise AssertionError(f"unexpected verb {verb}")

    def close(self):
        self.proc.alive = False


class ScriptPlanner:
    """Calls move_to `n_moves` times (tool agent), then finish; every reply bills 100 input tokens."""

    name, model = "test-script", "script-v0"

    def __init__(self, n_moves: int, prompt_tokens=lambda n: 100):
        self.n_moves, self.n, self.prompt_tokens = n_moves, 0, prompt_tokens

    def next(self, messages, tools) -> PlannerReply:
        self.n += 1
        if self.n <= self.n_moves:
            call = ToolCall(f"c{self.n}", "move_to", json.dumps({"xyz": [0.0, 0.0, 1.0]}))
        else:
            call = ToolCall(f"c{self.n}", "finish", json.dumps({"status": "done", "summary": "done"}))
        usage = Usage(input_tokens=self.prompt_tokens(self.n), output_tokens=10)
        return PlannerReply(text="", tool_calls=[call], usage=usage, usage_source="estimated")


@pytest.fixture
def stub(monkeypatch):
    monkeypatch.setattr(episode_mod, "RuntimeClient", StubRuntime)
    monkeypatch.setattr(StubRuntime, "solved_after", None)
    monkeypatch.setattr(StubRuntime, "timeout_on", None)
    monkeypatch.setattr(StubRuntime, "die_on", None)
    return StubRuntime


def spec(**kw) -> EpisodeSpec:
    return EpisodeSpec(benchmark="libero_pro", task="s/0", seed=0, agent="tool", ablation="no_vla", **kw)


def calls(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "calls.jsonl").read_text().splitlines()]


def test_the_episode_goes_on_after_success_until_finish_and_counts_those_calls(stub, tmp_path):
    stub.solved_after = 2
    rec = run_episode(spec(call_budget=10), ScriptPlanner(n_moves=4), str(tmp_path))
    assert rec.n_calls == 5  # four moves and finish: the two after success are counted (paper §3.4)
    assert rec.solved_at_call == 2 and rec.success and rec.status == "solved"
    assert [c["success_after"] for c in calls(tmp_path)] == [False, True, True, True, True]
    assert rec.input_tokens == 500


def test_stop_on_success_ends_at_the_first_success(stub, tmp_path):
    stub.solved_after = 2
    rec = run_episode(spec(call_budget=10, stop_on_success=True), ScriptPlanner(n_moves=4), str(tmp_path))
    assert rec.n_calls == 2 and rec.solved_at_call == 2 and rec.status == "solved"


def test_a_budget_ending_with_the_check_true_is_solved_and_finish_without_it_gave_up(stub, tmp_path):
    stub.solved_after = 3
    rec = run_episode(spec(call_budget=4), ScriptPlanner(n_moves=10), str(tmp_path / "a"))
    assert rec.n_calls == 4 and rec.solved_at_call == 3 and rec.status == "solved"
    stub.solved_after = None
    rec = run_episode(spec(call_budget=10), ScriptPlanner(n_moves=2), str(tmp_path / "b"))
    assert rec.status == "gave_up" and not rec.success and rec.solved_at_call is None


def test_after_a_wall_clock_or_error_ending_the_check_is_read_from_the_live_simulator(stub, tmp_path):
    # The action solved the task, then the clock ran out (or the runtime reported a failure) before its
    # result came back: the child is alive, so the benchmark's check is read, not the stale last flag.
    stub.solved_after, stub.timeout_on = 1, 1
    rec = run_episode(spec(call_budget=10), ScriptPlanner(n_moves=5), str(tmp_path / "clock"))
    assert rec.success and rec.solved_at_call == 1 and rec.status == "solved"
    assert rec.n_calls == 1 and len(calls(tmp_path / "clock")) == 1  # the interrupted call is on record
    stub.timeout_on, stub.die_on = None, 1
    rec = run_episode(spec(call_budget=10), ScriptPlanner(n_moves=5), str(tmp_path / "error"))
    assert rec.success and rec.status == "error" and "KeyError" in rec.error


def test_the_call_that_trips_the_context_window_is_recorded_and_billed(stub, tmp_path):
    planner = ScriptPlanner(n_moves=10, prompt_tokens=lambda n: 1000 * n)
    rec = run_episode(spec(call_budget=10, context_window=2500), planner, str(tmp_path))
    assert rec.status == "context_overflow"
    rows = calls(tmp_path)
    assert [r["input_tokens"] for r in rows] == [1000, 2000, 3000]
    assert rec.n_calls == 3 and rec.input_tokens == 6000 == sum(r["input_tokens"] for r in rows)
    assert rows[-1]["exception"] == "ContextOverflow" and rows[-1]["n_primitives"] == 0
    assert planner.n == 3


def test_an_empty_reply_is_sent_back_as_empty_text_not_null(stub, tmp_path):
    class Silent(ScriptPlanner):
        def next(self, messages, tools):
            self.seen = messages
            self.n += 1
            return PlannerReply(text="", tool_calls=[], usage=Usage(input_tokens=10), usage_source="estimated")

    planner = Silent(0)
    run_episode(spec(call_budget=2), planner, str(tmp_path))
    assistants = [m for m in planner.seen if m["role"] == "assistant"]
    assert assistants and all(m["content"] == "" for m in assistants)


def test_stop_on_success_is_a_config_key_off_by_default_and_reaches_the_spec():
    from types import SimpleNamespace

    from agents.config import validate_config
    from agents.play import spec_from_args

    config = validate_config({
        "benchmarks": {"libero_pro": {"tasks": ["libero_spatial_swap/0"], "seeds": [0], "call_budget": 40}},
        "agents": ["tool", "code"], "ablations": ["full"], "planner": {"name": "scripted", "model": "scripted-v1"},
        "prices": {"m": {"input": 1.0, "cached_input": 0.1, "output": 2.0}}, "price_model": "m"})
    assert config["episode"]["stop_on_success"] is False  # the paper's protocol
    args = SimpleNamespace(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent="tool",
                           ablation="full", repeat=0, planner=None, model=None, call_budget=None, wall_clock=None)
    assert spec_from_args(args, config)[0].stop_on_success is False
    config["episode"]["stop_on_success"] = True
    spec = spec_from_args(args, config)[0]
    assert spec.stop_on_success is True and "stop_on_success" not in spec.extra
