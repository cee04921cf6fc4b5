"""Where each call's input tokens come from: the breakdown, its reconciliation with the estimate, its storage."""
from __future__ import annotations

import base64
import io
import json
from dataclasses import asdict

import duckdb
from PIL import Image

from agents.episode import ABLATION_EFFECTS, EpisodeSpec, _opening
from agents.records import INPUT_SOURCES, InputSources
from agents.usage import UsageEstimator, input_sources, message_sources
from analysis.ingest import ingest_traces
import trace_factory as tf


def _url(color=(10, 20, 30)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (256, 256), color).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _card() -> dict:
    return {"suite": "libero_spatial_swap", "instruction": "put the black bowl on the plate", "task_index": 0,
            "objects": ["akita_black_bowl_1", "plate_1"], "cameras": ["agentview", "robot0_eye_in_hand"],
            "guide": "Grasp bowls by the rim; lift 10 cm before moving.", "arms": ["right"]}


def _conversation(agent: str) -> tuple[list[dict], list[dict]]:
    """The real opening of `agent` (system prompt, guide, tools) and two acted calls after it."""
    spec = EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent=agent)
    tools, messages = _opening(spec, _card(), ("vla",), ABLATION_EFFECTS["full"], [], {}, None)
    messages[1]["content"].append({"type": "image_url", "image_url": {"url": _url(), "detail": "high"}})
    for i, result in enumerate(["{\"result\": {\"found\": true}}", "Task success: False"]):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "locate", "arguments": "{\"name\": \"plate_1\"}"}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": result})
    messages.append({"role": "user", "content": [{"type": "text", "text": "Camera images after the move:"},
                                                 {"type": "image_url", "image_url": {"url": _url((9, 9, 9))}}]})
    return tools, messages


def test_sources_sum_to_the_estimated_prompt_for_both_agents():
    for agent in ("tool", "code"):
        tools, messages = _conversation(agent)
        sources = input_sources(messages, tools)
        usage, _ = UsageEstimator().estimate(messages, tools)
        parts = asdict(sources)
        assert sum(parts[k] for k in INPUT_SOURCES) == sources.total == usage.input_tokens, agent
        assert sources.n_images == 2 and sources.images == 2 * 255
        for key in INPUT_SOURCES:  # every source is present in this conversation
            assert parts[key] > 0, (agent, key)
    # The code agent's API reference is in its system prompt, the tool agent's in its tool schemas:
    # both land in tools_api, and the code agent's prose (with the facts both prompts share) stays small beside it.
    code = input_sources(*reversed(_conversation("code")))
    assert code.tools_api > 2 * code.system


def test_guide_and_api_reference_are_told_apart_from_the_instructions():
    tools, messages = _conversation("code")
    with_guide = input_sources(messages, tools)
    messages[0] = {**messages[0], "content": messages[0]["content"].split("\n\n# Operating guide")[0]}
    without = input_sources(messages, tools)
    assert without.guide == 0 and with_guide.guide > 0
    assert abs(without.system - with_guide.system) <= 1 and without.tools_api == with_guide.tools_api


def test_newest_observation_becomes_history_at_the_next_call():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"},
                {"role": "assistant", "content": "a"}, {"role": "tool", "tool_call_id": "1", "content": "r1"},
                {"role": "user", "content": "nudge"}]
    assert message_sources(messages) == ["system", "task", "history_assistant", "newest_observation",
                                         "newest_observation"]
    messages += [{"role": "assistant", "content": "b"}, {"role": "tool", "tool_call_id": "2", "content": "r2"}]
    assert message_sources(messages)[3:] == ["history_results", "history_results", "history_assistant",
                                             "newest_observation"]
    assert message_sources(messages[:2]) == ["system", "task"]


def test_breakdown_is_stored_and_v1_traces_still_ingest(tmp_path):
    root = tmp_path / "episodes"
    sources = InputSources(system=10, tools_api=500, task=20, images=255, n_images=1, total=785)
    new = tf.write_episode(root, agent="tool", calls=[tf.call(1, input_tokens=785, input_sources=sources)])
    old = tf.write_episode(root, agent="code", calls=[tf.call(1, action_kind="cell")], schema_version=1)
    # A v1 calls.jsonl row has no input_sources key at all.
    row = json.loads((old / "calls.jsonl").read_text())
    del row["input_sources"]
    (old / "calls.jsonl").write_text(json.dumps(row) + "\n")
    summary = ingest_traces(root, tmp_path / "db.duckdb")
    assert summary.loaded == 2 and not summary.problems
    con = duckdb.connect(str(tmp_path / "db.duckdb"), read_only=True)
    got = dict(con.execute("SELECT agent, input_sources FROM calls").fetchall())
    assert got["code"] is None
    assert got["tool"]["tools_api"] == 500 and got["tool"]["total"] == 785
    assert con.execute("SELECT input_sources.images FROM calls WHERE agent = 'tool'").fetchone() == (255,)


def test_episode_stores_the_breakdown_of_the_prompt_the_planner_got(tmp_path):
    """Real scene, provider-style usage: each call row carries the breakdown of exactly the messages the
    planner was sent (counted by the estimator's tokenizer), beside the provider's own count."""
    from agents.episode import run_episode
    from agents.planners.base import PlannerReply, ToolCall
    from agents.records import Usage

    class Recorder:
        name, model = "test-recorder", "rec-v0"

        def __init__(self):
            self.seen = []

        def next(self, messages, tools):
            self.seen.append(([dict(m) for m in messages], tools))
            n = len(self.seen)
            return PlannerReply(text=None, tool_calls=[ToolCall(f"t{n}", "state", "{}")],
                                usage=Usage(input_tokens=7 * n, output_tokens=3), usage_source="provider",
                                raw_usage={"prompt_tokens": 7 * n})

    planner = Recorder()
    spec = EpisodeSpec(benchmark="libero_pro", task="libero_spatial_swap/0", seed=0, agent="tool",
                       ablation="no_vla_no_guides", image_size=128, n_images=1, call_budget=2)
    run_episode(spec, planner, str(tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert len(rows) == len(planner.seen) == 2
    for row, (messages, tools) in zip(rows, planner.seen):
        assert row["input_tokens"] == 7 * row["call_index"]  # the provider's count is kept as it came
        assert row["input_sources"] == asdict(input_sources(messages, tools))
    assert rows[1]["input_sources"]["newest_observation"] > 0 and rows[1]["input_sources"]["history_assistant"] > 0
    assert rows[0]["input_sources"]["newest_observation"] == 0


def test_tables_and_stacked_figure_follow_the_breakdown(tmp_path):
    """Shares are of the counted tokens; the figure's stack tops are the calls' counted totals."""
    from analysis.cost import choose_price_table, load_config
    from analysis.figures import fig8_input_sources
    from analysis.report import build_tables, load_report_data

    def sources(n):  # grows with the call like a tool-calling history
        return InputSources(system=100, tools_api=1000, task=50, images=255 * n, n_images=n,
                            history_assistant=10 * (n - 1), history_results=30 * (n - 1), newest_observation=20,
                            total=1170 + 255 * n + 40 * (n - 1))

    root = tmp_path / "episodes"
    tool_calls = [tf.call(i, input_tokens=sources(i).total, cached=1024 if i > 1 else 0, input_sources=sources(i))
                  for i in (1, 2, 3)]
    tf.write_pair(root, tool=dict(success=True, solved_at_call=3, calls=tool_calls),
                  code=dict(success=True, solved_at_call=1,
                            calls=[tf.call(1, input_tokens=1425, action_kind="cell", input_sources=sources(1))]))
    ingest_traces(root, tmp_path / "db.duckdb")
    data = load_report_data(tmp_path / "db.duckdb", choose_price_table(load_config(tf.write_config(tmp_path / "c.yaml")), None))
    by_name = {t.name: t.frame for t in build_tables(data)}
    tool = by_name["input_sources"].set_index("agent").loc["tool"]
    total = sum(sources(i).total for i in (1, 2, 3))
    assert tool["images_pct"] == 100 * 255 * 6 / total and tool["n_calls"] == 3
    assert tool["counted_tokens_per_call"] == tool["input_tokens_per_call"] == total / 3
    cached = by_name["cached_share"].set_index("agent")
    assert cached.loc["tool", "cached_pct"] == 100 * 2048 / total and cached.loc["code", "cached_pct"] == 0

    fig = fig8_input_sources(data)
    tool_ax = fig.axes[0]
    assert len(tool_ax.collections) == len(INPUT_SOURCES)
    top = tool_ax.collections[-1].get_paths()[0].vertices[:, 1].max()
    assert top == sources(3).total


def test_a_prompt_the_estimator_cannot_lay_out_has_no_breakdown_but_no_error(capsys):
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.org/a.png"}}]}]
    assert input_sources(messages, None) is None
    assert "no input-token breakdown" in capsys.readouterr().err
