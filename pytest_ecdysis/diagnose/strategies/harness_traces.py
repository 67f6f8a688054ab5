"""Harness-aware traces, failure attribution, flaw records and repair operators (for `harnessfix`).

    traces = [trace(r, artifacts) for r in records]      # steps with data/control links and artifacts
    causes = [attribute(t) for t in traces]              # the responsible step and artifact per failure
    flaws  = consolidate(causes)                         # recurring attributions, most tasks first
    ops    = [operator_for(f, artifacts) for f in flaws] # a scoped repair operator per flaw

A trace step is a tool call (its artifact: the tool wrapper; after an error, the feedback rule), a harness
note (a budget, the context trimming, another harness rule) or the end of the trial (the closing check).
`data_from` lists the earlier steps (or `"user"`) whose text holds one of the step's argument values;
`control_from` the step before; `unlinked` the arguments whose id-like value no earlier text holds. Artifacts are located in the harness source by symbol (`evidence.context.harness_map`,
parsed, never imported); a symbol the harness does not define is `{"file": None}`: the repair may create it.
Pure functions over records and the harness map; nothing here calls a model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.records import FailureRecord
from pytest_ecdysis.evidence.context import harness_map
from pytest_ecdysis.evidence.views import record_key

#: Harness artifact kind -> the symbol that implements it in a harness with named parts (docs/internals.md,
#: "Spec parameters"); a harness without the symbol (Direct) has the artifact nowhere yet.
SYMBOLS = {
    "tool_wrapper": "normalise_arguments",
    "feedback_rule": "format_tool_result",
    "closing_check": "check_before_end",
    "prompt_section": "system_prompt",
    "budget:model_calls": "MAX_MODEL_CALLS",
    "budget:tool_result_chars": "MAX_TOOL_RESULT_CHARS",
    "budget:context": "KEEP_LAST_MESSAGES",
}
#: Flaw kind -> (repair operator, the artifacts it may touch).
OPERATORS = {
    "budget_exhausted": ("change_budget", ("budget:model_calls",)),
    "context_trimmed": ("change_budget", ("budget:context",)),
    "result_truncated": ("change_budget", ("budget:tool_result_chars",)),
    "repeated_error": ("add_guard", ("feedback_rule",)),
    "tool_error": ("add_guard", ("tool_wrapper", "feedback_rule")),
    "premature_end": ("add_check", ("closing_check",)),
    "wrong_write": ("rewrite_tool_description", ("prompt_section", "tool_wrapper")),
}


def locate(harness_dir: Path | None) -> dict[str, dict[str, Any]]:
    """Artifact kind -> `{"kind", "symbol", "file"}` (`file` relative to the harness, None when absent)."""
    where: dict[str, str] = {}
    if harness_dir is not None and Path(harness_dir).is_dir():
        for entry in harness_map(Path(harness_dir))["files"]:
            names = [f.split("(")[0].removeprefix("class ").split(":")[0] for f in entry.get("functions", [])]
            for name in [*names, *entry.get("settings", {})]:
                where.setdefault(name, entry["path"])
    return {kind: {"kind": kind, "symbol": sym, "file": where.get(sym)} for kind, sym in SYMBOLS.items()}


def _texts(result: Any) -> str:
    return "" if result is None else str(result)


def trace(record: FailureRecord, artifacts: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The harness-aware trace of one failed trial: `{"record", "task_id", "steps": [...]}`."""
    user = " ".join(str(m.get("content", "")) for m in record.excerpt if m.get("role") == "user")
    steps: list[dict[str, Any]] = []
    for call in record.tool_calls:
        i = len(steps)
        values = {
            k: str(v) for k, v in call.arguments.items() if isinstance(v, str | int) and len(str(v)) >= 3
        }
        sources = {
            j: s.get("result", "") + " " + json.dumps(s["arguments"], default=str)
            for j, s in enumerate(steps)
            if s["kind"] == "tool_call"
        }
        data: list[Any] = [j for j, text in sources.items() if any(v in text for v in values.values())]
        if any(v in user for v in values.values()):
            data.append("user")
        # an id-like value (with a digit) that no earlier text holds came from nowhere: the model made it up
        unlinked = [
            k
            for k, v in values.items()
            if any(ch.isdigit() for ch in v)
            and v not in user
            and not any(v in text for text in sources.values())
        ]
        shown, raw = call.model_view, _texts(call.result)
        step = {
            "i": i,
            "kind": "tool_call",
            "tool": call.name,
            "arguments": call.arguments,
            "error": call.error,
            "result": raw[:300],
            "data_from": data,
            "unlinked": unlinked,
            "control_from": i - 1 if i else None,
            "artifact": artifacts["feedback_rule" if call.error else "tool_wrapper"],
        }
        if shown is not None and raw and len(shown) < len(raw):
            step.update(
                truncated=True,
                shown_chars=len(shown),
                result_chars=len(raw),
                artifact=artifacts["budget:tool_result_chars"],
            )
        steps.append(step)
    for note in record.harness_notes:
        kind = str(note.get("kind", ""))
        art = (
            "budget:model_calls"
            if any(w in kind for w in ("budget", "limit", "exhausted", "max_"))
            else "budget:context"
            if any(w in kind for w in ("trim", "context"))
            else "prompt_section"
        )
        steps.append(
            {
                "i": len(steps),
                "kind": "harness_note",
                "note": kind,
                "detail": str(note.get("detail", ""))[:200],
                "data_from": [],
                "control_from": len(steps) - 1 if steps else None,
                "artifact": artifacts[art],
            }
        )
    steps.append(
        {
            "i": len(steps),
            "kind": "end",
            "termination_reason": record.termination_reason,
            "failed_components": list(record.failed_components),
            "data_from": [],
            "control_from": len(steps) - 1 if steps else None,
            "artifact": artifacts["closing_check"],
        }
    )
    return {"record": record_key(record), "task_id": record.task_id, "steps": steps}


def attribute(tr: dict[str, Any]) -> dict[str, Any]:
    """The responsible step and artifact of one failure: `{"record", "task_id", "flaw", "step", "artifact"}`.

    In order: a budget note, a context-trimming note, a result the model saw cut, the same failing call
    repeated, the first tool error, a failed `db` after a last call with an unlinked argument (`wrong_write`), else
    the end itself (`premature_end`)."""
    steps = tr["steps"]
    calls = [s for s in steps if s["kind"] == "tool_call"]
    notes = [s for s in steps if s["kind"] == "harness_note"]

    def out(flaw: str, step: dict[str, Any]) -> dict[str, Any]:
        return {
            "record": tr["record"],
            "task_id": tr["task_id"],
            "flaw": flaw,
            "step": step["i"],
            "artifact": step["artifact"],
        }

    for note in notes:
        if note["artifact"]["kind"] == "budget:model_calls":
            return out("budget_exhausted", note)
    for note in notes:
        if note["artifact"]["kind"] == "budget:context":
            return out("context_trimmed", note)
    for call in calls:
        if call.get("truncated"):
            return out("result_truncated", call)
    errors = [c for c in calls if c["error"]]
    seen: set[str] = set()
    for call in errors:
        key = f"{call['tool']}:{sorted(call['arguments'].items())!r}"
        if key in seen:
            return out("repeated_error", call)
        seen.add(key)
    if errors:
        return out("tool_error", errors[0])
    end = steps[-1]
    if calls and "db" in end["failed_components"] and calls[-1]["unlinked"]:
        return out("wrong_write", calls[-1])
    return out("premature_end", end)


def consolidate(causes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flaw records: attributions sharing flaw kind and artifact, most tasks (then records) first.

    Each: `{"flaw_id", "flaw", "artifact", "tasks", "records", "steps"}` (`steps`: record key -> step)."""
    flaws: dict[tuple[str, str], dict[str, Any]] = {}
    for c in causes:
        key = (c["flaw"], c["artifact"]["kind"])
        f = flaws.setdefault(
            key, {"flaw": c["flaw"], "artifact": c["artifact"], "tasks": [], "records": [], "steps": {}}
        )
        if c["task_id"] not in f["tasks"]:
            f["tasks"].append(c["task_id"])
        f["records"].append(c["record"])
        f["steps"][c["record"]] = c["step"]
    ranked = sorted(flaws.values(), key=lambda f: (-len(f["tasks"]), -len(f["records"]), f["flaw"]))
    return [{"flaw_id": f"F{i}", **f} for i, f in enumerate(ranked, start=1)]


def operator_for(flaw: dict[str, Any], artifacts: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The scoped repair operator of a flaw: `{"flaw_id", "operator", "artifacts", "may_touch", "creates"}`.

    `may_touch` lists the harness files the repair may change (the located artifacts); `creates` is True
    when an artifact is absent from the harness, and the repair may then add it (any file)."""
    op, kinds = OPERATORS[flaw["flaw"]]
    arts = [artifacts[k] for k in kinds]
    return {
        "flaw_id": flaw["flaw_id"],
        "operator": op,
        "artifacts": arts,
        "may_touch": sorted({a["file"] for a in arts if a["file"]}),
        "creates": any(a["file"] is None for a in arts),
    }


def in_scope(files: list[str], operator: Mapping[str, Any]) -> bool:
    """May a change naming `files` be made by `operator`? (within `may_touch`, or anywhere if it creates)."""
    return bool(operator["creates"]) or all(f in operator["may_touch"] for f in files)
