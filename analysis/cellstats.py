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
  guard whose test observes a fresh result controls an acting call site.
* **retry** -- a ``for``/``while`` loop that contains an acting call site and
  whose exit depends on a result: a ``while`` test that observes the robot, or
  a ``break``/``return`` under an ``if`` whose test observes the robot, or a
  ``break``/``return`` in a ``try`` body that has handlers (it runs only when
  the primitive did not raise).
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

A cell that does not parse (the model wrote a syntax error) gets every
AST-derived flag False and keeps its executed counts.
"""
from __future__ import annotations

import ast
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Iterable, Iterator

ROBOT_NAME = "robo"
#: Moves, grasps, gripper commands and VLA calls: the primitives that act on the
#: world.  Used for call sites in cell text; executed rows carry their own flag.
ACTING_PRIMITIVES = frozenset({
    "move_to", "move_by", "rotate_wrist", "set_gripper", "close_gripper",
    "open_gripper", "release", "grasp", "vla",
})
#: Raw sensor reads a cell can do its own geometry on.
PERCEPTION_ACCESSORS = frozenset({"image", "depth", "points"})
IMAGE_REQUEST = "show"
NUMPY_MODULES = frozenset({"np", "numpy"})

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
    calls_perception_accessor: bool
    perception_bindings: tuple[tuple[frozenset[str], frozenset[str], bool], ...]
    """(names bound, names read, value calls a perception accessor) per assignment."""
    numpy_operands: frozenset[str]
    """Names used in array math: numpy arguments, method receivers, subscripted, operands."""
    defines: frozenset[str]
    called_names: frozenset[str]
    conditional_show: bool
    show_site: bool


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


CELL_STATS_FIELDS = tuple(f.name for f in fields(CellStats))


def _robo_method(node: ast.AST) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == ROBOT_NAME):
        return node.func.attr
    return None


def _pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


@lru_cache(maxsize=None)
def _child_fields(kind: type) -> tuple[str, ...]:
    # Literals and `ctx` (Load/Store markers) hold no names or calls.
    if kind is ast.Constant:
        return ()
    return tuple(f for f in kind._fields if f != "ctx")


class _IndexedTree:
    """One pre-order pass over the AST; subtree questions become index ranges.

    Repeated `ast.walk` over subtrees cost ~1.5 ms a cell, which is minutes on
    10^5 episodes; ranges over one flat list cost a bisect.
    """

    def __init__(self, tree: ast.AST):
        self.end: list[int] = []
        self.by_type: dict[type, list[ast.AST]] = defaultdict(list)
        self.blocks: list[list[ast.stmt]] = []
        self.name_at: list[int] = []
        self.name_ids: list[str] = []
        self.robo_at: list[int] = []
        self.robo_calls: list[tuple[str, ast.AST]] = []
        self._visit(tree)

    def _visit(self, node: ast.AST) -> None:
        i = len(self.end)
        self.end.append(0)
        node._cellstats_index = i
        kind = type(node)
        self.by_type[kind].append(node)
        if kind is ast.Name:
            if node.id != ROBOT_NAME:
                self.name_at.append(i)
                self.name_ids.append(node.id)
        elif kind is ast.Call:
            name = _robo_method(node)
            if name:
                self.robo_at.append(i)
                self.robo_calls.append((name, node))
        for field in _child_fields(kind):
            value = getattr(node, field, None)
            if type(value) is list:
                if value and field in _BLOCK_FIELDS and isinstance(value[0], ast.stmt):
                    self.blocks.append(value)
                for item in value:
                    if isinstance(item, ast.AST):
                        self._visit(item)
            elif isinstance(value, ast.AST):
                self._visit(value)
        self.end[i] = len(self.end)

    def of_type(self, *kinds: type) -> list[ast.AST]:
        return [n for k in kinds for n in self.by_type.get(k, ())]

    def _range(self, at: list[int], node: ast.AST) -> range:
        i = node._cellstats_index
        return range(bisect_left(at, i), bisect_left(at, self.end[i]))

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


_UNPARSED = CellSyntax(False, 0, False, False, False, (), frozenset(), frozenset(), frozenset(), False, False)


@lru_cache(maxsize=65536)
def cell_syntax(source: str) -> CellSyntax:
    """The AST facts of one cell's text (cached: scripted planners repeat cells verbatim)."""
    try:
        tree = _IndexedTree(ast.parse(source))
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

    guarded = bool(acting_ids) and any(
        observes_fresh(test) and has_acting_site(controlled) for test, controlled in _guards(tree))

    retry = False
    for loop in tree.of_type(*_LOOPS):
        if has_acting_site([loop]) and (
                (isinstance(loop, ast.While) and observes(loop.test))
                or _loop_exits_on_result(loop.body, observes)):
            retry = True
            break

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
        guarded_chain_shape=guarded,
        retry_loop=retry,
        calls_perception_accessor=any(name in PERCEPTION_ACCESSORS for name, _ in tree.robo_calls),
        perception_bindings=perception_bindings,
        numpy_operands=frozenset(numpy_operands),
        defines=frozenset(n.name for n in tree.of_type(ast.FunctionDef, ast.AsyncFunctionDef)),
        called_names=frozenset(called_names),
        conditional_show=conditional_show,
        show_site=bool(show_ids),
    )


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


def episode_cell_stats(cells: list[tuple[int, str]],
                       executed: dict[int, list[tuple[str, bool]]]) -> list[CellStats]:
    """Statistics of an episode's cells, in call order.

    `cells`: (call_index, source) pairs; `executed`: call_index -> [(primitive
    name, acting flag)] from primitives.jsonl.  Order matters: helper reuse and
    perception names carry over from earlier cells.
    """
    helpers: frozenset[str] = frozenset()
    perception_names: frozenset[str] = frozenset()
    out = []
    for call_index, source in sorted(cells):
        syn = cell_syntax(source)
        ran = executed.get(call_index, [])
        n_acting = sum(1 for _, acting in ran if acting)
        perception_names = _perception_closure(syn, perception_names)
        out.append(CellStats(
            parses=syn.parses,
            n_primitives=len(ran),
            n_acting=n_acting,
            acting_sites=syn.acting_sites,
            guarded_chain=n_acting >= 2 and syn.guarded_chain_shape,
            retry=syn.retry_loop,
            own_perception=syn.calls_perception_accessor or bool(syn.numpy_operands & perception_names),
            helper_defined=bool(syn.defines),
            helper_reused=bool(syn.called_names & helpers),
            conditional_image_request=syn.conditional_show,
            single_step=n_acting == 1,
            requests_image=syn.show_site or any(name == IMAGE_REQUEST for name, _ in ran),
        ))
        helpers = helpers | syn.defines
    return out
