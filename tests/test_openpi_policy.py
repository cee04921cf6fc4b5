"""The openpi client seam: `OpenPiPolicy` against a real websocket server speaking openpi's protocol.

The server (tests/policy_server.py) is the wire-level stand-in for openpi's
`serve_policy.py`; the robot is a point mass whose position integrates the
actions. Only the client seam is under test here — observation packing,
chunk execution, stop conditions, errors — not any simulator; except at the
end, where the two-arm (ALOHA-style) convention drives a real two-arm robosuite
scene, to show that a 14-D action moves both arms as commanded.
"""
from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from policy_server import STEP_SCALE, PointMassPolicy, PolicyServer
from robots.motion import axis_angle
from robots.vla.base import VLAPolicy
from robots.vla.openpi_policy import OpenPiPolicy, PolicyServerUnavailable

TARGET = np.array([0.30, 0.10, 0.20])


class PointMassIO:
    """RobotIO whose end effector is a point: pos += STEP_SCALE * action[:3]; success near TARGET."""

    def __init__(self, start=(0.0, 0.0, 0.0), target=TARGET, tol=1e-6, cam_hw=(128, 160)):
        self.pos = np.asarray(start, dtype=np.float64)
        self.target = np.asarray(target, dtype=np.float64)
        self.tol = tol
        self.cam_hw = cam_hw
        self.actions: list[np.ndarray] = []

    def observe(self) -> dict[str, np.ndarray]:
        h, w = self.cam_hw
        # Non-square frames of a constant colour: padding (zeros) shows where resize_with_pad added it.
        agent = np.full((h, w, 3), 200, dtype=np.uint8)
        wrist = np.full((96, 96, 3), 50, dtype=np.uint8)
        gripper = np.array([0.04, -0.04])
        return {
            "agentview_rgb": agent,
            "wrist_rgb": wrist,
            "eef_pos": self.pos.copy(),
            "eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
            "gripper_qpos": gripper,
            "state": np.concatenate([self.pos, np.zeros(3), gripper]),
        }

    def step(self, action: np.ndarray) -> None:
        action = np.asarray(action, dtype=np.float64)
        assert action.shape == (7,)
        self.actions.append(action)
        self.pos = self.pos + STEP_SCALE * action[:3]

    def success(self) -> bool:
        return bool(np.linalg.norm(self.pos - self.target) < self.tol)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    # The websocket client honours http(s)_proxy; a proxy in the environment must not see 127.0.0.1.
    monkeypatch.setenv("no_proxy", "*")


@pytest.fixture
def served():
    """(policy, server) for a point-mass policy on an ephemeral port."""
    policy = PointMassPolicy(TARGET, chunk=10)
    with PolicyServer(policy, metadata={"policy": "point-mass"}) as server:
        yield policy, server


def _client(server: PolicyServer, **kw) -> OpenPiPolicy:
    return OpenPiPolicy(host="127.0.0.1", port=server.port, **kw)


def test_is_a_vla_policy():
    p: VLAPolicy = OpenPiPolicy()
    assert p.name == "openpi"
    assert (p.host, p.port, p.image_size, p.replan_steps) == ("127.0.0.1", 8000, 224, 5)


def test_observations_have_openpi_libero_keys_shapes_dtypes(served):
    policy, server = served
    with _client(server) as client:
        assert client.server_metadata == {"policy": "point-mass"}
        client.run(PointMassIO(), "put the bowl on the plate", max_steps=5)

    assert len(policy.observations) == 1
    obs = policy.observations[0]
    assert set(obs) == {"observation/image", "observation/wrist_image", "observation/state", "prompt"}
    for key in ("observation/image", "observation/wrist_image"):
        assert obs[key].shape == (224, 224, 3)
        assert obs[key].dtype == np.uint8
    assert obs["observation/state"].shape == (8,)
    assert np.issubdtype(obs["observation/state"].dtype, np.floating)
    assert obs["prompt"] == "put the bowl on the plate"

    # 128x160 -> 179x224 content, zero-padded top and bottom (resize_with_pad, not a stretch).
    img = obs["observation/image"]
    assert (img[:20] == 0).all() and (img[-20:] == 0).all()
    assert (img[112] == 200).all()
    # The wrist image is square: resized without padding.
    assert (obs["observation/wrist_image"] == 50).all()


def test_chunks_are_executed_replan_steps_at_a_time(served):
    policy, server = served
    io = PointMassIO(target=[5.0, 5.0, 5.0])  # out of reach: the rollout runs to max_steps
    with _client(server, replan_steps=3) as client:
        out = client.run(io, "reach", max_steps=9)

    assert (out.steps, out.success, out.stopped_reason) == (9, False, "max_steps")
    assert len(policy.observations) == 3  # one query every replan_steps steps
    # Each query executed chunk[:3] of a 10-long chunk: in-chunk indices 0,1,2 three times.
    assert [int(a[3]) for a in io.actions] == [0, 1, 2] * 3
    executed = np.stack(io.actions)
    assert np.array_equal(executed, np.concatenate([r[:3] for r in policy.responses]))
    # Each observation shows the state after the previous chunk's steps were applied.
    sent = [o["observation/state"][:3] for o in policy.observations]
    np.testing.assert_allclose(sent[1], STEP_SCALE * executed[:3, :3].sum(axis=0))
    np.testing.assert_allclose(sent[2], STEP_SCALE * executed[:6, :3].sum(axis=0))


def test_success_stops_the_rollout(served):
    policy, server = served
    # 0.30 m at 0.05 m/step along x: success after exactly 6 steps, mid-way through the second chunk.
    io = PointMassIO(start=[0.0, 0.10, 0.20])
    with _client(server, replan_steps=5) as client:
        out = client.run(io, "reach", max_steps=100)

    assert (out.steps, out.success, out.stopped_reason) == (6, True, "success")
    assert len(io.actions) == 6
    assert len(policy.observations) == 2


def test_max_steps_bounds_a_partial_chunk(served):
    policy, server = served
    io = PointMassIO(target=[5.0, 5.0, 5.0])
    with _client(server, replan_steps=5) as client:
        out = client.run(io, "reach", max_steps=7)

    assert (out.steps, out.stopped_reason) == (7, "max_steps")
    assert [int(a[3]) for a in io.actions] == [0, 1, 2, 3, 4, 0, 1]
    assert len(policy.observations) == 2


def test_connection_is_reused_across_calls(served):
    policy, server = served
    with _client(server) as client:
        client.run(PointMassIO(target=[5.0, 5.0, 5.0]), "a", max_steps=5)
        client.run(PointMassIO(target=[5.0, 5.0, 5.0]), "b", max_steps=5)
    assert server.connections == 1
    assert [o["prompt"] for o in policy.observations] == ["a", "b"]


def test_server_error_ends_the_rollout_with_an_error_reason():
    with PolicyServer(PointMassPolicy(TARGET, fail=True)) as server:
        with _client(server) as client:
            out = client.run(PointMassIO(), "reach", max_steps=10)
    assert out.steps == 0 and not out.success
    assert out.stopped_reason.startswith("error: ")
    assert "policy exploded on purpose" in out.stopped_reason
    assert f"127.0.0.1:{server.port}" in out.stopped_reason


def test_no_server_gives_a_clear_error():
    with socket.socket() as s:  # a port nobody listens on: bind, note, release
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = OpenPiPolicy(port=port)
    with pytest.raises(PolicyServerUnavailable) as exc:
        client.run(PointMassIO(), "reach", max_steps=10)
    msg = str(exc.value)
    assert f"127.0.0.1:{port}" in msg
    assert "serve_policy.py" in msg and "episode.openpi_host" in msg
    assert isinstance(exc.value, ConnectionError)


def test_something_else_on_the_port_gives_a_clear_error():
    # Listening, but not a websocket server (say, a web app left on 8000): the handshake fails.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]

        def answer_404():
            # The TCP probe's connection is accepted first, then the handshake's.
            for _ in range(2):
                conn, _ = s.accept()
                with conn:
                    try:
                        conn.recv(4096)
                        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    except OSError:  # the probe hangs up at once
                        pass

        threading.Thread(target=answer_404, daemon=True).start()
        with pytest.raises(PolicyServerUnavailable, match=rf"127\.0\.0\.1:{port}.*HTTP 404"):
            OpenPiPolicy(port=port).run(PointMassIO(), "reach", max_steps=10)


# ------------------------------------------------------------------ two arms (ALOHA-style convention)
class ChunkPolicy:
    """Answers every observation with the same (chunk, 14) action array; records what it saw."""

    def __init__(self, actions: np.ndarray) -> None:
        self.actions = np.asarray(actions, dtype=np.float64)
        self.observations: list[dict] = []

    def infer(self, obs: dict) -> dict:
        self.observations.append(obs)
        return {"actions": self.actions}


#: Left arm up (+z), right arm forward (+x), both grippers as given; 0.5 = 2.5 cm per step.
LEFT_UP = np.array([0.0, 0.0, 0.5, 0.0, 0.0, 0.0, -1.0])
RIGHT_FORWARD = np.array([0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])


@pytest.fixture(scope="module")
def bimanual_robot():
    """A Robot on a real two-arm robosuite scene (TwoArmLift/0: two Pandas side by side)."""
    from robots.bimanual import BimanualBackend
    from robots.robot import Robot

    backend = BimanualBackend(image_size=128)
    backend.reset("TwoArmLift/0", 0)
    yield lambda policy: Robot(backend, capabilities=("vla",), vla_policy=policy)
    backend.close()


def test_two_arm_observation_has_aloha_keys_shapes_dtypes(bimanual_robot):
    from openpi_client import image_tools

    from robots.vla.io import BackendIO

    policy = ChunkPolicy(np.zeros((4, 14)))
    with PolicyServer(policy) as server, _client(server, convention="aloha") as client:
        robot = bimanual_robot(client)
        io = BackendIO(robot)
        assert (io.arms, io.action_dim) == (("left", "right"), 14)
        backend = robot.backend
        poses = {arm: backend.eef_pose(arm) for arm in ("left", "right")}
        widths = {arm: backend.gripper_width(arm) for arm in ("left", "right")}
        left_wrist = backend.render("robot1_eye_in_hand", "rgb", 224)
        out = client.run(io, "lift the pot", max_steps=1)

    assert out.steps == 1 and len(policy.observations) == 1
    obs = policy.observations[0]
    assert set(obs) == {"state", "images", "prompt"}
    assert obs["prompt"] == "lift the pot"
    state = obs["state"]
    assert state.shape == (14,) and np.issubdtype(state.dtype, np.floating)
    # Left arm first: eef position, axis-angle, gripper opening width; then the right arm.
    for i, arm in enumerate(("left", "right")):
        pos, R = poses[arm]
        np.testing.assert_allclose(state[7 * i: 7 * i + 3], pos, atol=1e-5)
        np.testing.assert_allclose(state[7 * i + 3: 7 * i + 6], axis_angle(R), atol=1e-5)
        assert state[7 * i + 6] == pytest.approx(widths[arm], abs=1e-5) and widths[arm] > 0.03  # open
    assert set(obs["images"]) == {"cam_high", "cam_left_wrist", "cam_right_wrist"}
    for img in obs["images"].values():
        assert img.shape == (3, 224, 224) and img.dtype == np.uint8  # CHW, as openpi's ALOHA clients send
    # cam_left_wrist is robot1's (the left arm's) wrist camera, not robot0's.
    expected = np.transpose(image_tools.resize_with_pad(left_wrist, 224, 224), (2, 0, 1))
    np.testing.assert_array_equal(obs["images"]["cam_left_wrist"], expected)
    assert not np.array_equal(obs["images"]["cam_left_wrist"], obs["images"]["cam_right_wrist"])


def test_a_14_dim_chunk_moves_both_arms_in_the_same_env_steps(bimanual_robot):
    chunk = np.tile(np.concatenate([LEFT_UP, RIGHT_FORWARD]), (10, 1))
    policy = ChunkPolicy(chunk)
    with PolicyServer(policy) as server, _client(server, convention="aloha", replan_steps=5) as client:
        robot = bimanual_robot(client)
        backend = robot.backend
        before = {arm: backend.eef_pose(arm)[0] for arm in ("left", "right")}
        sim0 = backend.counter.sim_steps
        result = robot.vla("lift the pot", max_steps=10)

    assert (result.steps, result.stopped_reason) == (10, "max_steps")
    assert len(policy.observations) == 2  # one query per replan_steps
    # Each 14-D action is one env step for both arms (step_arms), not one step per arm.
    assert backend.counter.sim_steps - sim0 == 10
    moved = {arm: backend.eef_pose(arm)[0] - before[arm] for arm in ("left", "right")}
    assert moved["left"][2] > 0.03, moved  # up (about 5.5 cm: the controller lags the 2.5 cm/step command)
    assert abs(moved["left"][0]) < 0.02 and abs(moved["left"][1]) < 0.02, moved
    assert moved["right"][0] > 0.03, moved  # forward
    assert abs(moved["right"][1]) < 0.02 and abs(moved["right"][2]) < 0.02, moved
    # The motion controllers' gripper commands follow the policy's: right closed, left open.
    assert robot.motions["right"].gripper_cmd == 1.0 and robot.motions["left"].gripper_cmd == -1.0


def test_convention_must_match_the_robots_arms():
    # An aloha-convention client on a one-arm robot stops before talking to any server.
    out = OpenPiPolicy(port=1, convention="aloha").run(PointMassIO(), "reach", max_steps=5)
    assert (out.steps, out.success) == (0, False)
    assert out.stopped_reason.startswith("error: ") and "14-D" in out.stopped_reason and "7-D" in out.stopped_reason
    with pytest.raises(ValueError, match="convention"):
        OpenPiPolicy(convention="droid")


def test_make_vla_gives_two_arm_groups_the_aloha_convention():
    from robots.factory import make_vla

    assert make_vla({"vla": "openpi", "benchmark": "bimanual"}).convention == "aloha"
    one = make_vla({"vla": "openpi", "benchmark": "libero_pro", "openpi_port": 8123})
    assert (one.convention, one.action_dim, one.port) == ("libero", 7, 8123)
