"""`cellbench play`: run one episode from the command line and print its outcome line.

Exit status: 0 for an episode with a result (whatever its status), 2 for a
bad argument or config (or a trace directory another live process writes),
3 for `planner_error` (rerun it), 4 for an episode that stopped because the
Snakemake run that started it had died (agents.runwatch).
"""
from __future__ import annotations

import importlib
import sys
from typing import Any

from agents.episode import ABLATION_EFFECTS, EpisodeSpec, run_episode
from agents.errors import CellbenchError
from robots.registry import CALL_BUDGETS

#: Exit status of `cellbench play` for a planner_error episode (2 is a usage or config error).
PLANNER_ERROR_EXIT = 3

#: planner.name -> (module, class) of the LLM backends, imported only when chosen.
PLANNER_BACKENDS = {
    "openai": ("agents.planners.openai_planner", "OpenAIPlanner"),
    "openai-responses": ("agents.planners.openai_responses_planner", "OpenAIResponsesPlanner"),
    "anthropic": ("agents.planners.anthropic_planner", "AnthropicPlanner"),
}

DEFAULT_EPISODE = {"wall_clock_s": 900.0, "n_images": 3, "image_size": 256, "vla": "scripted", "vla_failure_prob": 0.2}


def make_planner(planner_cfg: dict[str, Any]):
    name = planner_cfg.get("name", "scripted")
    if name == "scripted":
        from agents.planners.scripted import ScriptedPlanner

        return ScriptedPlanner(model=planner_cfg.get("model", "scripted-v1"))
    if name in PLANNER_BACKENDS:
        module, cls = PLANNER_BACKENDS[name]
        return getattr(importlib.import_module(module), cls).from_config(planner_cfg)
    raise CellbenchError(f"unknown planner {name!r}; known: scripted, {', '.join(PLANNER_BACKENDS)}")


def spec_from_args(args, config: dict[str, Any] | None) -> tuple[EpisodeSpec, dict[str, Any]]:
    config = config or {}
    episode = {**DEFAULT_EPISODE, **(config.get("episode") or {})}
    group = (config.get("benchmarks") or {}).get(args.benchmark, {})
    planner_cfg = dict(config.get("planner") or {"name": "scripted", "model": "scripted-v1"})
    if args.planner:
        planner_cfg["name"] = args.planner
    if args.model:
        planner_cfg["model"] = args.model
    if args.ablation not in ABLATION_EFFECTS:
        raise CellbenchError(f"unknown ablation {args.ablation!r}; known: {', '.join(ABLATION_EFFECTS)}")
    passthrough = {k: v for k, v in episode.items()
                   if k not in DEFAULT_EPISODE
                   and k not in ("context_window", "stop_on_success", "compact_at_tokens", "max_dollars")}
    spec = EpisodeSpec(
        benchmark=args.benchmark,
        task=args.task,
        seed=args.seed,
        agent=args.agent,
        ablation=args.ablation,
        repeat=args.repeat,
        # Without a config, the group's own budget (100 for composite tasks) from the registry.
        call_budget=args.call_budget or int(group.get("call_budget", CALL_BUDGETS.get(args.benchmark, 40))),
        wall_clock_s=args.wall_clock or float(episode["wall_clock_s"]),
        context_window=episode.get("context_window"),
        n_images=int(episode["n_images"]),
        image_size=int(episode["image_size"]),
        vla=episode["vla"],
        vla_failure_prob=float(episode["vla_failure_prob"]),
        extra=passthrough,
        stop_on_success=bool(episode.get("stop_on_success", False)),
        compact_at_tokens=episode.get("compact_at_tokens"),
        max_dollars=episode.get("max_dollars"),
    )
    if spec.max_dollars is not None:
        if "prices" not in config:
            raise CellbenchError("episode.max_dollars needs a config with a price table (--config)")
        from analysis.cost import choose_price_table

        spec.price = choose_price_table(config, None)  # price_model's table
    return spec, planner_cfg


def main_play(args) -> int:
    from robots.factory import BENCHMARKS

    if args.benchmark not in BENCHMARKS:  # cheap to check here; the task is checked where the benchmark loads
        raise CellbenchError(f"unknown benchmark {args.benchmark!r}; known: {', '.join(BENCHMARKS)}")
    config = None
    if args.config:
        from agents.config import config_hash, load_config

        config = load_config(args.config)
    spec, planner_cfg = spec_from_args(args, config)
    if config is not None:
        spec.config_hash = config_hash(config)
    if args.agent == "code" and args.ablation == "images_on_demand":
        raise CellbenchError("the images_on_demand ablation exists for the tool agent only")
    planner = make_planner(planner_cfg)
    guard_episode(args.out)  # a planner refused (no key, say) leaves no directory behind
    rec = run_episode(spec, planner, args.out)
    print(
        f"{rec.task} seed={rec.seed} agent={rec.agent} ablation={rec.ablation}: {rec.status} "
        f"success={rec.success} calls={rec.n_calls} solved_at={rec.solved_at_call} "
        f"input_tokens={rec.input_tokens} cached={rec.cached_input_tokens} images_in={rec.images_in_prompts} "
        f"wall={rec.wall_time_s:.1f}s -> {args.out}"
    )
    if rec.status == "planner_error":
        # Not a result: the episode stays incomplete (no episode.json), so the workflow runs it again.
        print(planner_error_note(rec.error, args.out), file=sys.stderr)
        return PLANNER_ERROR_EXIT
    return 0


def guard_episode(out: str) -> None:
    """Before anything else of an episode: end it if the Snakemake run that started it dies
    (agents.runwatch), and hold its trace directory for the rest of its life (agents.trace)."""
    from agents.runwatch import watch_run
    from agents.trace import hold_trace_dir

    watch_run()
    hold_trace_dir(out)


def planner_error_note(error: str | None, out: str) -> str:
    return (f"cellbench play: planner_error: {error}\n"
            f"  the LLM endpoint never let this episode finish; its trace is kept for inspection "
            f"({out}/planner_error.json) and the next `snakemake` runs it again")
