"""The runtime process: simulator, Robot and the code namespace live in a child process.

The agent loop (which holds the API key) talks to the child over a private
socket with two verbs, `call_tool(name, args)` and `exec_cell(code)`, plus
`init`, `success` and `close`.  The child starts with an environment stripped
of API keys, its working directory inside the episode directory, and resource
limits (no core dumps, bounded open files and address space).  The parent's
watchdog ends the child when the episode's wall clock runs out.

What this isolation is: a separate process that cannot see the key and
cannot take the episode loop down with it.  What it is not: a security
sandbox — a determined cell can still read files, open sockets, or spawn
processes within its limits.
"""
from __future__ import annotations

import io
import os
import pickle
import resource
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

SECRET_ENV_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
DEFAULT_ADDRESS_SPACE = 16 * 2**30  # llvmpipe maps a lot of virtual memory; this still stops a runaway cell
DEFAULT_OPEN_FILES = 1024


def scrubbed_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment less anything that looks like a credential."""
    env = dict(os.environ if env is None else env)
    return {k: v for k, v in env.items() if not any(m in k.upper() for m in SECRET_ENV_MARKERS)}


class RuntimeDied(RuntimeError):
    """The child exited or was killed (crash, resource limit, watchdog)."""


class RuntimeTimeout(RuntimeError):
    """The wall clock ran out while the child was working; the child has been killed."""


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("runtime connection closed")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> Any:
    (n,) = struct.unpack("!Q", _recv_exact(sock, 8))
    return pickle.loads(_recv_exact(sock, n))


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


class RuntimeClient:
    """Parent side: starts the child, sends verbs, enforces the deadline."""

    def __init__(self, workdir: str, address_space: int = DEFAULT_ADDRESS_SPACE):
        os.makedirs(workdir, exist_ok=True)
        parent, child = socket.socketpair()
        self._sock = parent
        self._stderr = open(os.path.join(workdir, "runtime.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agents.runtime", str(child.fileno())],
            pass_fds=(child.fileno(),),
            cwd=workdir,
            env=scrubbed_env(),
            stdin=subprocess.DEVNULL,
            stdout=self._stderr,
            stderr=self._stderr,
            preexec_fn=lambda: _limit_resources(address_space),
        )
        child.close()
        self.deadline = float("inf")

    def request(self, verb: str, *args) -> Any:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.kill()
            raise RuntimeTimeout("wall clock exhausted")
        # The default deadline (inf) means no limit; settimeout(inf) would overflow.
        self._sock.settimeout(None if remaining == float("inf") else remaining)
        try:
            _send(self._sock, (verb, args))
            reply = _recv(self._sock)
        except socket.timeout:
            self.kill()
            raise RuntimeTimeout(f"{verb} still running when the wall clock ran out") from None
        except (EOFError, ConnectionError, OSError) as e:
            try:  # the socket closes a moment before the child can be reaped: wait for its exit code
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            raise RuntimeDied(f"runtime child died during {verb} (exit code {code}): {e}") from None
        if isinstance(reply, dict) and reply.get("__error__"):
            raise RuntimeDied(reply["__error__"])
        return reply

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._sock.settimeout(10)
                _send(self._sock, ("close", ()))
                self.proc.wait(timeout=10)
            except Exception:
                self.kill()
        self._sock.close()
        self._stderr.close()


def _limit_resources(address_space: int) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (DEFAULT_OPEN_FILES, DEFAULT_OPEN_FILES))
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    os.setsid()  # own process group: the watchdog's kill takes the cell's children too


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

    def init(self, spec: dict[str, Any]) -> dict[str, Any]:
        from agents.cells import CellNamespace
        from robots.factory import make_robot

        self.robot, card = make_robot(spec)
        self.robot.recorder = self._record
        self.robot.guard = self._guard
        self.namespace = CellNamespace(self.robot)
        self.auto_cameras = tuple(spec.get("auto_cameras", ()))
        first = [(c, png_bytes(self.robot.backend.render(c, "rgb", self.robot.show_size))) for c in spec.get("initial_cameras", ())]
        return {"card": card, "images": first}

    def _record(self, **row) -> None:
        row["seq"] = self.n_recorded
        self.n_recorded += 1
        self.primitive_rows.append(row)

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
        import json

        from robots.robot import EpisodeFinished
        from robots.results import summarize

        exception, finished = None, False
        try:
            result = self.robot.call(name, args)
            text = json.dumps(summarize(result))
        except EpisodeFinished:
            finished, text = True, "The task is already solved; the action was not run."
        except (ValueError, TypeError) as e:
            exception, text = type(e).__name__, f"Error: {e}"
        rows, images = self._drain()
        # A call rejected with an error did not act: it gets the error alone, no state and no camera images.
        acting = exception is None and any(r["acting"] for r in rows)
        if acting and self.auto_cameras:
            images += [(c, png_bytes(self.robot.backend.render(c, "rgb", self.robot.show_size))) for c in self.auto_cameras]
        if acting:
            text = json.dumps({"result": json.loads(text) if text.startswith(("{", "[")) else text, "state": summarize(self.robot._state_now())})
        return ActionResult(text, images, rows, self.robot.backend.success(), exception, finished)

    def exec_cell(self, code: str) -> ActionResult:
        out = self.namespace.run(code)
        rows, images = self._drain()
        return ActionResult(out.output, images, rows, self.robot.backend.success(), out.exception, out.finished)

    def success(self) -> bool:
        return self.robot.backend.success()


def _serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    server = RuntimeServer()
    while True:
        try:
            verb, args = _recv(sock)
        except EOFError:
            return
        if verb == "close":
            return
        try:
            reply = getattr(server, verb)(*args)
        except Exception as e:  # infrastructure failure in the child: report, don't hang the parent
            import traceback

            reply = {"__error__": f"{verb} failed in the runtime: {type(e).__name__}: {e}\n{traceback.format_exc()}"}
        _send(sock, reply)


if __name__ == "__main__":
    # Import ourselves by name so pickled records are agents.runtime.*, not __main__.*.
    from agents.runtime import _serve as serve

    serve(int(sys.argv[1]))
    os._exit(0)  # skip EGL's noisy teardown at interpreter exit
