"""The real VLA backend: a client of an openpi policy server (π0 / π0.5 / π0-FAST).

`OpenPiPolicy` drives the `vla(instruction)` primitive by talking to a policy
served by Physical Intelligence's openpi over its websocket protocol, through
the `openpi_client` package (`WebsocketClientPolicy`, msgpack-numpy frames).
It follows openpi's LIBERO example client (`examples/libero/main.py`) so a
checkpoint fine-tuned on LIBERO sees exactly what it saw in evaluation:

* every `replan_steps` env steps the client sends one observation dict
  ``{"observation/image": (224, 224, 3) uint8,          # agent view
     "observation/wrist_image": (224, 224, 3) uint8,    # wrist camera
     "observation/state": (8,) float,                   # eef pos 3 + axis-angle 3 + gripper qpos 2
     "prompt": str}``
  with both images aspect-preserving resized and zero-padded by
  `openpi_client.image_tools.resize_with_pad`;
* the server answers ``{"actions": (chunk, 7)}`` — delta end-effector actions
  in the LIBERO/robosuite OSC_POSE convention (gripper -1 open, +1 close);
* the client executes the first `replan_steps` actions of the chunk open-loop,
  checking the benchmark's success after every step, then re-queries.

Two arms (the bimanual group, ``convention="aloha"``): the client speaks the
convention of openpi's two-arm ALOHA example client (`examples/aloha_sim`:
CHW images under "images") and of its `AlohaInputs` / `AlohaOutputs`
transforms (`src/openpi/policies/aloha_policy.py`: "state" 14, left arm first;
cameras "cam_high", "cam_left_wrist", "cam_right_wrist"; cam_low is optional):

* ``{"state": (14,) float,                                # left arm 7, then right arm 7
     "images": {"cam_high": (3, 224, 224) uint8,          # agent view, CHW
                "cam_left_wrist": (3, 224, 224) uint8,    # robot1 (left) wrist camera
                "cam_right_wrist": (3, 224, 224) uint8},  # robot0 (right) wrist camera
     "prompt": str}``, images resized with `resize_with_pad` as above;
* the server answers ``{"actions": (chunk, 14)}``; each row steps both arms in
  one env step, left arm's 7 numbers first.

Only the layout is ALOHA's. ALOHA's 7 numbers per arm are 6 joint positions
and a gripper position; these Pandas run robosuite's end-effector controller,
so here each arm's 7 are the one-arm path's end-effector quantities (see
`robots/vla/io.py`): state = eef position 3 + axis-angle 3 + gripper opening
width 1, action = delta OSC_POSE 6 + gripper (-1 open, +1 close). A released
ALOHA checkpoint (``pi0_aloha_sim``, ``pi0_aloha_towel`` ...) therefore does not
transfer: the server must run a checkpoint fine-tuned on data in this
convention, e.g. an openpi `LeRobotAlohaDataConfig` with ``adapt_to_pi=False``
(no ALOHA joint/gripper remapping) and ``use_delta_joint_actions=False`` (the
actions are already deltas).

openpi's example flips the raw LIBERO renders by 180°; `RobotIO.observe()`
already returns upright images (see `robots/vla/base.py`), which is what that
flip produces, so no flip happens here. The example's ten "let objects settle"
no-op steps belong to the episode reset in the benchmark backend, not here.

Serving a policy (on a GPU machine, in a checkout of openpi)::

    uv run scripts/serve_policy.py --env LIBERO               # π0.5-LIBERO, port 8000
    uv run scripts/serve_policy.py --port 8000 policy:checkpoint \\
        --policy.config=pi05_libero \\
        --policy.dir=gs://openpi-assets/checkpoints/pi05_libero  # or pi0_libero / pi0_fast_libero

Pointing cellbench at it (config.yaml)::

    episode:
      vla: openpi             # instead of the embedded scripted controller
      openpi_host: 127.0.0.1  # the machine running serve_policy.py
      openpi_port: 8000

On the bimanual benchmark `make_vla` builds the client with
``convention="aloha"``; on the others with ``"libero"``.

A remote server is reached best through an SSH tunnel
(``ssh -L 8000:localhost:8000 gpu-host``). The websocket client honours
http(s)_proxy environment variables; set ``no_proxy`` for the server's host if
one is set.

Errors: nothing listening at host:port raises `PolicyServerUnavailable` (a
`ConnectionError`) with the command that starts a server; the `vla` primitive
turns that into an ordinary failed call. Once connected, a failure of the
server mid-rollout (a traceback frame, a dropped connection, a malformed
response) ends the rollout with ``stopped_reason='error: ...'`` so the steps
already taken stay on the record.
"""
from __future__ import annotations

import socket
import urllib.parse
import warnings
from typing import Any

import numpy as np
import websockets.exceptions
from openpi_client import image_tools
from openpi_client import websocket_client_policy as _wcp

from robots.vla.base import RobotIO, VLAOutcome

ACTION_DIM = 7
#: Observation/action conventions of openpi's example clients -> the action width each expects.
CONVENTIONS = {"libero": 7, "aloha": 14}
#: openpi's two-arm camera names -> the RobotIO observation key of each image.
ALOHA_CAMERAS = {"cam_high": "agentview_rgb", "cam_left_wrist": "left_wrist_rgb", "cam_right_wrist": "right_wrist_rgb"}

SERVE_HINT = (
    "start one with openpi's `uv run scripts/serve_policy.py --env LIBERO` "
    "(see robots/vla/openpi_policy.py), or set episode.openpi_host / episode.openpi_port "
    "to where it runs, or use episode.vla: scripted"
)


class PolicyServerUnavailable(ConnectionError):
    """No openpi policy server could be reached at the configured host:port."""


class OpenPiPolicy:
    """`VLAPolicy` backed by an openpi policy server (π0 / π0.5 via `serve_policy.py`).

    `host` may also be a full ``ws://`` / ``wss://`` URI (then `port` may be None),
    as `WebsocketClientPolicy` allows. The connection opens on the first `run`
    and is reused by later ones; `close()` drops it. `convention` is "libero"
    (one arm, 7-D actions) or "aloha" (two arms, 14-D actions); the RobotIO's
    `action_dim` (7 when it has none) must match it.
    """

    name = "openpi"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = 8000,
        image_size: int = 224,
        replan_steps: int = 5,
        api_key: str | None = None,
        convention: str = "libero",
    ) -> None:
        if replan_steps < 1:
            raise ValueError(f"replan_steps must be >= 1, got {replan_steps}")
        if convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}")
        self.host = host
        self.port = port
        self.image_size = image_size
        self.replan_steps = replan_steps
        self.api_key = api_key
        self.convention = convention
        self.action_dim = CONVENTIONS[convention]
        self._client: _wcp.WebsocketClientPolicy | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}" if self.port is not None else self.host

    @property
    def server_metadata(self) -> dict[str, Any]:
        """What the server sent on connect (openpi: the policy's metadata dict)."""
        return self._connect().get_server_metadata()

    def run(self, io: RobotIO, instruction: str, max_steps: int) -> VLAOutcome:
        io_dim = int(getattr(io, "action_dim", ACTION_DIM))
        if io_dim != self.action_dim:
            return VLAOutcome(
                steps=0, success=io.success(),
                stopped_reason=f"error: the openpi client speaks the {self.convention!r} convention "
                f"({self.action_dim}-D actions) but this robot takes {io_dim}-D actions",
            )
        client = self._connect()
        steps = 0
        if io.success():
            return VLAOutcome(steps=0, success=True, stopped_reason="success")
        while steps < max_steps:
            try:
                chunk = self._infer(client, self._observation(io.observe(), instruction))
            except _ServerFault as e:
                # A half-dead connection must not be reused by the next call.
                self.close()
                return VLAOutcome(steps=steps, success=io.success(), stopped_reason=f"error: {e}")
            for action in chunk[: self.replan_steps]:
                io.step(action)
                steps += 1
                if io.success():
                    return VLAOutcome(steps=steps, success=True, stopped_reason="success")
                if steps >= max_steps:
                    break
        return VLAOutcome(steps=steps, success=io.success(), stopped_reason="max_steps")

    def close(self) -> None:
        client, self._client = self._client, None
        ws = getattr(client, "_ws", None)  # the client has no close(); its socket does
        if ws is not None:
            try:
                ws.close()
            except Exception:
                pass

    def __enter__(self) -> OpenPiPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _observation(self, obs: dict[str, np.ndarray], instruction: str) -> dict[str, Any]:
        if self.convention == "aloha":
            return {
                "state": np.asarray(obs["state"], dtype=np.float64).reshape(self.action_dim),
                # openpi's ALOHA clients send CHW images.
                "images": {cam: np.transpose(self._image(obs[key]), (2, 0, 1)) for cam, key in ALOHA_CAMERAS.items()},
                "prompt": str(instruction),
            }
        return {
            "observation/image": self._image(obs["agentview_rgb"]),
            "observation/wrist_image": self._image(obs["wrist_rgb"]),
            "observation/state": np.asarray(obs["state"], dtype=np.float64).reshape(8),
            "prompt": str(instruction),
        }

    def _image(self, img: np.ndarray) -> np.ndarray:
        # uint8 first: PIL (inside resize_with_pad) cannot take float RGB arrays.
        img = image_tools.convert_to_uint8(np.ascontiguousarray(img))
        return image_tools.resize_with_pad(img, self.image_size, self.image_size)

    def _infer(self, client: _wcp.WebsocketClientPolicy, element: dict[str, Any]) -> np.ndarray:
        try:
            response = client.infer(element)
        except (OSError, RuntimeError, ValueError, websockets.exceptions.WebSocketException) as e:
            # RuntimeError: the server sent a traceback frame instead of a response;
            # ValueError: msgpack could not decode what came back.
            raise _ServerFault(f"openpi server at {self.address}: {e}") from e
        actions = response.get("actions") if isinstance(response, dict) else None
        actions = None if actions is None else np.asarray(actions, dtype=np.float64)
        if actions is None or actions.ndim != 2 or actions.shape[0] == 0 or actions.shape[1] != self.action_dim:
            got = None if actions is None else actions.shape
            kind = "a LIBERO" if self.convention == "libero" else "a two-arm (ALOHA-style, 14-D)"
            raise _ServerFault(
                f"openpi server at {self.address} answered without a (chunk, {self.action_dim}) "
                f"'actions' array (got {got}); is it serving {kind} policy config?"
            )
        return actions

    def _connect(self) -> _wcp.WebsocketClientPolicy:
        if self._client is not None:
            return self._client
        self._probe()
        try:
            with warnings.catch_warnings():
                # openpi_client calls websockets' connect() outside a `with`, which
                # recent websockets releases flag on every connection; harmless here.
                warnings.filterwarnings("ignore", "connect\\(\\) must be used as a context manager",
                                        DeprecationWarning)
                self._client = _wcp.WebsocketClientPolicy(self.host, self.port, api_key=self.api_key)
        except (OSError, ValueError, websockets.exceptions.WebSocketException) as e:
            raise PolicyServerUnavailable(
                f"could not connect to an openpi policy server at {self.address}: {e}; {SERVE_HINT}"
            ) from e
        return self._client

    def _probe(self) -> None:
        # Newer openpi_client releases retry a refused connection forever
        # (sleeping 5 s each time); a plain TCP probe first turns "nothing is
        # listening" into an immediate, explainable error on every version.
        host, port = self._tcp_endpoint()
        try:
            socket.create_connection((host, port), timeout=5.0).close()
        except OSError as e:
            raise PolicyServerUnavailable(
                f"no openpi policy server is listening at {self.address} ({e.strerror or e}); {SERVE_HINT}"
            ) from e

    def _tcp_endpoint(self) -> tuple[str, int]:
        if self.host.startswith("ws"):
            url = urllib.parse.urlsplit(self.host if self.port is None else f"{self.host}:{self.port}")
            return url.hostname or "localhost", url.port or (443 if url.scheme == "wss" else 80)
        return self.host, self.port if self.port is not None else 80


class _ServerFault(Exception):
    """The server misbehaved after the connection was up; ends the rollout, not the episode."""
