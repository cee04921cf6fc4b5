"""Both interfaces report the success flag after acting and refuse acting after success in the same words.

An in-process `RuntimeServer` over a real LIBERO-PRO scene (conftest's `runtime_server`) answers the same
primitive as a tool call and inside a cell: an acting one carries the
benchmark's check (`task_success` in the tool's JSON, `Task success: ...` as
the cell's last line), a read-only one carries none, and once the check
holds an acting primitive is refused with `TASK_COMPLETE` in both, the robot
unmoved.  (The success check is forced true at the backend seam for the
refusal; test_agents_cells solves the task for real.)
"""
from __future__ import annotations

import json

import pytest

from agents.feedback import TASK_COMPLETE, TASK_SUCCESS_KEY, parse_success_line, parse_tool_success, success_line


@pytest.fixture
def server(runtime_server):
    return runtime_server


def _here(server) -> list[float]:
    return json.loads(server.call_tool("state", {}).text)["eef_pos"]


def test_an_acting_primitive_reports_the_check_in_both_and_a_read_only_one_in_neither(server):
    xyz = _here(server)
    tool = server.call_tool("move_to", {"xyz": xyz, "max_steps": 5})
    result = json.loads(tool.text)
    assert result[TASK_SUCCESS_KEY] is False and set(result) == {"result", "state", TASK_SUCCESS_KEY}
    cell = server.exec_cell(f"m = robo.move_to({xyz}, max_steps=5)\nprint(m.reached)")
    assert cell.text.splitlines()[-1] == success_line(False)
    assert parse_tool_success(tool.text) is parse_success_line(cell.text) is False
    # Read-only: no flag in either.
    assert TASK_SUCCESS_KEY not in json.loads(server.call_tool("state", {}).text)
    assert parse_success_line(server.exec_cell("print(robo.state().holding)").text) is None


def test_after_success_acting_is_refused_the_same_way_in_both(server, monkeypatch):
    xyz = _here(server)
    monkeypatch.setattr(server.robot.backend, "success", lambda: True)
    tool = server.call_tool("move_to", {"xyz": [xyz[0], xyz[1], xyz[2] + 0.05]})
    assert json.loads(tool.text) == {"result": TASK_COMPLETE, TASK_SUCCESS_KEY: True}
    assert tool.finished and not any(r["acting"] for r in tool.primitives)
    cell = server.exec_cell(f"robo.move_to([{xyz[0]}, {xyz[1]}, {xyz[2] + 0.05}])\nprint('after')")
    assert cell.text.splitlines() == [TASK_COMPLETE, success_line(True)]
    assert cell.finished and not any(r["acting"] for r in cell.primitives)
    monkeypatch.undo()
    assert _here(server) == pytest.approx(xyz, abs=0.005)  # neither moved the robot
