"""The episode loop answers both agents alike where the harness, not the interface, writes the answer.

`agents.episode._act` is called directly with a runtime that fails the test
if asked anything: what is checked here is decided before any primitive runs.
"""
from __future__ import annotations

import pytest

from agents.episode import FINISH_TOOL, PYTHON_TOOL, EpisodeSpec, _act
from agents.feedback import unknown_tool
from agents.planners.base import PlannerReply, ToolCall
from agents.records import Usage
from agents.textcalls import tool_names
from robots.api_docs import tool_schemas


class NoRuntime:
    def request(self, *args):
        raise AssertionError(f"the runtime was asked {args[0]} {args[1:2]}")


def _answer(agent: str, tools, name: str):
    spec = EpisodeSpec(benchmark="libero_pro", task="s/0", seed=0, agent=agent)
    reply = PlannerReply(text="", tool_calls=[ToolCall("c1", name, "{}")], usage=Usage(), usage_source="estimated")
    messages: list[dict] = []
    rec, result = _act(spec, reply, messages, NoRuntime(), None, 1, {}, tools)
    [answer] = [m["content"] for m in messages if m["role"] == "tool"]
    return rec, result, answer


TOOL_TOOLS = tool_schemas(("vla",), include_show=False) + [FINISH_TOOL]  # the tool agent in `full`
CODE_TOOLS = [PYTHON_TOOL, FINISH_TOOL]


@pytest.mark.parametrize("agent,tools,name", [
    ("tool", TOOL_TOOLS, "show"),        # a primitive the robot has but `full` does not offer the tool agent
    ("tool", TOOL_TOOLS, "fly_to_the_moon"),
    ("tool", TOOL_TOOLS, "python"),      # the other interface's tool
    ("code", CODE_TOOLS, "move_to"),     # a primitive is no tool of the code agent
    ("code", CODE_TOOLS, "fly_to_the_moon"),
])
def test_a_tool_outside_the_agents_list_is_unknown_in_the_same_words_and_never_runs(agent, tools, name):
    rec, result, answer = _answer(agent, tools, name)
    assert result is None  # nothing ran: a tool agent in `full` gets no `show` image by naming it
    assert (rec.action_kind, rec.exception) == ("malformed", "UnknownTool")
    assert answer == unknown_tool(name, tool_names(tools))
    # The answer names only the tools this agent was given (not `show` where it is not offered).
    assert "show" not in answer.split("the tools are:")[1]


class _Failing:
    """A robot whose primitive raises a long message (a backend that dumps its state into its error)."""

    MESSAGE = "backend state: " + "x" * 20000

    def move_to(self, xyz):
        raise RuntimeError(self.MESSAGE)


def test_a_long_primitive_error_is_trimmed_alike_as_a_tool_result_and_in_a_cell():
    from agents.cells import OUTPUT_HEAD, OUTPUT_TAIL, CellNamespace
    from agents.feedback import error_text

    try:
        _Failing().move_to([0, 0, 1])
    except RuntimeError as e:
        tool = error_text(e)
    cell = CellNamespace(_Failing()).run("robo.move_to([0, 0, 1])")
    assert cell.exception == "RuntimeError"
    bound = OUTPUT_HEAD + OUTPUT_TAIL + 60  # the kept head and tail, and the note saying how much went
    assert len(cell.output) <= bound and len(tool) <= bound, (len(cell.output), len(tool))
    assert "characters trimmed]" in tool and "characters trimmed]" in cell.output
    assert tool.startswith("Error: RuntimeError: backend state: xxx")
