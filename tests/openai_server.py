"""A real LLM endpoint on 127.0.0.1 for tests: scripted replies, recorded requests, injected faults.

It speaks OpenAI's Chat Completions (POST /v1/chat/completions) and, with
bodies built from the SDKs' own types (wire_bodies), OpenAI's Responses API
(POST /v1/responses) and Anthropic's Messages API (POST /v1/messages; point
the anthropic SDK at `server.anthropic_base_url`; its errors have Anthropic's
shape).

    from openai_server import serve   # pytest puts tests/ on sys.path

    with serve(responder, faults=["429", "drop"]) as server:
        planner = OpenAIPlanner(model="m", base_url=server.base_url, api_key="sk-test")
        ...
        assert server.requests[-1].images

`responder(request_json)` decides each reply, so a test can script a whole
episode (look at the last tool result, return the next tool call).  It
returns a `Reply` (or `tool_call(...)`/`text_reply(...)`), a plain string
(assistant text), a full chat-completion dict (sent as is) or a `Fault`.
Faults queued with `faults=` or `server.add_faults()` are served one per
request, before the responder is asked.  Every request is recorded, faulted
or not.
"""
from __future__ import annotations

import itertools
import json
import socket
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class Fault:
    """One injected failure, served instead of a reply."""

    kind: str
    """'status' (an HTTP error), 'hang', 'drop', 'garbage' or 'no_choices'."""
    status: int = 500
    retry_after: float | None = None
    """Seconds, sent as the Retry-After header ('status' faults)."""
    seconds: float = 0.0
    """How long a 'hang' keeps the request open before closing it unanswered."""
    message: str = "injected fault"
    code: str | None = None
    error_type: str = "server_error"
    content_type: str = "application/json"
    """Content-Type of a 'garbage' body."""

    @classmethod
    def rate_limit(cls, retry_after: float = 0.0) -> "Fault":
        return cls("status", 429, retry_after, message="Rate limit reached", code="rate_limit_exceeded",
                   error_type="requests")

    @classmethod
    def server_error(cls, status: int = 500) -> "Fault":
        return cls("status", status, message=f"injected {status}")

    @classmethod
    def error(cls, status: int, message: str, code: str | None = None,
              error_type: str = "invalid_request_error") -> "Fault":
        return cls("status", status, message=message, code=code, error_type=error_type)

    @classmethod
    def context_length(cls) -> "Fault":
        # The wording and code of OpenAI's own context-length error.
        return cls.error(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 131072 tokens. Please reduce the length of the messages.",
            code="context_length_exceeded",
        )

    @classmethod
    def overloaded(cls) -> "Fault":
        # Anthropic's 529.
        return cls("status", 529, message="Overloaded", error_type="overloaded_error")

    @classmethod
    def hang(cls, seconds: float = 5.0) -> "Fault":
        return cls("hang", seconds=seconds)

    @classmethod
    def drop(cls) -> "Fault":
        return cls("drop")

    @classmethod
    def garbage(cls, content_type: str = "application/json") -> "Fault":
        return cls("garbage", 200, content_type=content_type)

    @classmethod
    def no_choices(cls) -> "Fault":
        return cls("no_choices", 200)


#: Shorthands accepted wherever a Fault is.
FAULTS: dict[str, Fault] = {
    "429": Fault.rate_limit(),
    "500": Fault.server_error(500),
    "502": Fault.server_error(502),
    "503": Fault.server_error(503),
    "529": Fault.overloaded(),
    "hang": Fault.hang(),
    "drop": Fault.drop(),
    "garbage": Fault.garbage(),
    "garbage_text": Fault.garbage("text/html"),
    "no_choices": Fault.no_choices(),
    "context_length": Fault.context_length(),
    "401": Fault.error(401, "Incorrect API key provided.", "invalid_api_key"),
    "404": Fault.error(404, "The model does not exist.", "model_not_found"),
}


def as_fault(fault: Fault | str) -> Fault:
    return fault if isinstance(fault, Fault) else FAULTS[fault]


@dataclass
class Reply:
    """The assistant message the server sends, and the usage it reports."""

    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """Each {"name", "arguments" (dict or raw JSON text), optional "id"}."""
    usage: dict[str, Any] | None = None
    """Flat overrides (prompt_tokens, completion_tokens, cached_tokens,
    cache_write_tokens, reasoning_tokens), or a wire-format usage object
    (with *_details) sent as is.  None: a crude estimate from the body size."""
    omit_usage: bool = False
    finish_reason: str | None = None
    reasoning: list[str] = field(default_factory=list)
    """Reasoning the model shows: `reasoning_content` (chat, as vLLM/SGLang send it), reasoning
    items with encrypted content (Responses), thinking blocks with signatures (Anthropic)."""


def tool_call(name: str, arguments: dict[str, Any] | str | None = None, **reply: Any) -> Reply:
    return Reply(tool_calls=[{"name": name, "arguments": arguments if arguments is not None else {}}], **reply)


def text_reply(content: str, **reply: Any) -> Reply:
    return Reply(content=content, **reply)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    raw: bytes
    body: Any
    """Parsed JSON, or None if the body was not JSON."""
    fault: Fault | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """Chat or Anthropic messages; Responses `input` items."""
        body = self.body or {}
        return body.get("messages", body.get("input", []))

    @property
    def tools(self) -> list[dict[str, Any]]:
        return (self.body or {}).get("tools", [])

    @property
    def images(self) -> list[str]:
        """URLs of every image part in the messages, in order."""
        urls = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, list):
                for p in content:
                    if p.get("type") == "image_url":
                        urls.append(p["image_url"]["url"])
                    elif p.get("type") == "input_image":
                        urls.append(p["image_url"])
                    elif p.get("type") == "image" and p["source"]["type"] == "base64":
                        urls.append(f"data:{p['source']['media_type']};base64,{p['source']['data']}")
        return urls


Responder = Callable[[dict[str, Any]], "Reply | str | Fault | dict[str, Any]"]


class OpenAIServer:
    """The running server: its `base_url`, what it `requests` it received, its fault queue."""

    def __init__(self, responder: Responder | None, faults, api_key: str | None, model: str):
        self.responder = responder or (lambda request: text_reply("ok"))
        self.api_key = api_key
        self.model = model
        self.requests: list[RecordedRequest] = []
        self.responder_errors: list[str] = []
        self._faults: list[Fault] = [as_fault(f) for f in faults]
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self  # type: ignore[attr-defined]
        host, port = self._httpd.server_address[:2]
        self.base_url = f"http://{host}:{port}/v1"
        self.anthropic_base_url = f"http://{host}:{port}"  # the anthropic SDK adds /v1/messages itself
        # A short poll interval: shutdown() waits for the next poll, and tests start many servers.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="openai-test-server", daemon=True)

    def add_faults(self, *faults: Fault | str) -> None:
        with self._lock:
            self._faults += [as_fault(f) for f in faults]

    @property
    def pending_faults(self) -> int:
        with self._lock:
            return len(self._faults)

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def next_id(self) -> int:
        return next(self._ids)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()  # wakes hanging handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@contextmanager
def serve(
    responder: Responder | None = None,
    faults: list[Fault | str] | tuple = (),
    *,
    api_key: str | None = None,
    model: str = "cellbench-test-model",
) -> Iterator[OpenAIServer]:
    """Run a server for the `with` block.  With `api_key`, other Bearer tokens get a 401."""
    server = OpenAIServer(responder, faults, api_key, model)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def completion_json(server: OpenAIServer, request: dict[str, Any], raw: bytes, reply: Reply) -> dict[str, Any]:
    """The chat.completion object for `reply`, in OpenAI's wire format."""
    number = server.next_id()
    tool_calls = []
    for index, call in enumerate(reply.tool_calls):
        arguments = call.get("arguments", {})
        tool_calls.append({
            "id": call.get("id", f"call_{number}_{index}"),
            "type": "function",
            "function": {"name": call["name"],
                         "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)},
        })
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.reasoning:
        message["reasoning_content"] = "\n".join(reply.reasoning)
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
    body: dict[str, Any] = {
        "id": f"chatcmpl-test{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", server.model),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "system_fingerprint": "fp_cellbench_test",
    }
    if not reply.omit_usage:
        output_chars = len(reply.content or "") + sum(len(c["function"]["arguments"]) for c in tool_calls)
        body["usage"] = _usage_json(reply.usage, prompt=len(raw) // 4, completion=output_chars // 4 + 1)
    return body


def _usage_json(spec: dict[str, Any] | None, prompt: int, completion: int) -> dict[str, Any]:
    spec = dict(spec or {})
    if "prompt_tokens_details" in spec or "completion_tokens_details" in spec:
        spec.setdefault("total_tokens", spec.get("prompt_tokens", 0) + spec.get("completion_tokens", 0))
        return spec
    prompt = spec.pop("prompt_tokens", prompt)
    completion = spec.pop("completion_tokens", completion)
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": spec.pop("cached_tokens", 0), "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": spec.pop("reasoning_tokens", 0),
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    if "cache_write_tokens" in spec:
        usage["prompt_tokens_details"]["cache_write_tokens"] = spec.pop("cache_write_tokens")
    usage.update(spec)  # anything else (e.g. cache_creation_input_tokens) at the top level
    return usage


#: Path suffix -> the API a request speaks.
_APIS = {"/chat/completions": "chat", "/responses": "responses", "/messages": "anthropic"}


def _invalid_chat_message(body: dict[str, Any]) -> str | None:
    """OpenAI's 400 for an assistant message with null content and no tool call (None when valid)."""
    for i, message in enumerate(body.get("messages") or []):
        if message.get("role") == "assistant" and message.get("content") is None and not message.get("tool_calls"):
            return f"Invalid value for 'messages[{i}].content': expected a string, got null."
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do: the SDK reuses connections
    disable_nagle_algorithm = True  # headers and body go out in two writes: avoid the 40 ms delayed-ACK stall

    @property
    def owner(self) -> OpenAIServer:
        return self.server.owner  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [
                {"id": self.owner.model, "object": "model", "created": 0, "owned_by": "cellbench"}]})
        else:
            self._send_error(404, "Not found", "not_found", "invalid_request_error")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        fault = self.owner._next_fault()
        record = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, raw, body, fault)
        self.owner._record(record)
        self.api = next((api for suffix, api in _APIS.items() if self.path.rstrip("/").endswith(suffix)), None)
        if self.api is None:
            return self._send_error(404, f"Unknown path {self.path}", "not_found", "invalid_request_error")
        # Anthropic's SDK sends x-api-key (older releases) or a Bearer token (2.x).
        key = ((self.headers.get("x-api-key") if self.api == "anthropic" else None)
               or (self.headers.get("Authorization") or "").removeprefix("Bearer "))
        if self.owner.api_key is not None and key != self.owner.api_key:
            return self._send_error(401, "Incorrect API key provided.", "invalid_api_key", "invalid_request_error")
        if body is None:
            return self._send_error(400, "We could not parse the JSON body of your request.", None,
                                    "invalid_request_error")
        if fault is None and self.api == "chat":
            invalid = _invalid_chat_message(body)
            if invalid:  # what OpenAI itself answers, before any model sees the request
                return self._send_error(400, invalid, None, "invalid_request_error")
        if fault is None:
            try:
                answer = self.owner.responder(body)
            except Exception:
                self.owner.responder_errors.append(traceback.format_exc())
                return self._send_error(500, "the test responder raised", None, "server_error")
            if not isinstance(answer, Fault):
                return self._answer(body, raw, answer)
            fault = record.fault = answer
        self._serve_fault(fault)

    def _answer(self, body: dict[str, Any], raw: bytes, answer: Any) -> None:
        if isinstance(answer, str):
            answer = text_reply(answer)
        if isinstance(answer, dict):
            return self._send_json(200, answer)
        if self.api == "chat":
            return self._send_json(200, completion_json(self.owner, body, raw, answer))
        from wire_bodies import anthropic_json, responses_json

        build = responses_json if self.api == "responses" else anthropic_json
        try:
            payload = build(self.owner.next_id(), body, raw, answer)
        except Exception:  # an SDK type that changed: the test must see it, not a retried 500
            self.owner.responder_errors.append(traceback.format_exc())
            return self._send_error(500, "the test server could not build the body", None, "server_error")
        self._send_json(200, payload)

    def _serve_fault(self, fault: Fault) -> None:
        if fault.kind == "status":
            headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
            self._send_error(fault.status, fault.message, fault.code, fault.error_type, headers)
        elif fault.kind == "hang":
            self.owner.stopping.wait(fault.seconds)
            self._drop()
        elif fault.kind == "drop":
            self._drop()
        elif fault.kind == "garbage":
            self._send(200, b"<html><body>502 Bad Gateway (upstream hiccup)", fault.content_type)
        elif fault.kind == "no_choices":
            self._send_json(200, {"id": "chatcmpl-nochoices", "object": "chat.completion",
                                  "created": int(time.time()), "model": self.owner.model})
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _drop(self) -> None:
        # Close the socket with no status line: what a crashed proxy looks like.
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send_error(self, status: int, message: str, code: str | None, error_type: str,
                    headers: dict[str, str] | None = None) -> None:
        if getattr(self, "api", None) == "anthropic":
            error = {"type": "error", "error": {"type": error_type, "message": message}}
        else:
            error = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
        self._send_json(status, error, headers)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout) first
            self.close_connection = True
