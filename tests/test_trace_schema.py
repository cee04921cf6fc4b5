"""The trace schemas: committed files equal what `agents.schema` generates, and the validator names what is wrong.

Traces here are written through the real `TraceWriter` from the record
dataclasses (no simulator); the end-to-end traces of real episodes are
validated in tests/test_agents_play.py and the other agent tests.
"""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from agents import schema
from agents.records import CallRecord, EpisodeRecord, PrimitiveRecord
from agents.trace import TraceWriter, data_url, image_key

CELL = "x = robo.state()\nprint(x.holding)\n"


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


def _call(i: int, **kw) -> CallRecord:
    rec = CallRecord(
        call_index=i, started_at=100.0 + i, latency_s=0.5, input_tokens=1000 * i, cached_input_tokens=512 * (i - 1),
        cache_write_tokens=0, output_tokens=50, reasoning_tokens=0, usage_source="provider",
        raw_usage={"prompt_tokens": 1000 * i}, images_in_prompt=1, images_returned=0, action_kind="cell",
        tool_name="python", tool_args={"code": CELL}, cell_hash=hashlib.sha256(CELL.encode()).hexdigest(),
        n_primitives=1, n_acting=0, exception=None, success_after=False,
    )
    return replace(rec, **kw)


def write_trace(d: Path) -> Path:
    """A small complete code-agent trace: two cells, one primitive each, one image in the opening."""
    w = TraceWriter(d)
    png = _png()
    url = data_url(png)
    refs = {image_key(url): w.image(0, "agentview", png)}
    calls = [_call(1), _call(2, success_after=True)]
    messages = [
        {"role": "system", "content": "You control a robot."},
        {"role": "user", "content": [{"type": "text", "text": "Task: t"}, {"type": "image_url", "image_url": {"url": url}}]},
    ]
    for c in calls:
        w.cell(c.call_index, CELL)
        w.call(c)
        w.primitive(PrimitiveRecord(call_index=c.call_index, seq=c.call_index - 1, name="state", args={}, acting=False,
                                    ok=True, result={"holding": False}, sim_steps=0, wall_s=0.01))
        tc = {"id": f"c{c.call_index}", "type": "function", "function": {"name": "python", "arguments": json.dumps({"code": CELL})}}
        messages += [{"role": "assistant", "content": "Check.", "tool_calls": [tc]},
                     {"role": "tool", "tool_call_id": f"c{c.call_index}", "content": "False"}]
    w.transcript(messages, refs)
    w.finish(EpisodeRecord(
        benchmark="libero_pro", suite="libero_spatial_swap", task="libero_spatial_swap/0", seed=0, agent="code",
        ablation="no_vla_no_guides", planner="scripted", model="m", instruction="put the bowl on the plate",
        success=True, solved_at_call=2, status="solved", n_calls=2,
        input_tokens=sum(c.input_tokens for c in calls), cached_input_tokens=sum(c.cached_input_tokens for c in calls),
        cache_write_tokens=0, output_tokens=100, reasoning_tokens=0, usage_source="provider", images_in_prompts=2,
        images_returned=0, n_primitives=2, n_acting=0, sim_steps=0, wall_time_s=1.0, started_at=100.0,
        finished_at=101.0, call_budget=40, wall_clock_limit_s=900.0, config_hash="", code_version="test",
        package_versions={"numpy": "2"},
    ))
    return d


@pytest.fixture()
def trace(tmp_path) -> Path:
    return write_trace(tmp_path / "ep")


def _rewrite_jsonl(path: Path, line: int, **changes) -> None:
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[line - 1].update(changes)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", schema.NAMES)
def test_committed_schema_equals_generated(name):
    committed = (schema.SCHEMA_DIR / f"{name}.schema.json").read_text()
    assert committed == schema.dumps(schema.generate()[name]), (
        f"agents/schemas/{name}.schema.json is stale: run `python -m agents.schema`")


@pytest.mark.parametrize("name", schema.NAMES)
def test_schemas_are_valid_draft_2020_12(name):
    s = schema.load_schema(name)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(s)


def test_record_schemas_follow_the_dataclasses():
    call = schema.load_schema("call")
    props = call["properties"]
    assert call["required"] == list(props) and call["additionalProperties"] is False
    assert props["input_tokens"]["type"] == "integer"
    assert props["latency_s"]["type"] == "number"
    assert props["success_after"]["type"] == "boolean"
    assert props["tool_name"]["type"] == ["string", "null"]
    assert props["usage_source"]["enum"] == ["provider", "estimated"]
    assert props["raw_usage"]["type"] == "object"
    ep = schema.load_schema("episode")["properties"]
    assert ep["status"]["enum"] == ["solved", "gave_up", "call_budget", "dollar_budget", "wall_clock",
                                    "context_overflow", "planner_error", "error"]
    assert ep["package_versions"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert ep["solved_at_call"]["type"] == ["integer", "null"]
    assert ep["schema_version"]["const"] == 2
    sources = props["input_sources"]
    assert sources["type"] == ["object", "null"] and sources["additionalProperties"] is False
    assert sources["properties"]["newest_observation"]["type"] == "integer"
    assert "1-based" in props["call_index"]["description"]  # attribute docstrings carry over


def test_valid_trace_has_no_problems(trace):
    assert schema.validate_trace(trace) == []


def test_bad_call_row_names_file_line_and_field(trace):
    _rewrite_jsonl(trace / "calls.jsonl", 2, input_tokens="many")
    problems = schema.validate_trace(trace)
    assert any("calls.jsonl line 2" in p and "'input_tokens'" in p for p in problems), problems


def test_missing_and_extra_fields_are_named(trace):
    rows = [json.loads(x) for x in (trace / "primitives.jsonl").read_text().splitlines()]
    del rows[0]["sim_steps"]
    rows[1]["colour"] = "red"
    (trace / "primitives.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = schema.validate_trace(trace)
    assert any("primitives.jsonl line 1" in p and "'sim_steps'" in p and "missing" in p for p in problems), problems
    assert any("primitives.jsonl line 2" in p and "colour" in p for p in problems), problems


def test_bad_episode_field_and_torn_line(trace):
    ep = json.loads((trace / "episode.json").read_text())
    ep["status"] = "exploded"
    (trace / "episode.json").write_text(json.dumps(ep))
    with open(trace / "calls.jsonl", "a") as f:
        f.write('{"call_index": 3, "start')
    problems = schema.validate_trace(trace)
    assert any(p.startswith("episode.json: field 'status'") and "exploded" in p for p in problems), problems
    assert any(p.startswith("calls.jsonl line 3: not JSON") for p in problems), problems


def test_missing_cell_image_and_episode_are_reported(trace):
    (trace / "cells" / "cell_002.py").unlink()
    next((trace / "images").iterdir()).unlink()
    (trace / "episode.json").unlink()
    problems = schema.validate_trace(trace)
    assert any(p.startswith("cells/cell_002.py: missing") for p in problems), problems
    assert any(p.startswith("transcript.json message 1: image") for p in problems), problems
    assert any(p.startswith("episode.json: missing") for p in problems), problems


def test_edited_cell_and_inconsistent_totals(trace):
    (trace / "cells" / "cell_001.py").write_text("print('something else')\n")
    ep = json.loads((trace / "episode.json").read_text())
    ep["input_tokens"] += 1
    ep["n_calls"] = 3
    (trace / "episode.json").write_text(json.dumps(ep))
    problems = schema.validate_trace(trace)
    assert any("call 1: field 'cell_hash'" in p for p in problems), problems
    assert any("episode.json: field 'input_tokens'" in p for p in problems), problems
    assert any("episode.json: field 'n_calls'" in p for p in problems), problems


def test_bad_transcript_message_is_named(trace):
    msgs = json.loads((trace / "transcript.json").read_text())
    msgs[3]["role"] = "robot"
    (trace / "transcript.json").write_text(json.dumps(msgs))
    problems = schema.validate_trace(trace)
    assert any(p.startswith("transcript.json message 3: field 'role'") for p in problems), problems


def test_malformed_call_record_fits_the_schema():
    # The dataclasses are the source: any record they build serialises to a valid row.
    v = Draft202012Validator(schema.load_schema("call"))
    assert not list(v.iter_errors(asdict(_call(1, action_kind="malformed", tool_args=None, exception="JSONDecodeError"))))
