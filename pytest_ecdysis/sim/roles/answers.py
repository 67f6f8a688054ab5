"""The simulated model's answers to the diagnosis roles (analyst, critic, engineer, moderator).

    text = answer("critic", {"messages": [...], ...})     # the body of a /v1/chat/completions request

A pure function of the request's messages: the evidence JSON the prompt carries (`<evidence>...`, see
`pytest_ecdysis.evidence.build`), the shared transcript (`<turn role=... pass=...>`) and the `<respond ...
format=.../>` marker. It never reads the server's quirk state or ground truth, so a fresh server gives the
same answer to the same prompt, and removing a group's evidence removes that group from the spec.
It knows no harness's wording: mechanisms are found from signals any harness produces (the tool result
the model saw against the environment's, harness_notes kinds, an error paired with the argument that
caused it, repeated identical calls, the user's last turn before a stop).

How evidence maps to knobs (docs/internals.md, "Spec parameters"), per group, from its example records:

| evidence in a failing record | change |
| --- | --- |
| a tool error like "not found" on an `*_id` argument that does not show the expected form (no example of another form, no case/prefix/space rule) | `error_feedback`; plus `id_normalisation` with rules (`<arg>:#prefix`, `<arg>:upper`, `<arg>:strip`) when another value or the conversation shows the expected form |
| a tool result the model saw shorter than the environment's (`model_view` vs the raw result: evidence `result_is` and `result_chars`) | `max_tool_result_chars` = the raw length x1.25, rounded up to 500 |
| a harness note whose kind names a limit (`budget`, `limit`, `exhausted`, ...) | `max_model_calls` = 2 x the current setting (at most 150) |
| a harness note about trimmed context (kind containing `trim` or `context`) | `keep_last_messages` = 2 x current (80 if unknown) |
| the same failing call repeated and answered with the identical error | `repeat_guard` |
| a tool error about invalid JSON arguments | nothing: the harness already answers them (left alone) |
| ended by user/agent stop with `db`/`communicate` failed and none of the above, on >= 2 tasks (across groups), or in a prompt showing a single failure (self-evolution) | `completion_check` |
| the same on one task only | left alone as a model blind spot |
| a write argument one or two characters off a value seen earlier (user's words, earlier call arguments), in a single-task group | the analyst is tempted by a `policy_rule` naming the value, which the Critic blocks |
| the same (a value the environment accepted, near the one the user stated) on >= 2 tasks | `value_check` (tool interface: such a value is replaced before the call) |
| any of the above that the harness map shows the harness already does (a function whose docstring names the behaviour and does not open with a negation, `sim.roles.evidence.MECHANISM_WORDS`) | nothing: left alone, naming the file and function |

The Critic blocks policy rules for single-task groups, changes to the `build_agent` entry point
(`__init__.py`, the runtime contract with the suite) and changes identical to a rejected earlier one,
and narrows changes that would run on tasks the incumbent solves (trigger, guards, `watch_tasks`). The
Engineer keeps the ledger; later Analyst passes drop what is disputed; the Moderator writes the spec
from the last ledger. This module must not import tau2, task suites, the server's state or ground truth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pytest_ecdysis.evidence.build import EVIDENCE_CLOSE, extract_json, parse_evidence, parse_turns
from pytest_ecdysis.sim.roles.analysis import World, _dedupe_left

ROLES = ("analyst", "critic", "engineer", "moderator")
RESPOND_RE = re.compile(r'<respond role="(\w+)" pass="(\w+)" passes="(\d+)" format="(\w+)"/>')

DEFAULT_FORMATS = {"analyst": "proposal", "critic": "verdicts", "engineer": "ledger", "moderator": "spec"}
NARROW_GUARD = "leaves values and conversations that already succeed unchanged"


def answer(role: str, body: Mapping[str, Any]) -> str:
    """The simulated reply text of `role` to a chat-completions request body.

    Raises:
        ValueError: an unknown role, or a prompt without evidence (the message says what is missing);
            the server turns it into an HTTP 400.
    """
    if role == "editor":
        raise ValueError(
            "the simulated model writes no free-form code edits: with a simulated diagnosis model "
            "use --ecdysis-editor sim (edit recipes), or a real model for --ecdysis-editor builtin"
        )
    if role not in ROLES:
        raise ValueError(f"the simulated model answers the roles {', '.join(ROLES)}, not {role!r}")
    messages = body.get("messages") or []
    text = "\n\n".join(
        str(m.get("content") or "")
        for m in messages
        if isinstance(m, Mapping) and m.get("role") in ("system", "user")
    )
    evidence = parse_evidence(text)
    if evidence is None:
        raise ValueError(f"the {role} prompt carries no <evidence>...</evidence> JSON block to diagnose")
    marker = RESPOND_RE.findall(text)
    fmt = marker[-1][3] if marker else DEFAULT_FORMATS[role]
    after = text[text.rfind(EVIDENCE_CLOSE) :]
    turns = parse_turns(after)
    world = World(evidence)
    if fmt == "spec":
        if role == "analyst":
            proposals, left = world.analyse()
            return _json(world.spec(proposals, left, world.watch(proposals)))
        return _json(_moderate(world, turns))
    if role == "analyst":
        return _analyst(world, turns)
    if role == "critic":
        return _critic(world, turns)
    if role == "engineer":
        return _engineer(world, turns)
    return _json(_moderate(world, turns))


# --- the roles ----------------------------------------------------------------------------------------


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)


def _block(prose: str, data: Any) -> str:
    return f"{prose}\n\n```json\n{_json(data)}\n```"


def _last(turns: list[dict[str, Any]], role: str) -> dict[str, Any] | None:
    for turn in reversed(turns):
        if turn["role"] == role:
            value = extract_json(turn["content"])
            return value if isinstance(value, dict) else None
    return None


def _key(change: Mapping[str, Any]) -> str:
    params = change.get("parameters") or {}
    return (
        str(params.get("knob") or change.get("component"))
        + ":"
        + ",".join(sorted(change.get("addresses", [])))
    )


def _analyst(world: World, turns: list[dict[str, Any]]) -> str:
    proposals, left = world.analyse()
    ledger = _last(turns, "engineer")
    if ledger:
        disputed = {
            _key(d.get("change") or {}): d.get("reason", "")
            for d in ledger.get("disputed", [])
            if isinstance(d, dict)
        }
        agreed = {_key(a): a for a in ledger.get("agreed", []) if isinstance(a, dict)}
        kept = []
        for p in proposals:
            k = _key(p)
            if k in disputed:
                left.extend(
                    {"signature": s, "reason": f"proposal blocked in review: {disputed[k]}"}
                    for s in p["addresses"]
                )
            else:
                kept.append(agreed.get(k, p))
        proposals = kept
        left = _dedupe_left(left, proposals)
    prose = (
        f"Analysis of {len(world.groups)} pattern group(s): {len(proposals)} proposed change(s), "
        f"{len(left)} group(s) left alone."
    )
    for p in proposals:
        prose += (
            f"\n- {p['parameters'].get('knob')}: {p['description']} Addresses {', '.join(p['addresses'])}."
        )
    return _block(prose, {"proposals": proposals, "left_alone": left})


def _critic(world: World, turns: list[dict[str, Any]]) -> str:
    proposal = _last(turns, "analyst") or {"proposals": []}
    verdicts = []
    for i, p in enumerate(proposal.get("proposals", [])):
        if not isinstance(p, dict):
            continue
        params = p.get("parameters") or {}
        knob = params.get("knob")
        addresses = p.get("addresses") or []
        tasks = sorted({t for s in addresses for t in world.group_tasks.get(s, [])})
        verdict: dict[str, Any] = {
            "change": i,
            "verdict": "accept",
            "reason": "",
            "trigger": None,
            "guards": [],
            "watch_tasks": [],
        }
        old = world.rejected_before(p)
        if knob == "policy_rule" and (not addresses or all(s in world.single_task for s in addresses)):
            verdict.update(
                verdict="block",
                reason=(
                    f"over-fitted: a system-prompt rule naming a value from one task ({', '.join(tasks) or '?'}) would "
                    f"apply to every task{', including solved ones' if world.solved else ''}; it treats a model "
                    "blind spot, not a harness defect"
                ),
            )
        elif any(str(f).endswith("__init__.py") for f in p.get("files") or []):
            verdict.update(
                verdict="block",
                reason=(
                    "runtime-contract risk: __init__.py holds build_agent, the entry point the suite calls; change "
                    "the layer module instead"
                ),
            )
        elif old is not None:
            verdict.update(
                verdict="block",
                reason=(
                    f"identical to a change rejected in round {old.get('round')} (score change "
                    f"{old.get('score_change')})"
                ),
            )
        elif (
            knob in ("completion_check", "id_normalisation", "policy_rule")
            and NARROW_GUARD not in " ".join(p.get("guards") or [])
            and world.touched(knob, addresses)
        ):
            touched = world.touched(knob, addresses)
            narrowed = {
                "completion_check": "the agent is about to end the conversation after at least one "
                "write, and no check was sent yet in this conversation",
                "id_normalisation": "an id argument whose value does not match the expected form",
                "policy_rule": "only the tool calls named in the rule",
            }[knob]
            verdict.update(
                verdict="narrow",
                trigger=narrowed,
                guards=[NARROW_GUARD],
                watch_tasks=touched[:10],
                reason=(
                    f"would also run on {len(touched)} task(s) the incumbent solves "
                    f"({', '.join(touched[:5])}): narrow the trigger and watch them"
                ),
            )
        else:
            verdict["reason"] = "minimal, mechanism visible in the evidence, no runtime-contract change"
        verdicts.append(verdict)
    blocked = sum(v["verdict"] == "block" for v in verdicts)
    narrowed_n = sum(v["verdict"] == "narrow" for v in verdicts)
    prose = f"Reviewed {len(verdicts)} change(s): {blocked} blocked, {narrowed_n} narrowed."
    for v in verdicts:
        if v["verdict"] != "accept":
            prose += f"\n- change {v['change']}: {v['verdict']}: {v['reason']}"
    return _block(prose, {"verdicts": verdicts})


def _engineer(world: World, turns: list[dict[str, Any]]) -> str:
    proposal = _last(turns, "analyst") or {"proposals": [], "left_alone": []}
    review = _last(turns, "critic") or {"verdicts": []}
    by_index = {v.get("change"): v for v in review.get("verdicts", []) if isinstance(v, dict)}
    agreed, disputed, watch = [], [], set()
    left = [x for x in proposal.get("left_alone", []) if isinstance(x, dict)]
    for i, p in enumerate(proposal.get("proposals", [])):
        if not isinstance(p, dict):
            continue
        v = by_index.get(i, {"verdict": "accept"})
        # a module missing at the harness root is a layer the edit creates (the Direct harness has none)
        missing = [
            f
            for f in p.get("files", [])
            if world.files and f not in world.files and not (str(f).endswith(".py") and "/" not in str(f))
        ]
        if v.get("verdict") == "block":
            disputed.append({"change": p, "reason": v.get("reason", "")})
            left.extend(
                {"signature": s, "reason": f"blocked by the critic: {v.get('reason', '')}"}
                for s in p.get("addresses", [])
            )
            continue
        if missing:
            disputed.append({"change": p, "reason": f"not implementable: {missing} not in the harness"})
            continue
        p = dict(p)
        if v.get("verdict") == "narrow":
            p["trigger"] = v.get("trigger") or p.get("trigger", "")
            p["guards"] = list(dict.fromkeys([*p.get("guards", []), *v.get("guards", [])]))
            p["watch_tasks"] = sorted(set(v.get("watch_tasks", [])))
        watch.update(p.get("watch_tasks", []))
        agreed.append(p)
    left = _dedupe_left(left, agreed)
    prose = f"Ledger: {len(agreed)} agreed, {len(disputed)} disputed, {len(left)} group(s) left alone."
    return _block(
        prose, {"agreed": agreed, "disputed": disputed, "left_alone": left, "watch_tasks": sorted(watch)}
    )


def _moderate(world: World, turns: list[dict[str, Any]]) -> dict[str, Any]:
    ledger = _last(turns, "engineer")
    if ledger is None:
        proposals, left = world.analyse()
        return world.spec(proposals, left, [])
    agreed = [a for a in ledger.get("agreed", []) if isinstance(a, dict)]
    left = [x for x in ledger.get("left_alone", []) if isinstance(x, dict)]
    return world.spec(agreed, left, sorted(set(ledger.get("watch_tasks", []))))
