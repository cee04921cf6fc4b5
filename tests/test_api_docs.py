"""The code agent's API reference and the tool agent's schemas describe the same primitives (no simulator)."""
from __future__ import annotations

import ast
import inspect
import json
import re

import jsonschema
import pytest

from robots.api_docs import TWO_ARM_PARAMS, api_reference, tool_schemas
from robots.robot import TWO_ARMS, Robot

HEADING = re.compile(r"^### `robo\.(?P<name>\w+)\((?P<params>.*)\) -> (?P<ret>[^`]+)`\s+\((?P<kind>acting|read-only)\)$")
NO_DEFAULT = object()


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets and quotes ("a: Literal['x', 'y'], b: int = 2" -> 2 parts)."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def reference_primitives(markdown: str) -> dict[str, dict]:
    """name -> {'acting': bool, 'params': [(name, required, default)]} from the reference's headings."""
    out = {}
    for line in markdown.splitlines():
        m = HEADING.match(line)
        if not m:
            continue
        params = []
        for part in _split_top_level(m["params"]):
            name_type, eq, default = part.partition(" = ")
            name = name_type.split(":")[0].strip()
            params.append((name, not eq, ast.literal_eval(default) if eq else NO_DEFAULT))
        out[m["name"]] = {"acting": m["kind"] == "acting", "params": params}
    return out


def schema_primitives(tools: list[dict]) -> dict[str, dict]:
    """The same view from the OpenAI tool schemas (defaults are stated in each description)."""
    out = {}
    for tool in tools:
        fn = tool["function"]
        props, required = fn["parameters"]["properties"], set(fn["parameters"]["required"])
        params = []
        for name, prop in props.items():
            m = re.search(r"Default: (.+)\.$", prop.get("description", ""))
            default = json.loads(m.group(1)) if m else NO_DEFAULT
            params.append((name, name in required, default))
        acting = fn["description"].endswith("Acting (moves the robot).")
        out[fn["name"]] = {"acting": acting, "params": params}
    return out


def signature_primitives(capabilities=("vla",)) -> dict[str, dict]:
    """The source of truth: the primitive methods' own signatures (a one-arm robot hides `arm`)."""
    out = {}
    for spec in Robot.primitive_specs():
        if spec.requires and spec.requires not in capabilities:
            continue
        params = [
            (p.name, p.default is inspect.Parameter.empty, NO_DEFAULT if p.default is inspect.Parameter.empty else p.default)
            for p in list(inspect.signature(spec.fn).parameters.values())[1:]
            if not (p.name in TWO_ARM_PARAMS and TWO_ARMS not in capabilities)
        ]
        out[spec.name] = {"acting": spec.acting, "params": params}
    return out


@pytest.mark.parametrize("capabilities", [("vla",), ("vla", TWO_ARMS)])
def test_reference_and_schemas_list_the_same_primitives_as_the_signatures(capabilities):
    ref = reference_primitives(api_reference(capabilities))
    tools = schema_primitives(tool_schemas(capabilities))
    truth = signature_primitives(capabilities)
    assert list(ref) == list(tools) == list(truth)
    assert ref == truth
    assert tools == truth
    # The marker, not a hand-kept list, decides acting: spot-check both kinds.
    assert truth["move_to"]["acting"] and not truth["locate"]["acting"]


def test_argument_details_survive_in_both_views():
    ref = reference_primitives(api_reference())
    assert ref["move_to"]["params"] == [("xyz", True, NO_DEFAULT), ("max_steps", False, 250)]
    assert ref["set_gripper"]["params"] == [("action", True, NO_DEFAULT)]
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in tool_schemas()}
    assert tools["set_gripper"]["properties"]["action"]["enum"] == ["open", "close"]
    xyz = tools["move_to"]["properties"]["xyz"]
    assert xyz["type"] == "array" and xyz["items"] == {"type": "number"}
    assert tools["state"]["properties"] == {} and tools["state"]["required"] == []


def test_vla_disappears_from_both_without_the_capability():
    ref = reference_primitives(api_reference(capabilities=()))
    tools = schema_primitives(tool_schemas(capabilities=()))
    assert "vla" not in ref and "vla" not in tools
    assert "robo.vla(" not in api_reference(capabilities=())
    assert list(ref) == list(tools) == list(signature_primitives(()))
    assert "vla" in reference_primitives(api_reference(("vla",)))


def test_show_can_be_left_out_of_the_tool_schemas():
    with_show = [t["function"]["name"] for t in tool_schemas(("vla",), include_show=True)]
    without = [t["function"]["name"] for t in tool_schemas(("vla",), include_show=False)]
    assert "show" in with_show and "show" not in without
    assert [n for n in with_show if n != "show"] == without


@pytest.mark.parametrize("capabilities", [("vla",), ()])
def test_every_tool_schema_is_valid_json_schema(capabilities):
    for tool in tool_schemas(capabilities):
        assert tool["type"] == "function"
        params = tool["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(params)
        assert params["type"] == "object" and params["additionalProperties"] is False
        for name, prop in params["properties"].items():
            jsonschema.Draft202012Validator.check_schema(prop)
            assert prop["description"], f"{tool['function']['name']}.{name} has no description"


def test_schemas_accept_good_calls_and_reject_bad_ones():
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in tool_schemas()}
    ok = {"move_to": {"xyz": [0.1, 0.2, 1.0]}, "set_gripper": {"action": "close"}, "vla": {"instruction": "pick"}}
    for name, args in ok.items():
        jsonschema.validate(args, tools[name], cls=jsonschema.Draft202012Validator)
    bad = {"set_gripper": {"action": "half"}, "move_to": {"max_steps": 10}, "locate": {"name": "x", "extra": 1}}
    for name, args in bad.items():
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(args, tools[name], cls=jsonschema.Draft202012Validator)


def test_cli_prints_the_view_of_the_benchmark_and_ablation(capsys):
    from agents.cli import main

    assert main(["api", "--benchmark", "bimanual"]) == 0
    two_arm = capsys.readouterr().out
    assert "robo.move_both(" in two_arm and "arm: Literal['right', 'left']" in two_arm
    assert main(["api"]) == 0
    one_arm = capsys.readouterr().out
    assert "robo.move_both(" not in one_arm and "arm:" not in one_arm and "robo.vla(" in one_arm
    assert main(["api", "--ablation", "no_vla"]) == 0
    assert "robo.vla(" not in capsys.readouterr().out
    assert main(["api", "--tools", "--benchmark", "bimanual", "--ablation", "no_vla_no_guides"]) == 0
    names = [t["function"]["name"] for t in json.loads(capsys.readouterr().out)]
    assert "move_both" in names and "vla" not in names
    assert main(["api", "--benchmark", "robotwin"]) == 2
    assert "unknown benchmark 'robotwin'" in capsys.readouterr().err
