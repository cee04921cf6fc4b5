"""Text-only planners: planner.vision / planner.tool_calls / constrain_calls on the loopback server, and whole episodes.

The episodes run both agents on a real LIBERO-PRO scene with the same
planner setting (vision off, calls written as text), so what one interface
gets and the other does not shows up as a difference between them.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from agents.episode import FINISH_TOOL, PYTHON_TOOL, EpisodeSpec, run_episode, withheld_note
from agents.errors import CellbenchError
from agents.planners.base import PlannerConfigError
from agents.planners.openai_planner import OpenAIPlanner
from agents.textcalls import instructions
from openai_server import Fault, serve, text_reply

MESSAGES = [{"role": "system", "content": "You control a robot."}, {"role": "user", "content": "Task: x"}]
TOOLS = [PYTHON_TOOL, FINISH_TOOL]


def _planner(server, **kw):
    return OpenAIPlanner(model="m", base_url=server.base_url, api_key="sk-test", max_retries=3,
                         backoff_base_s=0.0, **kw)


def test_text_mode_sends_no_tools_and_reads_the_call_from_the_text():
    reply = 'Looking first.\n```json\n{"name": "python", "arguments": {"code": """print(robo.state())"""}}\n```'
    with serve(lambda body: text_reply(reply)) as server:
        planner = _planner(server, tool_calls="text")
        got = planner.next(MESSAGES, TOOLS)
        sent = server.requests[-1].body
    assert "tools" not in sent and "tool_choice" not in sent and "response_format" not in sent
    assert sent["messages"][0]["content"] == "You control a robot.\n\n" + instructions(TOOLS)
    assert [(c.name, json.loads(c.arguments), c.source) for c in got.tool_calls] == [
        ("python", {"code": "print(robo.state())"}, "text")]
    assert got.text == reply


def test_native_mode_calls_are_marked_native_and_text_is_not_parsed():
    from openai_server import tool_call

    with serve(lambda body: tool_call("finish", {"status": "done", "summary": "s"},
                                      content='{"name": "python", "arguments": {"code": "1"}}')) as server:
        got = _planner(server).next(MESSAGES, TOOLS)
        assert server.requests[-1].body["tools"] == TOOLS
    assert [(c.name, c.source) for c in got.tool_calls] == [("finish", "native")]


def test_constrain_calls_sends_the_calls_json_schema():
    with serve(lambda body: text_reply('{"name": "finish", "arguments": {"status": "done", "summary": "s"}}')) as server:
        got = _planner(server, tool_calls="text", constrain_calls=True).next(MESSAGES, TOOLS)
        fmt = server.requests[-1].body["response_format"]
    assert fmt["type"] == "json_schema"
    assert [b["properties"]["name"]["const"] for b in fmt["json_schema"]["schema"]["anyOf"]] == ["python", "finish"]
    assert [c.name for c in got.tool_calls] == ["finish"]


@pytest.mark.parametrize("bad, key", [({"tool_calls": "xml"}, "planner.tool_calls"),
                                      ({"constrain_calls": True}, "planner.constrain_calls")])
def test_bad_settings_name_their_key(bad, key):
    with pytest.raises(CellbenchError, match=key):
        OpenAIPlanner(model="m", api_key="k", **bad)


@pytest.mark.parametrize("status", [500, 400])
def test_image_input_not_supported_is_a_config_error_naming_planner_vision_not_retried(status):
    """llama.cpp answers a text-only model's image with a 500: retrying would only end in planner_error."""
    fault = Fault("status", status, message="image input is not supported - hint: if this is unexpected, "
                                            "you may need to provide the mmproj")
    with serve(lambda body: text_reply("unused"), faults=[fault]) as server:
        with pytest.raises(PlannerConfigError, match=r"planner\.vision: false"):
            _planner(server).next(MESSAGES, TOOLS)
        assert len(server.requests) == 1


# ---------------------------------------------------------------------------
# Whole episodes, both agents, on a real scene

#: Per agent: the reply written as text that locates an object, as each interface says it.
LOCATE = {
    "tool": 'I will find the bowl.\n```json\n{"name": "locate", "arguments": {"name": "%s"}}\n```',
    "code": 'I will find the bowl.\n```python\nprint(robo.locate("%s").position)\n```',
}


class TextResponder:
    """No call at first, then a locate written as text, then finish: what a small local model writes."""

    def __init__(self, agent):
        self.agent, self.n = agent, 0

    def __call__(self, body):
        self.n += 1
        if self.n == 1:
            return text_reply("Let me think about the scene first.")
        if self.n == 2:
            task = body["messages"][1]["content"]
            task = task if isinstance(task, str) else " ".join(p.get("text", "") for p in task)
            first_object = re.search(r"Objects in the scene \([^)]*\): ([^,\n]+)", task).group(1).strip()
            return text_reply(LOCATE[self.agent] % first_object)
        return text_reply('{"name": "finish", "arguments": {"status": "stuck", "summary": "only looked"}}')


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    out = {}
    for agent in ("tool", "code"):
        d = tmp_path_factory.mktemp(f"text_only_{agent}")
        with serve(TextResponder(agent)) as server:
            planner = _planner(server, vision=False, tool_calls="text")
            spec = EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent=agent,
                               ablation="no_vla", call_budget=4)
            try:
                rec = run_episode(spec, planner, str(d))
            finally:
                planner.close()
            assert not server.responder_errors, server.responder_errors[0]
            out[agent] = (rec, d, [r.body for r in server.requests])
    return out


def _calls(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "calls.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("agent", ["tool", "code"])
def test_text_only_episode_sends_notes_not_images_and_keeps_them_in_the_trace(episodes, agent):
    rec, d, bodies = episodes[agent]
    sent = json.dumps(bodies)
    assert "image_url" not in sent and "data:image" not in sent
    assert withheld_note("agentview") in json.dumps(bodies[0]["messages"][1])
    assert [c["images_withheld"] for c in _calls(d)][0] == 1
    assert rec.images_in_prompts == 0
    assert list((d / "images").glob("*agentview*")), "the withheld images are still saved for people"


@pytest.mark.parametrize("agent", ["tool", "code"])
def test_text_calls_reach_the_simulator_and_are_marked_text(episodes, agent):
    rec, d, bodies = episodes[agent]
    calls = _calls(d)
    assert [c["tool_call_source"] for c in calls] == [None, "text", "text"]
    assert [c["action_kind"] for c in calls] == ["none", "tool" if agent == "tool" else "cell", "finish"]
    assert rec.status == "gave_up" and rec.n_primitives == 1
    # The reply without a call is answered with how to write one, in the second request, as plain text.
    second = bodies[1]["messages"]
    assert second[-1]["role"] == "user" and "Your reply has no tool call. Write exactly one" in second[-1]["content"]
    assert all("tools" not in b for b in bodies)


def test_both_agents_get_the_same_notes_and_answers(episodes):
    """Same no-call answer (but for the python block only the code agent has), same 'Result of' framing."""
    def framing(agent):
        rec, d, bodies = episodes[agent]
        third = bodies[2]["messages"]
        return (third[3]["content"], third[-1]["content"].split(":\n")[0])

    assert framing("code")[0].replace(", or a fenced ```python block as the code of python", "") == framing("tool")[0]
    assert framing("tool")[1] == "Result of locate" and framing("code")[1] == "Result of python"


@pytest.mark.parametrize("agent", ["tool", "code"])
def test_wall_clock_ends_an_episode_whose_replies_run_nothing(agent, tmp_path):
    """A slow model that writes no call never reaches the runtime, where the clock is read: it still ends."""
    def slow(body):
        time.sleep(1.0)
        return text_reply("Let me think about it.")

    with serve(slow) as server:
        planner = _planner(server)
        spec = EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent=agent,
                           ablation="no_vla", call_budget=50, wall_clock_s=3)
        try:
            rec = run_episode(spec, planner, str(tmp_path))
        finally:
            planner.close()
    # Without the check at each call it would run all 50 calls (~50 s) and end on the call budget.
    assert rec.status == "wall_clock" and 1 <= rec.n_calls < 10, (rec.status, rec.n_calls)
