"""The figures of one real-model session, read back from its files (`real_model.py` writes them).

    python scripts/measure.py .ecdysis/real-model/<session>      # prints the JSON

- `speed`: prompt and generation tokens per second, summed over the server's own per-request timings
  (`llama_perf_context_print` lines of `server.log`; prompt tokens served from the prefix cache are not
  counted as evaluated);
- `replies`: per role, from `replies.jsonl`: requests, HTTP errors, mean seconds; for the agent the share
  of replies with a well-formed tool call (a known tool name, arguments a JSON object), of plain text, of
  text that looks like a tool call written as text, of empty replies; for spec writers the share of
  answers that validate as a modification spec; for the editor the share with at least one edit block;
- `runs`: per stage, the suite score, the gate verdict, and per trial reward, termination, steps, tool
  calls, seconds; `evolution`: the round's outcome and reason; `noise`: per task, what moved across runs.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PERF = re.compile(r"(prompt eval|\beval) time =\s*([\d.]+) ms /\s*(\d+) (?:tokens|runs)")
TEXT_CALL = re.compile(
    r"<tool_call>|<function=|\[TOOL_CALLS\]|functions\.\w+|\"name\"\s*:\s*\"\w+\"|```tool_code"
)
SPEC_ROLES = {"moderator", "analyst"}


def speed(log: Path) -> dict[str, Any]:
    sums = {"prompt eval": [0.0, 0], "eval": [0.0, 0]}
    if log.is_file():
        for match in PERF.finditer(log.read_text(errors="replace")):
            kind = "prompt eval" if match[1] == "prompt eval" else "eval"
            sums[kind][0] += float(match[2])
            sums[kind][1] += int(match[3])
    out = {}
    for kind, key in (("prompt eval", "prompt"), ("eval", "generation")):
        ms, n = sums[kind]
        out[f"{key}_tokens"] = n
        out[f"{key}_tokens_per_s"] = round(n / (ms / 1000), 1) if ms else None
    return out


def message_of(reply: Any) -> dict[str, Any] | None:
    try:
        return reply["choices"][0]["message"] or {}
    except (KeyError, IndexError, TypeError):
        return None


def tool_call_ok(call: dict[str, Any], tools: list[str]) -> bool:
    function = call.get("function") or {}
    if function.get("name") not in tools:
        return False
    args = function.get("arguments")
    if isinstance(args, dict):
        return True
    try:
        return isinstance(json.loads(args or ""), dict)
    except (TypeError, ValueError):
        return False


def replies(path: Path) -> dict[str, Any]:
    from pytest_ecdysis.core.errors import SpecError
    from pytest_ecdysis.diagnose.spec import validate_spec
    from pytest_ecdysis.edit.editors import EDIT_BLOCK
    from pytest_ecdysis.evidence.build import extract_json

    by_role: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    walls: dict[str, list[float]] = defaultdict(list)
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    for line in lines:
        role, stats = line.get("role") or "?", by_role[line.get("role") or "?"]
        stats["requests"] += 1
        walls[role].append(line.get("wall_s", 0.0))
        message = message_of(line.get("reply"))
        if line.get("status") != 200 or message is None:
            stats["errors"] += 1
            continue
        text = message.get("content") or ""
        calls = message.get("tool_calls") or []
        if role == "agent":
            tools = line["request"].get("tools") or []
            if calls:
                stats["tool_call_ok" if all(tool_call_ok(c, tools) for c in calls) else "tool_call_bad"] += 1
            elif not text.strip():
                stats["empty"] += 1
            elif TEXT_CALL.search(text):
                stats["tool_call_as_text"] += 1
            else:
                stats["text"] += 1
        elif role in SPEC_ROLES and line["request"].get("response_format"):
            try:
                validate_spec(extract_json(text), REPO / "pytest_ecdysis_tau2" / "example_harness")
                stats["spec_valid"] += 1
            except SpecError:
                stats["spec_invalid"] += 1
        elif role == "editor":
            stats["edit_blocks" if EDIT_BLOCK.search(text) else "no_edit_block"] += 1
    out = {}
    for role, stats in by_role.items():
        answered = stats["requests"] - stats["errors"]
        row = dict(stats, mean_s=round(mean(walls[role]), 1))
        for key in ("tool_call_ok", "tool_call_as_text", "text", "empty", "spec_valid", "edit_blocks"):
            if key in stats and answered:
                base = stats["spec_valid"] + stats["spec_invalid"] if key == "spec_valid" else answered
                row[f"share_{key}"] = round(stats[key] / base, 3) if base else None
        out[role] = row
    return out


def run_figures(run: Path) -> dict[str, Any]:
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
    trials = (
        [json.loads(x) for x in (run / "trials.jsonl").read_text().splitlines() if x.strip()]
        if (run / "trials.jsonl").is_file()
        else []
    )
    out: dict[str, Any] = {
        "suite_score": summary.get("suite_score"),
        "wall_s": summary.get("wall_s"),
        "n_infra_errors": summary.get("n_infra_errors"),
        "gate": (summary.get("gate") or {}).get("headline"),
        "trials": [
            {
                "task_id": t["task_id"],
                "trial": t["trial"],
                "reward": t.get("reward"),
                "termination": t.get("termination_reason"),
                "steps": t.get("steps"),
                "tool_calls": len(t.get("tool_calls") or []),
                "wall_s": t.get("wall_s"),
                "tokens": (t.get("tokens") or {}).get("total"),
            }
            for t in trials
        ],
    }
    evo = run / "evolution.json"
    if evo.is_file():
        doc = json.loads(evo.read_text())
        out["evolution"] = [
            {
                "round": r.get("round"),
                "outcome": r.get("outcome"),
                "reason": r.get("reason"),
                "score_before": r.get("score_before"),
                "score_after": r.get("score_after"),
                "tokens": r.get("tokens"),
                "wall_s": r.get("wall_s"),
            }
            for r in doc.get("rounds", [])
        ]
    return out


def noise(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    per_task: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for name, run in sorted(runs.items()):
        if not name.split("-")[-1].startswith("noise"):
            continue
        for t in run["trials"]:
            row = per_task[f"{t['task_id']}-t{t['trial']}"]
            for key in ("reward", "termination", "steps", "tool_calls", "wall_s"):
                row[key].append(t[key])
    return {case: {k: v for k, v in row.items()} for case, row in per_task.items()}


def measure(session: Path) -> dict[str, Any]:
    runs = {p.name: run_figures(p) for p in sorted((session / "runs").glob("*")) if p.is_dir()}
    trial_walls = [t["wall_s"] for r in runs.values() for t in r["trials"] if t.get("wall_s")]
    return {
        "speed": speed(session / "server.log"),
        "replies": replies(session / "replies.jsonl"),
        "runs": runs,
        "mean_trial_s": round(mean(trial_walls), 1) if trial_walls else None,
        "noise": noise(runs),
    }


if __name__ == "__main__":
    print(json.dumps(measure(Path(sys.argv[1])), indent=2))
