"""The experiment config: schema errors name the key, the grid's shape, hashes."""
from __future__ import annotations

import copy

import pytest
import yaml
from snakemake.utils import update_config

from agents.config import (
    config_hash,
    episode_grid,
    episode_settings_hash,
    load_config,
    schema,
    validate_config,
)
from agents.errors import CellbenchError
from agents.records import ABLATIONS, AGENTS

BASE_ABLATIONS = ["full", "no_vla", "no_guides", "no_vla_no_guides"]


@pytest.fixture
def default(repo):
    return load_config(repo / "config.yaml")


def write_config(tmp_path, config, name="config.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return path


def test_unknown_key_is_named_with_its_file_and_path(tmp_path, repo):
    raw = yaml.safe_load((repo / "config.yaml").read_text())
    raw["benchmarks"]["libero_pro"]["seedz"] = raw["benchmarks"]["libero_pro"].pop("seeds")
    path = write_config(tmp_path, raw)
    with pytest.raises(CellbenchError) as e:
        load_config(path)
    assert f"{path}: benchmarks.libero_pro: unknown key 'seedz' (did you mean 'seeds'?)" in str(e.value)


def test_unknown_top_level_key_and_bad_value(tmp_path, default):
    bad = copy.deepcopy(default)
    bad["planr"] = {}
    bad["benchmarks"]["libero_pro"]["seeds"] = [0, "one"]
    with pytest.raises(CellbenchError) as e:
        validate_config(bad, sources=["my.yaml"])
    msg = str(e.value)
    assert "my.yaml: unknown key 'planr' (did you mean 'planner'?)" in msg
    assert "my.yaml: benchmarks.libero_pro.seeds[1]: 'one' is not of type 'integer'" in msg


def test_error_names_the_file_that_set_the_key(tmp_path, repo):
    overlay = write_config(tmp_path, {"episode": {"wall_clok_s": 5}}, "overlay.yaml")
    merged = yaml.safe_load((repo / "config.yaml").read_text())
    update_config(merged, yaml.safe_load(overlay.read_text()))
    with pytest.raises(CellbenchError, match=r"overlay\.yaml: episode: unknown key 'wall_clok_s'"):
        validate_config(merged, sources=[repo / "config.yaml", overlay])


def test_price_model_needs_a_price_table(default):
    default["price_model"] = "gpt-7"
    with pytest.raises(CellbenchError, match="price_model: 'gpt-7' has no price table"):
        validate_config(default)


def test_defaults_are_filled_in(tmp_path, default):
    raw = {k: v for k, v in default.items() if k not in ("episode", "repeats", "analysis")}
    raw["prices"] = {**raw["prices"], "plain": {"input": 3.0, "cached_input": 0.3, "output": 15.0}}
    config = load_config(write_config(tmp_path, raw))
    assert config["repeats"] == 1
    assert config["episode"]["wall_clock_s"] == 900
    assert config["analysis"] == {"bootstrap_resamples": 2000, "bootstrap_seed": 0, "confidence": 0.95}
    # No schema default of 0 for a cache write: a table without one bills writes at its input price.
    assert "cache_write" not in config["prices"]["plain"]
    from analysis.cost import price_tables
    assert price_tables(config)["plain"].cache_write == 3.0


def test_schema_enums_are_the_records_names():
    defs = schema()["$defs"]
    assert tuple(defs["ablation"]["enum"]) == ABLATIONS
    assert tuple(schema()["properties"]["agents"]["items"]["enum"]) == AGENTS


def test_images_on_demand_only_for_the_tool_agent(default):
    grid = episode_grid(default)
    assert {e["agent"] for e in grid if e["ablation"] == "images_on_demand"} == {"tool"}
    instances = {(e["task"], e["seed"]) for e in grid}
    assert sorted(e["ablation"] for e in grid if e["agent"] == "code") == sorted(BASE_ABLATIONS * len(instances))


def test_default_config_covers_both_agents_and_every_ablation(default):
    cells = {(e["agent"], e["ablation"]) for e in episode_grid(default)}
    assert cells == {(a, x) for a in ("tool", "code") for x in BASE_ABLATIONS} | {("tool", "images_on_demand")}
    # 4 instances x (2 agents x 4 ablations + the tool agent's images_on_demand)
    assert len({(e["task"], e["seed"]) for e in episode_grid(default)}) == 8  # 4 tasks x 2 seeds
    assert len(episode_grid(default)) == 8 * (2 * 4 + 1) == 72


def test_paper_grid_is_200_libero_pro_instances_times_9_cells(repo):
    config = load_config(repo / "configs" / "paper.yaml")
    group = config["benchmarks"]["libero_pro"]
    assert len(group["tasks"]) == 40 and len(group["seeds"]) == 5
    # 40 tasks x 5 seeds x (2 agents x 4 ablations + tool's images_on_demand)
    assert len([e for e in episode_grid(config) if e["benchmark"] == "libero_pro"]) == 40 * 5 * (2 * 4 + 1) == 1800
    suites = [t.split("/")[0] for t in group["tasks"]]
    for base in ("libero_spatial", "libero_object", "libero_goal", "libero_10"):
        assert sum(s.startswith(base + "_") for s in suites) == 10
    for perturbation in ("swap", "lan", "object", "task"):
        assert sum(s.endswith("_" + perturbation) for s in suites) == 10


def test_paper_config_stands_alone(repo):
    """Merged over config.yaml (as --configfile does) it is the same as on its own."""
    merged = yaml.safe_load((repo / "config.yaml").read_text())
    update_config(merged, yaml.safe_load((repo / "configs" / "paper.yaml").read_text()))
    validate_config(merged)
    assert config_hash(merged) == config_hash(load_config(repo / "configs" / "paper.yaml"))


def test_group_ablation_override_and_repeat_directories(default):
    default["benchmarks"]["kitchen_composite"] = {
        "tasks": ["composite/PrepareCoffee"], "seeds": [3], "call_budget": 100, "ablations": ["full", "no_vla"]}
    default["repeats"] = 2
    validate_config(default)
    kitchen = [e for e in episode_grid(default) if e["benchmark"] == "kitchen_composite"]
    assert {(e["agent"], e["ablation"]) for e in kitchen} == {(a, x) for a in ("tool", "code") for x in ("full", "no_vla")}
    assert len(kitchen) == 2 * 2 * 2 and {e["call_budget"] for e in kitchen} == {100}
    dirs = {e["repeat"]: e["trace_dir"] for e in kitchen if e["agent"] == "code" and e["ablation"] == "full"}
    assert dirs == {0: "results/episodes/kitchen_composite/full/code/composite/PrepareCoffee/seed3",
                    1: "results/episodes/kitchen_composite/full/code/composite/PrepareCoffee/seed3/r1"}
    first = episode_grid(default)[0]
    assert first["task"] == "libero_spatial_swap/0" and first["suite"] == "libero_spatial_swap"
    assert first["task_index"] == 0


def test_config_hash_ignores_key_order_only(default):
    reordered = copy.deepcopy(dict(reversed(list(default.items()))))
    assert config_hash(reordered) == config_hash(default)
    default["episode"]["n_images"] = 1
    assert config_hash(reordered) != config_hash(default)


def test_episode_settings_hash_tracks_what_changes_an_episode(default):
    before = episode_settings_hash(default, "libero_pro")
    default["prices"]["gpt-4o"]["output"] = 99.0
    default["benchmarks"]["libero_pro"]["seeds"] = [0, 1, 2]
    default["planner"]["max_retries"] = 9
    assert episode_settings_hash(default, "libero_pro") == before
    default["planner"]["model"] = "scripted-v2"
    assert episode_settings_hash(default, "libero_pro") != before
