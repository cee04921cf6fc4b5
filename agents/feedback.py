"""The feedback texts both interfaces give the planner, defined once so they cannot drift apart.

A tool call's JSON result and a code cell's output carry the same facts in
the same words:

* after an acting primitive ran, the benchmark's success check: the key
  `TASK_SUCCESS_KEY` in a tool result, `success_line(flag)` as the last line
  of a cell's output;
* an acting primitive refused because the task is already complete:
  `TASK_COMPLETE` (a tool call's result; the message the success guard
  ends a cell with);
* an exception a primitive raised: `error_text` for a tool call (the code
  agent reads the traceback, which names the same type and message).

Planners (the scripted one included) read these constants rather than
matching their own copies of the wording.
"""
from __future__ import annotations

import json
from typing import Any

TASK_SUCCESS_KEY = "task_success"
"""Top-level key of an acting tool call's JSON result: the benchmark's success check after the call."""

TASK_COMPLETE = "The task is already complete: the action was not run. Call finish."
"""What an acting primitive returns (tool) or ends the cell with (code) once the task has succeeded."""

SUCCESS_LINE_PREFIX = "Task success: "

TRUNCATED = ("Your reply reached the output token limit and was cut off: its tool call is incomplete and was "
             "not run. Write a shorter one.")
"""What either agent reads after a reply the provider cut at the output token limit (a long cell is cut as
a long tool call is); a bare 'not valid JSON' would hide why."""


def success_line(flag: bool) -> str:
    """The last line of a cell that ran an acting primitive: exactly "Task success: True" / "Task success: False"."""
    return f"{SUCCESS_LINE_PREFIX}{bool(flag)}"


def parse_success_line(text: str | None) -> bool | None:
    """The flag of a cell output's last success line, or None when the cell did not act."""
    for line in reversed((text or "").splitlines()):
        if line.startswith(SUCCESS_LINE_PREFIX):
            value = line[len(SUCCESS_LINE_PREFIX):].strip()
            if value in ("True", "False"):
                return value == "True"
    return None


def unknown_tool(name: str, tools: list[str]) -> str:
    """The result of a call to a tool the interface's tool list lacks, the same for both agents (the list is
    the one the planner was given: a primitive the robot has but this interface does not offer is unknown too)."""
    return f"Error: unknown tool {name!r}; the tools are: {', '.join(tools)}."


def error_text(exc: BaseException) -> str:
    """A tool call's result when its primitive raised: the exception's type and message, as a traceback ends.

    Trimmed as a cell's output is (`agents.cells.trim`), so a long message costs the tool agent no more
    than the same traceback costs the code agent."""
    from agents.cells import trim

    message = str(exc)
    return trim(f"Error: {type(exc).__name__}: {message}" if message else f"Error: {type(exc).__name__}")


def tool_result(payload: Any, *, acted: bool, success: bool, state: Any = None, refused: bool = False) -> str:
    """The JSON text of one tool call's result.

    `payload` is the primitive's summarized result (or `error_text`);
    `acted`: an acting primitive ran (its result carries the state and the
    success flag); `refused`: the success guard refused it (TASK_COMPLETE and
    the flag, nothing ran).  A read-only call returns its payload alone.
    """
    if refused:
        return json.dumps({"result": TASK_COMPLETE, TASK_SUCCESS_KEY: bool(success)})
    if acted:
        return json.dumps({"result": payload, "state": state, TASK_SUCCESS_KEY: bool(success)})
    return payload if isinstance(payload, str) else json.dumps(payload)


def cell_output(output: str, *, acted: bool, refused: bool, success: bool) -> str:
    """A cell's output as the planner reads it: `success_line` last when it acted or the guard ended it."""
    if not (acted or refused):
        return output
    return (output.rstrip("\n") + "\n" if output.strip() else "") + success_line(success)


def parse_tool_success(text: str | None) -> bool | None:
    """The success flag of a tool call's JSON result, or None when the call did not act."""
    try:
        obj = json.loads(text or "")
    except ValueError:
        return None
    if isinstance(obj, dict) and isinstance(obj.get(TASK_SUCCESS_KEY), bool):
        return obj[TASK_SUCCESS_KEY]
    return None
