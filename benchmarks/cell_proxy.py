"""What sealing the cells costs: a proxied primitive against a direct call, and the cell worker itself.

On one real LIBERO-PRO scene (libero_spatial_swap/0, seed 0), in one run:

* the round trip of `robo.state()` called from a cell in the confined worker
  (agents/cellworker.py) against the same primitive called directly on the
  Robot in the simulator process; the overhead is the difference of medians
  (goal: under 1 ms);
* that overhead times the primitives of the scripted planner's
  pick-and-place cells, as a share of those cells' wall time (goal: under 1 %
  of an episode's wall time, which also holds the LLM calls);
* the worker's start (interpreter, numpy, confinement, handshake) and its
  memory (VmRSS, VmHWM) once started and after those cells.

Usage: MUJOCO_GL=egl python benchmarks/cell_proxy.py [--calls 2000] [--starts 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

N_DEFAULT = 2000


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=N_DEFAULT, help="primitive calls timed each way")
    ap.add_argument("--starts", type=int, default=5, help="worker starts timed")
    args = ap.parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")

    from agents.cellworker import CellWorker
    from agents.planners.scripted import locate_and_choose_cell, parse_task, pick_place_cell
    from robots.factory import make_robot

    t0 = time.perf_counter()
    robot, card = make_robot({"benchmark": "libero_pro", "task": "libero_spatial_swap/0", "seed": 0,
                              "capabilities": (), "guides": False, "image_size": 128})
    print(f"scene built in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows: list[dict] = []
    robot.recorder = lambda **row: rows.append(row)  # as the runtime records: part of a primitive's cost

    direct = []
    for _ in range(args.calls):
        t = time.perf_counter()
        robot.state()
        direct.append(time.perf_counter() - t)

    with tempfile.TemporaryDirectory() as work:
        starts, rss_start = [], []
        for _ in range(args.starts):
            worker = CellWorker(robot, work)
            worker.start()
            starts.append(worker.start_s)
            rss_start.append(_status_kib(worker.proc.pid, "VmRSS"))
            worker.close()
        worker = CellWorker(robot, work)
        worker.start()
        layers = [k for k, v in worker.sandbox.items() if v is True]
        out = worker.run(f"import time\nts = []\nfor _ in range({args.calls}):\n"
                         "    t = time.perf_counter()\n    robo.state()\n    ts.append(time.perf_counter() - t)\n"
                         "ts.sort()\nprint(ts[len(ts) // 2], ts[int(len(ts) * 0.99)])")
        assert out.exception is None, out.output
        proxied_median, proxied_p99 = map(float, out.output.split())

        plan = parse_task(card["instruction"], card["objects"])
        rows.clear()
        t = time.perf_counter()
        for code in (locate_and_choose_cell(plan), pick_place_cell()):
            out = worker.run(code)
            assert out.exception is None, out.output
        cells_wall = time.perf_counter() - t
        n_prims = len(rows)
        rss_after = _status_kib(worker.proc.pid, "VmRSS")
        hwm_after = _status_kib(worker.proc.pid, "VmHWM")
        worker.close()

    direct_median = statistics.median(direct)
    overhead = proxied_median - direct_median
    share = overhead * n_prims / cells_wall
    print(f"sandbox layers applied: {', '.join(layers)}")
    print(f"robo.state() direct:   median {direct_median * 1e3:.3f} ms over {args.calls} calls")
    print(f"robo.state() proxied:  median {proxied_median * 1e3:.3f} ms, p99 {proxied_p99 * 1e3:.3f} ms "
          f"(from a cell in the worker)")
    print(f"proxy overhead:        {overhead * 1e3:.3f} ms per primitive (goal < 1 ms)")
    print(f"pick-and-place cells:  {n_prims} primitives in {cells_wall:.1f} s -> proxy overhead "
          f"{share * 100:.3f} % of their wall time (goal < 1 % of an episode's)")
    print(f"worker start:          median {statistics.median(starts):.3f} s (min {min(starts):.3f}, "
          f"max {max(starts):.3f}) over {args.starts} starts")
    print(f"worker memory:         VmRSS {statistics.median(rss_start) / 1024:.0f} MiB started, "
          f"{rss_after / 1024:.0f} MiB after the cells (peak {hwm_after / 1024:.0f} MiB)")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # skip EGL's noisy teardown at interpreter exit
