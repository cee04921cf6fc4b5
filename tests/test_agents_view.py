"""`cellbench view` on hand-made traces: escaping, incomplete traces, endpoint failures (no simulator).

The pages of real episodes are checked in tests/test_agents_play.py and
tests/test_agents_endings.py.
"""
from __future__ import annotations

import json
from dataclasses import asdict

from agents.records import CallRecord
from agents.view import render_file
from test_trace_schema import _call, write_trace


def test_page_shows_header_calls_code_results_and_tokens(tmp_path):
    d = write_trace(tmp_path / "ep")
    page = render_file(d).read_text()
    assert (d / "view.html").exists()
    assert "libero_spatial_swap/0 · code agent · no_vla_no_guides" in page
    assert "put the bowl on the plate" in page
    assert page.count('class="card" id="call-') == 2
    assert page.count("x = robo.state()") == 2  # both cells, from cells/
    assert page.count('src="data:image/png;base64,') == 1
    # Tokens so far after call 2: input 1000 + 2000, cached 0 + 512.
    assert "so far: input <b>3,000</b> · cached <b>512</b> · output <b>100</b>" in page


def test_text_from_the_trace_is_escaped(tmp_path):
    d = write_trace(tmp_path / "ep")
    msgs = json.loads((d / "transcript.json").read_text())
    msgs[3]["content"] = "<script>alert('x')</script> & <b>"
    (d / "transcript.json").write_text(json.dumps(msgs))
    page = render_file(d).read_text()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;" in page


def test_incomplete_trace_and_endpoint_failure(tmp_path):
    d = write_trace(tmp_path / "ep")
    (d / "episode.json").unlink()
    failed = CallRecord(**{**asdict(_call(3)), "action_kind": "none", "tool_name": None, "tool_args": None,
                           "cell_hash": None, "n_primitives": 0, "input_tokens": 0, "cached_input_tokens": 0,
                           "output_tokens": 0, "exception": "PlannerError", "retries": 6,
                           "error": "m at http://x failed 7 times; last: APIStatusError 503"})
    with open(d / "calls.jsonl", "a") as f:
        f.write(json.dumps(asdict(failed)) + "\n")
        f.write('{"call_index": 4, "torn')  # a killed run's last line
    page = render_file(d).read_text()
    assert "incomplete trace: no episode.json (3 calls recorded so far)" in page
    assert page.count('class="card" id="call-') == 3
    assert "6 endpoint retries" in page and "APIStatusError 503" in page
