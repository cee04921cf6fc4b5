"""JSON Schemas (draft 2020-12) of the trace files, generated from `agents.records`, and a trace validator.

The record dataclasses are the one definition of every field; the schemas in
`agents/schemas/*.schema.json` are derived from their annotations and
attribute docstrings and committed, so a reader of a trace (or another
language) has them without Python.  A test asserts the committed files equal
`generate()`; after changing a record run `python -m agents.schema` to
rewrite them.

`validate_trace(dir)` checks one episode directory against the schemas and
for internal consistency (row counts and token totals agree with
episode.json, cells and images the trace names exist) and returns the
problems as readable lines, each naming the file (and row) and the field.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal

from agents.records import SCHEMA_VERSION, CallRecord, EpisodeRecord, PrimitiveRecord

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = Path(__file__).parent / "schemas"
RECORDS = {"episode": EpisodeRecord, "call": CallRecord, "primitive": PrimitiveRecord}
NAMES = ("episode", "call", "primitive", "transcript")
TOKEN_FIELDS = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens")


# ---------------------------------------------------------------------------
# generation


def _type_schema(tp: Any) -> dict[str, Any]:
    """JSON Schema of one Python annotation (the subset records use)."""
    if tp is Any:
        return {}
    if tp is bool:  # before int: bool is an int subclass, and JSON keeps them apart
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if tp is type(None):
        return {"type": "null"}
    if dataclasses.is_dataclass(tp):  # a nested record (CallRecord.input_sources)
        nested = record_schema(tp, tp.__name__)
        return {k: nested[k] for k in ("type", "properties", "required", "additionalProperties")}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(a) for a in args]
        # `X | None` reads best as a type list when both sides are plain types.
        if all(set(o) == {"type"} and isinstance(o["type"], str) for o in options):
            return {"type": [o["type"] for o in options]}
        if any(o == {"type": "null"} for o in options):
            rest = [o for o in options if o != {"type": "null"}]
            if len(rest) == 1 and "enum" in rest[0]:
                return {"enum": rest[0]["enum"] + [None]}
            if len(rest) == 1 and rest[0].get("type") == "object":
                return {**rest[0], "type": ["object", "null"]}
        return {"anyOf": options}
    if origin is dict or tp is dict:
        value = _type_schema(args[1]) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
    if origin in (list, tuple) or tp in (list, tuple):
        item = _type_schema(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    raise TypeError(f"no JSON Schema mapping for annotation {tp!r}")


def _field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (a string literal right after a field) of a dataclass."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for stmt, nxt in zip(body, body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def record_schema(cls: type, name: str) -> dict[str, Any]:
    """Schema of one record dataclass: every field required, nothing else allowed."""
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    docs = _field_docs(cls)
    props: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        prop = _type_schema(hints[f.name])
        if f.name in docs:
            prop = {"description": docs[f.name], **prop}
        props[f.name] = prop
    if "schema_version" in props:
        props["schema_version"] = {**props["schema_version"], "const": SCHEMA_VERSION}
    return {
        "$schema": DRAFT,
        "$id": f"https://cellbench.local/schemas/v{SCHEMA_VERSION}/{name}.schema.json",
        "title": cls.__name__,
        "description": " ".join((cls.__doc__ or "").split()),
        "type": "object",
        "properties": props,
        "required": [f.name for f in dataclasses.fields(cls)],
        "additionalProperties": False,
    }


def transcript_schema() -> dict[str, Any]:
    """Schema of transcript.json: chat-completions messages with images as file references."""
    text_part = {
        "type": "object",
        "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
        "required": ["type", "text"],
        "additionalProperties": False,
    }
    image_part = {
        "type": "object",
        "description": "An image of the prompt, stored as a PNG under images/ (path relative to the trace directory).",
        "properties": {"type": {"const": "image_ref"}, "path": {"type": "string"}},
        "required": ["type", "path"],
        "additionalProperties": False,
    }
    tool_call = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "type": {"const": "function"},
            "function": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "arguments": {"type": "string", "description": "Raw JSON text as the model wrote it (may be malformed)."},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            },
        },
        "required": ["id", "type", "function"],
        "additionalProperties": False,
    }
    message = {
        "type": "object",
        "properties": {
            "role": {"enum": ["system", "user", "assistant", "tool"]},
            "content": {
                "anyOf": [
                    {"type": "string"},
                    {"type": "null"},
                    {"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/text_part"}, {"$ref": "#/$defs/image_part"}]}},
                ]
            },
            "tool_calls": {"type": "array", "items": {"$ref": "#/$defs/tool_call"}},
            "tool_call_id": {"type": "string"},
        },
        "required": ["role", "content"],
        "additionalProperties": False,
        "allOf": [
            {"if": {"properties": {"role": {"const": "tool"}}}, "then": {"required": ["tool_call_id"]}},
            {"if": {"properties": {"role": {"not": {"const": "assistant"}}}}, "then": {"not": {"required": ["tool_calls"]}}},
        ],
    }
    return {
        "$schema": DRAFT,
        "$id": f"https://cellbench.local/schemas/v{SCHEMA_VERSION}/transcript.schema.json",
        "title": "Transcript",
        "description": "The episode's conversation (OpenAI chat-completions messages) with every image replaced by a file reference.",
        "type": "array",
        "items": {"$ref": "#/$defs/message"},
        "$defs": {"message": message, "text_part": text_part, "image_part": image_part, "tool_call": tool_call},
    }


def generate() -> dict[str, dict[str, Any]]:
    """Every trace schema by short name: episode, call, primitive, transcript."""
    out = {name: record_schema(cls, name) for name, cls in RECORDS.items()}
    out["transcript"] = transcript_schema()
    return out


def dumps(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, schema in generate().items():
        path = directory / f"{name}.schema.json"
        path.write_text(dumps(schema))
        paths.append(path)
    return paths


def load_schema(name: str) -> dict[str, Any]:
    """A committed schema file (what a reader outside Python would use)."""
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())


# ---------------------------------------------------------------------------
# validation


def _validator(name: str):
    from jsonschema import Draft202012Validator

    return Draft202012Validator(load_schema(name))


def _describe(err) -> str:
    """One readable line for a jsonschema error: the field path first."""
    path = ".".join(str(p) for p in err.absolute_path)
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else "?"
        path = f"{path}.{missing}" if path else missing
        return f"field '{path}': missing"
    if err.validator == "additionalProperties" and not path:
        return f"unexpected field(s): {err.message}"
    where = f"field '{path}'" if path else "record"
    return f"{where}: {err.message}"


def _schema_problems(validator, obj: Any, where: str) -> list[str]:
    errors = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{where}: {_describe(e)}" for e in errors]


def _read_jsonl(path: Path, validator, problems: list[str]) -> list[dict[str, Any]]:
    rows = []
    if not path.exists():
        problems.append(f"{path.name}: missing")
        return rows
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name} line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{where}: not JSON: {e}")
            continue
        found = _schema_problems(validator, row, where)
        problems += found
        if not found:
            rows.append(row)
    return rows


def validate_trace(trace_dir: str | Path) -> list[str]:
    """Problems of one episode trace directory; an empty list means it is valid."""
    d = Path(trace_dir)
    problems: list[str] = []
    if not d.is_dir():
        return [f"{d}: not a directory"]

    from agents.trace import record_file

    episode = None
    ep_path = record_file(d)
    if ep_path is None:
        problems.append("episode.json: missing (the episode did not complete)")
    else:
        try:
            episode = json.loads(ep_path.read_text())
        except json.JSONDecodeError as e:
            problems.append(f"{ep_path.name}: not JSON: {e}")
        else:
            found = _schema_problems(_validator("episode"), episode, ep_path.name)
            problems += found
            if found:
                episode = None

    calls = _read_jsonl(d / "calls.jsonl", _validator("call"), problems)
    prims = _read_jsonl(d / "primitives.jsonl", _validator("primitive"), problems)

    indices = [c["call_index"] for c in calls]
    if indices != list(range(1, len(indices) + 1)):
        problems.append(f"calls.jsonl: field 'call_index' must run 1..n in order, got {indices}")
    seqs = [p["seq"] for p in prims]
    if seqs != list(range(len(seqs))):
        problems.append(f"primitives.jsonl: field 'seq' must run 0..n-1 in order, got {seqs}")
    known = set(indices)
    for i, p in enumerate(prims, 1):
        if p["call_index"] not in known:
            problems.append(f"primitives.jsonl row {i}: field 'call_index' {p['call_index']} has no row in calls.jsonl")
    for c in calls:
        per_call = sum(1 for p in prims if p["call_index"] == c["call_index"])
        if c["n_primitives"] != per_call:
            problems.append(f"calls.jsonl call {c['call_index']}: field 'n_primitives' is {c['n_primitives']} "
                            f"but primitives.jsonl has {per_call} rows for it")
        if c["cached_input_tokens"] + c["cache_write_tokens"] > c["input_tokens"]:
            problems.append(f"calls.jsonl call {c['call_index']}: field 'cached_input_tokens' + 'cache_write_tokens' "
                            f"exceeds 'input_tokens' (input includes them)")
        if c["action_kind"] == "cell":
            problems += _check_cell(d, c)

    if episode is not None:
        problems += _check_totals(episode, calls, prims)

    problems += _check_transcript(d)
    return problems


def _check_cell(d: Path, call: dict[str, Any]) -> list[str]:
    rel = f"cells/cell_{call['call_index']:03d}.py"
    path = d / rel
    if not path.exists():
        return [f"{rel}: missing (calls.jsonl call {call['call_index']} ran a cell)"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if call["cell_hash"] != digest:
        return [f"calls.jsonl call {call['call_index']}: field 'cell_hash' does not match {rel}"]
    return []


def _check_totals(ep: dict[str, Any], calls: list[dict[str, Any]], prims: list[dict[str, Any]]) -> list[str]:
    out = []
    if ep["n_calls"] != len(calls):
        out.append(f"episode.json: field 'n_calls' is {ep['n_calls']} but calls.jsonl has {len(calls)} valid rows")
    for k in TOKEN_FIELDS:
        total = sum(c[k] for c in calls)
        if ep[k] != total:
            out.append(f"episode.json: field '{k}' is {ep[k]} but calls.jsonl sums to {total}")
    if ep["n_primitives"] != len(prims):
        out.append(f"episode.json: field 'n_primitives' is {ep['n_primitives']} but primitives.jsonl has {len(prims)} valid rows")
    if ep["n_acting"] != sum(1 for p in prims if p["acting"]):
        out.append("episode.json: field 'n_acting' disagrees with the acting rows of primitives.jsonl")
    solved = ep["solved_at_call"]
    if solved is not None and not 1 <= solved <= max(len(calls), 1):
        out.append(f"episode.json: field 'solved_at_call' {solved} is outside 1..{len(calls)}")
    if ep["status"] == "solved" and not ep["success"]:
        out.append("episode.json: field 'success' is false but status is 'solved'")
    return out


def _check_transcript(d: Path) -> list[str]:
    path = d / "transcript.json"
    if not path.exists():
        return ["transcript.json: missing"]
    try:
        messages = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        return [f"transcript.json: not JSON: {e}"]
    out = []
    for e in sorted(_validator("transcript").iter_errors(messages), key=lambda e: [str(p) for p in e.absolute_path]):
        path_ = list(e.absolute_path)
        where = f"transcript.json message {path_[0]}" if path_ else "transcript.json"
        sub = ".".join(str(p) for p in path_[1:])
        out.append(f"{where}: field '{sub}': {e.message}" if sub else f"{where}: {e.message}")
    if out:
        return out
    for i, m in enumerate(messages):
        if isinstance(m.get("content"), list):
            for part in m["content"]:
                if part["type"] == "image_ref" and not (d / part["path"]).is_file():
                    out.append(f"transcript.json message {i}: image {part['path']!r} does not exist")
    return out


def main(argv: list[str] | None = None) -> int:
    for path in write_schemas():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
