"""Code-cell execution semantics (paper §3.1–3.3), run inside the cell worker (agents/cellworker.py).

A persistent namespace across cells; `print` output and the value of a
trailing expression come back, trimmed (head and tail kept); an uncaught
exception ends the cell and returns its traceback, and variables assigned
before it survive; `exit()` (SystemExit) is reported like any exception and
the runtime goes on; `EpisodeFinished` (a BaseException raised before an
acting primitive once the task is solved) ends the cell cleanly.
"""
from __future__ import annotations

import ast
import contextlib
import io
import math
import traceback
from dataclasses import dataclass

import numpy as np

from agents.feedback import TASK_COMPLETE

OUTPUT_HEAD = 2000
OUTPUT_TAIL = 1500
CELL_FILENAME = "<cell>"


def trim(text: str, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL) -> str:
    if len(text) <= head + tail:
        return text
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters trimmed] ...\n{text[-tail:]}"


@dataclass
class CellOutcome:
    output: str
    exception: str | None
    """Exception type name when the cell raised, else None."""
    finished: bool
    """The success guard ended the cell."""


class CellNamespace:
    """The code agent's persistent Python namespace with `robo`, `np` and `math`."""

    def __init__(self, robot, finished: type[BaseException] | None = None):
        """`finished`: the success guard's exception (the Robot's own `EpisodeFinished` by default;
        the cell worker's proxy raises one of its own, so the worker never imports the robot stack)."""
        if finished is None:
            from robots.robot import EpisodeFinished as finished
        self.finished = finished
        self.globals: dict = cell_globals(robot)

    def run(self, code: str) -> CellOutcome:
        buf = io.StringIO()
        exc_name, finished = None, False
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                tree = ast.parse(code, filename=CELL_FILENAME)
                last_expr = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last_expr = ast.Expression(tree.body.pop().value)
                exec(compile(tree, CELL_FILENAME, "exec"), self.globals)
                if last_expr is not None:
                    value = eval(compile(last_expr, CELL_FILENAME, "eval"), self.globals)
                    if value is not None:
                        print(repr(value))
            except self.finished:
                finished = True
                print(TASK_COMPLETE)  # the words a tool call refused after success returns
            except SyntaxError as e:
                exc_name = "SyntaxError"
                print("".join(traceback.format_exception_only(type(e), e)).rstrip())
            except (Exception, SystemExit, KeyboardInterrupt) as e:  # the model's code failed: show it its traceback
                # exit() in a cell ends the cell, not the runtime (and with it the episode).
                exc_name = type(e).__name__
                print(cell_traceback(e))
        return CellOutcome(trim(buf.getvalue()), exc_name, finished)


def cell_globals(robot) -> dict:
    """What a cell's namespace starts with: `robo`, `np`, `math` (the scripted tool mind's cells start alike)."""
    return {"robo": robot, "np": np, "math": math, "__name__": "__cell__"}


def cell_traceback(e: BaseException) -> str:
    """Traceback from the first frame of the cell on: the runtime's own frames are noise to the model,
    and so are the frames of the worker's `robo` proxy (its primitive's error is the message)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CELL_FILENAME:
        tb = tb.tb_next
    te = traceback.TracebackException(type(e), e, tb, lookup_lines=False)  # read sources only of frames kept
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != _PROXY_FILE])
    return "".join(te.format()).rstrip()


_PROXY_FILE = __file__.replace("cells.py", "cellworker.py")
