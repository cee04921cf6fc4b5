"""Config episode.sandbox: the three modes validate (YAML's unquoted `off` too), anything else names the key."""
from __future__ import annotations

import pytest
import yaml

from agents.config import load_config
from agents.errors import CellbenchError


def config_with(repo, tmp_path, text: str):
    base = yaml.safe_load((repo / "config.yaml").read_text())
    base["episode"] = {**(base.get("episode") or {}), **yaml.safe_load(text)}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(base).replace("sandbox: false", "sandbox: off"))
    return load_config(path)


@pytest.mark.parametrize("text,mode", [("{}", "best_effort"), ("sandbox: required", "required"),
                                       ("sandbox: off", False), ("sandbox: 'off'", "off")])
def test_modes_validate(repo, tmp_path, text, mode):
    assert config_with(repo, tmp_path, text)["episode"]["sandbox"] == mode


def test_an_unknown_mode_names_the_key(repo, tmp_path):
    with pytest.raises(CellbenchError, match="episode.sandbox"):
        config_with(repo, tmp_path, "sandbox: strict")


def test_the_sandbox_mode_does_not_rerun_finished_episodes(repo, tmp_path):
    from agents.config import episode_settings_hash

    hashes = {episode_settings_hash(config_with(repo, tmp_path, text), "libero_pro")
              for text in ("{}", "sandbox: required", "sandbox: 'off'")}
    assert len(hashes) == 1
    assert episode_settings_hash(config_with(repo, tmp_path, "wall_clock_s: 60"), "libero_pro") not in hashes
