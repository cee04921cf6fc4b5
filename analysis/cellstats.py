"""What a code cell does (paper Table 6): statistics from its AST and the primitives it executed.

A cell's text says what it *could* do; `primitives.jsonl` says what it did.
Counts of executed primitives come from the trace (its `acting` flag, written
by the runtime); the control-flow patterns come from the AST.  Definitions,
precisely (``robo`` is the robot object, an *acting call site* is a call
``robo.<name>(...)`` with ``<name>`` in `ACTING_PRIMITIVES`):

* **observes the robot** -- an expression observes the robot if it contains a
  ``robo.*`` call or a name bound (transitively, in this cell) from such a
  call.  It observes a *fresh* result if that call is an acting call or comes
  after the cell's first acting call site in the source, or the name was bound
  so (``r = robo.grasp(...)``; ``w = robo.gripper_width()`` after a move).
* **guard** -- the test of an ``if``/``while``/conditional expression (it
  controls its body and ``else``), of an ``assert``, or of an ``if`` whose body
  leaves the block (``raise``/``return``/``break``/``continue``) and has no
  ``else`` (these two control the statements after them in the same block).
* **guarded chain** -- the cell executed >= 2 acting primitives, and some
  guard whose test observes a fresh result controls an acting call site, in
  the cell's text or in the body of a helper it calls, directly or through
  other helpers, that an earlier cell defined (a guarded pick-and-place
  written once and called later).
* **retry** -- a ``for``/``while`` loop that contains an acting call site and
  whose exit depends on a result: a ``while`` test that observes the robot, or
  a ``break``/``return`` under an ``if`` whose test observes the robot, or a
  ``break``/``return`` in a ``try`` body that has handlers (it runs only when
  the primitive did not raise); in the cell's text or in a helper it calls
  that an earlier cell defined (followed through helpers calling helpers).
* **own perception** -- the cell calls one of `PERCEPTION_ACCESSORS`
  (``robo.image/depth/points``: raw pixels and points, not a perception
  tool's answer), or does array math on a name bound (transitively) from
  those accessors in this or an earlier cell of the episode: passes it to
  ``np.*``/``numpy.*``, calls its methods, subscripts it (masks, slices) or
  uses it as an operand of arithmetic or a comparison.
* **helper defined** -- a ``def`` anywhere in the cell.
  **helper reused** -- the cell calls, by name, a function that a ``def`` in
  an earlier cell of the same episode defined.
* **conditional image request** -- a ``robo.show`` call site inside the body
  or ``else`` of an ``if``/conditional expression, or in an ``except`` handler.
* **single step** -- exactly one acting primitive executed.
* **requests an image** -- ``show`` executed, or a ``robo.show`` call site.
* **left the API** -- the cell tried to reach past the primitives: in its
  text, a ``robo.<name>`` that is no primitive (``robo.backend``,
  ``robo._motion``), an import of one of `ESCAPE_MODULES` (``gc``,
  ``ctypes``, ``subprocess``, ``socket``, ...), an `ESCAPE_ATTRS`
  introspection attribute (``__globals__``, ``__subclasses__``, frames), or
  ``open`` of a constant absolute or ``..`` path; or, at run time, its call
  row's ``left_api`` (what the sandboxed worker noticed: ingest adds it).

A cell that does not parse (the model wrote a syntax error) gets every
AST-derived flag False and keeps its executed counts.

**Stored statistics.**  Parsing cells is most of a cold ingest's work, so the
episode that ran them stores their statistics (`cells/stats.json`, written by
the trace writer with `stored_stats`), where the work is spread over the
episode jobs.  It is a cache, never the source: ingest uses it only when its
`definitions` key (a hash of this module's text and the primitive sets) and
every cell's hash match the trace's cell files (`stats_from_stored`), and
computes the statistics from the cell text otherwise.
"""
from __future__ import annotations

import ast
import hashlib
from bisect import bisect_left
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator

from robots.robot import Robot

ROBOT_NAME = "robo"
#: Acting primitives (moves, grasps, gripper commands, VLA calls) as named in
#: cell text.  The Robot facade's `@primitive(acting=True)` marker decides;
#: the paper's API adds names the facade may not have (a cell can still call
#: them).  Executed rows carry the runtime's own `acting` flag instead.
PAPER_ACTING_PRIMITIVES = frozenset({
    "move_to", "move_by", "rotate_wrist", "set_gripper", "close_gripper",
    "open_gripper", "release", "grasp", "vla",
})
ACTING_PRIMITIVES = PAPER_ACTING_PRIMITIVES | frozenset(s.name for s in Robot.primitive_specs() if s.acting)
#: Raw sensor reads a cell can do its own geometry on.
PERCEPTION_ACCESSORS = frozenset({"image", "depth", "points"})
IMAGE_REQUEST = "show"
NUMPY_MODULES = frozenset({"np", "numpy"})
#: Robot names a cell may use: every primitive, and the paper's API names.
API_NAMES = PAPER_ACTING_PRIMITIVES | frozenset(s.name for s in Robot.primitive_specs())
#: Modules whose import is a way past the API (the sandbox refuses what they are for).
ESCAPE_MODULES = frozenset({"gc", "ctypes", "subprocess", "socket", "multiprocessing", "pty", "importlib"})
ESCAPE_ATTRS = frozenset({"__globals__", "__subclasses__", "__builtins__", "__code__", "f_back", "f_globals",
                          "gi_frame", "tb_frame", "_getframe"})

_LEAVES_BLOCK = (ast.Raise, ast.Return, ast.Break, ast.Continue)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_BLOCK_FIELDS = frozenset({"body", "orelse", "finalbody"})


@dataclass(frozen=True)
class CellSyntax:
    """The AST-derived facts of one cell, independent of the rest of its episode."""

    parses: bool
    acting_sites: int
    guarded_chain_shape: bool
    """A guard observing a fresh result controls an acting call site."""
    retry_loop: bool
    guarded_helpers: frozenset[str]
    """Functions defined here whose body holds a guarded-chain shape."""
    retry_helpers: frozenset[str]
    """Functions defined here whose body holds a retry loop."""
    calls_perception_accessor: bool
    perception_bindings: tuple[tuple[frozenset[str], frozenset[str], bool], ...]
    """(names bound, names read, value calls a perception accessor) per assignment."""
    numpy_operands: frozenset[str]
    """Names used in array math: numpy arguments, method receivers, subscripted, operands."""
    defines: frozenset[str]
    called_names: frozenset[str]
    helper_calls: tuple[tuple[str, frozenset[str]], ...]
    """(function defined here, names its body calls): helpers calling helpers."""
    conditional_show: bool
    show_site: bool
    leaves_api: bool = False


@dataclass(frozen=True)
class CellStats:
    """One cell's statistics: the stats columns of the `cells` table."""

    parses: bool
    n_primitives: int
    """Primitives the cell executed."""
    n_acting: int
    """Of those, acting ones (moves, grasps, gripper, VLA)."""
    acting_sites: int
    """Acting call sites in the cell text."""
    guarded_chain: bool
    retry: bool
    own_perception: bool
    helper_defined: bool
    helper_reused: bool
    conditional_image_request: bool
    single_step: bool
    requests_image: bool
    left_api: bool = False
    """The cell tried to reach past the primitives (its text, or what its worker noticed)."""


CELL_STATS_FIELDS = tuple(f.name for f in fields(CellStats))


def _robo_method(node: ast.AST) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == ROBOT_NAME):
        return node.func.attr
    return None


def _pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


#: Fields that hold names, flags or literals, never nodes; Load/Store markers (`ctx`) hold nothing.
_SCALAR_FIELDS = frozenset({"ctx", "id", "attr", "name", "arg", "module", "asname", "type_comment", "kind",
                            "level", "conversion", "is_async", "simple"})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {ast.Constant: ()}
#: Node types the analysis looks up; the others are only indexed.
_KEPT_TYPES = (ast.If, ast.While, ast.IfExp, ast.For, ast.AsyncFor, ast.Assign, ast.AnnAssign, ast.AugAssign,
               ast.NamedExpr, ast.With, ast.AsyncWith, ast.ExceptHandler, ast.Call, ast.FunctionDef,
               ast.AsyncFunctionDef, ast.Subscript, ast.BinOp, ast.Compare)


class _IndexedTree:
    """One pre-order pass over the AST; subtree questions become index ranges.

    Repeated `ast.walk` over subtrees cost ~1.5 ms a cell, which is minutes on
    10^5 episodes; ranges over one flat list cost a bisect.  The pass itself
    is the hot loop of ingest (~90 nodes a cell), hence its plain style.
    """

    def __init__(self, tree: ast.AST):
        self.end: list[int] = []
        self.by_type: dict[type, list[ast.AST]] = {kind: [] for kind in _KEPT_TYPES}
        self.blocks: list[list[ast.stmt]] = []
        self.name_at: list[int] = []
        self.name_ids: list[str] = []
        self.robo_at: list[int] = []
        self.robo_calls: list[tuple[str, ast.AST]] = []
        self._index(tree)

    def _index(self, tree: ast.AST) -> None:
        end, by_type, blocks = self.end, self.by_type, self.blocks
        name_at, name_ids, robo_at, robo_calls = self.name_at, self.name_ids, self.robo_at, self.robo_calls
        child_fields, AST, Name, Call, stmt = _CHILD_FIELDS, ast.AST, ast.Name, ast.Call, ast.stmt

        def visit(node: ast.AST) -> None:
            i = len(end)
            end.append(0)
            node._cellstats_index = i
            kind = type(node)
            kept = by_type.get(kind)
            if kept is not None:
                kept.append(node)
            if kind is Name:
                if node.id != ROBOT_NAME:
                    name_at.append(i)
                    name_ids.append(node.id)
            elif kind is Call:
                name = _robo_method(node)
                if name:
                    robo_at.append(i)
                    robo_calls.append((name, node))
            fields = child_fields.get(kind)
            if fields is None:
                fields = child_fields[kind] = tuple(f for f in kind._fields if f not in _SCALAR_FIELDS)
            for field in fields:
                value = getattr(node, field, None)
                if type(value) is list:
                    if value and field in _BLOCK_FIELDS and isinstance(value[0], stmt):
                        blocks.append(value)
                    for item in value:
                        if isinstance(item, AST):
                            visit(item)
                elif isinstance(value, AST):
                    visit(value)
            end[i] = len(end)

        visit(tree)

    def of_type(self, *kinds: type) -> list[ast.AST]:
        return [n for k in kinds for n in self.by_type[k]]

    def _range(self, at: list[int], node: ast.AST) -> range:
        i = node._cellstats_index
        return range(bisect_left(at, i), bisect_left(at, self.end[i]))

    def contains(self, outer: ast.AST, inner: ast.AST) -> bool:
        i = outer._cellstats_index
        return i <= inner._cellstats_index < self.end[i]

    def names_read(self, node: ast.AST) -> set[str]:
        return {self.name_ids[k] for k in self._range(self.name_at, node)}

    def robo_calls_in(self, node: ast.AST) -> list[tuple[str, ast.AST]]:
        return [self.robo_calls[k] for k in self._range(self.robo_at, node)]


def _target_names(tree: _IndexedTree, targets: Iterable[ast.AST]) -> frozenset[str]:
    """Names an assignment binds; `a[i] = ...` and `a.x = ...` rebind (mutate) `a`, not `i`."""
    out: set[str] = set()
    for t in targets:
        while isinstance(t, (ast.Attribute, ast.Subscript, ast.Starred)):
            t = t.value
        out |= tree.names_read(t)
    return frozenset(out)


def _bindings(tree: _IndexedTree) -> Iterator[tuple[frozenset[str], ast.AST]]:
    """(names bound, value expression) for every assignment-like binding."""
    for node in tree.of_type(ast.Assign):
        yield _target_names(tree, node.targets), node.value
    for node in tree.of_type(ast.AnnAssign, ast.AugAssign, ast.NamedExpr):
        if node.value is not None:
            yield _target_names(tree, [node.target]), node.value
    for node in tree.of_type(ast.For, ast.AsyncFor):
        yield _target_names(tree, [node.target]), node.iter
    for node in tree.of_type(ast.With, ast.AsyncWith):
        for item in node.items:
            if item.optional_vars is not None:
                yield _target_names(tree, [item.optional_vars]), item.context_expr


def _guards(tree: _IndexedTree) -> Iterator[tuple[ast.expr, list[ast.AST]]]:
    """(test, nodes it controls) for every guard, as defined in the module docstring."""
    for node in tree.of_type(ast.If, ast.While):
        yield node.test, node.body + node.orelse
    for node in tree.of_type(ast.IfExp):
        yield node.test, [node.body, node.orelse]
    for block in tree.blocks:
        for i, stmt in enumerate(block):
            if isinstance(stmt, ast.Assert):
                yield stmt.test, block[i + 1:]
            elif (isinstance(stmt, ast.If) and not stmt.orelse
                  and isinstance(stmt.body[-1], _LEAVES_BLOCK)):
                yield stmt.test, block[i + 1:]


def _exits_without_crossing(stmts: list[ast.stmt]) -> bool:
    """A break/return among these statements that leaves the enclosing loop."""
    for stmt in stmts:
        if isinstance(stmt, (ast.Break, ast.Return)):
            return True
        if isinstance(stmt, _SCOPES + _LOOPS):
            continue
        for attr in ("body", "orelse", "finalbody"):
            sub = getattr(stmt, attr, None)
            if isinstance(sub, list) and _exits_without_crossing(sub):
                return True
        for handler in getattr(stmt, "handlers", []):
            if _exits_without_crossing(handler.body):
                return True
    return False


def _loop_exits_on_result(stmts: list[ast.stmt], observes) -> bool:
    for stmt in stmts:
        if isinstance(stmt, _SCOPES + _LOOPS):
            continue
        if isinstance(stmt, ast.If) and observes(stmt.test) and _exits_without_crossing(stmt.body + stmt.orelse):
            return True
        if isinstance(stmt, ast.Try) and stmt.handlers and _exits_without_crossing(stmt.body):
            return True
        for attr in ("body", "orelse", "finalbody"):
            sub = getattr(stmt, attr, None)
            if isinstance(sub, list) and _loop_exits_on_result(sub, observes):
                return True
        for handler in getattr(stmt, "handlers", []):
            if _loop_exits_on_result(handler.body, observes):
                return True
    return False


def _conditional_regions(tree: _IndexedTree) -> Iterator[ast.AST]:
    for node in tree.of_type(ast.If):
        yield from node.body + node.orelse
    for node in tree.of_type(ast.IfExp):
        yield node.body
        yield node.orelse
    for node in tree.of_type(ast.ExceptHandler):
        yield from node.body


_NOTHING = frozenset()
_UNPARSED = CellSyntax(
    parses=False, acting_sites=0, guarded_chain_shape=False, retry_loop=False, guarded_helpers=_NOTHING,
    retry_helpers=_NOTHING, calls_perception_accessor=False, perception_bindings=(), numpy_operands=_NOTHING,
    defines=_NOTHING, called_names=_NOTHING, helper_calls=(), conditional_show=False, show_site=False)


@lru_cache(maxsize=65536)
def cell_syntax(source: str) -> CellSyntax:
    """The AST facts of one cell's text (cached: scripted planners repeat cells verbatim)."""
    try:
        root = ast.parse(source)
        leaves_api = _leaves_api(root)  # before indexing, which prunes the tree
        tree = _IndexedTree(root)
    except (SyntaxError, ValueError, RecursionError):
        return _UNPARSED

    acting_nodes = [n for name, n in tree.robo_calls if name in ACTING_PRIMITIVES]
    acting_ids = {id(n) for n in acting_nodes}
    first_acting = min((_pos(n) for n in acting_nodes), default=None)

    def fresh_call(name: str, node: ast.AST) -> bool:
        return name in ACTING_PRIMITIVES or (first_acting is not None and _pos(node) >= first_acting)

    bindings = [(targets, tree.names_read(value), tree.robo_calls_in(value)) for targets, value in _bindings(tree)]

    # Flow-insensitive fixpoint: cells are short and straight-line enough that
    # "bound from a robot result somewhere in the cell" is the honest reading.
    observed: set[str] = set()
    fresh: set[str] = set()
    changed = True
    while changed:
        changed = False
        for targets, reads, calls_in_value in bindings:
            if (calls_in_value or reads & observed) and not targets <= observed:
                observed |= targets
                changed = True
            is_fresh = any(fresh_call(name, n) for name, n in calls_in_value) or bool(reads & fresh)
            if is_fresh and not targets <= fresh:
                fresh |= targets
                changed = True

    def observes(test: ast.AST) -> bool:
        return bool(tree.robo_calls_in(test)) or bool(tree.names_read(test) & observed)

    def observes_fresh(test: ast.AST) -> bool:
        if any(fresh_call(name, n) for name, n in tree.robo_calls_in(test)):
            return True
        return bool(tree.names_read(test) & fresh)

    def has_acting_site(nodes: Iterable[ast.AST]) -> bool:
        return any(id(n) in acting_ids for top in nodes for _, n in tree.robo_calls_in(top))

    guard_tests = [test for test, controlled in _guards(tree) if acting_ids
                   and observes_fresh(test) and has_acting_site(controlled)]
    retry_loops = [loop for loop in tree.of_type(*_LOOPS) if has_acting_site([loop]) and (
        (isinstance(loop, ast.While) and observes(loop.test)) or _loop_exits_on_result(loop.body, observes))]
    defs = tree.of_type(ast.FunctionDef, ast.AsyncFunctionDef)

    numpy_operands: set[str] = set()
    called_names: set[str] = set()
    for node in tree.of_type(ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            called_names.add(func.id)
        elif isinstance(func, ast.Attribute):
            root = func.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in NUMPY_MODULES:
                for arg in list(node.args) + [k.value for k in node.keywords]:
                    numpy_operands |= tree.names_read(arg)
            elif isinstance(func.value, ast.Name) and func.value.id != ROBOT_NAME:
                numpy_operands.add(func.value.id)
    # Array math without a numpy call: masks, slices and arithmetic on a name.
    for node in tree.of_type(ast.Subscript):
        if isinstance(node.value, ast.Name):
            numpy_operands.add(node.value.id)
    for node in tree.of_type(ast.BinOp):
        numpy_operands |= {n.id for n in (node.left, node.right) if isinstance(n, ast.Name)}
    for node in tree.of_type(ast.Compare):
        numpy_operands |= {n.id for n in [node.left, *node.comparators] if isinstance(n, ast.Name)}

    show_ids = {id(n) for name, n in tree.robo_calls if name == IMAGE_REQUEST}
    conditional_show = bool(show_ids) and any(
        id(n) in show_ids for region in _conditional_regions(tree) for _, n in tree.robo_calls_in(region))
    perception_bindings = tuple(
        (targets, frozenset(reads), any(name in PERCEPTION_ACCESSORS for name, _ in calls_in_value))
        for targets, reads, calls_in_value in bindings
    )
    return CellSyntax(
        parses=True,
        acting_sites=len(acting_ids),
        guarded_chain_shape=bool(guard_tests),
        retry_loop=bool(retry_loops),
        guarded_helpers=frozenset(d.name for d in defs if any(tree.contains(d, t) for t in guard_tests)),
        retry_helpers=frozenset(d.name for d in defs if any(tree.contains(d, loop) for loop in retry_loops)),
        calls_perception_accessor=any(name in PERCEPTION_ACCESSORS for name, _ in tree.robo_calls),
        perception_bindings=perception_bindings,
        numpy_operands=frozenset(numpy_operands),
        defines=frozenset(d.name for d in defs),
        called_names=frozenset(called_names),
        helper_calls=tuple((d.name, frozenset(n.func.id for n in tree.of_type(ast.Call)
                                              if isinstance(n.func, ast.Name) and tree.contains(d, n)))
                           for d in defs),
        conditional_show=conditional_show,
        show_site=bool(show_ids),
        leaves_api=leaves_api,
    )


def _leaves_api(root: ast.AST) -> bool:
    """The cell's text reaches past the primitives (see "left the API" above)."""
    for node in ast.walk(root):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == ROBOT_NAME and node.attr not in API_NAMES:
                return True
            if node.attr in ESCAPE_ATTRS:
                return True
        elif isinstance(node, ast.Import):
            if any(a.name.split(".")[0] in ESCAPE_MODULES for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in ESCAPE_MODULES:
                return True
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            arg = node.args[0].value
            if name == "__import__" and isinstance(arg, str) and arg.split(".")[0] in ESCAPE_MODULES:
                return True
            if name == "open" and isinstance(arg, str) and (arg.startswith(("/", "~")) or ".." in arg):
                return True
    return False


def _perception_closure(syntax: CellSyntax, known: frozenset[str]) -> frozenset[str]:
    names = set(known)
    changed = True
    while changed:
        changed = False
        for targets, reads, from_accessor in syntax.perception_bindings:
            if (from_accessor or reads & names) and not targets <= names:
                names |= targets
                changed = True
    return frozenset(names)


def _helpers_reached(called: frozenset[str], helper_calls: dict[str, frozenset[str]]) -> set[str]:
    """Earlier cells' helpers a cell calls, directly or through other helpers."""
    reached: set[str] = set()
    todo = [name for name in called if name in helper_calls]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(n for n in helper_calls[name] if n in helper_calls)
    return reached


def episode_cell_stats(cells: list[tuple[int, str]],
                       executed: dict[int, list[tuple[str, bool]]]) -> list[CellStats]:
    """Statistics of an episode's cells, in call order.

    `cells`: (call_index, source) pairs; `executed`: call_index -> [(primitive
    name, acting flag)] from primitives.jsonl.  Order matters: helper reuse and
    perception names carry over from earlier cells.
    """
    helper_calls: dict[str, frozenset[str]] = {}
    guarded_helpers: frozenset[str] = frozenset()
    retry_helpers: frozenset[str] = frozenset()
    perception_names: frozenset[str] = frozenset()
    out = []
    for call_index, source in sorted(cells):
        syn = cell_syntax(source)
        ran = executed.get(call_index, [])
        n_acting = sum(1 for _, acting in ran if acting)
        perception_names = _perception_closure(syn, perception_names)
        reached = _helpers_reached(syn.called_names, helper_calls)
        out.append(CellStats(
            parses=syn.parses,
            n_primitives=len(ran),
            n_acting=n_acting,
            acting_sites=syn.acting_sites,
            guarded_chain=n_acting >= 2 and (syn.guarded_chain_shape or bool(reached & guarded_helpers)),
            retry=syn.retry_loop or bool(reached & retry_helpers),
            own_perception=syn.calls_perception_accessor or bool(syn.numpy_operands & perception_names),
            helper_defined=bool(syn.defines),
            helper_reused=bool(syn.called_names & helper_calls.keys()),
            conditional_image_request=syn.conditional_show,
            single_step=n_acting == 1,
            requests_image=syn.show_site or any(name == IMAGE_REQUEST for name, _ in ran),
            left_api=syn.leaves_api,
        ))
        helper_calls.update(syn.helper_calls)
        guarded_helpers = (guarded_helpers - syn.defines) | syn.guarded_helpers
        retry_helpers = (retry_helpers - syn.defines) | syn.retry_helpers
    return out


# ---------------------------------------------------------------------------
# Stored statistics (cells/stats.json): a cache the episode writes, keyed by the definitions.

STORED_STATS_FILE = "stats.json"  # in the trace's cells/ directory


@lru_cache(maxsize=1)
def definitions_key() -> str:
    """Changes whenever the statistics could: this module's text and the primitive sets it reads."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for names in (ACTING_PRIMITIVES, PERCEPTION_ACCESSORS, NUMPY_MODULES):
        h.update(("\0" + ",".join(sorted(names))).encode())
    return h.hexdigest()[:16]


def cell_hash(source: str) -> str:
    """The trace's `cell_hash` of a cell text (sha256 of its UTF-8 bytes)."""
    return hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()


def stored_stats(cells: list[tuple[int, str]], executed: dict[int, list[tuple[str, bool]]]) -> dict[str, Any]:
    """The cells/stats.json document of an episode's cells (arguments as for `episode_cell_stats`)."""
    stats = episode_cell_stats(cells, executed)
    return {"definitions": definitions_key(),
            "cells": [{"call_index": i, "cell_hash": cell_hash(src),
                       "executed": [[name, acting] for name, acting in executed.get(i, [])], **asdict(st)}
                      for (i, src), st in zip(sorted(cells), stats)]}


def stats_from_stored(doc: Any, cells: list[tuple[int, str]],
                      executed: dict[int, list[tuple[str, bool]]]) -> list[CellStats] | None:
    """The stored statistics of these cells, in call order; None if they are stale, partial or malformed.

    Stale: other definitions, another cell text, or other executed primitives
    than the trace's primitives.jsonl holds (arguments as for `episode_cell_stats`).
    """
    try:
        if doc.get("definitions") != definitions_key():
            return None
        rows = doc["cells"]
        ordered = sorted(cells)
        if len(rows) != len(ordered):
            return None
        out = []
        for row, (i, src) in zip(rows, ordered):
            if (row["call_index"] != i or row["cell_hash"] != cell_hash(src)
                    or [tuple(e) for e in row["executed"]] != list(executed.get(i, []))):
                return None
            values = {f: row[f] for f in CELL_STATS_FIELDS}
            if not all(type(v) is (int if f in _COUNT_FIELDS else bool) for f, v in values.items()):
                return None
            out.append(CellStats(**values))
        return out
    except (AttributeError, KeyError, TypeError):
        return None


_COUNT_FIELDS = frozenset({"n_primitives", "n_acting", "acting_sites"})
