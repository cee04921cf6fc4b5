"""A stand-in for `cellbench play` that writes a real-schema trace in about a second, no simulator.

The workflow tests put a `cellbench` on PATH that sends `play` here and every
other verb to the real CLI, so Snakemake, the trace layout, ingest and the
report are the real ones and only the episode is fake.  The trace goes
through the real `TraceWriter` (rows appended and flushed one by one, the
record written last and atomically), with outcomes that are a deterministic
function of the episode's ids, as the scripted planner's are.  It starts as
`cellbench play` does (agents.play.guard_episode: the run watch, the trace
lock), and each call row names the process that wrote it (raw_usage.writer_pid).

Environment:
  FAKE_PLAY_CALL_S        seconds per LLM call (default 0.3): how long a kill has to catch an episode mid-way
  FAKE_PLAY_FAIL_ONCE     a file listing trace directories (one a line) whose first run ends in
                          planner_error (exit 3, planner_error.json); later runs succeed
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

from agents.cli import _build_parser
from agents.play import PLANNER_ERROR_EXIT, guard_episode, planner_error_note
from agents.records import CallRecord, EpisodeRecord
from agents.trace import TraceWriter


def outcome(key: str) -> tuple[int, bool]:
    """(number of calls, success) of an episode, from its ids alone."""
    h = int(hashlib.sha256(key.encode()).hexdigest(), 16)
    return 2 + h % 4, h % 3 != 0


def _call(i: int, key: str, success_after: bool, error: str | None = None) -> CallRecord:
    tokens = 1000 * i + int(hashlib.sha256(f"{key}/{i}".encode()).hexdigest(), 16) % 500
    return CallRecord(
        call_index=i, started_at=time.time(), latency_s=0.1, input_tokens=0 if error else tokens,
        cached_input_tokens=0 if error else tokens // 2, cache_write_tokens=0, output_tokens=0 if error else 50,
        reasoning_tokens=0, usage_source="provider" if error else "estimated",
        raw_usage={"writer_pid": os.getpid()}, images_in_prompt=1,
        images_returned=0, action_kind="none" if error else "tool", tool_name=None if error else "state",
        tool_args=None if error else {}, cell_hash=None, n_primitives=0, n_acting=0,
        exception="PlannerError" if error else None, success_after=success_after,
        retries=2 if error else 0, error=error, retry_errors=["InternalServerError 500: injected"] * 3 if error else None,
    )


def _fails_now(out: str) -> bool:
    listing = os.environ.get("FAKE_PLAY_FAIL_ONCE")
    if not listing or not Path(listing).exists():
        return False
    wanted = {line.strip() for line in Path(listing).read_text().splitlines() if line.strip()}
    done = Path(listing + ".failed")
    already = set(done.read_text().splitlines()) if done.exists() else set()
    if out not in wanted or out in already:
        return False
    with open(done, "a") as f:
        f.write(out + "\n")
    return True


def main(argv: list[str]) -> int:
    args = _build_parser().parse_args(["play", *argv])
    key = f"{args.benchmark}/{args.task}/{args.seed}/{args.agent}/{args.ablation}/{args.repeat}"
    n_calls, success = outcome(key)
    guard_episode(args.out)  # what `cellbench play` does first: the run watch and the trace lock
    planner_error = _fails_now(args.out)
    if planner_error:
        n_calls = 2
    trace = TraceWriter(args.out)
    started, t0 = time.time(), time.monotonic()
    calls = []
    for i in range(1, n_calls + 1):
        time.sleep(float(os.environ.get("FAKE_PLAY_CALL_S", "0.3")))
        failed = planner_error and i == n_calls
        calls.append(_call(i, key, success and i == n_calls,
                           error="endpoint failed 3 times; last: InternalServerError 500" if failed else None))
        trace.call(calls[-1])
    trace.transcript([{"role": "system", "content": "fake"}], {})
    status = "planner_error" if planner_error else ("solved" if success else "call_budget")
    rec = EpisodeRecord(
        benchmark=args.benchmark, suite=args.task.split("/")[0], task=args.task, seed=args.seed,
        agent=args.agent, ablation=args.ablation, planner="fake", model="fake-v1", instruction="fake",
        success=success and not planner_error, solved_at_call=n_calls if status == "solved" else None,
        status=status, n_calls=n_calls, input_tokens=sum(c.input_tokens for c in calls),
        cached_input_tokens=sum(c.cached_input_tokens for c in calls), cache_write_tokens=0,
        output_tokens=sum(c.output_tokens for c in calls), reasoning_tokens=0, usage_source="estimated",
        images_in_prompts=n_calls, images_returned=0, n_primitives=0, n_acting=0, sim_steps=0,
        wall_time_s=round(time.monotonic() - t0, 3), started_at=started, finished_at=time.time(),
        call_budget=args.call_budget or 40, wall_clock_limit_s=900.0, config_hash="fake", code_version="fake",
        package_versions={}, repeat=args.repeat,
        error="endpoint failed 3 times; last: InternalServerError 500" if planner_error else None,
    )
    trace.finish(rec)
    print(f"{args.task} seed={args.seed} agent={args.agent} ablation={args.ablation}: {status} -> {args.out}")
    if planner_error:
        print(planner_error_note(rec.error, args.out), file=sys.stderr)
        return PLANNER_ERROR_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
