"""An unexpected exception in a primitive is that call's result in both interfaces, and the episode goes on.

The tool agent reads an error text naming the exception's type and message
(`agents.feedback.error_text`), the code agent the cell's traceback, which
names the same; neither episode ends.  Two real sources of failure on a real
LIBERO-PRO scene:

* the openpi VLA client with no policy server at its port: its
  `PolicyServerUnavailable` (a ConnectionError), through whole episodes in the
  runtime child;
* a backend fault inside a primitive (a RuntimeError, as a simulator or
  policy backend raises), injected at the VLA policy seam of an in-process
  `RuntimeServer` (conftest's `runtime_server`), compared between the two
  interfaces call for call.
"""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from agents.episode import EpisodeSpec, run_episode
from agents.feedback import TASK_SUCCESS_KEY, error_text
from agents.planners.base import PlannerReply, ToolCall
from agents.records import Usage

TASK = "libero_spatial_swap/0"


def _free_port() -> int:
    """A port nothing listens on (bound, read, released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replay:
    name, model = "test-replay", "replay-v0"

    def __init__(self, calls):
        self.calls, self.n, self.seen = calls, 0, []

    def next(self, messages, tools) -> PlannerReply:
        self.seen.append([dict(m) for m in messages])
        name, args = self.calls[min(self.n, len(self.calls) - 1)]
        self.n += 1
        return PlannerReply(text="", tool_calls=[ToolCall(f"t{self.n}", name, json.dumps(args))],
                            usage=Usage(input_tokens=100, output_tokens=10), usage_source="estimated")


def _spec(agent: str) -> EpisodeSpec:
    return EpisodeSpec(benchmark="libero_pro", task=TASK, seed=0, agent=agent, ablation="no_guides", image_size=128,
                       n_images=1, call_budget=6, vla="openpi",
                       extra={"openpi_host": "127.0.0.1", "openpi_port": _free_port()})


def _rows(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "calls.jsonl").read_text().splitlines()]


FINISH = ("finish", {"status": "stuck", "summary": "no policy server"})


@pytest.mark.parametrize("agent", ["tool", "code"])
def test_an_unreachable_policy_server_is_the_calls_result_and_the_episode_goes_on(agent, tmp_path):
    action = (("vla", {"instruction": "pick up the bowl", "max_steps": 20}) if agent == "tool"
              else ("python", {"code": "r = robo.vla('pick up the bowl', max_steps=20)"}))
    planner = Replay([action, ("state", {}) if agent == "tool" else ("python", {"code": "print('still here')"}),
                      FINISH])
    rec = run_episode(_spec(agent), planner, str(tmp_path))
    assert rec.status == "gave_up" and rec.n_calls == 3, rec.error
    rows = _rows(tmp_path)
    # Both interfaces record the same exception type (the cell worker re-raises it under its own name).
    assert rows[0]["exception"] == "PolicyServerUnavailable"
    assert [r["action_kind"] for r in rows] == (["tool", "tool", "finish"] if agent == "tool" else ["cell"] * 2 + ["finish"])
    answer = [m for m in planner.seen[1] if m["role"] == "tool"][-1]["content"]
    assert "PolicyServerUnavailable" in answer and "no openpi policy server is listening at 127.0.0.1" in answer
    if agent == "tool":
        assert json.loads(answer)["result"].startswith("Error: PolicyServerUnavailable: no openpi policy server is listening")
    else:
        assert "Traceback" in answer
    later = [m for m in planner.seen[2] if m["role"] == "tool"][-1]["content"]
    assert "still here" in later if agent == "code" else "gripper_width_m" in later


class _FaultyPolicy:
    name = "faulty"

    def __init__(self, exc: Exception):
        self.exc = exc

    def run(self, io, instruction, max_steps):
        raise self.exc


@pytest.mark.parametrize("exc", [RuntimeError("physics backend fault"), ConnectionError("policy server went away"),
                                 TimeoutError("render timed out")], ids=lambda e: type(e).__name__)
def test_a_backend_exception_reaches_both_interfaces_with_its_type_and_message(runtime_server, monkeypatch, exc):
    server = runtime_server
    monkeypatch.setattr(server.robot, "vla_policy", _FaultyPolicy(exc))
    tool = server.call_tool("vla", {"instruction": "pick up the bowl", "max_steps": 20})
    cell = server.exec_cell("robo.vla('pick up the bowl', max_steps=20)")
    assert tool.exception == cell.exception == type(exc).__name__
    # The tool agent's text names what the traceback's last line names.
    last_line = [line for line in cell.text.splitlines() if line.startswith(type(exc).__name__)][-1]
    assert error_text(exc) == f"Error: {last_line}"
    result = json.loads(tool.text)
    assert result["result"] == error_text(exc)
    # The VLA primitive was entered (an acting primitive): both report the check after it.
    assert result[TASK_SUCCESS_KEY] is False and cell.text.splitlines()[-1] == "Task success: False"
    # And the runtime goes on in both.
    assert json.loads(server.call_tool("state", {}).text)["gripper_width_m"] >= 0
    assert server.exec_cell("print(1 + 1)").text.strip() == "2"
