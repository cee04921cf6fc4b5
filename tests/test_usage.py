"""Token usage estimation: offline tokenizer, image formula, prompt layout, prefix cache."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PIL import Image

from agents.planners.base import ToolCall
from agents.usage import (
    PromptCacheModel,
    PromptSerializer,
    UsageEstimator,
    data_url_image_size,
    get_encoding,
    image_tokens,
    png_size,
)

REPO = Path(__file__).resolve().parents[1]
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def _data_url(width: int, height: int, color=(200, 30, 30), fmt: str = "PNG") -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, format=fmt)
    mime = "png" if fmt == "PNG" else "jpeg"
    return f"data:image/{mime};base64," + base64.b64encode(buffer.getvalue()).decode()


def _image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


# --------------------------------------------------------------------------
# Tokenizer


def test_get_encoding_works_with_no_network_and_an_empty_cache(tmp_path):
    """A fresh process with sockets disabled and no tiktoken cache still encodes."""
    script = textwrap.dedent(
        """
        import json, socket
        def refuse(*args, **kwargs):
            raise OSError("network disabled by the test")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        from agents.usage import get_encoding
        enc = get_encoding()
        tokens = enc.encode("hello world")
        print(json.dumps({"tokens": tokens, "decoded": enc.decode(tokens)}))
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"tokens": [24912, 2375], "decoded": "hello world"}
    # tiktoken's cache file name: sha1 of the URL it would download from.
    cached = tmp_path / "cellbench" / "tiktoken" / hashlib.sha1(O200K_URL.encode()).hexdigest()
    assert hashlib.sha256(cached.read_bytes()).hexdigest().startswith("446a9538")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # bpe-openai's own importlib use
def test_get_encoding_agrees_with_bpe_openai_rust_encoder():
    """tiktoken (through our cache) and bpe-openai's independent Rust encoder give the same ids."""
    from bpe_openai import _bindings

    rust = _bindings.tokenizer_for_encoding("o200k_base")
    enc = get_encoding()
    samples = [
        "hello world",
        "robo.move_to(x=0.42, y=-0.1, z=0.3)  # lift\n\tthen place",
        "Place the bowl on the plate. Ünïcödé, 日本語, emoji 🤖!",
        json.dumps({"type": "function", "function": {"name": "grasp", "parameters": {}}}),
    ]
    for text in samples:
        assert enc.encode(text) == rust.encode(text)
        assert enc.decode(enc.encode(text)) == text


# --------------------------------------------------------------------------
# Images


@pytest.mark.parametrize(
    "width, height, tokens",
    [
        (1024, 1024, 765),  # short side 1024 → 768: 768×768, 2×2 tiles
        (256, 256, 255),  # never scaled up: 1 tile
        (512, 512, 255),  # exactly one tile
        (513, 512, 425),  # one pixel over: 2 tiles
        (2048, 4096, 1105),  # → 1024×2048 → 768×1536: 2×3 tiles
        (4096, 8192, 1105),  # same shape, fitted into 2048 first
        (1920, 1080, 1105),  # → 1365.3×768: 3×2 tiles
        (100, 4000, 765),  # → 51.2×2048, short side already < 768: 1×4 tiles
    ],
)
def test_image_tokens_high_detail(width, height, tokens):
    assert image_tokens(width, height) == tokens


def test_image_tokens_low_detail_is_flat():
    assert image_tokens(4096, 4096, "low") == 85


def test_image_size_from_png_header_and_other_formats():
    url = _data_url(320, 240)
    assert data_url_image_size(url) == (320, 240)
    header = base64.b64decode(url.split(",", 1)[1])[:24]
    assert png_size(header) == (320, 240)
    assert data_url_image_size(_data_url(64, 48, fmt="JPEG")) == (64, 48)


# --------------------------------------------------------------------------
# Prompt layout


@pytest.fixture(scope="module")
def serializer():
    return PromptSerializer()


def test_single_message_prompt_matches_the_cookbook_count(serializer):
    # 3 framing + "user" (1) + "hello world" (2) + 3 reply priming = 9
    prompt = serializer.serialize([{"role": "user", "content": "hello world"}], None)
    assert prompt.n_tokens == 9
    assert (prompt.text_tokens, prompt.framing_tokens) == (2, 7)


def test_image_message_counts_the_image_formula(serializer):
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, _image_part(_data_url(256, 256))]}]
    prompt = serializer.serialize(messages, None)
    assert (prompt.text_tokens, prompt.image_tokens, prompt.n_images) == (1, 255, 1)
    assert prompt.n_tokens == 4 + 1 + 255 + 3


def test_image_ref_part_and_missing_identity(serializer):
    ref = {"type": "image_ref", "width": 1024, "height": 1024, "sha256": "ab" * 32}
    prompt = serializer.serialize([{"role": "tool", "content": [ref]}], None)
    assert prompt.image_tokens == 765
    with pytest.raises(ValueError, match="sha256"):
        serializer.serialize([{"role": "tool", "content": [{"type": "image_ref", "width": 1, "height": 1}]}], None)


def test_tool_schemas_and_tool_calls(serializer):
    enc = get_encoding()
    tools = [{"type": "function", "function": {"name": "move", "parameters": {"type": "object"}}}]
    schema = json.dumps(tools, separators=(",", ":"))
    call = {"id": "call_1", "type": "function", "function": {"name": "move", "arguments": '{"x": 1}'}}
    messages = [{"role": "assistant", "content": None, "tool_calls": [call]}]
    prompt = serializer.serialize(messages, tools)
    assert prompt.tool_schema_tokens == len(enc.encode(schema))
    assert prompt.text_tokens == 1 + 6  # "move" + '{"x": 1}'
    # <start> role <sep> ... <end> = 4 each for the tools block, the message and
    # its tool call; priming 3
    assert prompt.framing_tokens == 4 + 4 + 4 + 3


# --------------------------------------------------------------------------
# Prefix cache


def test_cache_repeated_then_extended_prompt():
    cache = PromptCacheModel()
    prompt = list(range(2000))
    assert cache.observe(prompt) == 0
    assert cache.observe(prompt + [7, 8, 9]) == 1920  # 2000 shared → 15 blocks of 128


def test_cache_threshold_and_rounding():
    cache = PromptCacheModel()
    cache.observe(list(range(3000)))
    assert cache.lookup(list(range(1000)) + [-5] * 500) == 0  # 1000 shared < 1024
    assert cache.lookup(list(range(1100)) + [-5] * 500) == 1024  # 1100 → 1024
    assert cache.lookup([99] + list(range(1, 3000))) == 0  # differs at the first token


def test_cache_hits_any_earlier_prompt_not_only_the_last():
    cache = PromptCacheModel()
    cache.observe(list(range(1500)))
    cache.observe([-9] * 1500)
    assert cache.lookup(list(range(1500)) + [1]) == 1408


def test_estimator_hand_worked_episode():
    """System prompt of 1990 text tokens, then the same conversation extended."""
    estimator = UsageEstimator()
    system = {"role": "system", "content": " hello" * 1990}
    first = [system, {"role": "user", "content": "hello world"}]
    usage, raw = estimator.estimate(first, None, ToolCall("c1", "move", '{"x": 1}'))
    # 4+1990 system, 4+2 user, 3 priming
    assert usage.input_tokens == 2003 and usage.cached_input_tokens == 0
    assert usage.output_tokens == 7 and usage.cache_write_tokens == 0
    assert raw["prompt_tokens"] == 2003 and raw["prompt_tokens_details"]["cached_tokens"] == 0

    second = first + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "move", "arguments": '{"x": 1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    # 2000 as before + assistant message 4 + its tool call 4+7 + tool result 4+1 + priming 3
    assert estimator.prompt_tokens(second, None) == 2023
    usage, raw = estimator.estimate(second, None, "done")
    # The first prompt (2003 tokens, priming included: the assistant message
    # opens the same way) is a prefix of the second: 2003 → 1920.
    assert usage.cached_input_tokens == 1920
    assert usage.output_tokens == 1
    assert raw["estimate"]["shared_prefix_tokens"] == 1920


def test_prompt_tokens_does_not_touch_the_cache():
    estimator = UsageEstimator()
    messages = [{"role": "system", "content": " hello" * 1990}]
    estimator.prompt_tokens(messages, None)
    usage, _ = estimator.estimate(messages, None)
    assert usage.cached_input_tokens == 0
    usage, _ = estimator.estimate(messages, None)
    assert usage.cached_input_tokens == 1920
    estimator.reset()
    usage, _ = estimator.estimate(messages, None)
    assert usage.cached_input_tokens == 0


def test_images_are_opaque_prefix_tokens_identified_by_content():
    estimator = UsageEstimator()
    text = {"type": "text", "text": " hello" * 1500}
    red, blue = _data_url(256, 256, (255, 0, 0)), _data_url(256, 256, (0, 0, 255))
    tail = {"type": "text", "text": " hello" * 500}

    def prompt(url):
        return [{"role": "user", "content": [text, _image_part(url), tail]}]

    estimator.estimate(prompt(red), None)
    # Same text, different image: shared prefix ends where the image starts (4+1500 → 1408).
    usage, _ = estimator.estimate(prompt(blue), None)
    assert usage.cached_input_tokens == 1408
    # Same image again: 4 + 1500 + 255 + 500 + 3 = 2262 → 2176
    usage, raw = estimator.estimate(prompt(red), None)
    assert usage.input_tokens == 2262 and usage.cached_input_tokens == 2176
    assert raw["prompt_tokens_details"]["image_tokens"] == 255


def test_cache_writes_when_billed():
    estimator = UsageEstimator(bill_cache_writes=True)
    messages = [{"role": "system", "content": " hello" * 1990}]
    usage, _ = estimator.estimate(messages, None)
    assert (usage.cached_input_tokens, usage.cache_write_tokens) == (0, 1920)
    usage, _ = estimator.estimate(messages + [{"role": "user", "content": " hello" * 300}], None)
    # 1994 + 304 + 3 = 2301 tokens: 1920 cached, the blocks up to 2176 newly written
    assert (usage.cached_input_tokens, usage.cache_write_tokens) == (1920, 256)
    assert usage.uncached_input_tokens == usage.input_tokens - 1920 - 256


def test_bpe_openai_alone_and_no_tokenizer_at_all():
    """Without tiktoken, bpe-openai's encoder serves; without either, the error names the fix."""
    script = textwrap.dedent(
        """
        import sys, warnings
        warnings.simplefilter("ignore")
        sys.modules["tiktoken"] = None
        from agents.errors import CellbenchError
        from agents import usage
        print(usage.get_encoding().encode("hello world"))
        usage.get_encoding.cache_clear()
        sys.modules["bpe_openai"] = None
        try:
            usage.get_encoding()
        except CellbenchError as exc:
            print(exc)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0] == "[24912, 2375]", done.stderr
    assert "install tiktoken and bpe-openai" in lines[1]
