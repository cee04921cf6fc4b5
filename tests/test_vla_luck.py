"""The scripted VLA stand-in's luck: keyed on the instance and the repeat, common to both agents by default.

Draws only (no scene): `make_vla` builds the stand-in from the same init spec
the runtime gets, and `draw(n)` is the luck its n-th call runs with.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from agents.config import load_config, validate_config
from agents.errors import CellbenchError
from robots.factory import make_vla

ROOT = Path(__file__).resolve().parent.parent
CALLS = 8


@pytest.fixture(scope="module")
def paper():
    return load_config(ROOT / "configs" / "paper.yaml")


def instances(config):
    for benchmark, group in config["benchmarks"].items():
        for task in group["tasks"]:
            for seed in group["seeds"]:
                yield benchmark, task, seed


def vla(benchmark, task, seed, repeat=0, agent="tool", luck="common", p=0.2):
    return make_vla({"vla": "scripted", "benchmark": benchmark, "task": task, "seed": seed, "repeat": repeat,
                     "agent": agent, "vla_luck": luck, "vla_failure_prob": p})


def luck(stand_in, calls=CALLS):
    """Per call: the failure mode (None: no failure) and the next number its details would be drawn from."""
    out = []
    for n in range(1, calls + 1):
        failure, rng = stand_in.draw(n)
        out.append((failure, round(float(rng.random()), 12)))
    return out


def test_first_call_fails_at_the_failure_rate_over_the_paper_grid(paper):
    p = paper["episode"]["vla_failure_prob"]
    grid = list(instances(paper))
    assert len(grid) == 700
    first = [vla(b, t, s, p=p).draw(1)[0] is not None for b, t, s in grid]
    # 700 instances: the binomial's standard error at 0.2 is 1.5 points; "a few points" is 4.5 (3 SE).
    assert abs(sum(first) / len(first) - p) < 0.045, sum(first) / len(first)
    # Every group fails on its first call sometimes (before, seeds 0-4 never failed there).
    for group in paper["benchmarks"]:
        share = sum(f for f, (b, _, _) in zip(first, grid) if b == group) / sum(b == group for b, _, _ in grid)
        assert 0.08 < share < 0.35, (group, share)
    # Nor is the luck the same across tasks at one seed: the draws depend on the task.
    at_seed0 = {tuple(luck(vla(b, t, 0), 3)) for b, t, s in grid if s == 0}
    assert len(at_seed0) == 140


def test_repeats_meet_different_luck(paper):
    grid = list(instances(paper))
    differ_flags = 0
    for b, t, s in grid:
        draws = [luck(vla(b, t, s, repeat=r)) for r in range(3)]
        # Never a copy: the underlying numbers differ between every two repeats.
        assert draws[0] != draws[1] and draws[1] != draws[2] and draws[0] != draws[2], (b, t, s)
        flags = [tuple(f is not None for f, _ in d) for d in draws]
        differ_flags += len(set(flags)) > 1
    # Which of 8 calls fail: the same in three repeats with probability ~0.68^8 * 0.68^8 (p = 0.2).
    assert differ_flags / len(grid) > 0.95


def test_common_luck_is_the_same_for_both_agents_and_per_agent_luck_is_not(paper):
    grid = list(instances(paper))
    for b, t, s in grid:
        assert luck(vla(b, t, s, agent="tool")) == luck(vla(b, t, s, agent="code")), (b, t, s)
    per_agent = [luck(vla(b, t, s, agent="tool", luck="per_agent")) != luck(vla(b, t, s, agent="code", luck="per_agent"))
                 for b, t, s in grid]
    assert all(per_agent)
    # Per-agent luck is still the instance's, and the same on a rerun.
    b, t, s = grid[0]
    assert luck(vla(b, t, s, agent="code", luck="per_agent")) == luck(vla(b, t, s, agent="code", luck="per_agent"))


def test_the_bimanual_stand_in_draws_the_same_luck():
    one_arm = vla("bimanual", "TwoArmLift/3", 2)
    assert type(one_arm).__name__ == "ScriptedBimanualVLA"
    assert luck(one_arm) == luck(vla("bimanual", "TwoArmLift/3", 2, agent="code"))
    assert luck(one_arm) != luck(vla("bimanual", "TwoArmLift/3", 2, repeat=1))


def test_the_key_is_stable_across_processes():
    """sha256, not hash(): a fresh interpreter (another hash salt) draws the same."""
    import subprocess
    import sys

    code = ("from robots.factory import make_vla; v = make_vla({'vla': 'scripted', 'benchmark': 'libero_pro', "
            "'task': 'libero_goal_swap/1', 'seed': 3, 'repeat': 1}); print(v.luck)")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(salt), "PATH": ""}).stdout for salt in (1, 2)}
    assert len(runs) == 1
    assert runs.pop().strip() == str(vla("libero_pro", "libero_goal_swap/1", 3, repeat=1).luck)


def test_vla_luck_setting_is_checked():
    with pytest.raises(CellbenchError, match="episode.vla_luck: 'shared' is not one of common, per_agent"):
        vla("libero_pro", "libero_goal_swap/1", 0, luck="shared")
    with pytest.raises(CellbenchError, match="per_agent needs the episode's agent"):
        make_vla({"vla": "scripted", "benchmark": "libero_pro", "task": "x/0", "seed": 0, "vla_luck": "per_agent"})
    config = load_config(ROOT / "config.yaml")
    assert config["episode"]["vla_luck"] == "common"
    config["episode"]["vla_luck"] = "per_agent"
    validate_config(config)
    config["episode"]["vla_luck"] = "sometimes"
    with pytest.raises(CellbenchError, match=r"episode\.vla_luck: 'sometimes' is not one of"):
        validate_config(config)


class _StopAtInit(Exception):
    pass


def test_the_episode_hands_instance_repeat_agent_and_luck_to_the_runtime(monkeypatch, tmp_path):
    """What `cellbench play --config` sends to the simulator process's init: the stand-in's whole key."""
    import argparse

    from agents import episode
    from agents.play import spec_from_args

    sent = {}

    class Runtime:
        def __init__(self, *args, **kwargs):
            self.deadline = None

        def request(self, op, payload):
            sent[op] = payload
            raise CellbenchError("stop at init")

        def close(self):
            pass

    monkeypatch.setattr(episode, "RuntimeClient", Runtime)
    config = load_config(ROOT / "config.yaml")
    config["episode"]["vla_luck"] = "per_agent"
    args = argparse.Namespace(benchmark="libero_pro", task="libero_goal_swap/1", seed=4, agent="code",
                              ablation="full", repeat=2, call_budget=None, wall_clock=None, planner=None, model=None)
    spec, _ = spec_from_args(args, config)
    with pytest.raises(CellbenchError, match="stop at init"):
        episode.run_episode(spec, planner=None, out_dir=str(tmp_path / "ep"))
    init = sent["init"]
    assert (init["benchmark"], init["task"], init["seed"], init["repeat"], init["agent"], init["vla_luck"]) == (
        "libero_pro", "libero_goal_swap/1", 4, 2, "code", "per_agent")
    assert make_vla(init).luck == vla("libero_pro", "libero_goal_swap/1", 4, repeat=2, agent="code",
                                      luck="per_agent").luck
