"""`cellbench serve`: an OpenAI-compatible endpoint (Chat Completions, Responses) answering as the scripted planner.

A dress rehearsal of a paid grid at zero cost: point the `openai` planner at
it (`OPENAI_BASE_URL=http://HOST:PORT/v1`, any key; `openai-responses` talks
to its /v1/responses, translated back to the chat conversation the episode
keeps, as agents/planners/openai_responses_planner.py maps it) and the whole paid path
runs - the SDK, HTTP, the planner's retries, the traces - with the offline
planner's decisions, so the results equal the in-process `scripted` planner's
on the same instances (tests/test_serve.py runs both).  What it adds on
purpose: a per-call latency (`--latency-s`, the time from request to reply,
planner time included) with jitter, injected 429/5xx answers (`--fail-rate`),
and usage in the provider's format whose numbers are the estimator's
(`agents.usage`), marked `"estimated": true` in the usage object and by an
`x-cellbench-usage: estimated` header.

Conversations.  The endpoint is stateless as a real one is: every request
carries the whole conversation.  Each conversation gets its own
`ScriptedPlanner`, called exactly as the episode loop calls it in process:
one list of messages, extended by what each request adds.  A request whose
conversation the server holds (keyed by a hash of the messages up to its last
assistant reply) continues it; any other (a server restarted mid-episode, a
retry of a request whose reply was lost) is replayed from its start through
a fresh planner, which must write the same assistant messages the
conversation carries, or the request is refused with a 400 naming the first
message that differs.  Identical conversations in flight at once (the same
instance twice) each get a planner of their own.
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Statuses `--fail-rate` draws from by default: rate limits and server faults, the ones a planner retries.
DEFAULT_FAIL_STATUSES = (429, 500, 503)
#: Open conversations kept (least recently used dropped first; a dropped one is replayed if it comes back).
MAX_OPEN_CONVERSATIONS = 256


class ConversationMismatch(ValueError):
    """The conversation's assistant messages are not what the scripted planner writes."""


@dataclass
class FaultPlan:
    """What the endpoint does besides answering: latency, jitter, injected failures (seeded)."""

    latency_s: float = 0.0
    jitter_s: float = 0.0
    """Latency is drawn uniformly from [latency_s - jitter_s, latency_s + jitter_s] (at least 0)."""
    fail_rate: float = 0.0
    fail_statuses: tuple[int, ...] = DEFAULT_FAIL_STATUSES
    retry_after_s: float | None = 1.0
    """Retry-After sent with an injected 429 (None: no header)."""
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        from agents.errors import CellbenchError

        if self.latency_s < 0 or self.jitter_s < 0:
            raise CellbenchError("--latency-s and --jitter-s must be >= 0")
        if not 0.0 <= self.fail_rate < 1.0:
            raise CellbenchError(f"--fail-rate must be in [0, 1), got {self.fail_rate}")
        bad = [s for s in self.fail_statuses if not 400 <= s <= 599]
        if bad:
            raise CellbenchError(f"--fail-statuses must be HTTP error statuses (4xx/5xx), got {bad}")
        self._rng = random.Random(self.seed)

    def draw(self) -> tuple[float, int | None]:
        """(latency of this reply in seconds, injected status or None)."""
        with self._lock:
            latency = self.latency_s
            if self.jitter_s:
                latency = max(0.0, self._rng.uniform(self.latency_s - self.jitter_s, self.latency_s + self.jitter_s))
            status = None
            if self.fail_rate and self._rng.random() < self.fail_rate:
                status = self._rng.choice(self.fail_statuses)
        return latency, status


def _canonical(message: dict[str, Any]) -> list[Any]:
    """What identifies a message for continuing a conversation (ids and formatting aside)."""
    content = message.get("content")
    if isinstance(content, list):
        parts = []
        for p in content:
            if p.get("type") == "text":
                parts.append(["text", p.get("text", "")])
            elif p.get("type") == "image_url":
                url = p.get("image_url", {}).get("url", "")
                parts.append(["image", hashlib.sha256(url.encode()).hexdigest()])
            else:
                parts.append([p.get("type"), json.dumps(p, sort_keys=True)])
        content = parts
    else:
        content = content or ""
    calls = [[c.get("function", {}).get("name"), c.get("function", {}).get("arguments")]
             for c in message.get("tool_calls") or []]
    return [message.get("role"), content, calls]


def conversation_key(messages: list[dict[str, Any]]) -> str:
    h = hashlib.sha256()
    for m in messages:
        h.update(json.dumps(_canonical(m), ensure_ascii=False).encode())
        h.update(b"\0")
    return h.hexdigest()


def assistant_message(reply) -> dict[str, Any]:
    """The assistant message of a PlannerReply, as the episode loop appends it."""
    msg: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in reply.tool_calls]
    return msg


class _Conversation:
    def __init__(self, model: str):
        from agents.planners.scripted import ScriptedPlanner

        self.planner = ScriptedPlanner(model=model)
        self.messages: list[dict[str, Any]] = []
        """The one list this planner is called with, extended by each request (as in the episode loop)."""

    def next(self, new_messages: list[dict[str, Any]], tools: list[dict[str, Any]]):
        self.messages.extend(new_messages)
        return self.planner.next(self.messages, tools)


class ScriptedEndpoint:
    """Answers chat-completions requests with the scripted planner, one planner per conversation."""

    def __init__(self, model: str = "scripted-v1", max_open: int = MAX_OPEN_CONVERSATIONS):
        self.model = model
        self.max_open = max_open
        self._open: OrderedDict[str, list[_Conversation]] = OrderedDict()
        self._n_open = 0
        self._lock = threading.Lock()
        self.replays = 0
        """Requests answered by replaying their conversation from the start."""

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]):
        if not messages:
            raise ConversationMismatch("messages is empty")
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
        conv = None
        if last is not None:
            conv = self._take(conversation_key(messages[: last + 1]))
        if conv is None:
            conv = self._replay(messages, tools) if last is not None else _Conversation(self.model)
        reply = conv.next(messages[len(conv.messages):], tools)
        if not any(c.name == "finish" for c in reply.tool_calls):
            self._put(conversation_key(conv.messages + [assistant_message(reply)]), conv)
        return reply

    def _replay(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> _Conversation:
        """A fresh planner led through the conversation; each of its replies must be the one the conversation has."""
        with self._lock:
            self.replays += 1
        conv = _Conversation(self.model)
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            reply = conv.next(messages[len(conv.messages):i], tools)
            want, got = _canonical(m), _canonical(assistant_message(reply))
            if want != got:
                raise ConversationMismatch(
                    f"message {i} (assistant): the scripted planner writes {json.dumps(got[1:])[:300]}, "
                    f"the conversation has {json.dumps(want[1:])[:300]}")
            conv.messages.append(m)
        return conv

    def _take(self, key: str) -> _Conversation | None:
        with self._lock:
            convs = self._open.get(key)
            if not convs:
                return None
            conv = convs.pop()
            self._n_open -= 1
            if not convs:
                del self._open[key]
            return conv

    def _put(self, key: str, conv: _Conversation) -> None:
        with self._lock:
            self._open.setdefault(key, []).append(conv)
            self._open.move_to_end(key)
            self._n_open += 1
            while self._n_open > self.max_open and self._open:
                _, convs = self._open.popitem(last=False)
                self._n_open -= len(convs)


def usage_block(reply) -> dict[str, Any]:
    """The reply's estimated usage in the provider's chat-completions format, marked as estimated."""
    u = reply.usage
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens, "cache_write_tokens": u.cache_write_tokens},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "estimated": True,
    }


def completion_body(reply, model: str) -> dict[str, Any]:
    message = assistant_message(reply)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        "usage": usage_block(reply),
    }


def error_body(status: int, message: str) -> dict[str, Any]:
    kinds = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_exceeded"}
    return {"error": {"message": message, "type": kinds.get(status, "server_error"), "param": None,
                      "code": "rate_limit_exceeded" if status == 429 else None}}


def _chat_parts(content: Any) -> Any:
    if not isinstance(content, list):
        return content or ""
    parts = []
    for p in content:
        if p.get("type") in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": p.get("text", "")})
        elif p.get("type") == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": p.get("image_url", ""),
                                                              "detail": p.get("detail", "auto")}})
        else:
            raise ConversationMismatch(f"content part of type {p.get('type')!r} is not supported")
    return parts


def _plain(content: Any) -> str:
    parts = _chat_parts(content)
    return parts if isinstance(parts, str) else "\n".join(p["text"] for p in parts if p["type"] == "text")


def chat_from_responses(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A Responses request as the chat conversation and tools it was made from (the inverse of
    OpenAIResponsesPlanner.input_items); reasoning items are dropped, the scripted planner has none."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    turn: dict[str, Any] | None = None  # the assistant message function_call items join
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            turn = None
            if role == "assistant":
                turn = {"role": "assistant", "content": _plain(item.get("content")) or None}
                messages.append(turn)
            elif role in ("system", "developer"):
                messages.append({"role": "system", "content": _plain(item.get("content"))})
            elif role == "user":
                messages.append({"role": "user", "content": _chat_parts(item.get("content"))})
            else:
                raise ConversationMismatch(f"input message role {role!r} is not supported")
        elif kind == "function_call":
            if turn is None:
                turn = {"role": "assistant", "content": None}
                messages.append(turn)
            turn.setdefault("tool_calls", []).append({"id": item.get("call_id"), "type": "function", "function": {
                "name": item.get("name"), "arguments": item.get("arguments") or ""}})
        elif kind == "function_call_output":
            turn = None
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output", "")})
        elif kind != "reasoning":
            raise ConversationMismatch(f"input item of type {kind!r} is not supported")
    tools = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                               "parameters": t.get("parameters") or {}}}
             for t in body.get("tools") or [] if t.get("type") == "function"]
    return messages, tools


def response_body(reply, model: str) -> dict[str, Any]:
    """The reply as a Responses API response, its usage the estimator's, marked as estimated."""
    output: list[dict[str, Any]] = []
    if reply.text:
        output.append({"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "role": "assistant",
                       "status": "completed", "content": [{"type": "output_text", "text": reply.text,
                                                           "annotations": []}]})
    for c in reply.tool_calls:
        output.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:24]}", "call_id": c.id,
                       "name": c.name, "arguments": c.arguments, "status": "completed"})
    u = reply.usage
    return {
        "id": f"resp_{uuid.uuid4().hex[:24]}", "object": "response", "created_at": int(time.time()),
        "model": model, "status": "completed", "output": output, "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": u.input_tokens,
                  "input_tokens_details": {"cached_tokens": u.cached_input_tokens,
                                           "cache_write_tokens": u.cache_write_tokens},
                  "output_tokens": u.output_tokens, "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
                  "total_tokens": u.input_tokens + u.output_tokens, "estimated": True},
    }


#: Route -> (request body -> (messages, tools), (reply, model) -> response body).
API_ROUTES = {
    "/v1/chat/completions": (lambda body: (body["messages"], body.get("tools") or []), completion_body),
    "/v1/responses": (chat_from_responses, response_body),
}


class RehearsalServer(ThreadingHTTPServer):
    """The HTTP server: one thread per request, so concurrent episodes wait their latency in parallel."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], endpoint: ScriptedEndpoint, faults: FaultPlan,
                 log=None):
        self.endpoint = endpoint
        self.faults = faults
        self.log = log
        self.counts = {"requests": 0, "replies": 0, "faults": 0, "refused": 0}
        self._count_lock = threading.Lock()
        super().__init__(address, _Handler)

    def count(self, key: str) -> None:
        with self._count_lock:
            self.counts[key] += 1

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RehearsalServer

    def log_message(self, fmt, *args) -> None:  # one line per request goes to server.log instead
        pass

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = self.server.endpoint.model
            self._send(200, {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "cellbench"}]})
        elif self.path.rstrip("/") in ("/health", "/v1/health"):
            self._send(200, {"status": "ok", **self.server.counts})
        else:
            self._send(404, error_body(404, f"no route {self.path}; this server answers POST {' and '.join(API_ROUTES)}"))

    def do_POST(self) -> None:
        started = time.monotonic()
        server = self.server
        server.count("requests")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        path = self.path.rstrip("/")
        route = API_ROUTES.get(path if path.startswith("/v1/") else "/v1" + path)
        if route is None:
            server.count("refused")
            return self._send(404, error_body(404, f"no route {self.path}; this server answers POST "
                                                   f"{' and '.join(API_ROUTES)}"))
        to_chat, to_body = route
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            messages, tools = to_chat(body)
            if not isinstance(messages, list):
                raise ValueError("'messages' must be a list")
        except ConversationMismatch as e:
            server.count("refused")
            return self._send(400, error_body(400, f"bad request body: {e}"))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            server.count("refused")
            return self._send(400, error_body(400, f"bad request body: {type(e).__name__}: {e}"))
        if body.get("stream"):
            server.count("refused")
            return self._send(400, error_body(400, "stream=true is not supported by cellbench serve"))
        latency, status = server.faults.draw()
        if status is not None:
            server.count("faults")
            headers = {}
            if status == 429 and server.faults.retry_after_s is not None:
                headers["Retry-After"] = f"{server.faults.retry_after_s:g}"
            self._log(f"{status} injected")
            return self._send(status, error_body(status, f"injected {status} (cellbench serve --fail-rate)"), headers)
        try:
            reply = server.endpoint.reply(messages, tools)
        except ConversationMismatch as e:
            server.count("refused")
            self._log(f"400 {e}")
            return self._send(400, error_body(400, f"not a scripted conversation: {e}"))
        wait = latency - (time.monotonic() - started)
        if wait > 0:
            time.sleep(wait)
        server.count("replies")
        names = ",".join(c.name for c in reply.tool_calls)
        self._log(f"200 {names} after {time.monotonic() - started:.2f} s ({len(messages)} messages)")
        self._send(200, to_body(reply, body.get("model") or server.endpoint.model), {"x-cellbench-usage": "estimated"})

    def _log(self, text: str) -> None:
        if self.server.log is not None:
            print(f"[serve] {time.strftime('%H:%M:%S')} {self.client_address[0]} {text}", file=self.server.log,
                  flush=True)


def make_server(host: str = "127.0.0.1", port: int = 0, *, model: str = "scripted-v1",
                faults: FaultPlan | None = None, max_open: int = MAX_OPEN_CONVERSATIONS, log=None) -> RehearsalServer:
    """A bound server (port 0: any free port); run it with serve_forever() in a thread or in the foreground."""
    return RehearsalServer((host, port), ScriptedEndpoint(model, max_open), faults or FaultPlan(), log)


def main_serve(args) -> int:
    from agents.errors import CellbenchError

    try:
        statuses = tuple(int(s) for s in str(args.fail_statuses).split(",") if s.strip())
    except ValueError:
        raise CellbenchError(f"--fail-statuses must be comma-separated HTTP statuses, got {args.fail_statuses!r}")
    faults = FaultPlan(latency_s=args.latency_s, jitter_s=args.jitter_s, fail_rate=args.fail_rate,
                       fail_statuses=statuses, retry_after_s=args.retry_after_s, seed=args.seed)
    try:
        server = make_server(args.host, args.port, model=args.model, faults=faults,
                             log=None if args.quiet else sys.stderr)
    except OSError as e:
        raise CellbenchError(f"cannot listen on {args.host}:{args.port}: {e}")
    print(f"cellbench serve: the scripted planner at {server.base_url} (latency {args.latency_s:g} s "
          f"± {args.jitter_s:g}, fail rate {args.fail_rate:g}); set OPENAI_BASE_URL={server.base_url} "
          f"OPENAI_API_KEY=any and planner.name=openai. Ctrl-C stops.", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        print(f"cellbench serve: stopped; {server.counts}", file=sys.stderr)
    return 0
