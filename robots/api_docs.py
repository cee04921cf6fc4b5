"""Generate both views of the primitives from their one definition on `Robot`.

- `api_reference(...)`: the Markdown API reference the code agent reads.
- `tool_schemas(...)`: the OpenAI function-tool schemas the tool agent gets.
- `shared_facts()` / `conventions(...)`: every fact about the robot and the
  episode that is not interface-specific (the world frame and surface
  heights from the `Robot` docstring, the workspace, how failures and errors
  come back, the success flag and the refusal after success), rendered into
  both system prompts: the code agent's inside its API reference, the tool
  agent's beside its tools.

Both views walk `Robot.primitive_specs()`; names, arguments, defaults and
descriptions come from the signatures and docstrings, so the two interfaces
cannot drift apart.
"""
from __future__ import annotations

import inspect
import json
import re
import typing
from typing import Any, Literal, get_args, get_origin

from robots.robot import TWO_ARMS, WORKSPACE_HIGH, WORKSPACE_LOW, PrimitiveSpec, Robot

#: Parameters that exist only on a two-arm robot: hidden from both views without the `two_arms`
#: capability, so a one-arm benchmark's prompt is what it was before arms existed.
TWO_ARM_PARAMS = ("arm",)


def _parse_doc(fn) -> tuple[str, dict[str, str]]:
    doc = inspect.getdoc(fn) or ""
    head, _, args_block = doc.partition("\nArgs:\n")
    params: dict[str, str] = {}
    current = None
    for line in args_block.splitlines():
        m = re.match(r"\s{4}(\w+):\s*(.*)", line)
        if m:
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif current and line.strip():
            params[current] += " " + line.strip()
    return head.strip(), params


def _json_type(annotation) -> dict[str, Any]:
    origin = get_origin(annotation)
    if annotation is float:
        return {"type": "number"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is str:
        return {"type": "string"}
    if annotation is bool:
        return {"type": "boolean"}
    if origin is Literal:
        return {"type": "string", "enum": list(get_args(annotation))}
    if origin in (list, tuple):
        (item,) = get_args(annotation)[:1] or (float,)
        schema = {"type": "array", "items": _json_type(item)}
        return schema
    raise TypeError(f"no JSON schema for annotation {annotation!r}")


def _params(spec: PrimitiveSpec, capabilities=("vla",)) -> list[dict[str, Any]]:
    sig = inspect.signature(spec.fn)
    hints = typing.get_type_hints(spec.fn)
    _, docs = _parse_doc(spec.fn)
    out = []
    for name, p in list(sig.parameters.items())[1:]:
        if name in TWO_ARM_PARAMS and TWO_ARMS not in capabilities:
            continue
        out.append(
            {
                "name": name,
                "annotation": hints[name],
                "schema": _json_type(hints[name]),
                "required": p.default is inspect.Parameter.empty,
                "default": None if p.default is inspect.Parameter.empty else p.default,
                "doc": docs.get(name, ""),
            }
        )
    return out


def visible_specs(capabilities=("vla",), include_show: bool = True) -> list[PrimitiveSpec]:
    specs = [s for s in Robot.primitive_specs() if s.requires is None or s.requires in capabilities]
    if not include_show:
        specs = [s for s in specs if s.name != "show"]
    return specs


def tool_schemas(capabilities=("vla",), include_show: bool = True) -> list[dict[str, Any]]:
    """OpenAI function tools, one per primitive."""
    tools = []
    for spec in visible_specs(capabilities, include_show):
        summary, _ = _parse_doc(spec.fn)
        props, required = {}, []
        for p in _params(spec, capabilities):
            schema = dict(p["schema"])
            desc = p["doc"] + ("" if p["required"] else f" Default: {json.dumps(p['default'])}.")
            schema["description"] = desc.strip()
            props[p["name"]] = schema
            if p["required"]:
                required.append(p["name"])
        kind = "Acting (moves the robot)." if spec.acting else "Read-only."
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": f"{summary}\n{kind}",
                    "parameters": {"type": "object", "properties": props, "required": required, "additionalProperties": False},
                },
            }
        )
    return tools


def shared_facts() -> list[str]:
    """The facts both interfaces' prompts carry, one paragraph each, in the same words.

    The interface-specific form of a fact (a JSON key in a tool result, the
    last line of a cell's output) is in each interface's prompt YAML; the
    fact itself is here, once.
    """
    from agents.feedback import TASK_COMPLETE

    low, high = WORKSPACE_LOW.tolist(), WORKSPACE_HIGH.tolist()
    return [
        " ".join(Robot.__doc__.split()),
        f"Gripper targets must lie inside the workspace, x, y, z from {low} to {high} metres.",
        "Ordinary failure is reported in a primitive's result (e.g. a move's `reached` is false), not as an error. "
        "Bad arguments (an unknown name, a target outside the workspace) are refused with a ValueError before "
        "the robot moves. Any other error a primitive meets comes back to you as that call's result, with its "
        "type and message, and the episode goes on.",
        "After every call that ran an acting primitive you are told the benchmark's own success check. "
        f"Once the task is complete, every acting primitive is refused with \"{TASK_COMPLETE}\" "
        "Read-only primitives still work. The episode ends when you call finish, or on its call or time budget.",
    ]


def conventions() -> str:
    """`shared_facts` as the Markdown section both prompts include."""
    return "## Conventions\n\n" + "\n\n".join(shared_facts()) + "\n"


def _type_name(annotation) -> str:
    text = inspect.formatannotation(annotation)
    return text.replace("typing.", "").replace("robots.results.", "").replace("numpy.", "np.")


def api_reference(capabilities=("vla",)) -> str:
    """Markdown API reference of the `robo` object for the code agent."""
    lines = [
        "# `robo` API reference",
        "",
        conventions(),
        "## Primitives",
        "",
    ]
    for spec in visible_specs(capabilities):
        params = _params(spec, capabilities)
        sig = ", ".join(
            f"{p['name']}: {_type_name(p['annotation'])}" + ("" if p["required"] else f" = {p['default']!r}") for p in params
        )
        ret = _type_name(typing.get_type_hints(spec.fn)["return"])
        summary, _ = _parse_doc(spec.fn)
        lines.append(f"### `robo.{spec.name}({sig}) -> {ret}`  ({'acting' if spec.acting else 'read-only'})")
        lines.append("")
        lines.append(summary)
        for p in params:
            lines.append(f"- `{p['name']}`: {p['doc']}")
        lines.append("")
    lines.append("## Result types")
    lines.append("")
    seen = set()
    for spec in visible_specs(capabilities):
        ret = typing.get_type_hints(spec.fn)["return"]
        if not hasattr(ret, "__dataclass_fields__") or ret in seen:
            continue
        seen.add(ret)
        fields = ", ".join(f"{n}: {_type_name(f.type) if not isinstance(f.type, str) else f.type}" for n, f in ret.__dataclass_fields__.items())
        lines.append(f"- `{ret.__name__}({fields})`")
    return "\n".join(lines) + "\n"


def main_api(args) -> int:
    """`cellbench api`: the reference (or tool schemas) a planner sees in this benchmark and ablation."""
    from agents.episode import ABLATION_EFFECTS
    from agents.errors import CellbenchError
    from robots.factory import BENCHMARKS, TWO_ARM_BENCHMARKS
    from robots.robot import TWO_ARMS

    if args.benchmark not in BENCHMARKS:
        raise CellbenchError(f"unknown benchmark {args.benchmark!r}; known: {', '.join(BENCHMARKS)}")
    if args.ablation not in ABLATION_EFFECTS:
        raise CellbenchError(f"unknown ablation {args.ablation!r}; known: {', '.join(ABLATION_EFFECTS)}")
    caps = ("vla",) if ABLATION_EFFECTS[args.ablation]["vla"] else ()
    if args.benchmark in TWO_ARM_BENCHMARKS:
        caps += (TWO_ARMS,)
    if args.tools:
        print(json.dumps(tool_schemas(caps), indent=2))
    else:
        print(api_reference(caps))
    return 0
