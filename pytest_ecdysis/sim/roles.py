"""The simulated model's answers to the diagnosis roles (analyst, critic, engineer, moderator).

    text = answer("critic", {"messages": [...], ...})     # the body of a /v1/chat/completions request

A pure function of the request's messages: the evidence JSON the prompt carries (`<evidence>...`, see
`pytest_ecdysis.evidence`), the shared transcript (`<turn role=... pass=...>`) and the `<respond ...
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
| a write argument one or two characters off a value seen earlier (user's words, earlier call arguments), in a single-task group | the analyst is tempted by a `policy_rule` naming the value, which the Critic blocks; on several tasks: left alone (slips) |

The Critic blocks policy rules for single-task groups, changes to the `build_agent` entry point
(`__init__.py`, the runtime contract with the suite) and changes identical to a rejected earlier one,
and narrows changes that would run on tasks the incumbent solves (trigger, guards, `watch_tasks`). The
Engineer keeps the ledger; later Analyst passes drop what is disputed; the Moderator writes the spec
from the last ledger. This module must not import tau2, task suites, the server's state or ground truth.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ..evidence import EVIDENCE_CLOSE, extract_json, parse_evidence, parse_turns
from ..records import SCHEMA_VERSION
from .reading import form, states_rule

ROLES = ("analyst", "critic", "engineer", "moderator")

#: knob -> (component, harness setting or function that locates the file, default file).
KNOBS: dict[str, tuple[str, str, str]] = {
    "max_model_calls": ("trajectory_regulation", "MAX_MODEL_CALLS", "config.py"),
    "max_tool_result_chars": ("environment_contract", "MAX_TOOL_RESULT_CHARS", "config.py"),
    "keep_last_messages": ("trajectory_regulation", "KEEP_LAST_MESSAGES", "config.py"),
    "error_feedback": ("environment_contract", "format_tool_result", "feedback.py"),
    "repeat_guard": ("trajectory_regulation", "format_tool_result", "feedback.py"),
    "id_normalisation": ("tool_interface", "normalise_arguments", "tools.py"),
    "completion_check": ("trajectory_regulation", "check_before_end", "closing.py"),
    "policy_rule": ("policy_prompt", "system_prompt", "prompts.py"),
}
VALUE_KNOBS = ("max_model_calls", "max_tool_result_chars", "keep_last_messages")
MAX_MODEL_CALLS_CAP = 150

#: The evidence's own mark for the middle of a long result it shortened (`evidence.cut`): not the harness's.
EVIDENCE_CUT_RE = re.compile(r"\[\.\.\. (\d+) chars cut \.\.\.\]")
#: harness_notes kinds that say the harness's own limit ended the trial.
LIMIT_NOTE_RE = re.compile(r"budget|limit|max_(steps|calls)|exhausted", re.I)
ID_ERROR_RE = re.compile(r"not found|does not exist|no such|invalid|unknown|could not find", re.I)
JSON_ERROR_RE = re.compile(r"json", re.I)
READ_TOOL_RE = re.compile(r"^(get|find|list|search|calculate|think|transfer|lookup|check)")
RESPOND_RE = re.compile(r'<respond role="(\w+)" pass="(\w+)" passes="(\d+)" format="(\w+)"/>')
TOKEN_RE = re.compile(r"[#\w-]{3,}")

DEFAULT_FORMATS = {"analyst": "proposal", "critic": "verdicts", "engineer": "ledger", "moderator": "spec"}
NARROW_GUARD = "leaves values and conversations that already succeed unchanged"


def answer(role: str, body: Mapping[str, Any]) -> str:
    """The simulated reply text of `role` to a chat-completions request body.

    Raises:
        ValueError: an unknown role, or a prompt without evidence (the message says what is missing);
            the server turns it into an HTTP 400.
    """
    if role == "editor":
        raise ValueError("the simulated model writes no free-form code edits: with a simulated diagnosis model "
                         "use --ecdysis-editor sim (edit recipes), or a real model for --ecdysis-editor builtin")
    if role not in ROLES:
        raise ValueError(f"the simulated model answers the roles {', '.join(ROLES)}, not {role!r}")
    messages = body.get("messages") or []
    text = "\n\n".join(str(m.get("content") or "") for m in messages
                       if isinstance(m, Mapping) and m.get("role") in ("system", "user"))
    evidence = parse_evidence(text)
    if evidence is None:
        raise ValueError(f"the {role} prompt carries no <evidence>...</evidence> JSON block to diagnose")
    marker = RESPOND_RE.findall(text)
    fmt = marker[-1][3] if marker else DEFAULT_FORMATS[role]
    after = text[text.rfind(EVIDENCE_CLOSE):]
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


# --- reading the evidence -----------------------------------------------------------------------------


def _is_error(call: Mapping[str, Any]) -> bool:
    return bool(call.get("error")) or str(call.get("result") or "").lstrip().lower().startswith("error")


def _round_up(x: float, step: int) -> int:
    return int(math.ceil(x / step) * step)


def _cut_chars(call: Mapping[str, Any]) -> int:
    """How many characters of the environment's result the model did not see: the evidence marks a
    result that differs from the environment's output (`result_is`, from the record's `model_view`) and
    gives the environment's length (`result_chars`); 0 when the model saw it all or nothing is known."""
    raw = call.get("result_chars")
    if not call.get("result_is") or not isinstance(raw, int) or call.get("result") is None:
        return 0
    shown = str(call["result"])
    seen = len(EVIDENCE_CUT_RE.sub("", shown)) + sum(int(m) for m in EVIDENCE_CUT_RE.findall(shown))
    return raw - seen if seen < raw * 0.98 else 0


def shows_form(text: str, value: str) -> bool:
    """Whether an error text shows the expected form of an id the model sent as `value`: an id-like example
    in another form than `value`'s, or a statement of a case, prefix or whitespace rule the value breaks."""
    sent = form(value)
    for token in re.findall(r"[#\w][\w#.\-]{4,}", text):
        if token != value.strip() and any(c.isdigit() for c in token) and form(token) != sent:
            return True
    return any(states_rule(text, candidate, value) for candidate in
               (value.strip().upper(), value.strip().lower(), "#" + value.strip(), value.strip()))


def _near(a: str, b: str) -> bool:
    """Same length, different, at most two characters apart (case-sensitive)."""
    return len(a) == len(b) and a != b and sum(x != y for x, y in zip(a, b, strict=True)) <= 2


class World:
    """The evidence of one prompt, with lookups the roles share."""

    def __init__(self, evidence: dict[str, Any]) -> None:
        self.ev = evidence
        self.groups = [g for g in evidence.get("groups", []) if isinstance(g, dict)]
        self.settings: dict[str, tuple[str, Any]] = {}
        self.functions: dict[str, str] = {}
        self.files: set[str] = set()
        for f in (evidence.get("harness") or {}).get("files", []):
            self.files.add(f.get("path", ""))
            for name, value in (f.get("settings") or {}).items():
                self.settings.setdefault(name, (f["path"], value))
            for sig in f.get("functions", []):
                self.functions.setdefault(sig.split("(")[0].split(":")[0].replace("class ", "").strip(), f["path"])
        solved = evidence.get("solved_tasks") or []
        self.solved = sorted(solved)
        #: tools each solved task used, when the evidence says (a mapping); None when only ids are known.
        self.solved_tools = {str(k): set(v or []) for k, v in solved.items()} if isinstance(solved, dict) else None
        self.history = [h for h in evidence.get("history", []) if isinstance(h, dict)]
        self.single_task = {g["signature"] for g in self.groups if not g.get("cross_task")}
        #: the prompt shows exactly one failure record (an instance-level analyst: self-evolution)
        self.single_failure = sum(len(g.get("examples", [])) for g in self.groups) == 1
        self.group_tasks = {g["signature"]: g.get("tasks", []) for g in self.groups}
        self.group_tools = {g["signature"]: {str(c.get("name")) for r in g.get("examples", [])
                                             for c in r.get("tool_calls", [])} for g in self.groups}
        # known-good values of each argument, over every example shown
        self.good: dict[str, set[str]] = {}
        for g in self.groups:
            for rec in g.get("examples", []):
                for call in rec.get("tool_calls", []):
                    if not _is_error(call):
                        for k, v in (call.get("arguments") or {}).items():
                            if isinstance(v, str):
                                self.good.setdefault(k, set()).add(v)

    def file_for(self, knob: str) -> str:
        _, locator, default = KNOBS[knob]
        if locator in self.settings:
            return self.settings[locator][0]
        if locator in self.functions:
            return self.functions[locator]
        return default

    def setting(self, knob: str) -> int | None:
        value = self.settings.get(KNOBS[knob][1], (None, None))[1]
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    # findings of one record ------------------------------------------------------------------------

    def findings(self, rec: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        calls = [c for c in rec.get("tool_calls", []) if isinstance(c, dict)]
        texts = [str(m.get("content") or "") for m in rec.get("excerpt", []) if isinstance(m, dict)]
        user_texts = [str(m.get("content") or "") for m in rec.get("excerpt", [])
                      if isinstance(m, dict) and m.get("role") == "user"]
        notes = [n for n in rec.get("harness_notes", []) if isinstance(n, dict)]
        for i, call in enumerate(calls):
            result = str(call.get("result") or "")
            if _is_error(call) and JSON_ERROR_RE.search(result):
                out.append({"kind": "json_handled", "quote": result})
                continue
            if _is_error(call) and ID_ERROR_RE.search(result):
                for arg, value in (call.get("arguments") or {}).items():
                    if not (isinstance(value, str) and re.search(r"(^|_)id$", arg)):
                        continue
                    out.append({"kind": "id_error", "arg": arg, "tool": call.get("name"), "quote": result,
                                "named": shows_form(result, value), "rules": self._id_rules(arg, value, texts)})
            cut = _cut_chars(call)
            if cut:
                out.append({"kind": "truncated", "n": cut, "raw": int(call["result_chars"]),
                            "quote": f"{call.get('name')}: the model saw {int(call['result_chars']) - cut} of "
                                     f"{call['result_chars']} characters of the environment's result"})
            if _is_error(call):
                for later in calls[i + 1:]:
                    if later.get("name") == call.get("name") and later.get("arguments") == call.get("arguments") \
                            and _is_error(later):
                        out.append({"kind": "repeat", "tool": call.get("name"), "quote": result,
                                    "flagged": str(later.get("result")) != result})
                        break
        for n in notes:
            kind = str(n.get("kind") or "")
            if LIMIT_NOTE_RE.search(kind) and not any(f["kind"] == "budget" for f in out):
                out.append({"kind": "budget", "n": self.setting("max_model_calls") or len(calls) or None,
                            "quote": f"harness note {kind}: {str(n.get('detail') or '')[:120]}"})
            elif "trim" in kind or "context" in kind:
                out.append({"kind": "trimmed", "quote": json.dumps(n)[:160]})
        if rec.get("label") or rec.get("termination_reason") == "endpoint_format_error":
            out.append({"kind": "endpoint", "quote": str(rec.get("label") or "endpoint_format_error")})
        mechanisms = {"id_error", "truncated", "budget", "repeat", "trimmed", "endpoint", "json_handled"}
        failed = set(rec.get("failed_components") or [])
        if rec.get("termination_reason") in ("user_stop", "agent_stop") and failed & {"db", "communicate"} \
                and not any(f["kind"] in mechanisms for f in out):
            finding: dict[str, Any] = {"kind": "incomplete", "task": rec.get("task_id"),
                                       "quote": texts[-1][:200] if texts else ""}
            near = self._near_miss(calls, user_texts)
            if near:
                finding["near_miss"] = near
            out.append(finding)
        return out

    def _id_rules(self, arg: str, value: str, texts: list[str]) -> list[str]:
        rules = []
        good = {g for g in self.good.get(arg, set()) if g != value}
        joined = "\n".join(texts)
        if value != value.strip():
            rules.append(f"{arg}:strip")
        v = value.strip()
        if not v.startswith("#") and (any(g == "#" + v for g in good) or f"#{v}" in joined
                                      or (good and all(g.startswith("#") for g in good))):
            rules.append(f"{arg}:#prefix")
        if v != v.upper() and (v.upper() in good or re.search(rf"\b{re.escape(v.upper())}\b", joined)
                               or (good and all(g == g.upper() for g in good))):
            rules.append(f"{arg}:upper")
        return rules

    def _near_miss(self, calls: list[dict[str, Any]], user_texts: list[str]) -> dict[str, str] | None:
        """The last write's argument that is one or two characters off a value seen earlier (in the user's
        words or an earlier call's arguments) and never seen exactly: a wrong value, not an early end."""
        for i in range(len(calls) - 1, -1, -1):
            call = calls[i]
            name = str(call.get("name") or "")
            if READ_TOOL_RE.match(name) or _is_error(call):
                continue
            seen = {t for text in user_texts for t in TOKEN_RE.findall(text)}
            seen |= {v for c in calls[:i] for v in (c.get("arguments") or {}).values() if isinstance(v, str)}
            for arg, value in sorted((call.get("arguments") or {}).items()):
                if isinstance(value, str) and len(value) >= 3 and value not in seen:
                    for t in sorted(seen):
                        if _near(t, value):
                            return {"tool": name, "arg": arg, "wrong": value, "right": t}
            return None
        return None

    # the analysis ----------------------------------------------------------------------------------

    def analyse(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Proposals (SpecChange-shaped dicts, one per knob) and left-alone groups, from the evidence."""
        changes: dict[str, dict[str, Any]] = {}
        left: list[dict[str, Any]] = []
        unexplained: list[tuple[str, list[dict[str, Any]], set[str]]] = []

        def add(knob: str, sig: str, quote: str, **params: Any) -> None:
            key = knob if knob != "policy_rule" else f"policy_rule:{params.get('text')}"
            ch = changes.get(key)
            if ch is None:
                ch = changes[key] = {"knob": knob, "addresses": [], "quotes": [], "params": {}}
            if sig not in ch["addresses"]:
                ch["addresses"].append(sig)
            if quote and len(ch["quotes"]) < 2 and quote not in ch["quotes"]:
                ch["quotes"].append(quote)
            for k, v in params.items():
                if k == "value":
                    ch["params"]["value"] = max(v, ch["params"].get("value", 0))
                elif k == "rules":
                    ch["params"]["rules"] = sorted(set(ch["params"].get("rules", [])) | set(v))
                else:
                    ch["params"][k] = v

        for g in self.groups:
            sig = g.get("signature", "")
            examples = [r for r in g.get("examples", []) if isinstance(r, dict)]
            if not examples:
                left.append({"signature": sig, "reason": "no example records in the evidence: not diagnosed"})
                continue
            found = [f for rec in examples for f in self.findings(rec)]
            kinds = {f["kind"] for f in found}
            before = {k: len(c["addresses"]) for k, c in changes.items()}
            for f in found:
                if f["kind"] == "id_error" and not f["named"]:
                    add("error_feedback", sig, f["quote"])
                if f["kind"] == "id_error" and f["rules"]:
                    add("id_normalisation", sig, f["quote"], rules=f["rules"])
                if f["kind"] == "truncated":
                    add("max_tool_result_chars", sig, f["quote"], value=_round_up(f["raw"] * 1.25, 500))
                if f["kind"] == "budget" and f.get("n"):
                    add("max_model_calls", sig, f["quote"], value=min(2 * f["n"], MAX_MODEL_CALLS_CAP))
                if f["kind"] == "repeat" and not f["flagged"]:
                    add("repeat_guard", sig, f["quote"])
                if f["kind"] == "trimmed":
                    current = self.setting("keep_last_messages")
                    add("keep_last_messages", sig, f["quote"], value=2 * current if current else 80)
            if any(len(c["addresses"]) != before.get(k, 0) for k, c in changes.items()):
                continue
            unexplained.append((sig, found, kinds))

        # Work left undone with no mechanism in sight: a pattern when it shows on >= 2 tasks, even across
        # groups the signatures split (e.g. `db` vs `db+communicate`); a wrong value in a write stays with
        # its group (model-like), as does an early end seen on one task only.
        early = {f["task"] for _, found, _ in unexplained for f in found
                 if f["kind"] == "incomplete" and not f.get("near_miss")}
        for sig, found, kinds in unexplained:
            incomplete = [f for f in found if f["kind"] == "incomplete"]
            ended_early = [f for f in incomplete if not f.get("near_miss")]
            if ended_early and (len(early) >= 2 or self.single_failure):
                # a single-failure prompt (self-evolution) cannot compare tasks: like a real model, it
                # answers work left undone with a completion check
                add("completion_check", sig, ended_early[0]["quote"])
            elif incomplete:
                near = next((f["near_miss"] for f in incomplete if f.get("near_miss")), None)
                if near and sig in self.single_task:
                    text = (f"When calling {near['tool']}, use {near['arg']} {near['right']} exactly as stated "
                            f"earlier in the conversation (not {near['wrong']}).")
                    add("policy_rule", sig, f"{near['tool']}({near['arg']}={near['wrong']!r}); earlier: "
                        f"{near['right']!r}", text=text)
                elif near:
                    left.append({"signature": sig, "reason": "wrong values in writes on several tasks, each a near "
                                 "miss of a value seen earlier, with no common harness mechanism: model slips"})
                else:
                    left.append({"signature": sig, "reason": "single task, ended with the work incomplete and no "
                                 "harness mechanism visible (no tool error, truncation or budget): looks like a "
                                 "model blind spot, not a harness defect"})
            elif "json_handled" in kinds:
                left.append({"signature": sig, "reason": "the harness already answers invalid JSON arguments with "
                             "a tool error; nothing to change"})
            elif "endpoint" in kinds:
                left.append({"signature": sig, "reason": "endpoint format errors: the endpoint's replies were "
                             "unusable; not a harness policy defect (no knob addresses it)"})
            elif kinds & {"id_error", "repeat"}:
                left.append({"signature": sig, "reason": "the harness already names the argument and expected "
                             "form / flags repeats; the remaining errors are the model's"})
            else:
                left.append({"signature": sig, "reason": "no harness-level cause visible in the evidence"})

        proposals = [self._change(c) for _, c in sorted(changes.items())]
        proposals, dropped = self._against_history(proposals)
        for change, reason in dropped:
            for sig in change["addresses"]:
                left.append({"signature": sig, "reason": reason})
        return proposals, _dedupe_left(left, proposals)

    def _change(self, c: dict[str, Any]) -> dict[str, Any]:
        knob = c["knob"]
        params = {"knob": knob, **c["params"]}
        quote = " | ".join(q[:160] for q in c["quotes"])
        text = KNOB_TEXT[knob]
        value = params.get("value")
        desc = text["description"].format(value=value, rules=", ".join(params.get("rules", [])),
                                          text=params.get("text", ""), current=self.setting(knob))
        return {
            "component": KNOBS[knob][0],
            "files": [self.file_for(knob)],
            "description": desc,
            "trigger": text["trigger"],
            "addresses": sorted(c["addresses"]),
            "expected_effect": text["effect"] + (f" Evidence: {quote}" if quote else ""),
            "risks": list(text["risks"]),
            "guards": list(text["guards"]),
            "parameters": params,
        }

    def _against_history(self, proposals: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
        kept, dropped = [], []
        for p in proposals:
            params = p["parameters"]
            verdict = None
            for h in self.history:
                for old in h.get("changes") or []:
                    old_params = old.get("parameters") or {}
                    if old_params.get("knob") != params["knob"]:
                        continue
                    if h.get("accepted") and params["knob"] not in VALUE_KNOBS:
                        verdict = (f"{params['knob']} was applied in round {h.get('round')} (accepted); the "
                                   "remaining failures are not explained by its absence")
                    elif not h.get("accepted") and old_params == params:
                        verdict = (f"{params['knob']} with the same parameters was tried in round {h.get('round')} "
                                   f"and rejected (score change {h.get('score_change')}); not proposed unchanged")
            if verdict:
                dropped.append((p, verdict))
            else:
                kept.append(p)
        return kept, dropped

    def rejected_before(self, change: Mapping[str, Any]) -> dict[str, Any] | None:
        params = change.get("parameters") or {}
        for h in self.history:
            if h.get("accepted"):
                continue
            for old in h.get("changes") or []:
                if params and (old.get("parameters") or {}) == params:
                    return h
        return None

    def touched(self, knob: str | None, addresses: list[str]) -> list[str]:
        """Solved tasks a change would run on: all of them when only ids are known; with the tools each
        solved task used, those with a write (completion_check) or a tool of the addressed groups."""
        if self.solved_tools is None or knob == "policy_rule":
            return self.solved
        if knob == "completion_check":
            return sorted(t for t, tools in self.solved_tools.items() if any(not READ_TOOL_RE.match(x) for x in tools))
        tools = {x for s in addresses for x in self.group_tools.get(s, set())}
        return sorted(t for t, used in self.solved_tools.items() if used & tools)

    def watch(self, proposals: list[dict[str, Any]]) -> list[str]:
        tasks: set[str] = set()
        for p in proposals:
            tasks.update(p.get("watch_tasks", []))
        return sorted(tasks)

    def spec(self, proposals: list[dict[str, Any]], left: list[dict[str, Any]], watch: list[str]) -> dict[str, Any]:
        changes = [{k: v for k, v in p.items() if k != "watch_tasks"} for p in proposals]
        knobs = ", ".join(c["parameters"].get("knob", c["component"]) for c in changes) or "nothing"
        addressed = {s for c in changes for s in c["addresses"]}
        tasks = {t for s in addressed for t in self.group_tasks.get(s, [])}
        summary = (f"Change {knobs}, addressing {len(addressed)} pattern group(s) over {len(tasks)} task(s); "
                   f"leave {len(left)} group(s) alone." if changes
                   else f"No harness change: {len(left)} group(s) left alone.")
        return {"schema_version": SCHEMA_VERSION, "summary": summary, "changes": changes, "left_alone": left,
                "watch_tasks": watch}


def _dedupe_left(left: list[dict[str, Any]], proposals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    addressed = {s for p in proposals for s in p.get("addresses", [])}
    out, seen = [], set()
    for item in left:
        if item["signature"] in addressed or item["signature"] in seen:
            continue
        seen.add(item["signature"])
        out.append(item)
    return out


KNOB_TEXT: dict[str, dict[str, Any]] = {
    "error_feedback": {
        "description": "Tool errors name the offending argument and the expected form of its value "
                       "(e.g. 'order_id: not found; expected an id like #W1234567') instead of the bare error.",
        "trigger": "a tool call returns an error that concerns one of its arguments",
        "effect": "the model can correct a wrong id format on its next call instead of giving up.",
        "risks": ["longer error messages"],
        "guards": ["successful tool results are passed through unchanged"],
    },
    "id_normalisation": {
        "description": "Normalise id arguments before the call with the rules {rules}.",
        "trigger": "an id argument whose value does not have the expected form",
        "effect": "calls with a mis-formatted id reach the right object instead of 'not found'.",
        "risks": ["rewriting a value that was right"],
        "guards": ["only values not already in the expected form are rewritten"],
    },
    "max_tool_result_chars": {
        "description": "Raise MAX_TOOL_RESULT_CHARS from {current} to {value} so tool results the model needs "
                       "later are not truncated.",
        "trigger": "a tool result longer than the current limit",
        "effect": "values first seen in a long tool result stay available at later writes.",
        "risks": ["more context tokens per call"],
        "guards": ["results stay bounded (a limit remains)"],
    },
    "max_model_calls": {
        "description": "Raise MAX_MODEL_CALLS from {current} to {value} model calls per trial.",
        "trigger": "a trial that reaches the step budget before its requests are done",
        "effect": "long tasks finish instead of ending at the budget.",
        "risks": ["longer, costlier trials when the model loops"],
        "guards": ["the budget stays finite"],
    },
    "keep_last_messages": {
        "description": "Keep the last {value} messages (was {current}) when trimming the context.",
        "trigger": "conversations longer than the kept window",
        "effect": "values from early tool results remain in the context at later writes.",
        "risks": ["more context tokens per call"],
        "guards": ["calls and their results are never split"],
    },
    "completion_check": {
        "description": "Before accepting the end of the conversation, ask the model once to check that every "
                       "request of the user was carried out and every figure asked for was stated.",
        "trigger": "the agent is about to end the conversation",
        "effect": "compound requests are completed and requested figures are communicated.",
        "risks": ["an extra model call at the end of every conversation"],
        "guards": ["at most one check per conversation"],
    },
    "repeat_guard": {
        "description": "When the model repeats an identical call that just failed, answer with a distinct error "
                       "saying it is a repeat and what to change.",
        "trigger": "an identical tool call (name and arguments) right after it failed",
        "effect": "the model stops looping on a failing call.",
        "risks": ["flagging a legitimate retry after a transient error"],
        "guards": ["only identical name and arguments after an error"],
    },
    "policy_rule": {
        "description": "Add the rule to the system prompt: {text}",
        "trigger": "always (system prompt)",
        "effect": "the model uses the value the user stated.",
        "risks": ["a rule naming one conversation's value applies to every task"],
        "guards": [],
    },
}


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
    return str(params.get("knob") or change.get("component")) + ":" + ",".join(sorted(change.get("addresses", [])))


def _analyst(world: World, turns: list[dict[str, Any]]) -> str:
    proposals, left = world.analyse()
    ledger = _last(turns, "engineer")
    if ledger:
        disputed = {_key(d.get("change") or {}): d.get("reason", "") for d in ledger.get("disputed", [])
                    if isinstance(d, dict)}
        agreed = {_key(a): a for a in ledger.get("agreed", []) if isinstance(a, dict)}
        kept = []
        for p in proposals:
            k = _key(p)
            if k in disputed:
                left.extend({"signature": s, "reason": f"proposal blocked in review: {disputed[k]}"}
                            for s in p["addresses"])
            else:
                kept.append(agreed.get(k, p))
        proposals = kept
        left = _dedupe_left(left, proposals)
    prose = (f"Analysis of {len(world.groups)} pattern group(s): {len(proposals)} proposed change(s), "
             f"{len(left)} group(s) left alone.")
    for p in proposals:
        prose += f"\n- {p['parameters'].get('knob')}: {p['description']} Addresses {', '.join(p['addresses'])}."
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
        verdict: dict[str, Any] = {"change": i, "verdict": "accept", "reason": "", "trigger": None,
                                   "guards": [], "watch_tasks": []}
        old = world.rejected_before(p)
        if knob == "policy_rule" and (not addresses or all(s in world.single_task for s in addresses)):
            verdict.update(verdict="block", reason=(
                f"over-fitted: a system-prompt rule naming a value from one task ({', '.join(tasks) or '?'}) would "
                f"apply to every task{', including solved ones' if world.solved else ''}; it treats a model "
                "blind spot, not a harness defect"))
        elif any(str(f).endswith("__init__.py") for f in p.get("files") or []):
            verdict.update(verdict="block", reason=(
                "runtime-contract risk: __init__.py holds build_agent, the entry point the suite calls; change "
                "the layer module instead"))
        elif old is not None:
            verdict.update(verdict="block", reason=(
                f"identical to a change rejected in round {old.get('round')} (score change "
                f"{old.get('score_change')})"))
        elif knob in ("completion_check", "id_normalisation", "policy_rule") \
                and NARROW_GUARD not in " ".join(p.get("guards") or []) and world.touched(knob, addresses):
            touched = world.touched(knob, addresses)
            narrowed = {"completion_check": "the agent is about to end the conversation after at least one "
                                            "write, and no check was sent yet in this conversation",
                        "id_normalisation": "an id argument whose value does not match the expected form",
                        "policy_rule": "only the tool calls named in the rule"}[knob]
            verdict.update(verdict="narrow", trigger=narrowed, guards=[NARROW_GUARD],
                           watch_tasks=touched[:10], reason=(
                               f"would also run on {len(touched)} task(s) the incumbent solves "
                               f"({', '.join(touched[:5])}): narrow the trigger and watch them"))
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
        missing = [f for f in p.get("files", []) if world.files and f not in world.files
                   and not (str(f).endswith(".py") and "/" not in str(f))]
        if v.get("verdict") == "block":
            disputed.append({"change": p, "reason": v.get("reason", "")})
            left.extend({"signature": s, "reason": f"blocked by the critic: {v.get('reason', '')}"}
                        for s in p.get("addresses", []))
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
    return _block(prose, {"agreed": agreed, "disputed": disputed, "left_alone": left, "watch_tasks": sorted(watch)})


def _moderate(world: World, turns: list[dict[str, Any]]) -> dict[str, Any]:
    ledger = _last(turns, "engineer")
    if ledger is None:
        proposals, left = world.analyse()
        return world.spec(proposals, left, [])
    agreed = [a for a in ledger.get("agreed", []) if isinstance(a, dict)]
    left = [x for x in ledger.get("left_alone", []) if isinstance(x, dict)]
    return world.spec(agreed, left, sorted(set(ledger.get("watch_tasks", []))))
