"""Context compaction (episode.compact_at_tokens) and the dollar budget (episode.max_dollars).

Unit checks of the cut and the digest, then real episodes: a tool-calling
episode through the openai planner against the loopback server, whose
prompts pass the threshold, compacts (a recorded, counted call), goes on from
the summary and solves; the scripted planner does the same offline; and an
episode stops as dollar_budget before its next call would pass max_dollars.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents import compaction
from agents.dollar_budget import DollarBudget
from agents.episode import EpisodeSpec, run_episode
from agents.planners.openai_planner import OpenAIPlanner
from agents.planners.scripted import ScriptedPlanner, make_mind
from agents.records import CallRecord, Usage
from agents.schema import validate_trace
from analysis.cost import PriceTable
from openai_server import serve, text_reply, tool_call

ASTRA = PriceTable("astra", input=10.0, cached_input=1.0, cache_write=12.5, output=50.0,
                   long_context_threshold=272000, long_context_input_multiplier=2.0, long_context_output_multiplier=1.5)


def _conversation(n_exchanges: int) -> list[dict]:
    messages = [{"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "Task: t"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}]
    for i in range(n_exchanges):
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "move_to", "arguments": json.dumps({"x": i})}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"moved to {i}\n(details)"},
            {"role": "user", "content": [{"type": "text", "text": "Camera images after the move:"},
                                         {"type": "image_url", "image_url": {"url": f"data:image/png;base64,B{i}"}}]},
        ]
    return messages


def _row(i: int, tokens: int, kind: str = "tool") -> CallRecord:
    return CallRecord(call_index=i, started_at=0, latency_s=0, input_tokens=tokens, cached_input_tokens=0,
                      cache_write_tokens=0, output_tokens=100, reasoning_tokens=0, usage_source="provider",
                      raw_usage={}, images_in_prompt=0, images_returned=0, action_kind=kind, tool_name=None,
                      tool_args=None, cell_hash=None, n_primitives=0, n_acting=0, exception=None, success_after=False)


class _Trace:
    def __init__(self):
        self.saved = {}

    def transcript(self, messages, image_refs, name="transcript.json"):
        self.saved[name] = [dict(m) for m in messages]


def test_the_cut_keeps_system_task_summary_and_the_newest_exchange():
    messages = _conversation(3)
    system, task, newest = messages[0], messages[1], messages[-3:]
    trace = _Trace()
    compaction.apply(text_reply_like("we moved three times"), messages, trace, 7, {})
    assert messages[0] is system and messages[1] is task  # same objects: the episode's identity survives
    assert messages[2] == {"role": "user", "content": compaction.SUMMARY_HEADER + "we moved three times"}
    assert messages[3:] == newest  # the result the planner acts on next, its images included
    assert len(trace.saved["transcript_before_compaction_007.json"]) == 11


def text_reply_like(text):
    from agents.planners.base import PlannerReply

    return PlannerReply(text=text, tool_calls=[], usage=Usage(), usage_source="provider")


def test_due_only_past_the_threshold_with_something_to_summarise():
    messages = _conversation(2)
    assert compaction.due(1000, [_row(1, 950)], messages)  # 950 + 100 output >= 1000
    assert not compaction.due(1100, [_row(1, 950)], messages)
    assert not compaction.due(None, [_row(1, 10**6)], messages)
    assert not compaction.due(1000, [_row(1, 950, "compaction")], messages)  # one at a time
    assert not compaction.due(1000, [_row(1, 950)], _conversation(1))  # only the newest exchange: nothing to cut


def test_digest_is_deterministic_and_names_every_action():
    messages = _conversation(2)
    text = compaction.digest(messages)
    assert text == compaction.digest(_conversation(2))
    assert '- move_to {"x": 0} -> moved to 0' in text and '- move_to {"x": 1} -> moved to 1' in text
    compaction.apply(text_reply_like(text), messages, _Trace(), 3, {})
    assert text in compaction.digest(messages)  # an earlier summary is carried into the next


def test_dollar_budget_prices_calls_with_the_reports_formula():
    budget = DollarBudget(0.05, ASTRA)
    budget.add(Usage(input_tokens=3000, cached_input_tokens=1000, output_tokens=200))
    # (2000 x 10 + 1000 x 1 + 200 x 50) / 1e6 = 0.031
    assert budget.spent == pytest.approx(0.031) and budget.next_would_pass()  # 0.031 + 0.031 > 0.05
    assert DollarBudget(1.0, ASTRA).dollars(Usage(input_tokens=300000, output_tokens=100)) == \
        pytest.approx((300000 * 10 * 2 + 100 * 50 * 1.5) / 1e6)  # the 272k tier: the whole call x2 / x1.5


# -- episodes ---------------------------------------------------------------------------------

class CompactingModel:
    """The model behind the chat endpoint: the scripted tool mind, a summary when asked, usage by prompt length."""

    def __init__(self):
        self.mind = None
        self.summaries = 0
        self.bodies = []

    def __call__(self, body):
        self.bodies.append(body)
        messages = body["messages"]
        usage = {"prompt_tokens": 1000 * len(messages), "completion_tokens": 50}
        if messages[-1]["role"] == "user" and messages[-1]["content"] == compaction.COMPACTION_REQUEST:
            self.summaries += 1
            return text_reply(f"summary {self.summaries}: picking up the bowl", usage=usage)
        if self.mind is None:
            system = messages[0]["content"]
            task = "\n".join(p["text"] for p in messages[1]["content"] if p["type"] == "text")
            self.mind = make_mind(system, task, body["tools"])
        i = len(messages) - 1
        while i > 0 and messages[i]["role"] == "user":
            i -= 1
        result = messages[i]["content"] if messages[i]["role"] == "tool" else None
        name, args, text = self.mind.step(result)
        return tool_call(name, args, content=text or None, usage=usage)


def _calls(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "calls.jsonl").read_text().splitlines()]


def _spec(agent="tool", ablation="no_vla", **extra):
    return EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent=agent, ablation=ablation,
                       call_budget=40, **extra)


def test_a_tool_episode_past_compact_at_tokens_compacts_and_solves(tmp_path):
    model = CompactingModel()
    with serve(model) as server:
        planner = OpenAIPlanner(model="m", base_url=server.base_url, api_key="k", max_retries=0)
        rec = run_episode(_spec(compact_at_tokens=12000), planner, str(tmp_path))
        assert not server.responder_errors, server.responder_errors[0]
    calls = _calls(tmp_path)
    kinds = [c["action_kind"] for c in calls]
    assert rec.success and validate_trace(tmp_path) == []
    assert model.summaries == rec.n_compactions == kinds.count("compaction") >= 1
    assert rec.n_calls == len(calls)  # counted like any call
    first = kinds.index("compaction")
    assert calls[first]["usage_source"] == "provider" and calls[first]["input_tokens"] > 0
    # The call after it was sent the system prompt, the task card, the summary and the newest exchange only.
    after = model.bodies[first + 1]["messages"]
    assert after[2]["content"].startswith(compaction.SUMMARY_HEADER + "summary 1")
    assert [m["role"] for m in after[3:5]] == ["assistant", "tool"] and len(after) <= 6
    assert (tmp_path / f"transcript_before_compaction_{first + 1:03d}.json").is_file()
    assert json.loads((tmp_path / "episode.json").read_text())["n_compactions"] == rec.n_compactions


@pytest.mark.parametrize("agent, at", [("tool", 8000), ("code", 4000)])
def test_the_scripted_planner_compacts_offline_and_solves(tmp_path, agent, at):
    # Both interfaces are compacted by the same loop, at their own scale (code prompts hold fewer, longer turns).
    rec = run_episode(_spec(agent=agent, compact_at_tokens=at), ScriptedPlanner(), str(tmp_path))
    calls = _calls(tmp_path)
    assert rec.success and rec.n_compactions >= 1 and validate_trace(tmp_path) == []
    rows = [c for c in calls if c["action_kind"] == "compaction"]
    assert len(rows) == rec.n_compactions and all(r["usage_source"] == "estimated" for r in rows)
    transcript = json.loads((tmp_path / "transcript.json").read_text())
    summary = transcript[2]["content"]
    assert summary.startswith(compaction.SUMMARY_HEADER + "Actions so far") and "-> " in summary
    # The count reaches the database and the endings table.
    from analysis.ingest import ingest_traces
    from analysis.report import open_database
    from analysis.stats import endings_table

    root = tmp_path.parent / f"{tmp_path.name}_db"
    shutil.copytree(tmp_path, root / "libero_pro" / "one")
    ingest_traces(root, root / "t.duckdb")
    episodes = open_database(str(root / "t.duckdb")).execute("SELECT * FROM episodes").df()
    assert list(episodes["n_compactions"]) == [rec.n_compactions]
    row = endings_table(episodes).query(f"benchmark == 'All' and agent == '{agent}'").iloc[0]
    assert row["n_compactions"] == rec.n_compactions


@pytest.mark.parametrize("agent, limit", [("tool", 0.05), pytest.param("code", 0.10, marks=pytest.mark.slow)])
def test_max_dollars_ends_the_episode_before_the_next_call_would_pass_it(tmp_path, agent, limit):
    # The first call is always made (nothing predicts it): the code agent's costs $0.085, so its limit is higher.
    rec = run_episode(_spec(agent=agent, max_dollars=limit, price=ASTRA), ScriptedPlanner(), str(tmp_path))
    budget = DollarBudget(limit, ASTRA)
    for c in _calls(tmp_path):
        budget.add(Usage(c["input_tokens"], c["cached_input_tokens"], c["cache_write_tokens"], c["output_tokens"]))
    # Unlimited, these episodes cost about $0.20 (code, 3 calls) and $0.22 (tool, 17 calls) under astra.
    assert rec.status == "dollar_budget" and "max_dollars" in rec.error, rec
    assert budget.spent <= limit and budget.next_would_pass()


def test_digest_keeps_the_success_flag_of_both_interfaces():
    """The flag ends a tool result (its JSON) and a cell's output (its last line): a first-line digest lost it."""
    from agents.feedback import cell_output, success_line, tool_result

    def call(i, name, args):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "t"},
                call(1, "move_to", {"xyz": [0, 0, 1]}),
                {"role": "tool", "tool_call_id": "c1",
                 "content": tool_result({"reached": True}, acted=True, success=True, state={"holding": False})},
                call(2, "python", {"code": "robo.release()\nprint('done')"}),
                {"role": "tool", "tool_call_id": "c2",
                 "content": cell_output("done\n", acted=True, refused=False, success=False)}]
    lines = compaction.digest(messages).splitlines()
    assert lines[1].endswith(f"[{success_line(True)}]") and lines[2].endswith(f"[{success_line(False)}]")
