"""One writer per trace directory, and an episode that stops once the run that started it has died.

Real processes: a holder of a trace directory's lock in another process, and
the `cellbench play` stand-in of tests/fake_play.py (which starts as the real
command does, through agents.play.guard_episode) watching a stand-in run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agents.runwatch import ORPHAN_EXIT, RUN_ENV, run_token, watch_run
from agents.trace import LOCK_FILE, TraceDirBusy, TraceWriter, hold_trace_dir, release_trace_dir

HERE = Path(__file__).resolve().parent


def _holder(trace_dir: Path, seconds: float) -> subprocess.Popen:
    """Another process that holds `trace_dir` for `seconds`, then ends; its stdout says when it holds it."""
    code = textwrap.dedent(f"""
        import sys, time
        from agents.trace import hold_trace_dir
        hold_trace_dir({str(trace_dir)!r})
        print("held", flush=True)
        time.sleep({seconds})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_refuses_naming_the_directory_and_the_live_process(tmp_path):
    trace = tmp_path / "seed0"
    holder = _holder(trace, 30)
    try:
        (trace / "calls.jsonl").write_text("row of the first writer\n")
        t0 = time.monotonic()
        with pytest.raises(TraceDirBusy) as err:
            TraceWriter(trace, lock_wait_s=0.6)
        assert time.monotonic() - t0 >= 0.6  # it waited before refusing
        message = str(err.value)
        assert str(trace) in message and f"pid {holder.pid} " in message and str(trace / LOCK_FILE) in message
        # It wrote nothing: the first writer's rows are intact, nothing was cleaned.
        assert (trace / "calls.jsonl").read_text() == "row of the first writer\n"
        assert sorted(p.name for p in trace.iterdir()) == sorted([LOCK_FILE, "calls.jsonl"])
    finally:
        holder.kill()
        holder.wait()


def test_a_second_writer_waits_for_the_first_to_end_then_starts_clean(tmp_path, capfd):
    trace = tmp_path / "seed0"
    holder = _holder(trace, 1.5)
    (trace / "calls.jsonl").write_text("row of the first writer\n")
    try:
        writer = TraceWriter(trace, lock_wait_s=30)
        assert holder.poll() is not None  # it only got the directory once the holder had ended
        assert f"being written by pid {holder.pid} " in capfd.readouterr().err
        assert (trace / "calls.jsonl").read_text() == ""  # the new writer starts clean
        assert f"pid {os.getpid()} " in (trace / LOCK_FILE).read_text()
        writer.discard()
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_taken_twice_in_one_process_is_held_once_and_released(tmp_path):
    trace = tmp_path / "seed0"
    hold_trace_dir(trace)
    hold_trace_dir(trace)  # the episode takes it first, then its TraceWriter: no self-deadlock
    code = f"from agents.trace import hold_trace_dir; hold_trace_dir({str(trace)!r}, wait_s=0.2)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0 and "TraceDirBusy" in proc.stderr
    release_trace_dir(trace)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_holder_killed_with_sigkill_frees_the_directory(tmp_path):
    trace = tmp_path / "seed0"
    holder = _holder(trace, 60)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    t0 = time.monotonic()
    hold_trace_dir(trace, wait_s=5)  # the kernel dropped the lock with the process
    assert time.monotonic() - t0 < 1
    release_trace_dir(trace)


def test_the_run_token_names_this_process_and_a_dead_run_is_noticed():
    stand_in = subprocess.Popen(["sleep", "30"])
    gone = []
    try:
        token = run_token(stand_in.pid)
        assert token.split(":")[1] == str(stand_in.pid) and run_token() != token
        watch = watch_run(token, on_gone=gone.append)
        time.sleep(0.3)
        assert not gone  # alive: nothing happens
        stand_in.kill()
        stand_in.wait()
        watch.join(timeout=5)
        assert gone == [stand_in.pid]
    finally:
        stand_in.kill()
    # Another machine's run (another boot id) is not watched, nor is no run at all.
    assert watch_run("another-boot:1:1", on_gone=gone.append) is None
    assert watch_run("", on_gone=gone.append) is None


def test_an_episode_whose_run_died_stops_without_writing_its_record(tmp_path):
    """The `cellbench play` stand-in, started by a stand-in run: the run is SIGKILLed mid-episode
    (the episode needs at least two 1 s calls), and the episode stops at once by itself."""
    run = subprocess.Popen(["sleep", "60"])
    out = tmp_path / "results" / "seed0"
    env = {**os.environ, RUN_ENV: run_token(run.pid), "FAKE_PLAY_CALL_S": "1"}
    play = subprocess.Popen([sys.executable, str(HERE / "fake_play.py"), "--task", "libero_spatial_swap/0",
                             "--agent", "tool", "--out", str(out)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "calls.jsonl").exists() or not (out / "calls.jsonl").read_text():
            assert play.poll() is None and time.monotonic() < deadline, play.stderr.read() if play.poll() else ""
            time.sleep(0.02)
        rows = (out / "calls.jsonl").read_text().splitlines()
        assert json.loads(rows[0])["raw_usage"]["writer_pid"] == play.pid
        run.kill()
        run.wait()
        t0 = time.monotonic()
        assert play.wait(timeout=10) == ORPHAN_EXIT
        assert time.monotonic() - t0 < 0.9  # before its next call could end
        assert "snakemake run that started this episode" in play.stderr.read()
        assert not (out / "episode.json").exists() and not (out / "planner_error.json").exists()
        hold_trace_dir(out, wait_s=0)  # and its lock went with it
        release_trace_dir(out)
    finally:
        run.kill()
        play.kill()
