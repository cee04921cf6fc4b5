"""A stand-in openpi policy server for tests: same wire protocol, toy policy.

`PolicyServer` mirrors openpi's `openpi.serving.websocket_policy_server.
WebsocketPolicyServer` (an asyncio `websockets` server, compression off,
no frame-size cap): on connect it sends the msgpack-numpy packed metadata
dict; then each packed observation it receives is answered with a packed
response dict holding `actions` plus `server_timing`; if the policy raises,
the traceback goes back as a *text* frame (the client turns it into a
RuntimeError) and the connection closes with INTERNAL_ERROR.

The policy, `PointMassPolicy`, reads the end-effector position from
`observation/state[:3]` and plans an open-loop chunk toward a fixed target
under the dynamics of `tests.test_openpi_policy.PointMassIO`
(pos += STEP_SCALE * action[:3]). Each action's `action[3]` carries its index
within the chunk so a test can tell which chunk entries were executed.
"""
from __future__ import annotations

import asyncio
import threading
import time
import traceback
from typing import Any

import numpy as np
import websockets
import websockets.asyncio.server as _server
import websockets.frames
from openpi_client import msgpack_numpy

STEP_SCALE = 0.05
"""Metres one unit of action moves the point mass per step."""


class PointMassPolicy:
    def __init__(self, target: np.ndarray, chunk: int = 10, fail: bool = False) -> None:
        self.target = np.asarray(target, dtype=np.float64)
        self.chunk = chunk
        self.fail = fail
        self.observations: list[dict[str, Any]] = []
        self.responses: list[np.ndarray] = []

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.observations.append(obs)
        if self.fail:
            raise ValueError("policy exploded on purpose")
        pos = np.asarray(obs["observation/state"][:3], dtype=np.float64).copy()
        actions = np.zeros((self.chunk, 7))
        for k in range(self.chunk):
            a = np.clip((self.target - pos) / STEP_SCALE, -1.0, 1.0)
            actions[k, :3] = a
            actions[k, 3] = k
            actions[k, 6] = -1.0  # gripper open
            pos = pos + STEP_SCALE * a
        self.responses.append(actions)
        return {"actions": actions}


class PolicyServer:
    """Serves `policy` on 127.0.0.1 at an ephemeral port from a background thread."""

    def __init__(self, policy: PointMassPolicy, metadata: dict[str, Any] | None = None) -> None:
        self.policy = policy
        self.metadata = metadata if metadata is not None else {"server": "tests.policy_server"}
        self.connections = 0
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> PolicyServer:
        self._thread.start()
        if not self._ready.wait(5.0):
            raise RuntimeError("test policy server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5.0)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with _server.serve(self._handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await self._stop.wait()

    async def _handler(self, websocket: _server.ServerConnection) -> None:
        self.connections += 1
        packer = msgpack_numpy.Packer()
        await websocket.send(packer.pack(self.metadata))
        while True:
            try:
                obs = msgpack_numpy.unpackb(await websocket.recv())
                t0 = time.monotonic()
                action = self.policy.infer(obs)
                action["server_timing"] = {"infer_ms": (time.monotonic() - t0) * 1000}
                await websocket.send(packer.pack(action))
            except websockets.ConnectionClosed:
                break
            except Exception:
                await websocket.send(traceback.format_exc())
                await websocket.close(
                    code=websockets.frames.CloseCode.INTERNAL_ERROR,
                    reason="Internal server error. Traceback included in previous frame.",
                )
                break
