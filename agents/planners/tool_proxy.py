"""Run a code cell's text as tool calls: a `robo` whose every primitive is one tool call.

The scripted planner's tool mind uses this to carry out exactly the cell the
code mind would send (`agents.planners.strategy`), so the two interfaces make
the same attempts by construction.  The cell runs in a thread; each
primitive it calls suspends it, becomes the mind's next tool call, and
resumes with that call's result as the tool agent received it (its JSON,
parsed into an object with the same field names as the API's result types).

What the proxy knows comes only from what the tool agent is given: the tool
schemas (which primitives exist, their argument order, which ones act) and
the tool results.  Like a tool-calling LLM that reads the success flag, it
stops the cell at its next primitive once a result said the task succeeded;
an error result raises in the cell, so the cell sees a traceback as code
would.  `show` without a `show` tool (images come after every move) is a
no-op.
"""
from __future__ import annotations

import json
import queue
import threading
from typing import Any

import numpy as np

from agents.cells import CELL_FILENAME, cell_globals, cell_traceback
from agents.feedback import TASK_COMPLETE, TASK_SUCCESS_KEY, cell_output


class ToolError(RuntimeError):
    """A tool call's result was an error: raised in the cell where the primitive was called."""


class _Stop(BaseException):
    """Ends the cell thread: the task succeeded, or the mind was dropped (a new episode began)."""


_ABANDON = object()


class Result(dict):
    """A tool result's JSON object with attribute access: `loc.found`, `loc.position[0]`, `both.right.reached`."""

    def __getattr__(self, key: str) -> Any:
        try:
            value = self[key]
        except KeyError:
            raise AttributeError(f"result has no field {key!r} (fields: {', '.join(self) or 'none'})") from None
        return Result(value) if isinstance(value, dict) else value


def _plain(value: Any) -> Any:
    """JSON-ready arguments: numpy numbers and arrays, tuples -> plain numbers and lists."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class ToolRobo:
    """The proxy `robo`: primitives named by the tool schemas, each one tool call through `cell`."""

    def __init__(self, tools: list[dict[str, Any]], cell: "CellAsToolCalls"):
        self._params: dict[str, list[str]] = {}
        self._acting: dict[str, bool] = {}
        for t in tools:
            fn = t["function"]
            if fn["name"] in ("finish", "python"):
                continue
            self._params[fn["name"]] = list(fn["parameters"].get("properties", {}))
            self._acting[fn["name"]] = "Acting" in fn.get("description", "")
        self._cell = cell

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "show" and "show" not in self._params:
            # Images come with every move in this interface: nothing to ask for.
            return lambda camera="agentview": Result({"camera": camera, "index": -1})
        if name not in self._params:
            raise AttributeError(f"robo has no primitive {name!r} here; tools: {', '.join(self._params)}")
        params = self._params[name]

        def call(*args, **kwargs):
            if len(args) > len(params):
                raise TypeError(f"{name}() takes {len(params)} arguments, {len(args)} given")
            named = dict(zip(params, args))
            for k, v in kwargs.items():
                if k in named:
                    raise TypeError(f"{name}() got multiple values for {k!r}")
                named[k] = v
            return self._cell.call(name, _plain(named), self._acting[name])

        call.__name__ = name
        return call


class CellAsToolCalls:
    """One cell's code, run in a thread against ToolRobo; the mind pulls its tool calls one by one.

    `next_event(result)` sends the previous tool call's result (None on the
    first) and returns ("call", name, args) or ("done", output).
    """

    def __init__(self, code: str, tools: list[dict[str, Any]], namespace: dict[str, Any]):
        self.code = code
        self.robo = ToolRobo(tools, self)
        self.namespace = namespace
        self.acted = False
        self.success = False
        self.stopped = False
        self._to_mind: queue.Queue = queue.Queue()
        self._to_cell: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True, name="scripted-tool-cell")
        self._started = False

    # -- the mind's side --------------------------------------------------
    def next_event(self, result: str | None) -> tuple:
        if not self._started:
            self._started = True
            self._thread.start()
        else:
            self._to_cell.put(result)
        return self._to_mind.get()

    def abandon(self) -> None:
        """Unblock and end the thread of a cell the episode will never finish."""
        if self._started and self._thread.is_alive():
            self._to_cell.put(_ABANDON)

    # -- the cell's side --------------------------------------------------
    def call(self, name: str, args: dict[str, Any], acting: bool):
        if self.success:  # a tool result said the task is done: read the flag and stop
            self.stopped = True
            raise _Stop()
        self._to_mind.put(("call", name, args))
        text = self._to_cell.get()
        if text is _ABANDON:
            raise _Stop()
        return self._parse(text or "", acting)

    def _parse(self, text: str, acting: bool):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get(TASK_SUCCESS_KEY), bool):
            self.acted = self.acted or acting
            self.success = data[TASK_SUCCESS_KEY]
        value = data.get("result", data) if isinstance(data, dict) else data
        if value == TASK_COMPLETE or text.startswith(TASK_COMPLETE):
            self.stopped, self.success = True, True
            raise _Stop()
        if text.startswith("Error") or (isinstance(value, str) and value.startswith("Error")):
            raise ToolError(value if isinstance(value, str) else text)
        if isinstance(value, dict):
            return Result(value)
        return value if value is not None else Result({"text": text})

    def _run(self) -> None:
        out: list[str] = []
        ns = self.namespace
        ns["robo"] = self.robo
        ns["print"] = lambda *a, sep=" ", end="\n", **_: out.append(sep.join(str(x) for x in a) + end)
        try:
            exec(compile(self.code, CELL_FILENAME, "exec"), ns)
        except _Stop:
            if self.stopped:
                out.append(TASK_COMPLETE + "\n")  # the words the success guard ends a cell with
        except Exception as e:  # the cell failed, as it would in the runtime: its traceback is its output
            out.append(cell_traceback(e) + "\n")
        text = cell_output("".join(out), acted=self.acted, refused=self.stopped, success=self.success)
        self._to_mind.put(("done", text))


def new_namespace() -> dict[str, Any]:
    """What a cell's namespace starts with in the runtime (robo is set per cell, to that cell's proxy)."""
    return cell_globals(None)
