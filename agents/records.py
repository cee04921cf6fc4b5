"""Typed records of an episode trace (schema v2): the one definition of every field.

The trace writer serialises these, the JSON Schemas in `agents/schemas/` are
generated from them, and `analysis.ingest` loads them into DuckDB.  Token
convention (as OpenAI reports it): `input_tokens` is the whole prompt, cached
and cache-write tokens *included*; uncached = input - cached - cache_write.

Schema versions: v2 added `CallRecord.input_sources` (v1 traces have none;
they still ingest, with the column NULL).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

SCHEMA_VERSION = 2

#: Every episode ends in exactly one of these.  `solved`: it ended on `finish`,
#: the call budget, the wall clock or the context window with the benchmark's
#: check true (episodes do not stop at the first success unless
#: `episode.stop_on_success`); otherwise the status names the ending (`gave_up`
#: is `finish`).  `error`: a runtime crash or a request the provider refused
#: for its content, whatever the check (`success` records it).  `planner_error`
#: is an infrastructure failure (rerun, never counted as a robot failure).
STATUSES = (
    "solved",
    "gave_up",
    "call_budget",
    "dollar_budget",
    "wall_clock",
    "context_overflow",
    "planner_error",
    "error",
)
Status = Literal[
    "solved", "gave_up", "call_budget", "dollar_budget", "wall_clock", "context_overflow", "planner_error", "error"
]
AGENTS = ("tool", "code")
ABLATIONS = ("full", "no_vla", "no_guides", "no_vla_no_guides", "images_on_demand")


@dataclass
class Usage:
    """Token usage of one LLM call (or a sum of calls)."""

    input_tokens: int = 0
    """Whole prompt, cached and cache-write tokens included."""
    cached_input_tokens: int = 0
    """Prompt tokens read from the provider's prefix cache."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the cache (providers that bill writes)."""
    output_tokens: int = 0
    """Completion tokens, reasoning tokens included."""
    reasoning_tokens: int = 0
    """Of output_tokens, those spent on hidden reasoning."""

    @property
    def uncached_input_tokens(self) -> int:
        return self.input_tokens - self.cached_input_tokens - self.cache_write_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


@dataclass
class InputSources:
    """One call's input tokens by where in the prompt they come from (agents/usage.py counts them).

    Counted with the estimator's tokenizer and prompt layout whatever the
    planner, so provider-billed calls get the same breakdown; `total` is that
    count, beside the call's own `input_tokens` (equal for estimated usage).
    Each message's framing tokens go to its source, the reply priming to
    `system`.
    """

    system: int = 0
    """The system prompt's own instructions (without API reference and guide)."""
    tools_api: int = 0
    """Tool schemas (the tool agent's primitives; the code agent's python/finish) and the code agent's API reference."""
    guide: int = 0
    """The operating guide appended to the system prompt."""
    task: int = 0
    """The task card: the opening user message's text."""
    images: int = 0
    """Every image in the prompt, the opening ones included."""
    n_images: int = 0
    """How many images the prompt holds."""
    history_assistant: int = 0
    """Earlier assistant messages: their text and tool calls (code cells included)."""
    history_results: int = 0
    """Earlier tool results, cell outputs and feedback, before the newest assistant message's."""
    newest_observation: int = 0
    """The text that answered the newest assistant message (its tool result or cell output, image labels)."""
    total: int = 0
    """The sum of the token sources above (n_images is a count, not tokens)."""


#: The token sources of InputSources, in prompt order (n_images and total are not sources).
INPUT_SOURCES = ("system", "tools_api", "guide", "task", "images", "history_assistant", "history_results",
                 "newest_observation")


@dataclass
class CallRecord:
    """One LLM call: a row of `calls.jsonl`."""

    call_index: int
    """1-based position of the call in the episode."""
    started_at: float
    """Unix time the request was sent."""
    latency_s: float
    input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    usage_source: Literal["provider", "estimated"]
    raw_usage: dict[str, Any]
    """The provider's usage object as received (or the estimator's breakdown)."""
    images_in_prompt: int
    """Images anywhere in the prompt of this call."""
    images_returned: int
    """Images the action of this call returned to the planner."""
    action_kind: Literal["tool", "cell", "finish", "none", "malformed", "compaction"]
    """What the call's reply did; `compaction`: the call summarised the conversation (agents/compaction.py)."""
    tool_name: str | None
    tool_args: dict[str, Any] | None
    cell_hash: str | None
    """sha256 of the cell text (code agent); the text is in cells/cell_NNN.py."""
    n_primitives: int
    """Primitives executed by this call's action."""
    n_acting: int
    """Of those, acting ones (motion, gripper, VLA)."""
    exception: str | None
    """Exception type the action raised (a cell's traceback, a tool call's error result), or why it did not
    finish: RuntimeTimeout / RuntimeDied, ContextOverflow (the billed call that tripped the context window; its
    action not run), PlannerError / RequestRejected (a call the endpoint never answered / refused)."""
    success_after: bool
    """Benchmark success check right after this call's action (calls after the first success stay True)."""
    retries: int = 0
    """Planner retries (transient endpoint errors) before this call succeeded."""
    error: str | None = None
    """Endpoint error text when the call finally failed."""
    retry_errors: list[str] | None = None
    """What each failed attempt of this call met (429, 5xx, timeout, dropped connection, malformed response), in order."""
    tool_calls_in_reply: int = 1
    """Tool calls the model's reply held; only the first is executed, the others are answered "Not executed"."""
    input_sources: InputSources | None = None
    """This call's input tokens by source (schema v2; None in v1 traces and for calls that never reached the model)."""
    tool_call_source: Literal["native", "text"] | None = None
    """Where the executed call came from: the API's tool_calls field, or the reply's text (planner.tool_calls: text); None when the reply held no call."""
    images_withheld: int = 0
    """Images this call's prompt would hold that a text-only planner (planner.vision: false) got as a text note instead (the images are in the trace)."""
    left_api: list[str] | None = None
    """What the cell tried outside the API, as its worker noticed it (`robo.<private>`, gc, ctypes, subprocess,
    socket, fork, opening a path outside work/); None for tool calls and in older traces."""


@dataclass
class PrimitiveRecord:
    """One primitive executed in the runtime: a row of `primitives.jsonl`."""

    call_index: int
    seq: int
    """0-based order within the episode."""
    name: str
    args: dict[str, Any]
    acting: bool
    """An acting primitive (motion, gripper, VLA) that acted: a call refused for its arguments before the
    simulator stepped is on record with acting false."""
    ok: bool
    """False when the primitive reported an ordinary failure or raised."""
    result: dict[str, Any]
    """Summary of the returned result dataclass."""
    sim_steps: int
    wall_s: float


@dataclass
class EpisodeRecord:
    """One complete episode: `episode.json`, written last and atomically."""

    benchmark: str
    """Benchmark group: libero_pro, bimanual, kitchen_atomic, kitchen_composite."""
    suite: str
    """e.g. libero_spatial_swap."""
    task: str
    """Task id naming suite and index, e.g. libero_spatial_swap/0."""
    seed: int
    agent: Literal["tool", "code"]
    ablation: str
    planner: str
    model: str
    instruction: str
    success: bool
    """The benchmark's own success check at the end, whatever the status (read from the simulator whenever it
    is still alive, after a wall-clock or error ending too)."""
    solved_at_call: int | None
    """The call after which the check first held (None if it never did); calls after it are in n_calls."""
    status: Status
    """How it ended (STATUSES): `solved` when it ended on finish or a budget with the check true."""
    n_calls: int
    input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    usage_source: str
    images_in_prompts: int
    images_returned: int
    n_primitives: int
    n_acting: int
    sim_steps: int
    wall_time_s: float
    started_at: float
    finished_at: float
    call_budget: int
    wall_clock_limit_s: float
    config_hash: str
    code_version: str
    package_versions: dict[str, str]
    repeat: int = 0
    error: str | None = None
    sandbox: dict[str, Any] | None = None
    """The code agent's cell worker: which confinement layers were applied (agents/sandbox.py: user_namespace,
    network, filesystem, tcp, scopes, no_new_privs, seccomp: true/false), its mode, Landlock ABI, and why a layer
    was unavailable; None for the tool agent (no cell worker) and in older traces."""
    cell_worker_restarts: int = 0
    """Cell workers that died (segfault, out of memory, CPU limit) and were replaced during the episode."""
    n_compactions: int = 0
    """Calls that compacted the conversation (episode.compact_at_tokens); they are in n_calls."""
    schema_version: int = SCHEMA_VERSION


def to_json_dict(record) -> dict[str, Any]:
    return asdict(record)
