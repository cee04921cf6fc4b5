"""The runtime process: simulator and Robot live in a child process; code cells in a grandchild.

The agent loop (which holds the API key) talks to the child over a private
socket with two verbs, `call_tool(name, args)` and `exec_cell(code)`, plus
`init`, `limits`, `success` and `close`.  The parent's watchdog ends the child
when the episode's wall clock runs out.  A code cell does not run here: the
child hands it to its cell worker (agents/cellworker.py), a confined process
of its own whose `robo` is a proxy to this one's Robot (README "Isolation").

Isolation of this child
  * a separate process: a crash or hang ends the episode with status `error`
    or `wall_clock`; the agent loop, the workflow and the next episode go on;
  * an environment without credentials: variables whose names look like keys
    or tokens are dropped (`scrubbed_env`), and so is any variable holding
    the same value as a dropped one;
  * its working directory is `work/` inside the episode's trace directory, so
    relative paths cannot overwrite the trace files;
  * resource limits (setrlimit): no core dumps; open files (1024); file size
    (4 GiB); address space (16 GiB from the start, then at most 8 GiB more
    than the built scene maps); CPU time (generous while the scene builds,
    then the CPU the scene took plus 2 CPU-seconds per second of the
    episode's wall clock plus a minute; SIGXCPU, then SIGKILL 5 s later).
    The same memory and CPU budgets bound the cell worker on its own;
  * at most 64 live processes through `os.fork` (counted over the child's
    process group); the whole process group (the cell worker included) is
    killed when the episode ends, and the child dies with its parent
    (PR_SET_PDEATHSIG), so a killed run leaves no simulator behind.

  This child is the harness's own code (simulator, VLA and segmentation
  clients with their network): it is not confined by the kernel; the cell
  worker is (agents/sandbox.py).
"""
from __future__ import annotations

import ctypes
import errno
import io
import math
import os
import pickle
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from agents.errors import CellbenchError

SECRET_ENV_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
WORK_DIR = "work"
"""The child's working directory, inside the trace directory."""
INIT_CPU_S = 3600
"""CPU seconds the scene build may take (several threads render; the init watchdog is 600 s of wall time)."""
_GIB = 2**30


@dataclass(frozen=True)
class RuntimeLimits:
    """Resource limits of the runtime child; see the module docstring for what they stop and what not."""

    address_space: int = 16 * _GIB
    """RLIMIT_AS from the start, bytes: llvmpipe maps a lot of virtual memory (~4 GiB on 2 cores, more on many)."""
    cell_memory: int | None = 8 * _GIB
    """Once the scene is built, the address space may grow by at most this much (None: keep `address_space`)."""
    cpu_per_wall_s: float = 2.0
    """CPU seconds allowed per second of the episode's wall clock (rendering threads run in parallel)."""
    cpu_margin_s: float = 60.0
    cpu_s: float | None = None
    """CPU seconds after the scene build, overriding cpu_per_wall_s x wall clock + cpu_margin_s."""
    open_files: int = 1024
    file_size: int = 4 * _GIB
    max_processes: int = 64
    """Live processes in the runtime's process group beyond which `os.fork` is refused."""

    def cpu_budget(self, wall_clock_s: float) -> float:
        if self.cpu_s is not None:
            return self.cpu_s
        if wall_clock_s == float("inf"):
            return float("inf")
        return self.cpu_per_wall_s * wall_clock_s + self.cpu_margin_s


def scrubbed_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment less anything that looks like a credential.

    A variable goes if its name has a marker (KEY, TOKEN, SECRET, ...) or its
    value is that of a variable dropped for its name (a key copied under an
    innocent name).
    """
    env = dict(os.environ if env is None else env)
    secret = {k for k in env if any(m in k.upper() for m in SECRET_ENV_MARKERS)}
    values = {env[k] for k in secret if len(env[k]) >= 8}
    return {k: v for k, v in env.items() if k not in secret and v not in values}


class RuntimeDied(RuntimeError):
    """The child exited or was killed (crash, resource limit, watchdog)."""


class RuntimeTimeout(RuntimeError):
    """The wall clock ran out while the child was working; the child has been killed."""


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int, wait=None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        if wait is not None:
            wait()
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("runtime connection closed")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket, wait=None) -> Any:
    """One message; `wait()` is called before each read (the parent's watchdog)."""
    (n,) = struct.unpack("!Q", _recv_exact(sock, 8, wait))
    return pickle.loads(_recv_exact(sock, n, wait))


@dataclass
class ActionResult:
    """What one tool call or cell returned, as the planner will see it, plus trace rows."""

    text: str
    images: list[tuple[str, bytes]] = field(default_factory=list)
    """(camera, PNG bytes) in the order they were produced."""
    primitives: list[dict[str, Any]] = field(default_factory=list)
    success: bool = False
    exception: str | None = None
    finished: bool = False
    left_api: list[str] | None = None
    """A cell's attempts to leave the API, as its worker noticed them (None for tool calls)."""


class RuntimeClient:
    """Parent side: starts the child, sends verbs, enforces the deadline, cleans up its processes.

    `trace_dir` receives `runtime.log` (the child's stdout and stderr); the
    child works in `trace_dir/work`.
    """

    def __init__(self, trace_dir: str, limits: RuntimeLimits | None = None):
        self.limits = limits or RuntimeLimits()
        self.workdir = os.path.join(trace_dir, WORK_DIR)
        os.makedirs(self.workdir, exist_ok=True)
        parent, child = socket.socketpair()
        self._sock = parent
        # The child writes a byte here once the benchmark's check holds after an acting primitive, so a request
        # the wall clock kills (a long cell, more often than a tool call) does not lose a success it reached.
        self._solved_r, solved_w = os.pipe()
        os.set_blocking(self._solved_r, False)
        self._solved = False
        self._stderr = open(os.path.join(trace_dir, "runtime.log"), "ab")
        limits = self.limits
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agents.runtime", str(child.fileno()), str(limits.max_processes), str(solved_w)],
            pass_fds=(child.fileno(), solved_w),
            cwd=self.workdir,
            env=scrubbed_env(),
            stdin=subprocess.DEVNULL,
            stdout=self._stderr,
            stderr=self._stderr,
            preexec_fn=lambda: _limit_resources(limits),
        )
        child.close()
        os.close(solved_w)
        self.deadline = float("inf")

    def solved_seen(self) -> bool:
        """Whether the check held after some acting primitive (read when the child can no longer be asked)."""
        if not self._solved and self._solved_r is not None:
            try:
                self._solved = bool(os.read(self._solved_r, 1))
            except BlockingIOError:
                pass
        return self._solved

    def start_clock(self, wall_clock_s: float) -> None:
        """Start the episode's wall clock (the scene is built) and tie the child's CPU limit to it."""
        self.deadline = time.monotonic() + wall_clock_s
        self.request("limits", self.limits.cpu_budget(wall_clock_s), self.limits.cell_memory)

    def request(self, verb: str, *args) -> Any:
        if self.deadline - time.monotonic() <= 0:
            # The child is idle between requests: it stays alive, so the episode can still read the check.
            raise RuntimeTimeout("wall clock exhausted")
        self._sock.settimeout(None)
        try:
            _send(self._sock, (verb, args))
            reply = _recv(self._sock, self._wait_readable)
        except socket.timeout:
            self.kill()
            raise RuntimeTimeout(f"{verb} still running when the wall clock ran out") from None
        except (EOFError, ConnectionError, OSError) as e:
            try:  # the socket closes a moment before the child can be reaped: wait for its exit code
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            self._kill_group()
            raise RuntimeDied(f"runtime child died during {verb} ({describe_exit(code)}): {e}") from None
        if isinstance(reply, dict) and reply.get("__error__"):
            raise RuntimeDied(reply["__error__"])
        if isinstance(reply, dict) and reply.get("__user_error__"):
            raise CellbenchError(reply["__user_error__"])
        return reply

    def _wait_readable(self) -> None:
        """Block until the child's reply can be read; watch the deadline and the child meanwhile.

        End of file alone does not tell that the child died: a process the
        cell started may still hold the socket open."""
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout
            readable, _, _ = select.select([self._sock], [], [], min(remaining, 1.0))
            if readable:
                return
            if self._exited(0):
                raise EOFError("runtime child exited")

    def _kill_group(self) -> None:
        """SIGKILL whatever is left in the child's process group (processes a cell started)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _exited(self, timeout: float) -> bool:
        """Wait up to `timeout` for the child to exit, without reaping it: while the exited
        child is unreaped its pid, which names the process group, cannot be reused."""
        end = time.monotonic() + timeout
        while True:
            try:
                if os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:  # already reaped
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.02)

    def kill(self) -> None:
        self._kill_group()  # the child leads its group: this kills it too
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._sock.settimeout(10)
                _send(self._sock, ("close", ()))
            except Exception:
                pass
            self._exited(10)
        self.kill()
        if self._solved_r is not None:
            self.solved_seen()
            os.close(self._solved_r)
            self._solved_r = None
        self._sock.close()
        self._stderr.close()
        try:
            os.rmdir(self.workdir)  # only if the cells left nothing there
        except OSError:
            pass


_SIGNAL_REASONS = {
    signal.SIGXCPU: "its CPU time limit",
    signal.SIGKILL: "SIGKILL: the CPU time hard limit, the out-of-memory killer, or a kill from outside",
    signal.SIGSEGV: "a crash in native code (memory exhaustion inside a C extension looks like this too)",
    signal.SIGABRT: "an abort in native code (often an allocation failure)",
    signal.SIGXFSZ: "its file size limit",
}


def describe_exit(code: int | None) -> str:
    """The child's exit status in words: `exit code 1`, `killed by SIGXCPU (its CPU time limit)`."""
    if code is None:
        return "exit code unknown"
    if code >= 0:
        return f"exit code {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"killed by signal {-code}"
    reason = _SIGNAL_REASONS.get(sig)
    return f"killed by {sig.name}" + (f" ({reason})" if reason else "")


# Loaded in the parent: preexec_fn runs between fork and exec, where loading a library is unsafe.
try:
    _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _LIBC = None
_PR_SET_PDEATHSIG = 1


def _limit_resources(limits: RuntimeLimits) -> None:
    """In the child, before exec: limits, a session of its own, death with its parent."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size, limits.file_size))
    resource.setrlimit(resource.RLIMIT_CPU, (INIT_CPU_S, INIT_CPU_S + 5))
    if limits.address_space:
        resource.setrlimit(resource.RLIMIT_AS, (limits.address_space, limits.address_space))
    os.setsid()  # own process group: the watchdog's kill takes the cell's children too
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # a SIGKILLed `cellbench play` leaves no runtime behind


# ---------------------------------------------------------------------------
# child side


def png_bytes(img) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(img).save(out, format="PNG", optimize=False, compress_level=1)
    return out.getvalue()


class RuntimeServer:
    """Child side: holds the backend, the Robot and the code namespace."""

    def __init__(self):
        self.robot = None
        self.namespace = None
        self.primitive_rows: list[dict[str, Any]] = []
        self.n_recorded = 0
        """Primitives recorded so far: `seq` runs over the episode, not per call (rows are drained per call)."""
        self.auto_cameras: tuple[str, ...] = ()
        self.images_on_demand = False
        self.solved_fd: int | None = None
        """Where `_record` tells the parent, once, that the check held after an acting primitive."""

    def init(self, spec: dict[str, Any]) -> dict[str, Any]:
        from agents.cellworker import CellWorker
        from robots.factory import make_robot

        self.robot, card = make_robot(spec)
        self.robot.recorder = self._record
        self.robot.guard = self._guard
        # Cells run in a confined worker process of their own, never in this one (agents/cellworker.py);
        # a code agent's worker starts (and confines itself) here, before the first cell and the clock.
        workdir = os.getcwd()  # the episode's work/ (RuntimeClient starts this child there)
        if os.path.basename(workdir) != WORK_DIR:  # a server in another process (tests): not its whole tree
            import tempfile

            workdir = tempfile.mkdtemp(prefix="cellbench-work-")
        self.namespace = CellWorker(self.robot, workdir, spec.get("sandbox", "best_effort"))
        if spec.get("cell_worker"):
            self.namespace.start()
        by_arms = spec.get("auto_cameras_by_arms", {})
        self.auto_cameras = tuple(by_arms.get(len(card.get("arms", ("right",))), ()))
        first = [(c, png_bytes(self.robot.backend.render(c, "rgb", self.robot.show_size))) for c in spec.get("initial_cameras", ())]
        return {"card": card, "images": first, "sandbox": self.namespace.sandbox}

    def _record(self, **row) -> None:
        row["seq"] = self.n_recorded
        self.n_recorded += 1
        self.primitive_rows.append(row)
        if row["acting"] and self.solved_fd is not None and self.robot.backend.success():
            os.write(self.solved_fd, b"1")
            self.solved_fd = None  # once is enough: the parent's flag is sticky

    def _guard(self) -> None:
        from robots.robot import EpisodeFinished

        if self.robot.backend.success():
            raise EpisodeFinished()

    def _drain(self) -> tuple[list[dict[str, Any]], list[tuple[str, bytes]]]:
        rows, self.primitive_rows = self.primitive_rows, []
        shown = [(c, png_bytes(img)) for c, img in self.robot.shown]
        self.robot.shown.clear()
        return rows, shown

    def call_tool(self, name: str, args: dict[str, Any]) -> ActionResult:
        """One primitive by name; every exception it raises is this call's result, as a cell's traceback is.

        Bad arguments (ValueError/TypeError) and failures inside the robot
        stack alike (an openpi ConnectionError, a backend's RuntimeError) come
        back as `feedback.error_text`; the episode goes on.
        """
        from agents import feedback
        from robots.robot import EpisodeFinished
        from robots.results import summarize

        exception, refused, payload = None, False, None
        try:
            payload = summarize(self.robot.call(name, args))
        except EpisodeFinished:
            refused = True
        except Exception as e:  # noqa: BLE001 - the planner reads it, as the code agent reads a traceback
            exception, payload = type(e).__name__, feedback.error_text(e)
        rows, images = self._drain()
        # A call refused before the simulator stepped did not act: its error alone, no state, no images.
        acted = any(r["acting"] for r in rows)
        if acted and self.auto_cameras:
            images += [(c, png_bytes(self.robot.backend.render(c, "rgb", self.robot.show_size))) for c in self.auto_cameras]
        success = self.robot.backend.success()
        state = self.robot.state_summary() if acted else None
        text = feedback.tool_result(payload, acted=acted, success=success, state=state, refused=refused)
        return ActionResult(text, images, rows, success, exception, refused)

    def exec_cell(self, code: str) -> ActionResult:
        from agents import feedback

        out = self.namespace.run(code)
        left_api = list(self.namespace.left_api)
        rows, images = self._drain()
        success = self.robot.backend.success()
        text = feedback.cell_output(out.output, acted=any(r["acting"] for r in rows), refused=out.finished, success=success)
        return ActionResult(text, images, rows, success, out.exception, out.finished, left_api)

    def success(self) -> bool:
        return self.robot.backend.success()

    def limits(self, cpu_s: float, cell_memory: int | None) -> dict[str, int | None]:
        """Tighten the limits once the scene is built: CPU from here on, and memory growth."""
        usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
        cpu = None
        if cpu_s != float("inf"):
            cpu = math.ceil(usage.ru_utime + usage.ru_stime + cpu_s)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        address_space = None
        if cell_memory:
            address_space = _vm_size() + cell_memory
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            if soft != resource.RLIM_INFINITY:
                address_space = min(address_space, soft)
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        print(f"[runtime] limits: CPU {cpu} s in all, address space {address_space} bytes", file=sys.stderr, flush=True)
        # The same budgets bound each cell worker on its own: a runaway cell ends its worker, not this process.
        self.namespace.set_limits(cpu_s, cell_memory)
        return {"cpu_s": cpu, "address_space": address_space}


def _vm_size() -> int:
    """This process's mapped virtual memory, bytes (what RLIMIT_AS counts)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _group_size(pgid: int) -> int:
    """Live processes in process group `pgid` (a /proc scan: forks are rare, this is cheap enough)."""
    n = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # after "pid (comm) "
        if fields[0] != b"Z" and int(fields[2]) == pgid:
            n += 1
    return n


def _bound_forks(max_processes: int) -> None:
    """Refuse `os.fork` once the process group has `max_processes` live processes.

    A guard against fork loops in model-written code, not a security
    boundary (posix.fork, subprocess and setsid get around it).  Any forked
    copy of the runtime exits as soon as its cell returns, before it could
    answer on the parent's socket: two processes talking on one socket
    would corrupt the protocol.
    """
    real_fork = os.fork
    pgid = os.getpgid(0)

    def fork() -> int:
        if _group_size(pgid) >= max_processes:
            raise BlockingIOError(errno.EAGAIN, f"os.fork refused: the runtime allows at most {max_processes} "
                                                "processes per episode")
        return real_fork()

    fork.__doc__ = real_fork.__doc__
    os.fork = fork


def _serve(fd: int, max_processes: int = 64, solved_fd: int | None = None) -> None:
    # Only this process may hold the parent's socket: programs a cell starts
    # do not inherit it, and forked copies close it at once.  (A holder would
    # also keep the parent from seeing end-of-file when the runtime dies.)
    os.set_inheritable(fd, False)
    os.register_at_fork(after_in_child=lambda: os.close(fd))
    sock = socket.socket(fileno=fd)
    server = RuntimeServer()
    if solved_fd is not None:
        os.set_inheritable(solved_fd, False)
        os.register_at_fork(after_in_child=lambda: os.close(solved_fd))
        server.solved_fd = solved_fd
    main_pid = os.getpid()
    _bound_forks(max_processes)
    while True:
        try:
            verb, args = _recv(sock)
        except EOFError:
            return
        if verb == "close":
            return
        try:
            reply = getattr(server, verb)(*args)
        except CellbenchError as e:  # the user's input (unknown task, bad setting): no episode to run
            reply = {"__user_error__": str(e)}
        except Exception as e:  # infrastructure failure in the child: report, don't hang the parent
            import traceback

            reply = {"__error__": f"{verb} failed in the runtime: {type(e).__name__}: {e}\n{traceback.format_exc()}"}
        if os.getpid() != main_pid:
            os._exit(0)  # a copy forked by a cell: only the runtime itself answers
        _send(sock, reply)


if __name__ == "__main__":
    # Import ourselves by name so pickled records are agents.runtime.*, not __main__.*.
    from agents.runtime import _serve as serve

    serve(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 64, int(sys.argv[3]) if len(sys.argv) > 3 else None)
    os._exit(0)  # skip EGL's noisy teardown at interpreter exit
