"""The Snakemake run an episode belongs to, and an episode that ends itself once that run has died.

`kill -9` of Snakemake alone (the out-of-memory killer's pick, a wrong pid)
leaves its `cellbench play` jobs running, reparented to init.  A new run would
start the same episodes again while the old ones still write.  So the
workflow's main process names itself in the environment every job inherits
(`CELLBENCH_RUN`: the machine's boot id, its pid and its start time; see
workflow/rules/common.smk), and `cellbench play` watches that process through
a pidfd (a reused pid cannot pass for it): once it is gone, the episode stops
at once without writing episode.json.  It is unfinished; the next run redoes
it, after waiting for this process's trace-directory lock (agents.trace).

A job on another machine (a cluster node) has another boot id: there the
check does not apply, and the scheduler's own cancel stops the jobs.
"""
from __future__ import annotations

import os
import select
import sys
import threading
import time
from pathlib import Path

#: The environment variable naming the run (set by the workflow's main process).
RUN_ENV = "CELLBENCH_RUN"
#: Exit status of an episode that stopped because its run had died.
ORPHAN_EXIT = 4


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def run_token(pid: int | None = None) -> str:
    """What CELLBENCH_RUN holds for the process `pid` (default: this one)."""
    pid = os.getpid() if pid is None else pid
    return f"{_boot_id()}:{pid}:{_start_time(pid)}"


def _stop(pid: int) -> None:
    print(f"cellbench play: the snakemake run that started this episode (pid {pid}) has ended; stopping "
          f"without writing episode.json (the next run redoes the episode)", file=sys.stderr, flush=True)
    # At once, from this thread: the runtime child dies with us (PR_SET_PDEATHSIG), the kernel drops
    # the trace-directory lock, and no record is written.
    os._exit(ORPHAN_EXIT)


def _wait_gone(pid: int, start: str) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (OSError, AttributeError):  # no pidfd (an old kernel): look every second
        while _start_time(pid) == start:
            time.sleep(1.0)
        return
    try:
        if _start_time(pid) != start:  # the pid is another process's now: the run is gone
            return
        select.select([fd], [], [])  # readable once the process has exited
    finally:
        os.close(fd)


def watch_run(token: str | None = None, on_gone=_stop) -> threading.Thread | None:
    """Call `on_gone(pid)` from a daemon thread once the run named by `token` (default:
    $CELLBENCH_RUN) has ended; None when there is no run to watch on this machine."""
    token = os.environ.get(RUN_ENV) if token is None else token
    if not token:
        return None
    try:
        boot, pid_text, start = token.split(":")
        pid = int(pid_text)
    except ValueError:
        print(f"cellbench: ignoring a malformed {RUN_ENV}={token!r}", file=sys.stderr)
        return None
    if boot != _boot_id():
        return None

    def watch():
        _wait_gone(pid, start)
        on_gone(pid)

    thread = threading.Thread(target=watch, name="run-watch", daemon=True)
    thread.start()
    return thread
