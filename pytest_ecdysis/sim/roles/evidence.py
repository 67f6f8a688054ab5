"""Reading the evidence for the simulated diagnosis roles (`sim/roles/answers.py`): what one prompt's evidence
shows, record by record.

`Evidence(evidence)` holds the groups, the harness's settings and functions, the solved tasks and
the history; `findings(record)` lists the mechanisms one failing record shows, from signals any harness
produces: a tool error on an `*_id` argument (and whether it shows the expected form), a result the model
saw shorter than the environment's (`result_is`, `result_chars`), a harness note naming a limit or a
trimmed context, an identical failing call repeated, an endpoint problem, and work left undone with no
mechanism in sight (with a near miss: a write value one or two characters off one seen earlier). It knows
no harness's wording and reads no server state or ground truth.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from pytest_ecdysis.sim.reading import form, states_rule

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
    "value_check": ("tool_interface", "normalise_arguments", "tools.py"),
}
VALUE_KNOBS = ("max_model_calls", "max_tool_result_chars", "keep_last_messages")
MAX_MODEL_CALLS_CAP = 150

#: The evidence's own mark for the middle of a long result it cut (`evidence.views.cut`), not the harness's.
EVIDENCE_CUT_RE = re.compile(r"\[\.\.\. (\d+) chars cut \.\.\.\]")
#: harness_notes kinds that say the harness's own limit ended the trial.
LIMIT_NOTE_RE = re.compile(r"budget|limit|max_(steps|calls)|exhausted", re.I)
ID_ERROR_RE = re.compile(r"not found|does not exist|no such|invalid|unknown|could not find", re.I)
JSON_ERROR_RE = re.compile(r"json", re.I)
READ_TOOL_RE = re.compile(r"^(get|find|list|search|calculate|think|transfer|lookup|check)")
TOKEN_RE = re.compile(r"[#\w-]{3,}")
#: Behaviours the harness map can show it already has: knob -> word stems a function's docstring must
#: contain, one of each set (what the behaviour is, when it acts); read from any harness's own docstrings.
MECHANISM_WORDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "completion_check": (("check", "verif", "review"), ("end", "clos", "finish", "complet")),
    "repeat_guard": (("repeat", "identical", "duplicat", "loop"), ("call", "error", "fail")),
    "value_check": (
        ("check", "verif", "repair", "correct", "replac", "refus", "validat"),
        ("shown", "seen", "stated", "conversation", "earlier"),
    ),
}
#: A docstring that opens by saying the behaviour is absent ("v1: no completion check.", "Disabled.").
NEGATED_DOC_RE = re.compile(r"^\s*(v\d+\s*[:.-]\s*)?(no|none|not|never|disabled|nothing)\b", re.I)


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
    return any(
        states_rule(text, candidate, value)
        for candidate in (value.strip().upper(), value.strip().lower(), "#" + value.strip(), value.strip())
    )


def _near(a: str, b: str) -> bool:
    """Same length, different, at most two characters apart (case-sensitive)."""
    return len(a) == len(b) and a != b and sum(x != y for x, y in zip(a, b, strict=True)) <= 2


class Evidence:
    """The evidence of one prompt, with lookups the roles share."""

    def __init__(self, evidence: dict[str, Any]) -> None:
        self.ev = evidence
        self.groups = [g for g in evidence.get("groups", []) if isinstance(g, dict)]
        self.settings: dict[str, tuple[str, Any]] = {}
        self.functions: dict[str, str] = {}
        self.files: set[str] = set()
        #: (file, function, first docstring line) of every documented function in the harness map
        self.documented: list[tuple[str, str, str]] = []
        for f in (evidence.get("harness") or {}).get("files", []):
            self.files.add(f.get("path", ""))
            for sig in f.get("functions", []):
                head, _, doc = str(sig).partition("): ")
                if doc and not str(sig).startswith("class "):
                    self.documented.append((f.get("path", ""), head.split("(")[0].strip(), doc))
            for name, value in (f.get("settings") or {}).items():
                self.settings.setdefault(name, (f["path"], value))
            for sig in f.get("functions", []):
                self.functions.setdefault(
                    sig.split("(")[0].split(":")[0].replace("class ", "").strip(), f["path"]
                )
        solved = evidence.get("solved_tasks") or []
        self.solved = sorted(solved)
        #: tools each solved task used, when the evidence says (a mapping); None when only ids are known.
        self.solved_tools = (
            {str(k): set(v or []) for k, v in solved.items()} if isinstance(solved, dict) else None
        )
        self.history = [h for h in evidence.get("history", []) if isinstance(h, dict)]
        self.single_task = {g["signature"] for g in self.groups if not g.get("cross_task")}
        #: the prompt shows exactly one failure record (an instance-level analyst: self-evolution)
        self.single_failure = sum(len(g.get("examples", [])) for g in self.groups) == 1
        self.group_tasks = {g["signature"]: g.get("tasks", []) for g in self.groups}
        self.group_tools = {
            g["signature"]: {
                str(c.get("name")) for r in g.get("examples", []) for c in r.get("tool_calls", [])
            }
            for g in self.groups
        }
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

    def already_does(self, knob: str) -> str | None:
        """`<file>: <function>` when the harness map shows a function whose docstring says it does what
        `knob` would add (`MECHANISM_WORDS`, one stem of each set, the docstring not opening with a
        negation); None otherwise, and for knobs that are settings or rules."""
        words = MECHANISM_WORDS.get(knob)
        if words is None:
            return None
        for path, name, doc in self.documented:
            tokens = re.findall(r"[a-z]+", doc.lower())
            if NEGATED_DOC_RE.match(doc) or not all(
                any(t.startswith(w) for t in tokens for w in stems) for stems in words
            ):
                continue
            return f"{path}: {name}"
        return None

    def setting(self, knob: str) -> int | None:
        value = self.settings.get(KNOBS[knob][1], (None, None))[1]
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    # findings of one record ------------------------------------------------------------------------

    def findings(self, rec: Mapping[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        calls = [c for c in rec.get("tool_calls", []) if isinstance(c, dict)]
        texts = [str(m.get("content") or "") for m in rec.get("excerpt", []) if isinstance(m, dict)]
        user_texts = [
            str(m.get("content") or "")
            for m in rec.get("excerpt", [])
            if isinstance(m, dict) and m.get("role") == "user"
        ]
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
                    out.append(
                        {
                            "kind": "id_error",
                            "arg": arg,
                            "tool": call.get("name"),
                            "quote": result,
                            "named": shows_form(result, value),
                            "rules": self._id_rules(arg, value, texts),
                        }
                    )
            cut = _cut_chars(call)
            if cut:
                out.append(
                    {
                        "kind": "truncated",
                        "n": cut,
                        "raw": int(call["result_chars"]),
                        "quote": f"{call.get('name')}: the model saw {int(call['result_chars']) - cut} of "
                        f"{call['result_chars']} characters of the environment's result",
                    }
                )
            if _is_error(call):
                for later in calls[i + 1 :]:
                    if (
                        later.get("name") == call.get("name")
                        and later.get("arguments") == call.get("arguments")
                        and _is_error(later)
                    ):
                        out.append(
                            {
                                "kind": "repeat",
                                "tool": call.get("name"),
                                "quote": result,
                                "flagged": str(later.get("result")) != result,
                            }
                        )
                        break
        for n in notes:
            kind = str(n.get("kind") or "")
            if LIMIT_NOTE_RE.search(kind) and not any(f["kind"] == "budget" for f in out):
                out.append(
                    {
                        "kind": "budget",
                        "n": self.setting("max_model_calls") or len(calls) or None,
                        "quote": f"harness note {kind}: {str(n.get('detail') or '')[:120]}",
                    }
                )
            elif "trim" in kind or "context" in kind:
                out.append({"kind": "trimmed", "quote": json.dumps(n)[:160]})
        if rec.get("label") or rec.get("termination_reason") == "endpoint_format_error":
            out.append({"kind": "endpoint", "quote": str(rec.get("label") or "endpoint_format_error")})
        mechanisms = {"id_error", "truncated", "budget", "repeat", "trimmed", "endpoint", "json_handled"}
        failed = set(rec.get("failed_components") or [])
        if (
            rec.get("termination_reason") in ("user_stop", "agent_stop")
            and failed & {"db", "communicate"}
            and not any(f["kind"] in mechanisms for f in out)
        ):
            finding: dict[str, Any] = {
                "kind": "incomplete",
                "task": rec.get("task_id"),
                "quote": texts[-1][:200] if texts else "",
            }
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
        if not v.startswith("#") and (
            any(g == "#" + v for g in good)
            or f"#{v}" in joined
            or (good and all(g.startswith("#") for g in good))
        ):
            rules.append(f"{arg}:#prefix")
        if v != v.upper() and (
            v.upper() in good
            or re.search(rf"\b{re.escape(v.upper())}\b", joined)
            or (good and all(g == g.upper() for g in good))
        ):
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
