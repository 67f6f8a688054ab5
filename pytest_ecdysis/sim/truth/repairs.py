"""Cures by the harness's code: what the model emitted against what the environment executed.

A harness can prevent a failure without the model ever knowing: it rewrites a bent argument before the
call is executed (`repaired`), or refuses the call so the wrong value never reaches the environment
(`refused`). The model cannot tell, so the agent's own record says "quirk present"; only the pair of what
the model emitted (the server keeps each agent reply's tool call: `note_emitted`) and what τ² executed (the
suite sends the executed calls of its trajectory with the ground-truth request) shows it.

For each ground-truth entry that bent an argument (`tool` and `arg` set, fired at agent request `step`),
let `w` be the value the model emitted there (the first call of that tool in the replies to request `step`
or later: a model that first reads the details back for the user's confirmation emits the call a turn after
the value was drawn) and `g` the plan's value (the plan step of that tool whose arguments the emitted call matches best). Then:

- the executed call with the emitted call's id carries `g` at `arg`: **repaired** (the harness rewrote it);
  it carries `w`: passed through; anything else: **altered** (rewritten, still wrong);
- no executed call has that id: when an executed call of the tool carries `g` at `arg` and the model never
  emitted `g` there, **repaired** (under another id); when none carries `w`, **refused**;
- a repaired entry, and a refused one after which the right value was executed (the model resent it
  right), is `cured` with `cured_by: "harness"` and loses its `effect`: the failure it would have caused
  was prevented in code. A refused entry with no right value executed after it keeps its effect (the work
  was not done). An entry whose value the model emitted right (`w == g`, e.g. a blind spot a rule cured)
  is not touched: the cure, if any, is the model's.

`attribute(truth, emitted, executed, plan)` returns the ground truth with `harness` set on those entries
and `cause`/`causes` recomputed (`sim/truth/causes.py`). Pure functions; no I/O, no tau2.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_ecdysis.sim.truth.causes import trial_cause
from pytest_ecdysis.sim.values import _get_path

_MISSING = object()


def note_emitted(emitted: dict[str, dict[str, Any]], step: int, reply: Mapping[str, Any]) -> None:
    """Record the tool calls of the agent's reply to request `step` (0-based) in `emitted` (call id ->
    `{"step", "name", "arguments"}`, arguments as the raw JSON string the model sent). A retried request
    answered with the same reply keeps its first step."""
    for call in reply.get("tool_calls") or []:
        function = call.get("function") or {}
        if call.get("id") and call["id"] not in emitted:
            emitted[call["id"]] = {
                "step": step,
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }


def executed_calls(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls τ² executed, in order, from a trajectory of message dicts (`role`, `tool_calls`
    with `id`, `name`, `arguments`): every call of an assistant message, which τ²'s orchestrator runs."""
    out = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for c in m.get("tool_calls") or []:
            out.append({"id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments")})
    return out


def _args(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _at(args: Any, path: str) -> Any:
    try:
        return _get_path(args, path)
    except (KeyError, IndexError, TypeError, ValueError):
        return _MISSING


def _gold(plan: Sequence[Any], name: str, sent: dict[str, Any], path: str) -> Any:
    """The plan's value at `path` of the plan step of tool `name` the sent arguments match best: fewest
    differing arguments, then the value at `path` closest to the sent one (two cancellations of different
    reservations differ only there)."""
    sent_value = str(_at(sent, path))
    best, best_key = _MISSING, None
    for step in plan:
        value = _at(step.arguments, path)
        if step.name != name or value is _MISSING:
            continue
        diff = sum(sent.get(k) != v for k, v in step.arguments.items())
        chars = sum(a != b for a, b in zip(str(value), sent_value, strict=False)) + abs(
            len(str(value)) - len(sent_value)
        )
        if best_key is None or (diff, chars) < best_key:
            best, best_key = value, (diff, chars)
    return best


def _verdict(
    entry: Mapping[str, Any],
    emitted: Mapping[str, tuple[Mapping[str, Any], dict[str, Any] | None]],
    executed: list[tuple[dict[str, Any], dict[str, Any] | None]],
    plan: Sequence[Any],
) -> tuple[str | None, bool]:
    """(`repaired` | `refused` | `altered` | None, whether the right value was executed for it).
    `emitted`: call id -> (record, parsed arguments); `executed`: (call, parsed arguments) in order."""
    tool, path = entry.get("tool"), entry.get("arg")
    if not isinstance(tool, str) or not isinstance(path, str):  # not an entry about one argument of a call
        return None, False
    step = entry.get("step")
    later = sorted(
        (e["step"], cid, a)
        for cid, (e, a) in emitted.items()
        if e["name"] == tool and isinstance(step, int) and e["step"] >= step
    )
    if not later:
        return None, False
    _, cid, sent_args = later[0]
    if sent_args is None:
        return None, False
    wrong, gold = _at(sent_args, path), _gold(plan, tool, sent_args, path)
    if gold is _MISSING or wrong is _MISSING or wrong == gold:
        return None, False
    same_tool = [(c, a) for c, a in executed if c.get("name") == tool]
    right_executed = any(a is not None and _at(a, path) == gold for _, a in same_tool)
    twin = next((a for c, a in same_tool if c.get("id") == cid), _MISSING)
    if twin is not _MISSING:
        value = _at(twin, path) if twin is not None else _MISSING
        if value == gold:
            return "repaired", True
        return (None if value == wrong else "altered"), right_executed
    model_sent_right = any(
        e["name"] == tool and a is not None and _at(a, path) == gold for e, a in emitted.values()
    )
    if right_executed and not model_sent_right:
        return "repaired", True
    if not any(a is not None and _at(a, path) == wrong for _, a in same_tool):
        return "refused", right_executed
    return None, right_executed


def attribute(
    truth: dict[str, Any],
    emitted: Mapping[str, Mapping[str, Any]],
    executed: list[dict[str, Any]],
    plan: Sequence[Any],
) -> dict[str, Any]:
    """The ground truth `truth` (as `sim.agent.draws.QuirkDraws.ground_truth` gives it) with each
    argument-bending entry's `harness` verdict (module docstring), cures by the harness's code settled and
    the cause recomputed.

    `emitted`: call id -> `{"step", "name", "arguments"}` (`note_emitted`); `executed`: `[{"id", "name",
    "arguments"}]` (`executed_calls`); `plan`: the task's `PlanStep`s. `truth` is not modified.
    """
    out = dict(truth)
    quirks = [dict(q) for q in truth.get("quirks") or []]
    sent = {cid: (e, _args(e.get("arguments"))) for cid, e in emitted.items()}
    ran = [(c, _args(c.get("arguments"))) for c in executed]
    for q in quirks:
        if not q.get("tool") or not q.get("arg") or q.get("tool") == "final_answer":
            continue
        verdict, right = _verdict(q, sent, ran, plan)
        if verdict is None:
            continue
        q["harness"] = verdict
        if verdict == "repaired" or (verdict == "refused" and right):
            q["cured"] = True
            q["cured_by"] = "harness"
            q.pop("effect", None)
    out["quirks"] = quirks
    out["executed_calls"] = len(executed)
    out["cause"], out["causes"] = trial_cause(quirks, closed=bool(truth.get("closed", True)))
    return out
