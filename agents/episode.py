"""One episode: the agent loop over either interface, budgets, endings, and the trace.

The loop makes one LLM call at a time, executes one tool call of the reply in
the runtime child (a primitive for tool calling, a cell for code), appends
the result to the conversation, and stops on the first of: `finish`, call
budget, wall clock, context window, planner failure, a request the provider
rejects, runtime crash - not on the first success (paper §3.4 counts the calls
after it: both interfaces report the success flag after acting and refuse
acting primitives once the task is complete, see `agents.feedback`, and the
planner ends the episode itself).  `EpisodeSpec.stop_on_success` ends it at
the first success instead (the cheaper, non-paper protocol).

Success is always the benchmark's own check at the end, read whenever the
simulator is still alive (after a wall-clock or error ending too); where the
clock killed it mid-request, whether the check held after an acting primitive
(the runtime reports that as it happens, `RuntimeClient.solved_seen`).  Status:
an episode that ended by `finish`, the call budget, the wall clock or the
context window with that check true is `solved`; otherwise the status names
the ending (`gave_up` for `finish`).  `error` and `planner_error` stay what
they are whatever the check says (`success` still records it).
`solved_at_call` is the call after which the check first held.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from agents.cellworker import RESTART_EXCEPTION
from agents import compaction
from agents.dollar_budget import DollarBudget
from agents.errors import CellbenchError
from agents.feedback import TRUNCATED, unknown_tool
from agents.planners.base import ContextOverflow, PlannerError, PlannerReply, RequestRejected
from agents.prompts import load_prompts
from agents.records import CallRecord, EpisodeRecord, PrimitiveRecord, Usage
from agents.runtime import ActionResult, RuntimeClient, RuntimeDied, RuntimeLimits, RuntimeTimeout
from agents.textcalls import no_call_message, tool_names
from agents.trace import TraceWriter, data_url, image_key
from agents.usage import input_sources

#: What each ablation removes (paper §3.7).
ABLATION_EFFECTS = {
    "full": dict(vla=True, guides=True, images_on_demand=False),
    "no_vla": dict(vla=False, guides=True, images_on_demand=False),
    "no_guides": dict(vla=True, guides=False, images_on_demand=False),
    "no_vla_no_guides": dict(vla=False, guides=False, images_on_demand=False),
    "images_on_demand": dict(vla=True, guides=True, images_on_demand=True),
}
AUTO_CAMERAS = ("agentview", "robot0_eye_in_hand", "frontview")
#: Two arms: the scene and both wrists (RoboTwin's head, right and left cameras).
TWO_ARM_AUTO_CAMERAS = ("agentview", "robot0_eye_in_hand", "robot1_eye_in_hand")


def auto_cameras(n_arms: int, n_images: int) -> tuple[str, ...]:
    """The cameras the tool agent sees after every move."""
    return (TWO_ARM_AUTO_CAMERAS if n_arms > 1 else AUTO_CAMERAS)[:n_images]
INIT_TIMEOUT_S = 600.0
#: Endings that become `solved` when the benchmark's check holds at the end (see the module docstring).
SOLVABLE_ENDINGS = ("solved", "gave_up", "call_budget", "dollar_budget", "wall_clock", "context_overflow")

FINISH_TOOL = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": "End the episode: status 'done' if you believe the task is complete, 'stuck' if you give up.",
        "parameters": {
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["done", "stuck"]},
                "summary": {"type": "string", "description": "One or two sentences on what happened."},
            },
            "required": ["status", "summary"],
            "additionalProperties": False,
        },
    },
}
PYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run a Python code cell in the persistent robot runtime (`robo`, `np`, `math` are defined).",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run."}},
            "required": ["code"],
            "additionalProperties": False,
        },
    },
}


@dataclass
class EpisodeSpec:
    benchmark: str
    task: str
    seed: int
    agent: str
    ablation: str = "full"
    repeat: int = 0
    call_budget: int = 40
    wall_clock_s: float = 900.0
    context_window: int | None = None
    n_images: int = 3
    image_size: int = 256
    vla: str = "scripted"
    vla_failure_prob: float = 0.2
    extra: dict[str, Any] = field(default_factory=dict)
    """Backend-specific settings passed through to the runtime (openpi host/port, ...)."""
    config_hash: str = ""
    limits: RuntimeLimits | None = None
    """Resource limits of the runtime child (None: RuntimeLimits' defaults)."""
    stop_on_success: bool = False
    """End the episode at the first call after which the check holds (False: the paper's protocol, the
    planner ends it with `finish` and its calls after success are counted)."""
    vision: bool = True
    """Images reach the planner; False (the planner's `vision: false`): each is a text note, `withheld_note`."""
    tool_calls: str = "native"
    """How the planner's calls are written (its `tool_calls`), so a reply without one is told how to write it."""
    compact_at_tokens: int | None = None
    """A call whose prompt plus reply reaches this makes the next call a compaction (agents/compaction.py)."""
    max_dollars: float | None = None
    """End as dollar_budget before the next call would take the cost under `price` past this (agents/dollar_budget.py)."""
    price: Any = None
    """The price table (analysis.cost.PriceTable) max_dollars counts in."""


#: How a withheld image's note begins (the trace counts them by it).
WITHHELD_PREFIX = "[image withheld:"


def withheld_note(camera: str) -> str:
    """What a text-only planner gets in place of an image, in both agents' prompts (the image stays in the trace)."""
    return f"{WITHHELD_PREFIX} {camera} camera image not shown: this planner reads no images]"


def _count_withheld(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if isinstance(m.get("content"), list) for p in m["content"]
               if p.get("type") == "text" and p.get("text", "").startswith(WITHHELD_PREFIX))


def _count_images(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "image_url"
    )


def _image_message(text: str, images: list[tuple[str, bytes]], urls: dict[str, str], refs: dict[str, str],
                   vision: bool = True) -> dict:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for camera, png in images:
        url = data_url(png)
        parts.append({"type": "image_url", "image_url": {"url": url, "detail": "high"}} if vision
                     else {"type": "text", "text": withheld_note(camera)})
        urls[camera] = url
    return {"role": "user", "content": parts}


def run_episode(spec: EpisodeSpec, planner, out_dir: str) -> EpisodeRecord:
    """Run one episode with `planner` and write its trace to `out_dir`."""
    if spec.agent not in ("tool", "code"):
        raise ValueError(f"agent must be 'tool' or 'code', got {spec.agent!r}")
    if spec.ablation not in ABLATION_EFFECTS:
        raise ValueError(f"unknown ablation {spec.ablation!r}; known: {', '.join(ABLATION_EFFECTS)}")
    effects = ABLATION_EFFECTS[spec.ablation]
    spec = replace(spec, vision=getattr(planner, "vision", True), tool_calls=getattr(planner, "tool_calls", "native"))
    if effects["images_on_demand"] and spec.agent != "tool":
        raise ValueError("the images_on_demand ablation exists for the tool agent only")
    caps = ("vla",) if effects["vla"] else ()
    auto_images = spec.agent == "tool" and not effects["images_on_demand"]
    trace = TraceWriter(out_dir)
    started = time.time()
    t0 = time.monotonic()
    runtime = RuntimeClient(out_dir, spec.limits)
    runtime.deadline = t0 + INIT_TIMEOUT_S
    status, error = None, None
    calls: list[CallRecord] = []
    total = Usage()
    solved_at, last_success = None, False
    n_prims = n_acting = sim_steps = images_returned = 0
    messages: list[dict[str, Any]] = []
    image_refs: dict[str, str] = {}
    card: dict[str, Any] = {"suite": spec.task.split("/")[0], "instruction": "", "task_index": 0}
    sandbox: dict[str, Any] | None = None
    try:
        try:
            init = runtime.request(
                "init",
                {
                    "benchmark": spec.benchmark,
                    "task": spec.task,
                    "seed": spec.seed,
                    # The VLA stand-in's luck is keyed on the instance and repeat (and the agent under vla_luck: per_agent).
                    "repeat": spec.repeat,
                    "agent": spec.agent,
                    "capabilities": caps,
                    "guides": effects["guides"],
                    "image_size": spec.image_size,
                    "vla": spec.vla,
                    "vla_failure_prob": spec.vla_failure_prob,
                    # By the number of arms, which the runtime learns when it builds the scene.
                    "auto_cameras_by_arms": {n: auto_cameras(n, spec.n_images) for n in (1, 2)} if auto_images else {},
                    "initial_cameras": ("agentview",),
                    # The code agent's cell worker starts and confines itself with the scene, before the clock.
                    "cell_worker": spec.agent == "code",
                    **spec.extra,
                },
            )
        except CellbenchError:
            # An unknown task or a bad setting is the user's error, not an episode: leave no trace of one.
            runtime.close()
            trace.discard()
            raise
        card = init["card"]
        sandbox = init.get("sandbox")
        # The episode's wall clock starts once the scene is built (env construction is not the agent's time).
        runtime.start_clock(spec.wall_clock_s)
        tools, messages = _opening(spec, card, caps, effects, init["images"], image_refs, trace)
        budget = DollarBudget(spec.max_dollars, spec.price) if spec.max_dollars is not None else None
        for call_index in range(1, spec.call_budget + 1):
            if time.monotonic() >= runtime.deadline:
                # A reply that ran nothing (no call, finish refused, bad arguments) never asks the runtime,
                # whose requests are where the clock is otherwise read: without this a slow model that
                # writes no call would go on past its wall clock until the call budget.
                raise RuntimeTimeout("wall clock exhausted")
            if budget is not None and budget.next_would_pass():
                status, error = "dollar_budget", budget.reason()
                break
            compacting = compaction.due(spec.compact_at_tokens, calls, messages)
            images_in, withheld_in = _count_images(messages), _count_withheld(messages)
            sources = input_sources(messages, tools)  # the prompt as sent, before the reply joins it
            t_call = time.time()
            try:
                reply: PlannerReply = (compaction.ask(planner, messages, tools) if compacting
                                       else planner.next(messages, tools))
            except CellbenchError:
                # A setting the endpoint cannot serve (PlannerConfigError): the user's error, not an episode.
                runtime.close()
                trace.discard()
                raise
            except ContextOverflow as e:
                status, error = "context_overflow", str(e)
                break
            except RequestRejected as e:
                # The conversation itself was refused (a 4xx that is not auth or rate limit): rerunning
                # would meet the same refusal, so it is an ending, not an infrastructure failure.
                status, error = "error", str(e)
                calls.append(_failed_call(call_index, t_call, images_in, e))
                trace.call(calls[-1])
                break
            except PlannerError as e:
                status, error = "planner_error", str(e)
                calls.append(_failed_call(call_index, t_call, images_in, e))
                trace.call(calls[-1])
                break
            total = total + reply.usage
            if budget is not None:
                budget.add(reply.usage)
            if spec.context_window and reply.usage.input_tokens > spec.context_window:
                # The provider answered and billed this call: on record, its action not run.
                status, error = "context_overflow", f"prompt of {reply.usage.input_tokens} tokens exceeds {spec.context_window}"
                rec = _unexecuted_call(call_index, t_call, images_in, reply, "ContextOverflow", error)
                rec.success_after, rec.input_sources = last_success, sources
                calls.append(rec)
                trace.call(rec)
                break
            interrupted = None
            try:
                if compacting:  # the summary replaces the conversation; nothing runs in the simulator
                    compaction.apply(reply, messages, trace, call_index, image_refs)
                    rec, result = _unexecuted_call(call_index, t_call, images_in, reply, None, None), None
                    rec.action_kind = "compaction"
                else:
                    rec, result = _act(spec, reply, messages, runtime, trace, call_index, image_refs, tools)
            except (RuntimeTimeout, RuntimeDied) as e:
                # The LLM call was made and billed: keep its row, so calls.jsonl sums to the episode totals.
                if not hasattr(e, "call_record"):
                    raise
                rec, result, interrupted = e.call_record, None, e
                rec.exception = rec.exception or type(e).__name__
                if runtime.proc.poll() is not None and runtime.solved_seen():
                    last_success = True  # the check held inside the request the child was killed in
            rec.started_at, rec.latency_s, rec.images_in_prompt = t_call, reply.latency_s, images_in
            rec.usage_source, rec.raw_usage, rec.retries = reply.usage_source, reply.raw_usage, reply.retries
            rec.retry_errors = list(reply.retry_errors) or None
            rec.input_sources = sources
            rec.images_withheld = withheld_in
            for k in ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens"):
                setattr(rec, k, getattr(reply.usage, k))
            if result is not None:
                last_success = result.success
                for row in result.primitives:
                    trace.primitive(PrimitiveRecord(call_index=call_index, **row))
                    n_prims += 1
                    n_acting += int(row["acting"])
                    sim_steps += row["sim_steps"]
                images_returned += len(result.images)
            rec.success_after = last_success
            calls.append(rec)
            trace.call(rec)
            if interrupted is not None:
                raise interrupted
            if last_success and solved_at is None:
                solved_at = call_index
            if last_success and spec.stop_on_success:
                status = "solved"
                break
            if rec.action_kind == "finish":
                status = "gave_up"
                break
        else:
            status = "call_budget"
    except RuntimeTimeout as e:
        status, error = "wall_clock", str(e)
    except RuntimeDied as e:
        status, error = "error", str(e)
    final_success, checked = last_success, False
    if runtime.proc.poll() is None:  # the simulator is alive (a wall clock between calls, a rejected request...)
        try:
            runtime.deadline = time.monotonic() + 60
            final_success, checked = bool(runtime.request("success")), True
        except (RuntimeTimeout, RuntimeDied):
            pass
    if not checked and runtime.solved_seen():
        # Killed mid-request (the clock during a cell or a rollout): the check had held after an acting
        # primitive, and the success guard let nothing act after it.
        final_success = True
    runtime.close()
    if final_success and solved_at is None and calls:
        solved_at = calls[-1].call_index
    if final_success and status in SOLVABLE_ENDINGS:
        status = "solved"
    trace.transcript(messages, image_refs)
    from agents.provenance import code_version, package_versions

    record = EpisodeRecord(
        benchmark=spec.benchmark,
        suite=card.get("suite", spec.task.split("/")[0]),
        task=spec.task,
        seed=spec.seed,
        agent=spec.agent,
        ablation=spec.ablation,
        planner=getattr(planner, "name", "?"),
        model=getattr(planner, "model", "?"),
        instruction=card.get("instruction", ""),
        success=bool(final_success),
        solved_at_call=solved_at,
        status=status or "error",
        n_calls=len(calls),
        n_compactions=sum(c.action_kind == "compaction" for c in calls),
        input_tokens=total.input_tokens,
        cached_input_tokens=total.cached_input_tokens,
        cache_write_tokens=total.cache_write_tokens,
        output_tokens=total.output_tokens,
        reasoning_tokens=total.reasoning_tokens,
        usage_source=calls[0].usage_source if calls else "none",
        images_in_prompts=sum(c.images_in_prompt for c in calls),
        images_returned=images_returned,
        n_primitives=n_prims,
        n_acting=n_acting,
        sim_steps=sim_steps,
        wall_time_s=round(time.monotonic() - t0, 3),
        started_at=started,
        finished_at=time.time(),
        call_budget=spec.call_budget,
        wall_clock_limit_s=spec.wall_clock_s,
        config_hash=spec.config_hash,
        code_version=code_version(),
        package_versions=package_versions(),
        repeat=spec.repeat,
        error=error,
        sandbox=sandbox,
        cell_worker_restarts=sum(1 for c in calls if c.exception == RESTART_EXCEPTION),
    )
    trace.finish(record)
    return record


def _opening(spec, card, caps, effects, first_images, image_refs, trace):
    """System prompt, task message (with the first images) and tool list of the chosen interface."""
    system, tools, task_text = render_prompt(spec, card, caps, effects)
    urls: dict[str, str] = {}
    opening = _image_message(task_text, first_images, urls, image_refs, spec.vision)
    for camera, png in first_images:
        image_refs[image_key(urls[camera])] = trace.image(0, camera, png)
    return tools, [{"role": "system", "content": system}, opening]


def render_prompt(spec: EpisodeSpec, card: dict[str, Any], caps, effects) -> tuple[str, list[dict[str, Any]], str]:
    """(system prompt, tools, task text) of `spec.agent` for a task card; no scene needed.

    Every fact that is not interface-specific reaches both system prompts
    from one source, `robots.api_docs.shared_facts`.
    """
    from agents.feedback import TASK_SUCCESS_KEY, success_line
    from robots.api_docs import api_reference, conventions, tool_schemas

    prompts = load_prompts(spec.agent)
    if len(card.get("arms", ("right",))) > 1:
        from robots.robot import TWO_ARMS

        caps = tuple(caps) + (TWO_ARMS,)  # the `arm` argument and move_both appear in both views
    objects = ", ".join(card["objects"])
    cameras = ", ".join(card["cameras"])
    if spec.agent == "tool":
        if effects["images_on_demand"]:
            note = prompts["images_on_demand"]
        else:
            cameras_after_move = auto_cameras(len(card.get("arms", ("right",))), spec.n_images)
            note = prompts["images_after_move"].format(n_images=spec.n_images, cameras=", ".join(cameras_after_move))
        # Name the VLA only where it exists: a no_vla prompt must not promise a tool it lacks.
        acting_tools = "moves, gripper, VLA" if "vla" in caps else "moves, gripper"
        system = prompts["system"].format(images_note=note, success_key=TASK_SUCCESS_KEY, conventions=conventions(),
                                          acting_tools=acting_tools)
        tools = tool_schemas(caps, include_show=effects["images_on_demand"]) + [FINISH_TOOL]
    else:
        system = prompts["system"].format(api_reference=api_reference(caps), success_line=success_line(True))
        tools = [PYTHON_TOOL, FINISH_TOOL]
    if card.get("guide"):
        system += "\n\n# Operating guide\n\n" + card["guide"]
    task_text = prompts["task"].format(instruction=card["instruction"], objects=objects, cameras=cameras)
    return system, tools, task_text


def _act(spec, reply, messages, runtime, trace, call_index, image_refs, tools):
    """Execute the first tool call of a reply; answer every tool call so the conversation stays valid."""
    # "" and not None: OpenAI answers 400 to an assistant message with null content and no tool call.
    assistant: dict[str, Any] = {"role": "assistant", "content": reply.text or ""}
    if reply.tool_calls:
        assistant["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in reply.tool_calls
        ]
    messages.append(assistant)
    rec = CallRecord(
        call_index=call_index, started_at=0.0, latency_s=0.0, input_tokens=0, cached_input_tokens=0,
        cache_write_tokens=0, output_tokens=0, reasoning_tokens=0, usage_source="", raw_usage={},
        images_in_prompt=0, images_returned=0, action_kind="none", tool_name=None, tool_args=None,
        cell_hash=None, n_primitives=0, n_acting=0, exception=None, success_after=False,
    )
    rec.tool_calls_in_reply = len(reply.tool_calls)
    if not reply.tool_calls:
        if reply.truncated:
            rec.exception = "TruncatedReply"
        text = TRUNCATED if reply.truncated else no_call_message(reply.text, spec.tool_calls, tools)
        messages.append({"role": "user", "content": text})
        return rec, None
    call, extra = reply.tool_calls[0], reply.tool_calls[1:]
    rec.tool_call_source = call.source
    result: ActionResult | None = None

    def request(*a):
        try:
            return runtime.request(*a)
        except (RuntimeTimeout, RuntimeDied) as e:
            e.call_record = rec  # type: ignore[attr-defined]  # run_episode still writes this call's row
            raise
    rec.tool_name = call.name
    try:
        args = json.loads(call.arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError("arguments must be a JSON object")
    except (json.JSONDecodeError, ValueError) as e:
        rec.action_kind, rec.exception = "malformed", "TruncatedReply" if reply.truncated else "JSONDecodeError"
        text = TRUNCATED if reply.truncated else f"Error: the arguments of {call.name} are not a valid JSON object: {e}"
        args = None
    else:
        rec.tool_args = args
        text = ""
    if args is not None:
        if call.name not in tool_names(tools):
            # Checked here for both agents against the list each was given, not by the robot: a tool agent
            # in `full` must not reach `show` (a primitive it is not offered) or learn of it from an error.
            rec.action_kind, rec.exception = "malformed", "UnknownTool"
            text = unknown_tool(call.name, tool_names(tools))
        elif call.name == "finish":
            rec.action_kind = "finish"
            text = "Episode finished."
        elif spec.agent == "code" and call.name == "python":
            code = args.get("code")
            if not isinstance(code, str):
                rec.action_kind, rec.exception, text = "malformed", "TypeError", "Error: python needs a string argument 'code'."
            else:
                rec.action_kind = "cell"
                rec.cell_hash = hashlib.sha256(code.encode()).hexdigest()
                trace.cell(call_index, code)
                result = request("exec_cell", code)
                text = result.text or "(no output)"
        elif spec.agent == "tool" and call.name != "python":
            rec.action_kind = "tool"
            result = request("call_tool", call.name, args)
            # Bad arguments are a malformed call; a failure inside the robot stack is the primitive's result.
            rec.action_kind = "malformed" if result.exception in ("ValueError", "TypeError") else "tool"
            text = result.text
        else:
            rec.action_kind, rec.exception = "malformed", "UnknownTool"
            text = unknown_tool(call.name, tool_names(tools))
    if result is not None:
        rec.exception = rec.exception or result.exception
        rec.n_primitives = len(result.primitives)
        rec.n_acting = sum(1 for r in result.primitives if r["acting"])
        rec.images_returned = len(result.images)
        rec.left_api = result.left_api
    messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    for other in extra:
        messages.append({"role": "tool", "tool_call_id": other.id, "content": "Not executed: one tool call per reply."})
    if result is not None and result.images:
        urls: dict[str, str] = {}
        label = "Images you requested:" if spec.agent == "code" or not any(r["acting"] for r in result.primitives) else "Camera images after the move:"
        messages.append(_image_message(label, result.images, urls, image_refs, spec.vision))
        for camera, png in result.images:
            image_refs[image_key(data_url(png))] = trace.image(call_index, camera, png)
    return rec, result


def _unexecuted_call(call_index: int, t_call: float, images_in: int, reply: PlannerReply, exception: str,
                     error: str) -> CallRecord:
    """The row of a call the provider answered (and billed) whose action the episode did not run."""
    call = reply.tool_calls[0] if reply.tool_calls else None
    return CallRecord(
        call_index=call_index, started_at=t_call, latency_s=reply.latency_s, images_in_prompt=images_in,
        usage_source=reply.usage_source, raw_usage=reply.raw_usage, images_returned=0, action_kind="none",
        tool_name=call.name if call else None, tool_args=None, cell_hash=None, n_primitives=0, n_acting=0,
        exception=exception, success_after=False, retries=reply.retries, error=error,
        retry_errors=list(reply.retry_errors) or None, tool_calls_in_reply=len(reply.tool_calls),
        **{k: getattr(reply.usage, k) for k in ("input_tokens", "cached_input_tokens", "cache_write_tokens",
                                                 "output_tokens", "reasoning_tokens")},
    )


def _failed_call(call_index: int, t_call: float, images_in: int, e: PlannerError) -> CallRecord:
    return CallRecord(
        call_index=call_index, started_at=t_call, latency_s=time.time() - t_call, input_tokens=0,
        cached_input_tokens=0, cache_write_tokens=0, output_tokens=0, reasoning_tokens=0, usage_source="provider",
        raw_usage={}, images_in_prompt=images_in, images_returned=0, action_kind="none", tool_name=None,
        tool_args=None, cell_hash=None, n_primitives=0, n_acting=0, exception=type(e).__name__, success_after=False,
        retries=e.retries, error=str(e), retry_errors=list(e.errors) or None,
    )
