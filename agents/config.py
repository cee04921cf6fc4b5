"""The experiment config: load and validate it, and expand it into the grid of episodes.

One schema (`workflow/schemas/config.schema.yaml`) serves both readers: the
Snakemake workflow, which validates the merged config before any rule runs,
and `cellbench play`, which loads the config file the workflow hands it.
Validation fills the schema's defaults in, so every reader sees the same
complete config and `config_hash` names exactly what an episode ran under.
"""
from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, validators

from agents.errors import CellbenchError

#: The schema sits with the workflow (snakemake-workflow-template layout); the
#: package is installed editable from this checkout, so it is found from here.
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "workflow" / "schemas" / "config.schema.yaml"

#: Ablations that exist for one agent only (paper §3.6: only tool calling has
#: automatic images to take away).
AGENT_ONLY_ABLATIONS = {"images_on_demand": "tool"}

#: Planner keys that change what an episode does.  Retries and timeouts only
#: change whether an infrastructure failure is survived, so editing them must
#: not rerun (and re-bill) a finished grid.
_PLANNER_RESULT_KEYS = ("name", "model", "base_url", "temperature", "top_p", "max_output_tokens",
                        "max_tokens_param", "tool_choice", "parallel_tool_calls", "extra_body",
                        "reasoning_effort", "thinking_budget_tokens", "vision", "tool_calls", "constrain_calls")


def _with_defaults(cls):
    """A validator class that also fills in each property's `default`."""
    check_properties = cls.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if validator.is_type(instance, "object"):
            for name, sub in props.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from check_properties(validator, props, instance, schema)

    return validators.extend(cls, {"properties": properties})


_Validator = _with_defaults(Draft202012Validator)


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The config schema, parsed."""
    if not SCHEMA_PATH.is_file():
        raise CellbenchError(f"config schema not found at {SCHEMA_PATH}: is cellbench installed from its checkout?")
    with open(SCHEMA_PATH) as f:
        return yaml.safe_load(f)


def benchmark_groups() -> tuple[str, ...]:
    """Every benchmark group the schema knows, whether or not a config uses it."""
    return tuple(schema()["properties"]["benchmarks"]["properties"])


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read a config YAML file, validate it and fill its defaults in.

    Raises CellbenchError naming the file and the bad key's path.
    """
    path = Path(path)
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except FileNotFoundError:
        raise CellbenchError(f"{path}: config file not found") from None
    except yaml.YAMLError as e:
        raise CellbenchError(f"{path}: not valid YAML: {e}") from None
    return validate_config(config, sources=[path])


def validate_config(config: Any, sources: Sequence[str | os.PathLike] = ("config",)) -> dict[str, Any]:
    """Validate `config` in place against the schema (filling defaults in) and return it.

    `sources` are the files the config was merged from, later ones winning (as
    Snakemake merges `configfile:` and `--configfile`); an error names the
    file that holds the offending key, or all of them where none does.
    """
    if not isinstance(config, dict):
        raise CellbenchError(f"{_label(sources)}: the config must be a mapping of keys to settings")
    errors = sorted(_Validator(schema()).iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])
    problems = [_describe(e, sources) for e in errors]
    if not problems:
        problems = _semantic_problems(config, sources)
    if problems:
        raise CellbenchError("\n".join(problems))
    return config


def _semantic_problems(config: dict[str, Any], sources) -> list[str]:
    """What the schema cannot say: cross-references between keys."""
    if config["price_model"] not in config["prices"]:
        from analysis.price_library import library_table

        try:
            library_table(config["price_model"])  # a model the offline price library knows needs no entry
        except CellbenchError as e:
            where = _where(("price_model",), sources)
            return [f"{where}: price_model: {config['price_model']!r} has no price table; "
                    f"known: {', '.join(config['prices'])} ({e})"]
    return []


def task_problems(config: Mapping[str, Any], sources: Sequence[str | os.PathLike] = ("config",)) -> list[str]:
    """One line per task of a validated config that its benchmark group does not have.

    Separate from `validate_config`: it imports the benchmark's task lists
    (a second or two, no scene), which the schema check alone does not need.
    """
    from robots.factory import BENCHMARKS, check_task

    problems = []
    for benchmark, group in config["benchmarks"].items():
        if benchmark not in BENCHMARKS:
            continue  # a group the schema knows whose backend is not registered: `cellbench play` says so
        for i, task in enumerate(group["tasks"]):
            try:
                check_task(benchmark, task)
            except CellbenchError as e:
                path = ("benchmarks", benchmark, "tasks", i)
                problems.append(f"{_where(path, sources)}: {_dotted(path)}: {e}")
    return problems


def _describe(error, sources) -> str:
    """One line per schema violation: file, dotted key path, what is wrong."""
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(error.schema.get("properties", {}))
        lines = []
        for key in sorted(set(error.instance) - set(known)):
            hint = difflib.get_close_matches(str(key), known, n=1)
            where = _where(path + (key,), sources)
            prefix = f"{where}: {_dotted(path)}: " if path else f"{where}: "
            lines.append(f"{prefix}unknown key {key!r}"
                         + (f" (did you mean {hint[0]!r}?)" if hint else f"; known: {', '.join(known)}"))
        if lines:
            return "\n".join(lines)
    where = _where(path, sources)
    return f"{where}: {_dotted(path) or '(top level)'}: {error.message}"


def _dotted(path: Iterable[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _label(sources) -> str:
    return " + ".join(str(s) for s in sources)


def _where(path: tuple, sources) -> str:
    """The last source file that sets `path` (the one that won the merge)."""
    for src in reversed(list(sources)):
        node = _read_yaml(str(src))
        for p in path:
            if isinstance(node, Mapping) and p in node:
                node = node[p]
            elif isinstance(node, list) and isinstance(p, int) and p < len(node):
                node = node[p]
            else:
                break
        else:
            return str(src)
    return _label(sources)


def _read_yaml(path: str) -> Any:
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return None


def _parse_task(task: str) -> tuple[str, int | str]:
    suite, _, index = task.partition("/")
    return suite, int(index) if index.isdigit() else index


def ablations_for(config: Mapping[str, Any], benchmark: str, agent: str) -> list[str]:
    """The ablations `agent` runs in `benchmark`: the group's override or the global list,
    less those that exist for another agent only."""
    group = config["benchmarks"][benchmark]
    return [a for a in group.get("ablations", config["ablations"])
            if AGENT_ONLY_ABLATIONS.get(a, agent) == agent]


def episode_grid(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One dict per episode of a validated config, instance by instance.

    The grid is irregular (an agent-only ablation, per-group ablation lists),
    so it is built here rather than with a plain product.
    """
    grid = []
    for benchmark, group in config["benchmarks"].items():
        for task in group["tasks"]:
            suite, task_index = _parse_task(task)
            for seed in group["seeds"]:
                for repeat in range(config.get("repeats", 1)):
                    for agent in config["agents"]:
                        for ablation in ablations_for(config, benchmark, agent):
                            trace_dir = (f"results/episodes/{benchmark}/{ablation}/{agent}/"
                                         f"{suite}/{task_index}/seed{seed}")
                            if repeat > 0:
                                trace_dir += f"/r{repeat}"
                            grid.append({
                                "benchmark": benchmark, "task": task, "suite": suite,
                                "task_index": task_index, "seed": seed, "agent": agent,
                                "ablation": ablation, "repeat": repeat,
                                "call_budget": group["call_budget"], "trace_dir": trace_dir,
                            })
    return grid


def config_hash(config: Mapping[str, Any]) -> str:
    """Stable sha256 of the config's canonical JSON (key order and layout ignored)."""
    return _digest(config)


def episode_settings_hash(config: Mapping[str, Any], benchmark: str) -> str:
    """Digest of the settings that change what an episode of `benchmark` does.

    The workflow records it with each episode so that a changed planner,
    budget or episode limit reruns the episodes it affects, while adding
    tasks, seeds or prices reruns none.
    """
    planner = {k: v for k, v in config["planner"].items() if k in _PLANNER_RESULT_KEYS}
    # How the cells are confined is not what the episode does: a new or edited `sandbox` reruns nothing.
    episode = {k: v for k, v in config.get("episode", {}).items() if k != "sandbox"}
    return _digest({"planner": planner, "episode": episode,
                    "call_budget": config["benchmarks"][benchmark]["call_budget"]})


def _digest(obj: Any) -> str:
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
