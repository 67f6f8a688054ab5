"""A tool call's arguments against τ²'s tool schema: coerced where unambiguous, refused with a clear error.

Some servers render every argument as a string (Ollama 7843: `"total_baggages": "2"`), and τ²'s tools do
not validate their arguments: the model was shown Python's `unsupported operand type(s) for -: 'str' and
'int'`. Two steps, both against τ²'s own tool parameters (`Tool.params`, the pydantic model its schema
comes from):

- `coerce_arguments(params, arguments)`, on the wire before the harness sees the reply
  (`endpoint.ReplyShapeTransport`): a value pydantic's lax mode turns into the declared type (`"2"` to 2,
  `"true"` to true, a JSON text of a list to the list, an integer where a string is declared to its
  digits) is replaced, and each replacement is named in an `arguments_coerced` endpoint note. The
  trajectory then holds what was executed, so τ²'s scorer replays the same call.
- `guard_tools(environment)`, on every environment the suite builds (`suite.get_environment`, the trial's
  and the scorer's alike, so a replay answers the same): a call whose argument still has the wrong type
  is refused before the tool runs, with `argument 'total_baggages' of update_reservation_baggages must be
  an integer (τ²'s tool schema); got the string 'two'` as the tool's error.

Coercion is made only where it is unambiguous (`_unambiguous`): never a boolean to a number (`true` is not
the amount 1), never to null or a number that is not finite (`"NaN"`, `"1e400"`), and only a value that
survives a JSON round trip, so the note, the executed call and what the model is told agree. A boolean for a
number and a non-finite number are refused by the guard too (pydantic's lax mode would let them through).

Only type errors are refused (pydantic error types `*_type`, `*_parsing`, `int_from_float`); a missing
argument, a value outside a `Literal` and anything else are left to the tool, as τ² has them. This module
must not import harness code.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from pytest_ecdysis.endpoint.replies import has_markup, repair_tool_name

#: JSON type names for messages.
_JSON_TYPES = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    list: "array",
    dict: "object",
    type(None): "null",
}
#: pydantic error types that mean "a value of the wrong type", with the type they name.
_WANTED = {
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "string": "a string",
    "list": "an array",
    "dict": "an object",
    "model": "an object",
    "date": "a date string",
    "datetime": "a datetime string",
}


def json_type(value: Any) -> str:
    """The JSON type name of a decoded JSON value (`"string"`, `"integer"`, ...)."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _schema_types(params: type[BaseModel]) -> dict[str, set[str]]:
    """Top-level argument -> its declared JSON types (from `type` or `anyOf`)."""
    out: dict[str, set[str]] = {}
    for name, prop in (params.model_json_schema().get("properties") or {}).items():
        options = prop.get("anyOf") or [prop]
        out[name] = {t for o in options if isinstance(o, dict) and isinstance(t := o.get("type"), str) and t}
    return out


def coerce_arguments(params: type[BaseModel] | None, arguments: Any) -> tuple[Any, list[str]]:
    """`(arguments, changes)`: the arguments with every unambiguous type mismatch coerced to τ²'s schema,
    and one sentence per replaced argument. Arguments that cannot be coerced are returned unchanged (the
    environment's guard refuses them); `arguments` that are not a JSON object come back as they are. Never
    raises."""
    if params is None or not isinstance(arguments, dict):
        return arguments, []
    out, changes = dict(arguments), []
    declared = _schema_types(params)
    for key, value in arguments.items():  # two coercions pydantic's lax mode does not make
        wanted = declared.get(key, set())
        if wanted == {"string"} and isinstance(value, int) and not isinstance(value, bool):
            out[key] = str(value)  # an id sent as a number
        elif wanted & {"array", "object"} and isinstance(value, str):
            try:
                decoded = json.loads(value)
            except ValueError:
                continue
            if isinstance(decoded, list | dict):
                out[key] = decoded  # a list or object sent as its JSON text
    try:
        dumped = params.model_validate(out).model_dump(mode="json", exclude_unset=True)
    except ValidationError as exc:
        dumped = _coerce_each(params, out, {str(e["loc"][0]) for e in exc.errors() if e.get("loc")})
    for key, value in arguments.items():
        new = dumped.get(key, out[key])
        if _same(new, value) or not _unambiguous(value, new):
            out[key] = value  # unchanged: the environment's guard refuses what it cannot take
            continue
        out[key] = new
        changes.append(
            f"argument {key!r}: the {json_type(value)} {json.dumps(value)[:60]} coerced to "
            f"{json_type(new)} {json.dumps(new)[:60]} (τ²'s tool schema)"
        )
    return out, changes


def _unambiguous(value: Any, new: Any) -> bool:
    """A coercion of `value` to `new` that is safe to execute: never a boolean to anything else (`true` is
    not the integer 1), never to null from a value, never to a number that is not finite, and `new` must
    survive a JSON round trip unchanged (what is noted is what runs and what the model is told)."""
    if isinstance(value, bool) and not isinstance(new, bool):
        return False
    if new is None and value is not None:
        return False
    if isinstance(new, float) and not math.isfinite(new):
        return False
    try:
        return _same(json.loads(json.dumps(new, allow_nan=False)), new)
    except (TypeError, ValueError):
        return False


def _type_clash(params: type[BaseModel], tool: str, arguments: dict[str, Any]) -> list[str]:
    """Type errors pydantic's lax mode lets through: a boolean for a number (`true` would run as 1) and a
    number that is not finite (`"NaN"`, `"1e400"`), for the top-level arguments."""
    declared = _schema_types(params)
    said = []
    for key, value in arguments.items():
        wanted = declared.get(key, set())
        numeric = wanted & {"integer", "number"}
        if not numeric or "boolean" in wanted:
            continue
        kind = "an integer" if numeric == {"integer"} else "a number"
        if isinstance(value, bool):
            said.append(
                f"argument {key!r} of {tool} must be {kind} (τ²'s tool schema); got the boolean "
                f"{json.dumps(value)}"
            )
            continue
        try:
            number = float(value) if isinstance(value, str | int | float) else 0.0
        except (ValueError, OverflowError):
            continue
        if not math.isfinite(number):
            said.append(
                f"argument {key!r} of {tool} must be a finite number (τ²'s tool schema); got the "
                f"{json_type(value)} {json.dumps(value)[:60]}"
            )
    return said


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values, a number and an equal number of the other kind included (2 and 2.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return json_type(a) == json_type(b) and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _coerce_each(params: type[BaseModel], arguments: dict[str, Any], bad: set[str]) -> dict[str, Any]:
    """The arguments not in `bad`, each validated alone (a call whose other arguments are wrong still gets
    its coercible ones coerced)."""
    fields = params.model_fields
    out = {}
    for key, value in arguments.items():
        if key in bad or key not in fields:
            continue
        try:
            annotation = fields[key].annotation  # None: pydantic's NoneType
            adapter = TypeAdapter(annotation if annotation is not None else type(None))
            out[key] = adapter.dump_python(adapter.validate_python(value), mode="json")
        except (ValidationError, TypeError, ValueError):
            continue
    return out


def refusal(params: type[BaseModel] | None, tool: str, arguments: dict[str, Any]) -> str | None:
    """The error a call gets when an argument has a type τ²'s schema cannot take even in lax mode (naming
    the argument, the type wanted and what came), else None (module docstring: only type errors)."""
    if params is None:
        return None
    clash = _type_clash(params, tool, arguments)
    try:
        params.model_validate(arguments)
        return "; ".join(clash) or None
    except ValidationError as exc:
        said = list(clash)
        for error in exc.errors():
            kind = str(error.get("type", ""))
            base = kind.removesuffix("_type").removesuffix("_parsing")
            if kind == "int_from_float":
                base = "int"
            if base == kind or base not in _WANTED:
                continue
            where = ".".join(str(p) for p in error.get("loc", ())) or "?"
            value = error.get("input")
            said.append(
                f"argument {where!r} of {tool} must be {_WANTED[base]} (τ²'s tool schema); got the "
                f"{json_type(value)} {json.dumps(value, default=str)[:60]}"
            )
        return "; ".join(said) or None


def guard_tools(environment: Any) -> Any:
    """Make `environment`'s assistant tools refuse wrongly typed arguments (`refusal`) before they run;
    returns the environment. Idempotent."""
    toolkit = getattr(environment, "tools", None)
    if toolkit is None or getattr(toolkit, "_ecdysis_guarded", False):
        return environment
    params = tool_params(environment)
    original = toolkit.use_tool

    def use_tool(tool_name: str, **kwargs: Any) -> Any:
        said = refusal(params.get(tool_name), tool_name, kwargs)
        if said:
            raise ValueError(said)
        return original(tool_name=tool_name, **kwargs)

    toolkit.use_tool = use_tool
    toolkit._ecdysis_guarded = True
    return environment


def tool_params(environment: Any) -> dict[str, type[BaseModel]]:
    """τ²'s assistant tools of an environment: name -> parameters model (built once per toolkit class: the
    models come from the tools' signatures)."""
    toolkit = getattr(environment, "tools", None)
    if toolkit is None:
        return {}
    kind = type(toolkit)
    if kind not in _PARAMS:
        _PARAMS[kind] = {name: tool.params for name, tool in toolkit.get_tools().items()}
    return _PARAMS[kind]


#: toolkit class -> its tools' parameters models (`tool_params`).
_PARAMS: dict[type, dict[str, type[BaseModel]]] = {}


def offered_tools(request: Any) -> set[str]:
    """The tool names a chat-completions request offered the model (`tools[].function.name`); a harness may
    offer tools τ² does not have."""
    try:
        body = json.loads(request.read() or b"{}")
    except (ValueError, TypeError):
        return set()
    tools = body.get("tools") if isinstance(body, dict) else None
    return {
        t["function"]["name"]
        for t in tools or []
        if isinstance(t, dict)
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
    }


def fix_calls(
    message: dict[str, Any],
    tools: dict[str, type[BaseModel]],
    offered: set[str] | frozenset[str] = frozenset(),
) -> tuple[bool, list[tuple[str, str]]]:
    """Repair, in place, the tool calls of one chat-completion `message` against τ²'s `tools` (name ->
    parameters model): a name that is a known tool plus chat-template markup becomes that tool (note
    `tool_name_repaired`; markup naming no single known tool: note `tool_name_markup`), and arguments are
    coerced (`coerce_arguments`, note `arguments_coerced`). `offered`: the request's tool names, known too
    (a harness's own tools are repaired, never coerced). Returns (changed, [(note kind, detail)])."""
    if not tools and not offered:
        return False, []
    known, changed, notes = set(tools) | set(offered), False, []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        name = function["name"]
        repaired = repair_tool_name(name, known)
        if repaired is not None and repaired != name:
            function["name"], changed = repaired, True
            notes.append(
                (
                    "tool_name_repaired",
                    f"tool name {name!r} is {repaired!r} with chat-template markup the "
                    "endpoint left in it (its tool parser or chat template does not fit the model); repaired",
                )
            )
        elif repaired is None and has_markup(name):
            notes.append(
                (
                    "tool_name_markup",
                    f"tool name {name!r} carries chat-template markup and names no single "
                    "known tool: the endpoint's tool parser or chat template does not fit the model",
                )
            )
        raw = function.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        coerced, changes = coerce_arguments(tools.get(function["name"]), arguments)
        if changes:
            function["arguments"], changed = json.dumps(coerced), True
            notes.append(("arguments_coerced", f"{function['name']}: " + "; ".join(changes)))
    return changed, notes
