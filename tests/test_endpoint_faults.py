"""The openai planner through whole episodes against a loopback endpoint that misbehaves.

The loopback server (tests/openai_server.py) plays the model with the
scripted planner's cells (as in test_agents_openai_episode.py) and serves
injected faults first: rate limits, server errors, a hang past the client's
timeout, a dropped connection, a body that is not JSON, a response without
choices.  One episode survives them all and records every retry per call;
another, over the CLI, meets an endpoint that stops answering for good and
ends in `planner_error`: exit 3, no episode.json, listed by the report and
left out of its success rates.  Two scene builds.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agents.episode import EpisodeSpec, run_episode
from agents.planners.openai_planner import OpenAIPlanner
from agents.schema import validate_trace
from openai_server import Fault, serve
from test_agents_openai_episode import CellResponder
from trace_factory import write_config, write_episode

CLI = str(Path(sys.executable).parent / "cellbench")
TASK = "libero_spatial_swap/0"
#: Faults served before the LLM call of that number (one per attempt, in order).
SCHEDULE = {
    1: ["429", "500"],
    2: [Fault.hang(5.0)],
    3: ["garbage", "drop", "no_choices", "502"],
}
RETRY_SETTINGS = dict(max_retries=6, timeout_s=1.0, backoff_base_s=0.01, backoff_max_s=0.05)


class Scheduled:
    """Queues the scheduled faults on the server before each LLM call of the wrapped planner."""

    def __init__(self, planner: OpenAIPlanner, server, schedule: dict[int, list]):
        self.planner, self.server, self.schedule = planner, server, schedule
        self.name, self.model = planner.name, planner.model
        self.n = 0

    def next(self, messages, tools):
        self.n += 1
        self.server.add_faults(*self.schedule.get(self.n, []))
        return self.planner.next(messages, tools)


@pytest.fixture(scope="module")
def faulty_episode(tmp_path_factory):
    out = tmp_path_factory.mktemp("faulty_episode")
    responder = CellResponder()
    with serve(responder) as server:
        planner = OpenAIPlanner(model="cellbench-test-model", base_url=server.base_url, api_key="sk-test",
                                **RETRY_SETTINGS)
        try:
            spec = EpisodeSpec(benchmark="libero_pro", task=TASK, seed=0, agent="code",
                               ablation="no_vla_no_guides", call_budget=8)
            rec = run_episode(spec, Scheduled(planner, server, SCHEDULE), str(out))
        finally:
            planner.close()
        assert not server.responder_errors, server.responder_errors[0]
        faulted = sum(1 for r in server.requests if r.fault is not None)
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    return rec, out, calls, responder.usages, faulted


def test_transient_faults_are_retried_and_the_episode_finishes(faulty_episode):
    rec, out, calls, usages, faulted = faulty_episode
    assert rec.status == "solved" and rec.success, rec
    assert faulted == sum(len(f) for f in SCHEDULE.values())
    assert validate_trace(out) == []


def test_each_call_records_its_retries_and_what_they_met(faulty_episode):
    _, _, calls, _, _ = faulty_episode
    assert [c["retries"] for c in calls[:3]] == [2, 1, 4]  # the episode solves at call 3
    assert all(c["retries"] == 0 and c["retry_errors"] is None for c in calls[3:])
    first, second, third = (c["retry_errors"] for c in calls[:3])
    assert first[0].startswith("RateLimitError 429") and first[1].startswith("InternalServerError 500")
    assert second == ["APITimeoutError: Request timed out."]
    assert "JSON" in third[0] or "not JSON" in third[0], third[0]
    assert third[1].startswith("APIConnectionError")
    assert third[2] == "_MalformedResponse: response has no choices"
    assert third[3].startswith("InternalServerError 502")
    assert all(c["error"] is None and c["exception"] != "PlannerError" for c in calls)


def test_only_answered_calls_are_billed(faulty_episode):
    rec, _, calls, usages, _ = faulty_episode
    assert [c["input_tokens"] for c in calls] == [u["prompt_tokens"] for u in usages]
    assert rec.input_tokens == sum(u["prompt_tokens"] for u in usages)


class DiesAfter:
    """Answers like CellResponder for `n` calls, then only with 503s."""

    def __init__(self, n: int):
        self.cells, self.n = CellResponder(), n

    def __call__(self, body):
        if len(self.cells.usages) >= self.n:
            return Fault.server_error(503)
        return self.cells(body)


@pytest.fixture(scope="module")
def planner_error_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("planner_error")
    trace = root / "episodes" / "libero_pro" / "no_vla_no_guides" / "code" / "libero_spatial_swap" / "0" / "seed0"
    config = yaml.safe_load(write_config(root / "base.yaml").read_text())
    with serve(DiesAfter(2)) as server:
        config["planner"] = {"name": "openai", "model": "cellbench-test-model", "base_url": server.base_url,
                             "max_retries": 2, "timeout_s": 5, "backoff_base_s": 0.01, "backoff_max_s": 0.02}
        (root / "config.yaml").write_text(yaml.safe_dump(config))
        proc = subprocess.run(
            [CLI, "play", "--task", TASK, "--seed", "0", "--agent", "code", "--ablation", "no_vla_no_guides",
             "--config", str(root / "config.yaml"), "--out", str(trace)],
            env={**os.environ, "OPENAI_API_KEY": "sk-test"}, capture_output=True, text=True,
            timeout=600)
        n_requests = len(server.requests)
    return root, trace, proc, n_requests


def test_an_endpoint_that_never_answers_ends_in_planner_error(planner_error_run):
    _, trace, proc, n_requests = planner_error_run
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "planner_error" in proc.stdout
    assert "the next `snakemake` runs it again" in proc.stderr and "InternalServerError 503" in proc.stderr
    assert not (trace / "episode.json").exists()  # incomplete: the workflow runs it again
    record = json.loads((trace / "planner_error.json").read_text())
    assert record["status"] == "planner_error" and record["n_calls"] == 3 and not record["success"]
    calls = [json.loads(line) for line in (trace / "calls.jsonl").read_text().splitlines()]
    assert [c["retries"] for c in calls] == [0, 0, 2]
    assert calls[-1]["exception"] == "PlannerError" and "503" in calls[-1]["error"]
    assert len(calls[-1]["retry_errors"]) == 3 and n_requests == 2 + 3
    assert validate_trace(trace) == []


def test_the_report_lists_planner_errors_and_leaves_them_out_of_success(planner_error_run):
    root, trace, _, _ = planner_error_run
    results = root / "episodes"
    # Its partner, and one complete instance to compare.
    common = dict(ablation="no_vla_no_guides", task=TASK)
    write_episode(results, agent="tool", seed=0, success=True, solved_at_call=1, **common)
    for agent in ("tool", "code"):
        write_episode(results, agent=agent, seed=1, success=agent == "code", solved_at_call=1 if agent == "code"
                      else None, **common)
    db, tables = root / "traces.duckdb", root / "tables"
    for args in (["ingest", "--results", str(results), "--db", str(db)],
                 ["report", "--db", str(db), "--out", str(tables), "--config", str(root / "base.yaml")]):
        proc = subprocess.run([CLI, *args], cwd=root, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    with open(tables / "planner_errors.csv") as f:
        [listed] = list(csv.DictReader(f))
    assert listed["trace_dir"] == str(trace) and "503" in listed["error"]
    with open(tables / "success.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["comparison"] == "no_vla_no_guides"]
    assert rows and {r["n_instances"] for r in rows} == {"1"}  # seed 0 has no tool result to pair
