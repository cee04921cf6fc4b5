"""Cell statistics (Table 6) on literal cells: each flag checked against the definition in analysis/cellstats.py."""
from __future__ import annotations

import textwrap

from analysis.cellstats import episode_cell_stats

MOVE, GRASP, SHOW, LOCATE = ("move_to", True), ("grasp", True), ("show", False), ("locate", False)


def stats_of(source: str, executed: list[tuple[str, bool]] | None = None):
    """Statistics of a one-cell episode."""
    return episode_cell_stats([(1, textwrap.dedent(source))], {1: executed or []})[0]


def test_guarded_chain_needs_a_guard_on_a_fresh_result_and_two_executed_acting_primitives():
    chain = """
        r = robo.move_to([0.1, 0.2, 0.3])
        if r.reached:
            robo.grasp("bowl")
    """
    s = stats_of(chain, [MOVE, GRASP])
    assert s.guarded_chain and s.n_acting == 2 and s.acting_sites == 2
    # The same text, but the guard failed and only one acting primitive ran.
    assert not stats_of(chain, [MOVE]).guarded_chain
    # The guard reads a perception result obtained before any acting call: no chain.
    checked_perception = """
        p = robo.locate("bowl")
        if p is None:
            raise RuntimeError("no bowl")
        robo.move_to(p)
        robo.grasp("bowl")
    """
    assert not stats_of(checked_perception, [LOCATE, MOVE, GRASP]).guarded_chain
    # An assert on a state read taken after an acting call guards what follows it.
    asserted = """
        robo.close_gripper()
        assert robo.gripper_width() > 0.01, "missed"
        robo.move_by(0, 0, 0.1)
    """
    assert stats_of(asserted, [("close_gripper", True), ("gripper_width", False), ("move_by", True)]).guarded_chain


def test_retry_is_a_loop_around_an_acting_call_whose_exit_depends_on_a_result():
    for_break = """
        for attempt in range(3):
            v = robo.vla("close the door")
            if v.success:
                break
    """
    assert stats_of(for_break).retry
    assert stats_of("while not robo.vla('open the drawer').success:\n    pass\n").retry
    try_break = """
        for attempt in range(3):
            try:
                robo.grasp("mug")
                break
            except Exception:
                robo.open_gripper()
    """
    assert stats_of(try_break).retry
    # A loop over targets without any check is a batch, not a retry.
    assert not stats_of("for obj in ['a', 'b']:\n    robo.move_to(robo.locate(obj))\n").retry
    # A checked loop without an acting primitive in it is not a retry either.
    assert not stats_of("for i in range(3):\n    if robo.locate('x'):\n        break\n").retry


def test_own_perception_follows_raw_sensor_data_across_cells():
    cells = [
        (1, "pts = robo.points('wrist')\n"),
        (2, "centre = np.median(pts, axis=0)\n"),          # numpy on an earlier cell's points
        (3, "other = np.median(robo_state, axis=0)\n"),    # numpy on something else
        (4, "top = pts[pts[:, 2] > 0.1]\n"),               # a mask on the points
        (5, "normal = np.linalg.svd(top)\n"),              # numpy on the derived array
        (6, "print(len(top), goal)\n"),                    # only looks at them
    ]
    s = episode_cell_stats(cells, {})
    assert [c.own_perception for c in s] == [True, True, False, True, True, False]


def test_helpers_defined_and_reused_in_a_later_cell():
    cells = [
        (1, "def descend(h):\n    while robo.state().z > h:\n        robo.move_by(0, 0, -0.01)\n"),
        (2, "descend(0.1)\n"),
        (3, "print('done')\n"),
    ]
    s = episode_cell_stats(cells, {2: [("move_by", True)] * 4})
    assert [c.helper_defined for c in s] == [True, False, False]
    assert [c.helper_reused for c in s] == [False, True, False]
    # The helper's loop is a retry shape (while on a state read around a move).
    assert s[0].retry
    assert s[1].n_acting == 4 and not s[1].single_step


def test_a_later_cell_calling_a_guarded_helper_is_a_guarded_chain():
    define = textwrap.dedent("""
        def pick(obj):
            if not robo.move_to([0, 0, 0.1]).reached:
                return "could not reach"
            robo.set_gripper("close")
            return "ok"
        def retry_vla(text):
            for attempt in range(3):
                if robo.vla(text).success:
                    return True
    """)
    later = "report = pick('bowl')\nprint(report)\n"
    s = episode_cell_stats([(1, define), (2, later), (3, "retry_vla('open it')\n"), (4, later)],
                           {2: [MOVE, ("set_gripper", True)], 3: [("vla", True)], 4: [MOVE]})
    # Cell 1 only defines (nothing ran): the early-exit `if` guards set_gripper, but no chain executed.
    assert [c.guarded_chain for c in s] == [False, True, False, False]   # cell 4 ran one acting primitive
    assert [c.retry for c in s] == [True, False, True, False]
    assert [c.helper_reused for c in s] == [False, True, True, True]


def test_image_requests_conditional_unconditional_and_executed_only():
    conditional = """
        ok = robo.grasp("bowl")
        if not ok:
            robo.show("agentview")
    """
    s = stats_of(conditional, [GRASP])
    assert s.conditional_image_request and s.requests_image and s.single_step
    in_handler = "try:\n    robo.grasp('x')\nexcept Exception:\n    robo.show('wrist')\n"
    assert stats_of(in_handler).conditional_image_request
    plain = stats_of("robo.move_to([0, 0, 1])\nrobo.show('agentview')\n", [MOVE, SHOW])
    assert plain.requests_image and not plain.conditional_image_request
    # The cell only calls a helper; the trace shows the image it requested.
    via_helper = stats_of("look()\n", [SHOW])
    assert via_helper.requests_image and not via_helper.conditional_image_request


def test_executed_counts_come_from_the_trace_acting_flag():
    # `push` is not in the AST constant set, but the runtime flagged it acting.
    s = stats_of("robo.push(0.1)\nrobo.locate('x')\n", [("push", True), LOCATE])
    assert s.n_primitives == 2 and s.n_acting == 1 and s.single_step and s.acting_sites == 0


def test_a_cell_that_does_not_parse_keeps_its_executed_counts():
    s = stats_of("def f(:\n    robo.grasp('x')\n", [])
    assert not s.parses and s.n_acting == 0 and not s.guarded_chain and not s.requests_image
    s = episode_cell_stats([(1, "if x\n"), (2, "robo.move_to([0, 0, 1])\n")], {2: [MOVE]})
    assert [c.parses for c in s] == [False, True] and s[1].single_step


def test_helpers_calling_helpers_carry_the_chain():
    cells = [
        (1, "def place(o):\n    r = robo.move_to([0, 0, 1])\n    if r.reached:\n        robo.release()\n"),
        (2, "def do_goal(g):\n    return place(g)\n"),
        (3, "do_goal('bowl')\n"),
    ]
    s = episode_cell_stats(cells, {3: [MOVE, ("release", True)]})
    assert [c.guarded_chain for c in s] == [False, False, True]
    assert [c.helper_reused for c in s] == [False, True, True]
