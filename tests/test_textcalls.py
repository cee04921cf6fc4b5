"""The text tool-call parser (agents/textcalls.py): real model replies and hand-made edge cases, the same for both agents.

Each edge case is written once over a call `(name, arguments)` and run for
the tool agent (its primitives + finish, a `move_to` call) and the code agent
(python + finish, a `python` call), so a rule that held for one interface
and not the other fails here.  The saved replies in
tests/fixtures/local_llm_replies.json are what Qwen2.5-Coder 1.5B Instruct
(Q4_K_M, llama.cpp) wrote in real episodes; the expected calls were read off
them by hand.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.episode import FINISH_TOOL, PYTHON_TOOL
from agents.textcalls import (call_schema, instructions, no_call_message, parse_calls, to_text_conversation,
                              tool_names)
from robots.api_docs import tool_schemas

FIXTURES = Path(__file__).parent / "fixtures" / "local_llm_replies.json"

TOOLS = {"tool": tool_schemas(("vla",)) + [FINISH_TOOL], "code": [PYTHON_TOOL, FINISH_TOOL]}
#: One ordinary acting call per agent.
CALLS = {
    "tool": ("move_to", {"xyz": [0.1, -0.2, 0.95]}),
    "code": ("python", {"code": 'bowl = robo.locate("akita_black_bowl_1")\nprint(bowl.position)'}),
}
AGENTS = ("tool", "code")


def _json(name, args):
    return json.dumps({"name": name, "arguments": args})


def _parsed(text, agent):
    return [(c.name, _args(c.arguments)) for c in parse_calls(text, tool_names(TOOLS[agent]))]


def _args(text):
    """The parsed arguments, or MALFORMED for a call passed on raw (the episode answers it as malformed)."""
    try:
        return json.loads(text)
    except ValueError:
        return MALFORMED


MALFORMED = "<malformed>"


@pytest.mark.parametrize("agent", AGENTS)
def test_fenced_json_with_prose_around_it(agent):
    name, args = CALLS[agent]
    text = f"I will do the next step now.\n\n```json\n{_json(name, args)}\n```\n\nThis should work."
    assert _parsed(text, agent) == [(name, args)]


@pytest.mark.parametrize("agent", AGENTS)
def test_bare_json_in_prose(agent):
    name, args = CALLS[agent]
    text = f"Next I call {_json(name, args)} and look at the result."
    assert _parsed(text, agent) == [(name, args)]


@pytest.mark.parametrize("agent", AGENTS)
def test_two_calls_in_one_reply_are_both_found_in_order(agent):
    name, args = CALLS[agent]
    finish = {"status": "done", "summary": "placed it"}
    text = f"```json\n{_json(name, args)}\n```\nthen\n```json\n{_json('finish', finish)}\n```"
    assert _parsed(text, agent) == [(name, args), ("finish", finish)]


@pytest.mark.parametrize("agent", AGENTS)
def test_broken_json_naming_a_tool_is_handed_on_raw(agent):
    """Not dropped: the episode answers it as it answers malformed native arguments."""
    name, _ = CALLS[agent]
    text = f'```json\n{{"name": "{name}", "arguments": {{"x": [0.1, 0.2,}}, }}\n```'
    calls = parse_calls(text, tool_names(TOOLS[agent]))
    assert [c.name for c in calls] == [name]
    with pytest.raises(json.JSONDecodeError):
        json.loads(calls[0].arguments)


@pytest.mark.parametrize("agent", AGENTS)
def test_python_style_triple_quotes_single_quotes_and_literals(agent):
    name, args = CALLS[agent]
    value = next(iter(args.values()))
    key = next(iter(args))
    body = f'"""\n{value}\n"""' if isinstance(value, str) else json.dumps(value)
    text = f"```json\n{{'name': '{name}', 'arguments': {{'{key}': {body},}}}}\n```"
    assert _parsed(text, agent) == [(name, args)]


@pytest.mark.parametrize("agent", AGENTS)
def test_a_fenced_call_to_an_unknown_tool_is_a_call_to_answer_unknown_tool(agent):
    """As a native call to it is (Qwen2.5 0.5B wrote put_bowl_on_stove four times and was told only
    that its reply held no call)."""
    assert _parsed('```json\n{"name": "teleport", "arguments": {"to": 1}}\n```', agent) == [("teleport", {"to": 1})]
    assert _parsed('<tool_call>{"name": "teleport", "arguments": {}}</tool_call>', agent) == [("teleport", {})]


@pytest.mark.parametrize("agent", AGENTS)
def test_unknown_names_in_prose_and_plain_prose_are_no_call(agent):
    assert _parsed('I could call {"name": "teleport", "arguments": {}} but will not.', agent) == []
    assert _parsed('```json\n{"name": "plate_1", "extent": [0.1, 0.1]}\n```', agent) == []
    assert _parsed("I think the bowl is on the left {of the plate}.", agent) == []
    assert _parsed("", agent) == []


@pytest.mark.parametrize("agent", AGENTS)
def test_tool_call_tags_and_openai_wire_shape(agent):
    name, args = CALLS[agent]
    tagged = f"<tool_call>\n{_json(name, args)}\n</tool_call>"
    wire = json.dumps({"type": "function", "function": {"name": name, "arguments": json.dumps(args)}})
    assert _parsed(tagged, agent) == [(name, args)]
    assert _parsed(wire, agent) == [(name, args)]


@pytest.mark.parametrize("agent", AGENTS)
def test_unclosed_fence_at_the_reply_limit(agent):
    name, args = CALLS[agent]
    assert _parsed(f"```json\n{_json(name, args)}\n", agent) == [(name, args)]


def test_lone_python_block_is_the_body_of_python_only_where_python_is_a_tool():
    code = "x = robo.state()\nprint(x)"
    text = f"Let me check the state.\n```python\n{code}\n```"
    assert _parsed(text, "code") == [("python", {"code": code})]
    assert _parsed(text, "tool") == []  # the tool agent has no python tool: prose, not a call


def test_a_json_call_wins_over_python_blocks():
    """A reply that explains a cell in a ```python block and then calls finish calls finish."""
    text = ("```python\nprint('done')\n```\n"
            '```json\n{"name": "finish", "arguments": {"status": "done", "summary": "ok"}}\n```')
    assert _parsed(text, "code") == [("finish", {"status": "done", "summary": "ok"})]


def _fixtures():
    return json.loads(FIXTURES.read_text())


@pytest.mark.parametrize("case", _fixtures(), ids=lambda c: c["id"])
def test_saved_real_model_replies(case):
    got = _parsed(case["content"], case["agent"])
    assert [n for n, _ in got] == [c["name"] for c in case["expected"]], case["content"][:300]
    for (_, args), want in zip(got, case["expected"]):
        assert (args == MALFORMED) == want.get("malformed", False), args
        for key, value in want.get("arguments", {}).items():
            assert args[key] == value
        for fragment in want.get("code_contains", []):
            assert fragment in args["code"]


def test_saved_replies_cover_both_agents():
    agents = {c["agent"] for c in _fixtures()}
    assert agents == {"tool", "code"}


@pytest.mark.parametrize("agent", AGENTS)
def test_text_conversation_has_no_native_calls_and_names_each_result(agent):
    name, args = CALLS[agent]
    tools = TOOLS[agent]
    messages = [
        {"role": "system", "content": "You control a robot."},
        {"role": "user", "content": [{"type": "text", "text": "Task: put the bowl on the plate."}]},
        {"role": "assistant", "content": f"```json\n{_json(name, args)}\n```",
         "tool_calls": [{"id": "t1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "t2", "type": "function", "function": {"name": "finish", "arguments": "{}"}}]},
    ]
    out = to_text_conversation(messages, tools)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant"]
    assert all("tool_calls" not in m for m in out)
    assert out[0]["content"].endswith(instructions(tools))
    assert f"Result of {name}:\nok" in out[3]["content"] and "more" in out[3]["content"]
    assert _parsed(out[4]["content"], agent) == [("finish", {})]  # a call without text is rendered as text
    assert messages[2]["tool_calls"]  # the episode's own conversation is left as it was


def test_instructions_differ_between_agents_only_by_their_tools_and_the_python_block():
    tool_note, code_note = instructions(TOOLS["tool"]), instructions(TOOLS["code"])
    head = lambda note: note.split("The result comes back")[0]  # noqa: E731
    assert head(code_note).replace(
        "To call `python` you may instead write the cell as one fenced ```python block: "
        "the block is the `code` argument.\n\n", "") == head(tool_note)
    for tools, note in ((TOOLS["tool"], tool_note), (TOOLS["code"], code_note)):
        for tool in tools:
            assert f"- {tool['function']['name']}: " in note


@pytest.mark.parametrize("agent", AGENTS)
def test_native_mode_nudge_names_the_call_written_as_text(agent):
    name, args = CALLS[agent]
    tools = TOOLS[agent]
    assert no_call_message(f"```json\n{_json(name, args)}\n```", "native", tools) == (
        f"Your reply has no tool call; it contains what looks like a call to {name} written as text: "
        f"call the tool instead.")
    assert no_call_message("I am not sure.", "native", tools) == "Reply with exactly one tool call."
    assert no_call_message("I am not sure.", "text", tools).startswith("Your reply has no tool call. Write exactly one")


@pytest.mark.parametrize("agent", AGENTS)
def test_call_schema_accepts_each_tool_and_refuses_others(agent):
    from jsonschema import Draft202012Validator

    name, args = CALLS[agent]
    validator = Draft202012Validator(call_schema(TOOLS[agent]))
    assert validator.is_valid({"name": name, "arguments": args})
    assert validator.is_valid({"name": "finish", "arguments": {"status": "done", "summary": "x"}})
    assert not validator.is_valid({"name": "teleport", "arguments": {}})
    assert not validator.is_valid({"name": name})
