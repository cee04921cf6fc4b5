"""Code-cell semantics in the real runtime child over a real LIBERO-PRO scene (paper §3.1–3.3).

One `RuntimeClient` (one scene build) serves every check in this module; the
success-guard test solves the task, so it runs last and the checks before it
never move the robot.
"""
from __future__ import annotations

import io
import os

import pytest

from agents.feedback import TASK_COMPLETE, success_line
from agents.planners.scripted import locate_and_choose_cell, parse_task, pick_place_cell
from agents.runtime import ActionResult, RuntimeClient

TASK = "libero_spatial_swap/0"
IMAGE_SIZE = 128
SECRET = "sk-cellbench-test-must-not-leak"


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("runtime_episode")
    with pytest.MonkeyPatch.context() as mp:
        # The parent holds a key, as the agent loop does; the child must not see it.
        mp.setenv("OPENAI_API_KEY", SECRET)
        mp.setenv("CELLBENCH_TEST_TOKEN", SECRET)
        client = RuntimeClient(str(workdir))
    client.deadline = float("inf")
    init = client.request("init", {
        "benchmark": "libero_pro", "task": TASK, "seed": 0, "capabilities": (), "guides": False,
        "image_size": IMAGE_SIZE, "auto_cameras_by_arms": {}, "initial_cameras": (),
    })
    client.trace_dir = workdir
    client.card = init["card"]
    yield client
    client.close()


def cell(runtime, code: str) -> ActionResult:
    return runtime.request("exec_cell", code)


def test_traceback_keeps_earlier_variables(runtime):
    r = cell(runtime, "a = 1\n1/0\nb = 2")
    assert r.exception == "ZeroDivisionError"
    assert "Traceback" in r.text and "ZeroDivisionError" in r.text
    assert 'File "<cell>", line 2' in r.text  # the model's own line, not the runtime's frames
    assert "agents/cells.py" not in r.text
    r = cell(runtime, "a")
    assert r.exception is None and r.text.strip() == "1"
    assert "NameError" in cell(runtime, "b").text


def test_trailing_expression_is_echoed_after_prints(runtime):
    r = cell(runtime, "print('hello')\nx = 20\nx + 1")
    assert r.text.splitlines() == ["hello", "21"]
    assert cell(runtime, "y = 3").text == ""  # an assignment echoes nothing
    assert cell(runtime, "None").text == ""


def test_syntax_error_is_reported(runtime):
    r = cell(runtime, "def f(:\n  pass")
    assert r.exception == "SyntaxError" and "SyntaxError" in r.text


def test_long_output_is_trimmed_keeping_head_and_tail(runtime):
    r = cell(runtime, "for i in range(3000):\n    print('line', i)")
    assert r.text.startswith("line 0\nline 1\n")
    assert r.text.rstrip().endswith("line 2999")
    assert "characters trimmed" in r.text
    assert "line 1500\n" not in r.text
    assert len(r.text) < 4000


def test_images_come_back_only_from_show(runtime):
    from PIL import Image

    r = cell(runtime, "img = robo.image('agentview')\nprint(img.shape, img.dtype)")
    assert r.exception is None, r.text
    assert f"({IMAGE_SIZE}, {IMAGE_SIZE}, 3) uint8" in r.text
    assert r.images == []

    r = cell(runtime, "robo.show('agentview')\nrobo.show('robot0_eye_in_hand')\nprint('shown')")
    assert r.exception is None, r.text
    assert [camera for camera, _ in r.images] == ["agentview", "robot0_eye_in_hand"]
    for _, png in r.images:
        im = Image.open(io.BytesIO(png))
        assert im.format == "PNG" and im.size == (IMAGE_SIZE, IMAGE_SIZE)
    assert r.images[0][1] != r.images[1][1]
    # Shown images are drained with the cell: the next cell starts with none.
    assert cell(runtime, "1 + 1").images == []
    names = [row["name"] for row in r.primitives]
    assert names == ["show", "show"]


def test_primitive_rows_number_across_cells(runtime):
    a = cell(runtime, "robo.state()\nrobo.state();")
    b = cell(runtime, "robo.state();")
    seqs = [row["seq"] for row in a.primitives + b.primitives]
    assert len(seqs) == 3 and seqs == list(range(seqs[0], seqs[0] + 3))


def test_child_has_no_api_key_and_runs_in_the_episode_dir(runtime):
    assert os.environ.get("OPENAI_API_KEY") != SECRET  # the fixture set it for the child's start only
    r = cell(runtime, "import os\nprint('OPENAI_API_KEY' in os.environ, 'CELLBENCH_TEST_TOKEN' in os.environ)\n"
                      f"print({SECRET!r} in repr(dict(os.environ)))")
    assert r.text.splitlines() == ["False False", "False"]
    r = cell(runtime, "import os\nos.getcwd()")
    # Inside the episode directory, in work/: relative paths cannot reach the trace files.
    assert os.path.realpath(eval(r.text.strip())) == os.path.realpath(runtime.trace_dir / "work")


def test_success_guard_stops_the_next_acting_primitive(runtime):
    plan = parse_task(runtime.card["instruction"], runtime.card["objects"])
    assert plan.understood, plan
    code = locate_and_choose_cell(plan)
    r = cell(runtime, code)
    assert r.exception is None and "object: None" not in r.text, r.text

    assert not runtime.solved_seen()
    r = cell(runtime, pick_place_cell())
    assert r.exception is None, r.text
    assert r.success, "the scripted pick-and-place no longer solves libero_spatial_swap/0 seed 0:\n" + r.text
    assert runtime.request("success") is True
    # The child told the parent as it happened (what an episode reads if the clock kills a request).
    assert runtime.solved_seen()
    # A cell that acted ends with the benchmark's check, in the words a tool result's flag stands for.
    assert r.text.splitlines()[-1] == success_line(True) == "Task success: True"

    # `except Exception` cannot swallow the guard's EpisodeFinished (a BaseException).
    r = cell(runtime, "try:\n    robo.move_to([0.0, 0.0, 1.2])\nexcept Exception as e:\n    print('swallowed', e)\n"
                      "print('after the move')")
    assert r.finished and r.exception is None
    assert "swallowed" not in r.text and "after the move" not in r.text
    assert r.text.splitlines() == [TASK_COMPLETE, "Task success: True"]  # the tool agent's refusal, word for word
    assert not any(row["name"] == "move_to" for row in r.primitives)  # the move never ran

    # Read-only primitives still work once the task is solved.
    r = cell(runtime, "s = robo.state()\nprint(len(s.eef_pos))")
    assert not r.finished and r.exception is None and r.text.strip() == "3"  # no flag: it did not act
