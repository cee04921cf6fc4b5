"""Endings the provider decides, over the loopback OpenAI-compatible server (tests/openai_server.py).

* A 4xx that the conversation causes (a bad request; not a key, a rate limit
  or a model name) is an ending: `RequestRejected`, the episode ends as
  `error` with the provider's message (rerunning would send the same
  conversation), not `planner_error` (which reruns forever).
* A reply with no text and no tool call goes back into the conversation as
  content "" - the server, like OpenAI, answers 400 to null content.
"""
from __future__ import annotations

import json

import pytest

from agents.episode import EpisodeSpec, run_episode
from agents.planners.base import PlannerError, RequestRejected
from agents.planners.openai_planner import OpenAIPlanner
from agents.schema import validate_trace
from openai_server import Fault, Reply, serve, tool_call

BAD_IMAGE = "Invalid 'messages[4].content[1].image_url': the image is not a valid PNG."


def _planner(server, **kw) -> OpenAIPlanner:
    return OpenAIPlanner(model="cellbench-test-model", base_url=server.base_url, api_key="sk-test",
                         sleep=lambda s: None, **kw)


def test_a_bad_request_is_rejected_at_once_with_the_providers_message():
    with serve(faults=[Fault.error(400, BAD_IMAGE, "invalid_image")]) as server:
        planner = _planner(server, max_retries=3)
        with pytest.raises(RequestRejected) as err:
            planner.next([{"role": "user", "content": "hi"}], [])
        assert len(server.requests) == 1  # not retried
    assert BAD_IMAGE in str(err.value)


@pytest.mark.parametrize("fault", [Fault.error(401, "Incorrect API key provided.", "invalid_api_key"),
                                   Fault.error(403, "Project does not have access.", "forbidden"),
                                   Fault.error(404, "The model does not exist.", "model_not_found"),
                                   Fault.rate_limit()],
                         ids=["401", "403", "404", "429"])
def test_keys_rate_limits_and_model_names_stay_planner_errors(fault):
    with serve(faults=[fault, fault]) as server:
        with pytest.raises(PlannerError) as err:
            _planner(server, max_retries=1).next([{"role": "user", "content": "hi"}], [])
    assert not isinstance(err.value, RequestRejected)


class Script:
    """Plays the model: an empty reply, a state call, then a request the provider refuses."""

    def __init__(self):
        self.n = 0

    def __call__(self, body):
        self.n += 1
        if self.n == 1:
            return Reply(content=None)  # no text, no tool call
        if self.n == 2:
            return tool_call("state", {})
        return Fault.error(400, BAD_IMAGE, "invalid_image")


def test_a_rejected_conversation_ends_the_episode_as_error_and_empty_replies_go_back_as_text(tmp_path):
    with serve(Script()) as server:
        planner = _planner(server, max_retries=2)
        try:
            spec = EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent="tool",
                               ablation="no_vla_no_guides", image_size=128, n_images=1, call_budget=6)
            rec = run_episode(spec, planner, str(tmp_path))
        finally:
            planner.close()
        requests = list(server.requests)
    # The empty reply went back as "", which the server accepted (null content is a 400).
    assistant = [m for m in requests[1].messages if m["role"] == "assistant"]
    assert assistant[0]["content"] == "" and "tool_calls" not in assistant[0]
    assert rec.status == "error" and BAD_IMAGE in rec.error, (rec.status, rec.error)
    assert len(requests) == 3  # the refusal is not retried
    rows = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [r["action_kind"] for r in rows] == ["none", "tool", "none"]
    assert rows[-1]["exception"] == "RequestRejected" and BAD_IMAGE in rows[-1]["error"]
    # A result, not an infrastructure failure: the trace is complete, nothing left for a rerun.
    assert (tmp_path / "episode.json").exists() and not (tmp_path / "planner_error.json").exists()
    assert validate_trace(tmp_path) == []
