"""Sealed cells (agents/cellworker.py, agents/sandbox.py, README "Isolation"), on a real scene.

One code-agent episode plays a list of hostile cells, each bounded so that
the test cannot hurt the machine, with a benign cell after each group: the
robot's backend and private attributes, the simulator through `gc` and
`sys.modules`, a secret in a file under `$HOME` and one in another episode's
trace directory, a write beside the trace files, a TCP connection to a
server this test listens with on 127.0.0.1, a host name, `subprocess`
touching a file and the network, a fork bomb, 50 GB, open files without
bound, `exit()`, a segfault through ctypes and a spin until the worker's CPU
limit.  Each fails with a clear result in the trace, the episode goes on to
`finish`, and the next episode runs normally.  Two scene builds for the
hostile episode and the next one (~15-50 s each), one more for `required`.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agents.cellworker import RESTART_EXCEPTION, RESTARTED
from agents.episode import EpisodeSpec, run_episode
from agents.errors import CellbenchError
from agents.planners.base import PlannerReply, ToolCall
from agents.records import Usage
from agents.runtime import RuntimeLimits, describe_exit, scrubbed_env
from agents.sandbox import LAYERS, UNAVAILABLE_ENV
from agents.schema import validate_trace

SECRET = "sk-cellbench-isolation-test-0123456789"
# Generous CPU: a slow CI machine spends more of it building the scene and zeroing memory; only the
# spinning cell is meant to reach it.  Room for the allocation is kept small (zeroing it costs CPU time).
LIMITS = RuntimeLimits(cell_memory=256 * 2**20, cpu_s=20.0, max_processes=16)
SIMULATOR_MODULES = ("mujoco", "robosuite", "libero", "robots.robot", "robots.backend", "robots.libero_pro",
                     "agents.runtime", "openai")


def hostile_cells(home_secret: Path, other_trace: Path, trace_dir: Path, port: int) -> dict[str, str]:
    outside = trace_dir / "pwned.txt"
    return {
        "environ": "import os\n"
                   "print(sorted(k for k in os.environ if 'KEY' in k or 'COPY' in k))\n"
                   f"print({SECRET!r} in repr(dict(os.environ)))",
        "workdir": "import os\nprint(os.getcwd())\n"
                   "open('calls.jsonl', 'w').write('not a trace row')\nopen('episode.json', 'w').write('{}')",
        "long_output": "print('x' * 10_000)",
        "backend": "robo.backend.success()",
        "private": "robo._motion",
        "guard_off": "robo.guard = None",
        "gc": "import gc, sys\n"
              f"mods = {SIMULATOR_MODULES!r}\n"
              "print(sorted(m for m in sys.modules if m.startswith(mods)))\n"
              "print(sorted({type(o).__module__ for o in gc.get_objects()\n"
              "              if type(o).__module__ and type(o).__module__.startswith(mods)}))\n"
              "import robots.robot",
        "after_gc": "s = robo.state()\nprint('state', len(s.eef_pos), s.holding)",
        "home_secret": f"print(open({str(home_secret)!r}).read())",
        "other_trace": f"print(open({str(other_trace / 'calls.jsonl')!r}).read())",
        "list_results": f"import os\nprint(os.listdir({str(other_trace.parent)!r}))",
        "write_outside": f"open({str(trace_dir / 'episode.json')!r}, 'w').write('{{}}')",
        "tcp": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)",
        "dns": "import socket\nprint(socket.getaddrinfo('pypi.org', 443))",
        "subprocess": "import subprocess\n"
                      f"subprocess.run(['sh', '-c', 'echo pwned > {outside}; "
                      f"echo x > /dev/tcp/127.0.0.1/{port}'])",
        "fork_bomb": "import os\nwhile True:\n    os.fork()",
        "namespace": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                     "print(libc.unshare(0x10000000), ctypes.get_errno())",  # a new user namespace: EPERM
        "after_fork_bomb": "print('alive', robo.state().gripper_width_m >= 0)",
        "allocate_50g": "x = bytearray(50 * 2**30)",
        "allocate": "def grab():\n    chunks = []\n    while True:\n        chunks.append(bytearray(16 * 2**20))\n"
                    "grab()",
        "after_allocate": "kept = 41\nprint('alive', len(bytearray(10 * 2**20)))",
        "open_files": "import os\nfiles = [open(os.devnull) for _ in range(100_000)]",
        "exit": "exit(3)",
        "after_exit": "print('still here', kept)",
        "plant": "import os\nos.makedirs('agents', exist_ok=True)\n"
                 "for name in ('numpy.py', 'json.py', 'agents/__init__.py'):\n"
                 "    open(name, 'w').write(\"open('planted_ran', 'w').write('imported')\\n\")",
        "segfault": "import ctypes\nprint('before the crash')\nrobo.state()\nctypes.string_at(0)",
        "after_segfault": "print('kept' in dir(), robo.state().gripper_width_m >= 0)",
        "spin": "while True:\n    pass",
        "after_spin": "import numpy as np\nprint('after spin', int(np.arange(4).sum()), robo.locate('plate_1').found)",
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
    root = tmp_path_factory.mktemp("hostile")
    out = root / "results" / "code" / "seed0"
    other = root / "results" / "tool" / "seed0"  # the other agent's trace of the same instance
    other.mkdir(parents=True)
    (other / "calls.jsonl").write_text(f"other trace {SECRET}")
    home_secret = Path.home() / f".cellbench-isolation-{uuid.uuid4().hex}"
    home_secret.write_text(f"home {SECRET}")
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    cells = hostile_cells(home_secret, other, out, server.getsockname()[1])
    planner = CellPlanner(list(cells.values()))
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("OPENAI_API_KEY", SECRET)  # as the agent loop holds it
            mp.setenv("CELLBENCH_COPY", SECRET)  # the same key under an innocent name
            rec = run_episode(spec(call_budget=len(cells) + 1, wall_clock_s=600, limits=LIMITS), planner, str(out))
        try:
            server.accept()
            connected = True
        except BlockingIOError:
            connected = False
    finally:
        server.close()
        home_secret.unlink()
    replies = dict(zip(cells, planner.replies))
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    return rec, out, replies, {name: calls[i] for i, name in enumerate(cells) if i < len(calls)}, connected


def test_the_episode_survives_every_hostile_cell(hostile):
    rec, out, replies, calls, _ = hostile
    assert rec.status == "gave_up" and rec.error is None, rec.error
    assert len(replies) == len(calls) == rec.n_calls - 1  # every cell ran, then finish
    episode = json.loads((out / "episode.json").read_text())
    assert {k: episode["sandbox"][k] for k in LAYERS} == {k: True for k in LAYERS}, episode["sandbox"]
    assert episode["sandbox"]["mode"] == "best_effort" and episode["sandbox"]["landlock_abi"] >= 6
    assert episode["cell_worker_restarts"] == 2  # the segfault and the spin
    assert validate_trace(out) == []


def test_no_key_in_the_workers_environment(hostile):
    _, _, replies, _, _ = hostile
    assert replies["environ"].splitlines() == ["[]", "False"]


def test_cells_work_inside_the_episode_directory_without_touching_the_trace(hostile):
    rec, out, replies, calls, _ = hostile
    assert Path(replies["workdir"].splitlines()[0]).resolve() == (out / "work").resolve()
    assert (out / "work" / "calls.jsonl").read_text() == "not a trace row"
    assert calls["write_outside"]["exception"] == "PermissionError"
    assert json.loads((out / "episode.json").read_text())["n_calls"] == rec.n_calls


def test_long_output_is_trimmed_once_with_the_true_count(hostile):
    _, _, replies, _, _ = hostile
    text = replies["long_output"]
    assert text.count("characters trimmed") == 1 and "[6501 characters trimmed]" in text


def test_robo_is_a_proxy_with_primitives_only(hostile):
    _, _, replies, calls, _ = hostile
    for name in ("backend", "private", "guard_off"):
        assert calls[name]["exception"] == "AttributeError", replies[name]
    assert "robo has no attribute 'backend'" in replies["backend"]
    assert "robo has no attribute '_motion'" in replies["private"]
    assert calls["backend"]["left_api"] == ["robo.backend"]
    assert calls["guard_off"]["left_api"] == ["robo.guard ="]
    assert replies["after_gc"].strip() == "state 3 False"


def test_the_simulator_is_not_in_the_workers_memory(hostile):
    _, _, replies, calls, _ = hostile
    modules, objects, *rest = replies["gc"].splitlines()
    assert modules == "[]" and objects == "[]", replies["gc"]
    # The project's own files are not readable either: the robot stack cannot even be imported.
    assert calls["gc"]["exception"] == "PermissionError" and "robots/robot" in replies["gc"]
    assert "gc" in calls["gc"]["left_api"]


def test_no_file_outside_the_interpreter_and_work(hostile):
    _, out, replies, calls, _ = hostile
    for name in ("home_secret", "other_trace", "list_results"):
        assert calls[name]["exception"] == "PermissionError", replies[name]
        assert SECRET not in replies[name]
    assert any(x.startswith("open ") and "cellbench-isolation" in x for x in calls["home_secret"]["left_api"])
    assert not (out / "pwned.txt").exists()


def test_no_network_and_no_processes(hostile):
    _, out, replies, calls, connected = hostile
    assert not connected  # the server on 127.0.0.1 never saw the cell
    assert calls["tcp"]["exception"] == "PermissionError", replies["tcp"]
    assert calls["dns"]["exception"] in ("gaierror", "PermissionError"), replies["dns"]
    assert calls["subprocess"]["exception"] == "PermissionError", replies["subprocess"]
    assert calls["fork_bomb"]["exception"] == "PermissionError", replies["fork_bomb"]
    assert {"socket"} <= set(calls["tcp"]["left_api"]) and "subprocess" in calls["subprocess"]["left_api"]
    assert replies["after_fork_bomb"].strip() == "alive True"
    assert replies["namespace"].strip() == "-1 1" and "ctypes" in calls["namespace"]["left_api"]


def test_memory_and_files_are_bounded_and_the_worker_goes_on(hostile):
    _, _, replies, calls, _ = hostile
    assert calls["allocate_50g"]["exception"] == "MemoryError"
    assert calls["allocate"]["exception"] == "MemoryError"
    assert "MemoryError" in replies["allocate"] and 'File "<cell>"' in replies["allocate"]
    assert replies["after_allocate"].strip() == f"alive {10 * 2**20}"
    assert calls["open_files"]["exception"] == "OSError" and "Too many open files" in replies["open_files"]
    assert calls["exit"]["exception"] == "SystemExit" and "SystemExit: 3" in replies["exit"]
    assert replies["after_exit"].strip() == "still here 41"


def test_a_crashed_worker_is_replaced_and_the_model_is_told(hostile):
    _, out, replies, calls, _ = hostile
    for name, how in (("segfault", "SIGSEGV"), ("spin", "SIGXCPU")):
        assert calls[name]["exception"] == RESTART_EXCEPTION, replies[name]
        assert RESTARTED in replies[name] and how in replies[name]
    # What the cell printed up to its last primitive call is kept.
    assert replies["segfault"].splitlines()[0] == "before the crash"
    # The fresh worker has none of the old variables, and robo works in it.
    assert replies["after_segfault"].strip() == "False True"
    # Modules a cell left in work/ were not imported by the fresh worker before it confined itself.
    assert calls["plant"]["exception"] is None and not (out / "work" / "planted_ran").exists()
    assert replies["after_spin"].strip() == "after spin 6 True"


def test_the_next_episode_runs(hostile, tmp_path):
    # With episode.sandbox off: no kernel layer, but still a worker of its own with robo a proxy.
    planner = CellPlanner(["print(robo.state().gripper_width_m >= 0)", "robo.backend"])
    rec = run_episode(spec(call_budget=4, extra={"sandbox": "off"}), planner, str(tmp_path))
    assert rec.status == "gave_up" and planner.replies[0].strip() == "True", (rec.error, planner.replies)
    assert "robo has no attribute 'backend'" in planner.replies[1], planner.replies
    layers = json.loads((tmp_path / "episode.json").read_text())["sandbox"]
    assert layers["mode"] == "off" and not any(layers[k] for k in LAYERS), layers
    assert validate_trace(tmp_path) == []
    assert not (tmp_path / "work").exists()  # an unused work directory is removed


def test_required_refuses_an_episode_without_a_layer(tmp_path, monkeypatch):
    monkeypatch.setenv(UNAVAILABLE_ENV, "filesystem")  # as on a kernel without Landlock
    planner = CellPlanner(["print('never runs')"])
    with pytest.raises(CellbenchError, match="'filesystem' layer is unavailable"):
        run_episode(spec(call_budget=2, extra={"sandbox": "required"}), planner, str(tmp_path))
    assert planner.n == 0 and not (tmp_path / "episode.json").exists()


def _confine_in_a_fresh_process(tmp_path: Path, mode: str, off: str) -> subprocess.CompletedProcess:
    code = ("import json, sys\nfrom agents.sandbox import confine\n"
            f"print(json.dumps(confine({str(tmp_path)!r}, {mode!r})))")
    env = {**os.environ, UNAVAILABLE_ENV: off, "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_best_effort_applies_the_other_layers_and_names_the_missing_one(tmp_path):
    out = _confine_in_a_fresh_process(tmp_path, "best_effort", "seccomp,tcp")
    report = json.loads(out.stdout)
    assert report["seccomp"] is False and report["tcp"] is False
    assert report["filesystem"] is True and report["network"] is True
    assert UNAVAILABLE_ENV in report["unavailable"]["seccomp"]
    out = _confine_in_a_fresh_process(tmp_path, "required", "network")
    assert out.returncode != 0 and "'network' layer is unavailable" in out.stderr


def test_scrubbed_env_drops_keys_and_their_copies():
    env = {"OPENAI_API_KEY": SECRET, "HF_TOKEN": "hf_abcdefgh", "MY_SETTING": SECRET, "PATH": "/usr/bin",
           "DB_PASSWORD": "hunter22", "SHORT": "1", "OTHER_KEY": "1"}
    assert scrubbed_env(env) == {"PATH": "/usr/bin", "SHORT": "1"}


def test_exit_statuses_in_words():
    assert describe_exit(1) == "exit code 1"
    assert describe_exit(-24) == "killed by SIGXCPU (its CPU time limit)"
    assert describe_exit(-9).startswith("killed by SIGKILL (")
    assert describe_exit(None) == "exit code unknown"
