"""`cellbench serve`: the scripted planner behind a real OpenAI-compatible HTTP endpoint.

The main test runs the same LIBERO-PRO instance twice at this commit, once
with the in-process `scripted` planner and once with the `openai` planner
(the real SDK, HTTP, retries) pointed at the rehearsal server, and compares
the two traces call for call and primitive for primitive.  Faster tests
check the endpoint's seams on the opening of a real conversation: injected
failures are retried and counted, latency is held, usage is the estimator's
and marked so, and a conversation the scripted planner would not have
written is refused with the message that differs.
"""
from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from agents.episode import ABLATION_EFFECTS, EpisodeSpec, _opening, run_episode
from agents.planners.base import PlannerError
from agents.planners.openai_planner import OpenAIPlanner
from agents.planners.openai_responses_planner import OpenAIResponsesPlanner
from agents.planners.scripted import ScriptedPlanner
from agents.serve import FaultPlan, make_server

TASK = "libero_spatial_swap/0"


@contextmanager
def rehearsal(**kw):
    server = make_server("127.0.0.1", 0, **kw)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def openai_planner(server, api: str = "chat", **kw) -> OpenAIPlanner:
    cls = OpenAIResponsesPlanner if api == "responses" else OpenAIPlanner
    return cls(model="scripted-v1", base_url=server.base_url, api_key="sk-rehearsal", **kw)


def opening(agent: str, ablation: str = "no_vla"):
    """The tools and first two messages an episode of `agent` sends (a LIBERO card, no image)."""
    spec = EpisodeSpec(benchmark="libero_pro", task=TASK, seed=0, agent=agent, ablation=ablation)
    effects = ABLATION_EFFECTS[ablation]
    card = {"suite": "libero_spatial_swap", "task_index": 0, "arms": ("right",), "guide": None,
            "instruction": "pick up the black bowl between the plate and the ramekin and place it on the plate",
            "objects": ("akita_black_bowl_1", "akita_black_bowl_2", "cookies_1", "glazed_rim_porcelain_ramekin_1",
                        "plate_1", "wooden_cabinet_1", "flat_stove_1"),
            "cameras": ("agentview", "robot0_eye_in_hand", "frontview")}
    caps = ("vla",) if effects["vla"] else ()
    return _opening(spec, card, caps, effects, [], {}, None)


def _rows(d: Path, name: str) -> list[dict]:
    return [json.loads(x) for x in (d / name).read_text().splitlines()]


CALL_KEYS = ("call_index", "action_kind", "tool_name", "tool_args", "cell_hash", "n_primitives", "n_acting",
             "exception", "success_after", "input_tokens", "cached_input_tokens", "output_tokens")
PRIMITIVE_KEYS = ("call_index", "seq", "name", "args", "acting", "ok", "result", "sim_steps")


@pytest.mark.parametrize("agent,faults,max_open,api", [
    # Tool calling, with a third of the requests answered 429/500/503 first: retries change nothing.
    pytest.param("tool", FaultPlan(fail_rate=0.3, retry_after_s=0.0, seed=3), 256, "chat", marks=pytest.mark.slow),
    # Code cells, and no conversation kept: every request is replayed from its start.
    ("code", FaultPlan(), 0, "chat"),
    # The Responses API (openai-responses), translated back to the conversation the episode keeps.
    pytest.param("code", FaultPlan(), 256, "responses", marks=pytest.mark.slow),
])
def test_episode_through_serve_equals_the_in_process_scripted_planner(tmp_path, agent, faults, max_open, api):
    spec = EpisodeSpec(benchmark="libero_pro", task=TASK, seed=0, agent=agent, ablation="no_vla")
    local = run_episode(spec, ScriptedPlanner(), str(tmp_path / "local"))
    with rehearsal(faults=faults, max_open=max_open) as server:
        planner = openai_planner(server, api, max_retries=12, backoff_base_s=0.01, backoff_max_s=0.05)
        try:
            served = run_episode(spec, planner, str(tmp_path / "served"))
        finally:
            planner.close()
        counts = dict(server.counts)
        replays = server.endpoint.replays
    assert local.status == served.status and local.success == served.success, (local, served)
    assert local.n_calls == served.n_calls >= 3
    assert (local.solved_at_call, local.n_primitives, local.n_acting, local.sim_steps) == \
        (served.solved_at_call, served.n_primitives, served.n_acting, served.sim_steps)
    assert (local.input_tokens, local.cached_input_tokens, local.output_tokens) == \
        (served.input_tokens, served.cached_input_tokens, served.output_tokens)
    a, b = _rows(tmp_path / "local", "calls.jsonl"), _rows(tmp_path / "served", "calls.jsonl")
    assert [{k: c[k] for k in CALL_KEYS} for c in a] == [{k: c[k] for k in CALL_KEYS} for c in b]
    pa, pb = _rows(tmp_path / "local", "primitives.jsonl"), _rows(tmp_path / "served", "primitives.jsonl")
    assert [{k: p[k] for k in PRIMITIVE_KEYS} for p in pa] == [{k: p[k] for k in PRIMITIVE_KEYS} for p in pb]
    # The served trace says where its numbers came from.
    assert served.planner == planner.name and served.usage_source == "estimated"
    assert all(c["usage_source"] == "estimated" and c["raw_usage"]["estimated"] is True for c in b)
    # Every injected fault was retried, and the trace counts each.
    assert sum(c["retries"] for c in b) == counts["faults"]
    assert counts["replies"] == served.n_calls
    if faults.fail_rate:
        assert counts["faults"] > 0
    if max_open == 0:
        assert replays == served.n_calls - 1  # every request after the first replays the conversation


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_reply_and_estimated_usage_equal_the_in_process_planner(api):
    for agent in ("tool", "code"):
        tools, messages = opening(agent)
        want = ScriptedPlanner().next(messages, tools)
        with rehearsal() as server:
            planner = openai_planner(server, api, max_retries=0)
            got = planner.next(messages, tools)
            planner.close()
        assert [(c.name, c.arguments) for c in got.tool_calls] == [(c.name, c.arguments) for c in want.tool_calls]
        assert got.text == want.text
        assert got.usage == want.usage
        assert got.usage_source == "estimated" and got.raw_usage["estimated"] is True


def test_injected_failures_are_retried_with_retry_after():
    tools, messages = opening("tool")
    want = ScriptedPlanner().next(messages, tools)
    slept: list[float] = []
    with rehearsal(faults=FaultPlan(fail_rate=0.6, fail_statuses=(429,), retry_after_s=0.25, seed=1)) as server:
        planner = openai_planner(server, max_retries=30, sleep=slept.append)
        got = planner.next(messages, tools)
        planner.close()
        faults = server.counts["faults"]
    assert faults >= 1 and got.retries == faults == len(slept)
    assert all("429" in e for e in got.retry_errors)
    assert slept == [0.25] * faults  # the server's Retry-After, honoured
    assert [(c.name, c.arguments) for c in got.tool_calls] == [(c.name, c.arguments) for c in want.tool_calls]


def test_latency_is_the_time_from_request_to_reply():
    tools, messages = opening("code")
    with rehearsal(faults=FaultPlan(latency_s=0.6, jitter_s=0.2, seed=0)) as server:
        planner = openai_planner(server, max_retries=0)
        t = time.monotonic()
        planner.next(messages, tools)
        took = time.monotonic() - t
        planner.close()
    assert took >= 0.4


def test_a_conversation_the_planner_would_not_write_is_refused():
    tools, messages = opening("tool")
    first = ScriptedPlanner().next(messages, tools)
    wrong = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "finish", "arguments": '{"status": "stuck"}'}}]}
    convo = messages + [wrong, {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]
    with rehearsal() as server:
        planner = openai_planner(server, max_retries=3)
        with pytest.raises(PlannerError, match="message 2 .*assistant"):
            planner.next(convo, tools)
        planner.close()
        assert server.counts["refused"] == 1  # a 400 is not retried
    assert first.tool_calls[0].name != "finish"


def test_bad_settings_name_the_flag(capsys):
    from agents.cli import main

    assert main(["serve", "--fail-rate", "1.5"]) == 2
    assert "--fail-rate" in capsys.readouterr().err
    assert main(["serve", "--fail-statuses", "200"]) == 2
    assert "--fail-statuses" in capsys.readouterr().err
