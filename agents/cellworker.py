"""The cell worker: model-written code runs in a confined process of its own, with `robo` as a proxy.

The runtime child (agents/runtime.py) holds the simulator, the Robot, the
recorder and the success guard.  Code cells run in a second process, started
from a fresh interpreter (never forked from the simulator, so no object of
the robot stack is in its memory), which holds the persistent namespace
(`robo`, `np`, `math` and the model's own variables) and nothing else.  It
confines itself (agents/sandbox.py) before the first cell.

`robo` in that namespace is a `RobotProxy`: each documented primitive, with
the Robot method's own signature and docstring, sends its name and keyword
arguments to the runtime and returns what the primitive returned there (the
`robots.results` records, numpy arrays).  Nothing else is on it: no backend,
no guard, no recorder.

The channel is a socket pair made before confinement, one length-prefixed
frame per message:

* worker -> runtime: JSON only.  The runtime parses it as plain data, checks
  the primitive's name against the episode's primitives and the arguments
  against its signature, and never unpickles anything the worker sends;
* runtime -> worker: pickle (results with numpy arrays): the direction of
  trust, from the harness to the cell.

The success guard's `EpisodeFinished` on the runtime side becomes the
worker's own `EpisodeFinished` raised at the proxy call; a primitive's
exception is raised at the call with its type (a builtin exception type by
name, else RuntimeError naming it) and message.  A worker that dies (a
segfault through ctypes, the out-of-memory killer, its CPU limit) or breaks
the protocol ends its cell with `RESTARTED` and a fresh worker takes over.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from typing import Any

FRAME = struct.Struct("!Q")
MAX_MESSAGE = 16 * 2**20
"""Largest frame the runtime reads from the worker (arguments and trimmed output are small)."""
RESTARTED = "the Python runtime restarted; your variables are gone"
RESTART_EXCEPTION = "RuntimeRestarted"
"""The `exception` of a cell whose worker died."""
MAX_LEFT_API = 20
MAX_PRINTED = 2**20
"""Characters of a cell's output the runtime keeps as it goes (shown, trimmed, if its worker dies)."""
"""Attempts to leave the API kept per cell."""
START_TIMEOUT_S = 120.0


class ProtocolError(Exception):
    """The worker sent something that is not a well-formed message."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("cell worker connection closed")
        buf += chunk
    return bytes(buf)


def send_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(FRAME.pack(len(data)) + data)


def recv_frame(sock: socket.socket, limit: int | None = None) -> bytes:
    (n,) = FRAME.unpack(_recv_exact(sock, FRAME.size))
    if limit is not None and n > limit:
        raise ProtocolError(f"a message of {n} bytes (at most {limit})")
    return _recv_exact(sock, n)


def recv_json(sock: socket.socket) -> dict[str, Any]:
    """One message from the worker, parsed as plain data; anything else is a ProtocolError."""
    data = recv_frame(sock, MAX_MESSAGE)
    try:
        msg = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"not JSON: {e}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
        raise ProtocolError("not a message object")
    return msg


# ---------------------------------------------------------------------------
# simulator side


class CellWorker:
    """Runtime side: starts the worker, runs cells in it, answers its primitive calls.

    `run(code)` returns an `agents.cells.CellOutcome`, as the in-process
    namespace did.  `sandbox` is the worker's confinement report,
    `restarts` how many workers died and were replaced.
    """

    def __init__(self, robot, workdir: str, mode: str = "best_effort", open_files: int = 1024,
                 file_size: int = 4 * 2**30, max_processes: int = 64):
        import inspect

        from agents.errors import CellbenchError
        from agents.sandbox import MODES

        self.robot = robot
        self.workdir = os.path.realpath(workdir)
        self.mode = "off" if mode is False else mode  # YAML's unquoted `off`
        if self.mode not in MODES:
            raise CellbenchError(f"episode.sandbox: {mode!r} is not one of {', '.join(MODES)}")
        self.base_limits = {"RLIMIT_CORE": 0, "RLIMIT_NOFILE": open_files, "RLIMIT_FSIZE": file_size,
                            "RLIMIT_NPROC": max_processes}
        self.cpu_s: float | None = None
        self.cell_memory: int | None = None
        self.restarts = 0
        self.sandbox: dict[str, Any] | None = None
        self.left_api: list[str] = []
        """What the last cell tried outside the API (the worker's audit and refusals)."""
        self.start_s: float | None = None
        self._specs = {s.name: inspect.signature(s.fn) for s in robot.available()}
        self._docs = {s.name: inspect.getdoc(s.fn) or "" for s in robot.available()}
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the worker now (else the first cell starts it)."""
        if self.proc is None:
            self._start()

    # -- lifecycle ---------------------------------------------------------
    def _start(self) -> None:
        from agents.errors import CellbenchError
        from agents.sandbox import write_id_maps

        t0 = time.perf_counter()
        parent, child = socket.socketpair()
        env = dict(os.environ)
        # One thread until confinement (unshare and the seccomp filter need it), and none spare after.
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HOME=self.workdir,
                   TMPDIR=self.workdir)
        self.proc = subprocess.Popen(
            # -P: the working directory is not on sys.path, so a module a cell left in work/ (numpy.py,
            # agents/) is never imported by the next worker, which imports before it confines itself.
            [sys.executable, "-P", "-m", "agents.cellworker", str(child.fileno()), self.workdir, self.mode],
            pass_fds=(child.fileno(),), cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
        )
        child.close()
        self.sock = parent
        self.sock.settimeout(START_TIMEOUT_S)
        try:
            while True:
                msg = recv_json(self.sock)
                if msg["op"] == "map_ids":  # root's worker: mapping uid 0 may need this side's CAP_SETFCAP
                    try:
                        write_id_maps(self.proc.pid)
                        self._send(("mapped",))
                    except OSError as e:
                        self._send(("refused", str(e)))
                elif msg["op"] == "ready":
                    break
                elif msg["op"] == "failed":
                    self._stop()
                    raise CellbenchError(f"the cell worker could not start: {msg.get('error')}")
                else:
                    raise ProtocolError(f"unexpected {msg['op']!r} while starting")
        except (EOFError, OSError, ProtocolError) as e:
            self._stop()
            raise RuntimeError(f"the cell worker did not start ({self._exit_text()}): {e}") from None
        self.sock.settimeout(None)
        self.sandbox = msg.get("sandbox") if isinstance(msg.get("sandbox"), dict) else {}
        self._apply_limits()
        self._send(("specs", [(name, sig, self._docs[name]) for name, sig in self._specs.items()]))
        self.start_s = time.perf_counter() - t0

    def _apply_limits(self) -> None:
        """rlimits of the worker alone, set from outside (the worker cannot raise them back)."""
        import math
        import resource

        limits = dict(self.base_limits)
        if not (self.sandbox or {}).get("user_namespace"):
            # RLIMIT_NPROC counts the user's processes in the worker's user namespace: without one of its
            # own, that is every process of the user on the machine. (seccomp refuses new processes anyway.)
            limits.pop("RLIMIT_NPROC")
        if self.cpu_s is not None and self.cpu_s != float("inf"):
            limits["RLIMIT_CPU"] = math.ceil(_cpu_seconds(self.proc.pid) + self.cpu_s)
        if self.cell_memory:
            limits["RLIMIT_AS"] = _vm_size(self.proc.pid) + self.cell_memory
        for name, value in limits.items():
            hard = value + 5 if name == "RLIMIT_CPU" else value  # SIGXCPU first, SIGKILL 5 s later
            resource.prlimit(self.proc.pid, getattr(resource, name), (value, hard))

    def set_limits(self, cpu_s: float | None, cell_memory: int | None) -> None:
        """CPU seconds and address-space growth of each worker (this one, and any that replaces it)."""
        self.cpu_s, self.cell_memory = cpu_s, cell_memory
        if self.proc is not None:
            self._apply_limits()

    def _exit_text(self) -> str:
        from agents.runtime import describe_exit

        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        return describe_exit(code)

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            self._send(("close",))
            self.proc.wait(timeout=5)
        except Exception:
            pass
        self._stop()

    def _send(self, msg) -> None:
        import pickle

        send_frame(self.sock, pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    # -- cells -------------------------------------------------------------
    def run(self, code: str):
        from agents.cells import OUTPUT_HEAD, OUTPUT_TAIL, CellOutcome, trim

        self.start()
        self.left_api = []
        try:
            self._send(("cell", code))
            printed: list[str] = []  # the cell's output so far, sent before each primitive call
            while True:
                msg = recv_json(self.sock)
                if msg["op"] == "call":
                    self._send(self._call(msg.get("name"), msg.get("args")))
                elif msg["op"] == "out":
                    if isinstance(msg.get("text"), str) and sum(map(len, printed)) < MAX_PRINTED:
                        printed.append(msg["text"])
                elif msg["op"] == "done":
                    break
                else:
                    raise ProtocolError(f"unexpected {msg['op']!r} during a cell")
        except (EOFError, OSError, ProtocolError) as e:
            return self._restart(e, "".join(printed))
        output, exception = msg.get("output"), msg.get("exception")
        left = msg.get("left_api")
        if isinstance(left, list):
            self.left_api = [str(x)[:200] for x in left[:MAX_LEFT_API]]
        output = output if isinstance(output, str) else ""
        if len(output) > 2 * (OUTPUT_HEAD + OUTPUT_TAIL):  # the worker trims; one that did not is cut here
            output = trim(output)
        return CellOutcome(output, exception if isinstance(exception, str) else None, msg.get("finished") is True)

    def _restart(self, cause: BaseException, printed: str = ""):
        """A fresh worker; the cell's outcome says so, after what it printed up to its last primitive call."""
        from agents.cells import CellOutcome, trim

        if isinstance(cause, ProtocolError) and self.proc.poll() is None:
            self.proc.kill()  # it broke the protocol: it cannot be trusted to go on
        how = self._exit_text()
        self.sock.close()
        self.restarts += 1
        print(f"[runtime] cell worker died ({how}; {cause}); starting a fresh one", file=sys.stderr, flush=True)
        self._start()
        before = trim(printed).rstrip("\n") + "\n" if printed.strip() else ""
        return CellOutcome(f"{before}[runtime] The cell ended: {RESTARTED} (the worker process was {how}).\n"
                           "Define your variables and helpers again; robo, np and math are there.",
                           RESTART_EXCEPTION, False)

    def _call(self, name: Any, args: Any):
        """One primitive for the worker, its message checked as plain data first."""
        from robots.robot import EpisodeFinished

        if not isinstance(name, str) or name not in self._specs:
            return ("raise", "AttributeError", f"robo has no primitive {name!r}")
        if not isinstance(args, dict):
            return ("raise", "TypeError", f"{name}: arguments must be a mapping")
        try:
            self._specs[name].bind(None, **args)
        except TypeError as e:
            return ("raise", "ValueError", f"{name}: {e}")
        try:
            return ("result", getattr(self.robot, name)(**args))
        except EpisodeFinished:
            return ("finished",)
        except Exception as e:  # noqa: BLE001 - raised at the cell's call, as in-process
            return ("raise", type(e).__name__, str(e))


def _vm_size(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


# ---------------------------------------------------------------------------
# worker side


class EpisodeFinished(BaseException):
    """The success guard refused an acting primitive: ends the cell (a BaseException, as on the runtime side)."""


def _plain(value: Any, where: str) -> Any:
    """An argument as JSON data: numpy arrays and scalars become lists and numbers."""
    import numpy as np

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, where) for k, v in value.items()}
    raise ValueError(f"{where} must be numbers, strings or lists of them, got {type(value).__name__}")


class _Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock

    def send(self, msg: dict[str, Any]) -> None:
        send_frame(self.sock, json.dumps(msg).encode("utf-8"))

    def receive(self):
        import pickle

        return pickle.loads(recv_frame(self.sock))


class _Printed:
    """Sends what the running cell printed since the last send (so it survives the worker's death)."""

    def __init__(self, channel: _Channel):
        self.channel, self.buffer, self.sent = channel, None, 0

    def send_new(self) -> None:
        import io

        out = sys.stdout  # the cell's buffer while it runs (agents.cells redirects stdout and stderr)
        if not isinstance(out, io.StringIO):
            return
        if out is not self.buffer:
            self.buffer, self.sent = out, 0
        text = out.getvalue()
        if len(text) > self.sent:
            self.channel.send({"op": "out", "text": text[self.sent:self.sent + MAX_PRINTED]})
            self.sent = len(text)


def _named_error(kind: str) -> type:
    """A RuntimeError subclass with the simulator-side exception's name: the cell's traceback and the call's
    recorded exception name the same type as the tool agent's error text (e.g. PolicyServerUnavailable)."""
    safe = kind if kind.isidentifier() else "RuntimeError"
    return type(safe, (RuntimeError,), {"__module__": "builtins"})


def make_proxy(specs, channel: _Channel, noticed: list[str]):
    """The cell's `robo`: one method per primitive, each a round trip to the runtime."""
    import builtins

    printed = _Printed(channel)

    names = tuple(name for name, _, _ in specs)

    def method(name, sig, doc):
        def call(self, *args, **kwargs):
            try:
                bound = sig.bind(self, *args, **kwargs)
            except TypeError as e:
                raise ValueError(f"{name}: {e}") from None
            sent = {k: _plain(v, f"{name}: {k}") for k, v in list(bound.arguments.items())[1:]}
            printed.send_new()
            channel.send({"op": "call", "name": name, "args": sent})
            reply = channel.receive()
            if reply[0] == "result":
                return reply[1]
            if reply[0] == "finished":
                raise EpisodeFinished()
            _, kind, message = reply
            exc = getattr(builtins, kind, None)
            if isinstance(exc, type) and issubclass(exc, Exception):
                raise exc(message)
            raise _named_error(kind)(message)

        call.__name__ = call.__qualname__ = name
        call.__doc__ = doc
        call.__signature__ = sig
        return call

    def refuse(self, attr):
        noticed.append(f"robo.{attr}")
        raise AttributeError(f"robo has no attribute {attr!r}: cells reach the robot through its primitives "
                             f"only ({', '.join(names)})")

    def no_set(self, attr, value):
        noticed.append(f"robo.{attr} =")
        raise AttributeError("robo's attributes cannot be set")

    body = {name: method(name, sig, doc) for name, sig, doc in specs}
    body.update(__slots__=(), __getattr__=refuse, __setattr__=no_set, __module__="robo",
                __doc__="The robot: its documented primitives, each run in the simulator process.",
                __repr__=lambda self: "<robo: the robot's primitives, run in the simulator process>",
                __dir__=lambda self: list(names))
    return type("Robot", (), body)()


def _audit(workdir: str, reads: list[str], noticed: list[str]):
    """An audit hook noting what a cell tried outside the API (a record for the reader, not a boundary)."""
    import os.path

    inside = tuple(os.path.join(p, "") for p in [workdir, *reads])
    events = {"socket.__new__": "socket", "socket.connect": "socket", "socket.getaddrinfo": "socket",
              "socket.gethostbyname": "socket", "subprocess.Popen": "subprocess", "os.system": "subprocess",
              "os.exec": "subprocess", "os.posix_spawn": "subprocess", "os.fork": "fork", "os.forkpty": "fork",
              "ctypes.dlopen": "ctypes", "ctypes.dlsym": "ctypes", "ctypes.string_at": "ctypes",
              "ctypes.cdata": "ctypes", "ctypes.call_function": "ctypes", "gc.get_objects": "gc",
              "gc.get_referrers": "gc", "gc.get_referents": "gc", "sys._getframe": "sys._getframe",
              "os.kill": "signal", "os.killpg": "signal"}

    def hook(event, args):
        if len(noticed) >= MAX_LEFT_API:
            return
        what = events.get(event)
        if what is None and event == "open" and args and isinstance(args[0], (str, bytes)):
            path = os.path.abspath(os.fsdecode(args[0]))
            if not (path + os.sep).startswith(inside) and path not in ("/dev/null", "/dev/urandom"):
                what = f"open {path}"
        if what is not None and what not in noticed:
            noticed.append(what)

    return hook


def _worker_main(fd: int, workdir: str, mode: str) -> None:
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with the runtime
    if os.getppid() == 1:
        os._exit(1)
    sock = socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    channel = _Channel(sock)
    # Everything the worker needs is imported before confinement (the project's own files stay unreadable).
    import math
    import numpy as np

    import robots.results  # noqa: F401 - the records the runtime's results unpickle into
    from agents import cells, sandbox

    def map_ids():
        channel.send({"op": "map_ids"})
        reply = channel.receive()
        if reply[0] != "mapped":
            raise OSError(f"the runtime could not map the worker's ids: {reply[1]}")

    try:
        report = sandbox.confine(workdir, mode, map_ids)
    except Exception as e:  # required and a layer missing, or a confinement step failed
        channel.send({"op": "failed", "error": str(e)})
        return
    channel.send({"op": "ready", "sandbox": report})
    _, specs = channel.receive()
    noticed: list[str] = []
    namespace = cells.CellNamespace(make_proxy(specs, channel, noticed), finished=EpisodeFinished)
    namespace.globals.update(np=np, math=math)
    sys.addaudithook(_audit(workdir, sandbox.read_roots(), noticed))
    while True:
        try:
            msg = channel.receive()
        except EOFError:
            return
        if msg[0] != "cell":
            return
        out = namespace.run(msg[1])
        channel.send({"op": "done", "output": out.output, "exception": out.exception, "finished": out.finished,
                      "left_api": noticed[:MAX_LEFT_API]})
        noticed.clear()


if __name__ == "__main__":
    from agents.cellworker import _worker_main as main  # by name: pickled results resolve the same classes

    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
    os._exit(0)
