"""What the runtime child's isolation stops (agents/runtime.py, README "Isolation"), on a real scene.

One code-agent episode plays a list of hostile cells, each bounded so that
the test cannot hurt the machine: it reads the environment for the key,
writes where the trace files are, allocates without bound (256 MiB of room),
forks in a loop (16 processes at most), opens files without bound, calls
`exit()`, and finally spins until its CPU limit (12 s) kills the runtime.
Each ends with a clear result in the trace; nothing of the child is left
running; and the next episode runs normally.  Two scene builds (~15-50 s each).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agents.episode import EpisodeSpec, run_episode
from agents.planners.base import PlannerReply, ToolCall
from agents.records import Usage
from agents.runtime import RuntimeLimits, _group_size, describe_exit, scrubbed_env
from agents.schema import validate_trace

SECRET = "sk-cellbench-isolation-test-0123456789"
# Room for the allocation is kept small and the CPU limit generous: zeroing memory costs CPU time
# (page faults count towards RLIMIT_CPU), and on a slow machine 1 GiB of it and 5 s of limit let
# SIGXCPU end the runtime before the later cells ran.
LIMITS = RuntimeLimits(cell_memory=256 * 2**20, cpu_s=12.0, max_processes=16)

CELLS = {
    "environ": "import os\n"
               "print(sorted(k for k in os.environ if 'KEY' in k or 'COPY' in k))\n"
               f"print({SECRET!r} in repr(dict(os.environ)))",
    "workdir": "import os\nprint(os.getcwd())\n"
               "open('calls.jsonl', 'w').write('not a trace row')\nopen('episode.json', 'w').write('{}')",
    "allocate": "def grab():\n    chunks = []\n    while True:\n        chunks.append(bytearray(16 * 2**20))\n"
                "grab()",
    "after_allocate": "print('alive', len(bytearray(10 * 2**20)))",
    "fork_continues": "import os\npid = os.fork()\nprint('copy' if pid == 0 else 'runtime')",
    "fork_loop": "import os, time\nkids = []\n"
                 "try:\n    for i in range(1000):\n        pid = os.fork()\n        if pid == 0:\n"
                 "            time.sleep(600)\n            os._exit(0)\n        kids.append(pid)\n"
                 "except BlockingIOError as e:\n    print('refused after', len(kids), 'forks:', e)\n"
                 "print('group', os.getpgid(0))",
    "open_files": "import os\nfiles = [open(os.devnull) for _ in range(100_000)]",
    "exit": "exit(3)",
    "after_exit": "print('still here')",
    "spin": "while True:\n    pass",
}


class CellPlanner:
    """Plays one python cell per call, in order; then `finish`."""

    name = "test-cells"
    model = "cells-v0"

    def __init__(self, cells: list[str]):
        self.cells = list(cells)
        self.replies: list[str] = []
        self.n = 0

    def next(self, messages, tools) -> PlannerReply:
        if self.n:
            self.replies.append(messages[-1]["content"] if messages[-1]["role"] == "tool" else messages[-2]["content"])
        self.n += 1
        if self.cells:
            call = ToolCall(f"c{self.n}", "python", json.dumps({"code": self.cells.pop(0)}))
        else:
            call = ToolCall(f"c{self.n}", "finish", json.dumps({"status": "stuck", "summary": "done testing"}))
        return PlannerReply(text="", tool_calls=[call], usage=Usage(input_tokens=10, output_tokens=1),
                            usage_source="estimated")


def spec(**kw) -> EpisodeSpec:
    return EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent="code",
                       ablation="no_vla_no_guides", image_size=128, n_images=1, **kw)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile")
    planner = CellPlanner(list(CELLS.values()))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", SECRET)  # as the agent loop holds it
        mp.setenv("CELLBENCH_COPY", SECRET)  # the same key under an innocent name
        rec = run_episode(spec(call_budget=len(CELLS) + 1, wall_clock_s=300, limits=LIMITS), planner, str(out))
    replies = dict(zip(CELLS, planner.replies))
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    return rec, out, replies, {name: calls[i] for i, name in enumerate(CELLS) if i < len(calls)}


def test_no_key_in_the_childs_environment(hostile):
    _, _, replies, _ = hostile
    assert replies["environ"].splitlines() == ["[]", "False"]


def test_cells_work_inside_the_episode_directory_without_touching_the_trace(hostile):
    rec, out, replies, _ = hostile
    assert Path(replies["workdir"].splitlines()[0]).resolve() == (out / "work").resolve()
    assert (out / "work" / "calls.jsonl").read_text() == "not a trace row"
    assert json.loads((out / "episode.json").read_text())["n_calls"] == rec.n_calls
    assert validate_trace(out) == []


def test_unbounded_allocation_is_a_memory_error_and_the_runtime_goes_on(hostile):
    _, _, replies, calls = hostile
    assert calls["allocate"]["exception"] == "MemoryError"
    assert "MemoryError" in replies["allocate"] and 'File "<cell>"' in replies["allocate"]
    assert replies["after_allocate"].strip() == f"alive {10 * 2**20}"


def test_fork_loop_is_bounded_and_forked_copies_stay_silent(hostile):
    _, _, replies, calls = hostile
    first, group = replies["fork_loop"].splitlines()
    assert first.startswith(f"refused after {LIMITS.max_processes - 1} forks:") and "at most 16 processes" in first
    assert calls["fork_loop"]["exception"] is None
    # The copy that went on with its cell exited without answering: the protocol is intact.
    assert replies["fork_continues"].strip() == "runtime"
    assert replies["open_files"] and calls["open_files"]["exception"] == "OSError"
    assert "Too many open files" in replies["open_files"]
    # Nothing of the episode's process group outlives it: sleeping children included.
    pgid = int(group.split()[1])
    deadline = time.monotonic() + 10
    while _group_size(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group_size(pgid) == 0


def test_exit_in_a_cell_ends_the_cell_not_the_runtime(hostile):
    _, _, replies, calls = hostile
    assert calls["exit"]["exception"] == "SystemExit" and "SystemExit: 3" in replies["exit"]
    assert replies["after_exit"].strip() == "still here"


def test_spinning_cell_ends_on_the_cpu_limit_with_a_clear_error(hostile):
    rec, out, _, calls = hostile
    assert rec.status == "error" and not rec.success
    assert "killed by SIGXCPU (its CPU time limit)" in rec.error
    assert calls["spin"]["action_kind"] == "cell" and calls["spin"]["exception"] == "RuntimeDied"
    assert rec.n_calls == len(CELLS)


def test_the_next_episode_runs(hostile, tmp_path):
    planner = CellPlanner(["print(robo.state().gripper_width_m >= 0)"])
    rec = run_episode(spec(call_budget=3), planner, str(tmp_path))
    assert rec.status == "gave_up" and planner.replies[0].strip() == "True"
    assert validate_trace(tmp_path) == []
    assert not (tmp_path / "work").exists()  # an unused work directory is removed


def test_scrubbed_env_drops_keys_and_their_copies():
    env = {"OPENAI_API_KEY": SECRET, "HF_TOKEN": "hf_abcdefgh", "MY_SETTING": SECRET, "PATH": "/usr/bin",
           "DB_PASSWORD": "hunter22", "SHORT": "1", "OTHER_KEY": "1"}
    assert scrubbed_env(env) == {"PATH": "/usr/bin", "SHORT": "1"}


def test_exit_statuses_in_words():
    assert describe_exit(1) == "exit code 1"
    assert describe_exit(-24) == "killed by SIGXCPU (its CPU time limit)"
    assert describe_exit(-9).startswith("killed by SIGKILL (")
    assert describe_exit(None) == "exit code unknown"
