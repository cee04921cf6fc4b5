"""The episode loop answers both agents alike where the harness, not the interface, writes the answer.

`agents.episode._act` is called directly with a runtime that fails the test
if asked anything: what is checked here is decided before any primitive runs.
"""
from __future__ import annotations

import json

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


# -- a success reached inside a request the wall clock kills ------------------------------------------------


class _KilledMidRequest:
    """Stands in for RuntimeClient: the first action reaches the check, then the clock kills the child mid-request."""

    def __init__(self, trace_dir, limits=None):
        self.proc = type("Proc", (), {"poll": lambda self: -9})()
        self.deadline = float("inf")

    def start_clock(self, wall_clock_s):
        pass

    def request(self, verb, *args):
        from agents.runtime import RuntimeTimeout

        if verb == "init":
            card = {"suite": "s", "task": "s/0", "instruction": "put the bowl on the plate", "objects": ["bowl"],
                    "cameras": ["agentview"], "arms": ["right"], "guide": None}
            return {"card": card, "images": []}
        raise RuntimeTimeout(f"{verb} still running when the wall clock ran out")

    def solved_seen(self):
        return True

    def close(self):
        pass


@pytest.mark.parametrize("agent,name,args", [("code", "python", '{"code": "solve(); think_forever()"}'),
                                             ("tool", "vla", '{"instruction": "put the bowl on the plate"}')])
def test_a_success_reached_before_the_clock_killed_the_request_is_kept(monkeypatch, tmp_path, agent, name, args):
    import agents.episode as episode_mod
    from agents.episode import run_episode

    class OneCall:
        name, model = "test-one", "one-v0"

        def next(self, messages, tools):
            return PlannerReply(text="", tool_calls=[ToolCall("c1", name, args)], usage=Usage(input_tokens=10),
                                usage_source="estimated")

    monkeypatch.setattr(episode_mod, "RuntimeClient", _KilledMidRequest)
    spec = EpisodeSpec(benchmark="libero_pro", task="s/0", seed=0, agent=agent, call_budget=3)
    rec = run_episode(spec, OneCall(), str(tmp_path))
    assert (rec.status, rec.success, rec.solved_at_call, rec.n_calls) == ("solved", True, 1, 1)
    [row] = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert row["success_after"] is True and row["exception"] == "RuntimeTimeout"  # the killed call's own row


class _SolvedAfterFirstLook:
    """The benchmark's check: false when the success guard asks before the primitive, true after it."""

    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return self.n > 1


def test_the_runtime_tells_the_parent_when_an_acting_primitive_reached_the_check_in_both(runtime_server, monkeypatch):
    import os

    server = runtime_server
    xyz = json.loads(server.call_tool("state", {}).text)["eef_pos"]
    r, w = os.pipe()
    os.set_blocking(r, False)
    try:
        server.solved_fd = w
        monkeypatch.setattr(server.robot.backend, "success", lambda: True)
        server.call_tool("state", {})  # read-only: says nothing
        server.exec_cell("robo.locate('plate_1')")
        with pytest.raises(BlockingIOError):
            os.read(r, 1)
        for act in (lambda: server.call_tool("move_to", {"xyz": xyz, "max_steps": 5}),
                    lambda: server.exec_cell(f"robo.move_to({xyz}, max_steps=5)")):
            server.solved_fd = w
            monkeypatch.setattr(server.robot.backend, "success", _SolvedAfterFirstLook())
            assert act().success
            assert os.read(r, 8) == b"1" and server.solved_fd is None  # once, then no more writes
    finally:
        server.solved_fd = None
        os.close(r)
        os.close(w)


def test_the_shared_facts_count_as_instructions_not_api_in_both_agents_prompts():
    from agents.episode import ABLATION_EFFECTS, render_prompt
    from agents.usage import PromptSerializer, input_sources, split_system_prompt
    from robots.api_docs import conventions

    card = {"instruction": "put the bowl on the plate", "objects": ["bowl_1", "plate_1"], "cameras": ["agentview"],
            "arms": ["right"], "guide": None}
    n_facts = len(PromptSerializer().encode(conventions()))
    for agent in ("tool", "code"):
        spec = EpisodeSpec(benchmark="libero_pro", task="s/0", seed=0, agent=agent)
        system, tools, task = render_prompt(spec, card, ("vla",), ABLATION_EFFECTS["full"])
        prose, api, _ = split_system_prompt(system)
        assert conventions() in prose and conventions() not in api, agent
        sources = input_sources([{"role": "system", "content": system}, {"role": "user", "content": task}], tools)
        assert sources.system >= n_facts, (agent, sources.system, n_facts)
