"""What the diagnosis roles see: ranked pattern groups with real evidence, a harness map, earlier rounds.

    ev = build_evidence(records=..., groups=..., harness_dir=..., history=..., solved_tasks=..., limit=None)
    ev.data        # a JSON-safe dict (schema below)
    ev.render()    # the text put into every role's prompt: a short preamble + <evidence>JSON</evidence>

The evidence is bounded in size whatever the number of failures (`max_chars`, default 60,000 characters
of JSON): at most `MAX_DETAILED_GROUPS` groups carry examples, each with at most `MAX_EXAMPLES` records,
each record with at most `MAX_TOOL_CALLS` tool calls and `MAX_EXCERPT` messages, every text cut
head-and-tail (so the harness's own `… [truncated N chars]` markers at the end of a tool result stay
visible); if the JSON is too long, every example is first shrunk to `COMPACT` detail, then examples are
dropped from the lowest-ranked groups first.

Rules of the data (docs/diagnosis.md, issue 5): records of suspect tasks and infrastructure errors never appear;
records that ended with `endpoint_format_error` are labelled as such (the endpoint's reply was unusable);
cross-task groups rank first. `select_records(records, limit)` is the paper's failure-aware data rule
(`--ecdysis-evidence failure-aware:N`): keep at most N records, preferring execution paths (tool-call
sequence, termination reason, failed components) and tasks not yet represented.

This module reads harness files (with `ast`, never importing them); it must not import tau2 or suites.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .harness import harness_files
from .records import INFRA_REASONS, FailureRecord, ModificationSpec, PatternGroup

MAX_DETAILED_GROUPS = 12
MAX_SUMMARY_GROUPS = 40
MAX_EXAMPLES = 3
MAX_TOOL_CALLS = 16
MAX_EXCERPT = 10
MAX_TEXT = 480
MAX_RESULT = 360


@dataclass(frozen=True)
class Detail:
    """Per-record limits: tool calls, excerpt messages, characters of a message and of a tool result."""

    tool_calls: int = MAX_TOOL_CALLS
    excerpt: int = MAX_EXCERPT
    text: int = MAX_TEXT
    result: int = MAX_RESULT


FULL = Detail()
#: used when the full detail does not fit `max_chars`, before examples are dropped
COMPACT = Detail(tool_calls=8, excerpt=4, text=240, result=200)
MAX_ARG = 120
MAX_TASKS_LISTED = 20
MAX_SOLVED_LISTED = 300
MAX_HISTORY = 10
MAX_HARNESS_FILES = 40
DEFAULT_MAX_CHARS = 60_000

EVIDENCE_OPEN = "<evidence>"
EVIDENCE_CLOSE = "</evidence>"


class PastRound(BaseModel):
    """An earlier round as the roles see it: its spec and what became of it."""

    round: int
    outcome: str
    score_before: float | None = None
    score_after: float | None = None
    spec: ModificationSpec | None = None


@dataclass(frozen=True)
class Evidence:
    """The bounded evidence of one round. `data` is JSON-safe; `records` are the records shown."""

    data: dict[str, Any]
    records: tuple[FailureRecord, ...]

    @property
    def n_records(self) -> int:
        return len(self.records)

    def render(self) -> str:
        """The evidence as prompt text: a preamble saying how to read it, then `<evidence>JSON</evidence>`."""
        return (
            "The evidence of this round follows as one JSON document. `groups` are failure patterns ranked "
            "cross-task first; each carries example records with their tool calls (arguments, results, errors) "
            "and a conversation excerpt; long texts are cut in the middle, marked `[... N chars cut ...]`. "
            "`harness` maps the harness source (files, functions, settings). `history` lists earlier rounds' "
            "specs and outcomes. `solved_tasks` are tasks the incumbent harness solves in every trial.\n"
            f"{EVIDENCE_OPEN}\n{json.dumps(self.data, ensure_ascii=False, indent=1)}\n{EVIDENCE_CLOSE}"
        )


def record_key(record: FailureRecord) -> str:
    """`<suite>/<task_id>/t<trial>`, the key `PatternGroup.records` uses."""
    return f"{record.suite}/{record.task_id}/t{record.trial}"


def _kept(record: FailureRecord) -> str | None:
    if record.suspect or record.termination_reason in INFRA_REASONS:
        return None  # counted as such
    if record.kept_out:
        return record.kept_out
    if record.endpoint_problem or record.termination_reason == "endpoint_format_error":
        return "endpoint_problem"
    return "user_stop_after_confirmation" if record.user_stop_after_confirmation else None


def usable_records(records: Iterable[FailureRecord]) -> list[FailureRecord]:
    """Records that may be evidence (`FailureRecord.is_evidence`): not of a suspect task, not an endpoint
    problem, not a user stop right after a confirmation request, not an infrastructure error."""
    return [r for r in records if r.is_evidence()]


def path_key(record: FailureRecord) -> tuple[Any, ...]:
    """The execution path of a record: termination reason, failed components, tool-call sequence."""
    return (record.termination_reason, tuple(sorted(record.failed_components)),
            tuple(c.name for c in record.tool_calls))


def select_records(records: Sequence[FailureRecord], limit: int | None) -> list[FailureRecord]:
    """The failure-aware data rule: at most `limit` records, new execution paths and new tasks first.

    Order of preference (deterministic, records sorted by suite, task, trial): a record whose path and
    task are both new; then a new path; then a new task; then the rest. `limit=None` keeps all.
    """
    ordered = sorted(records, key=lambda r: (r.suite, r.task_id, r.trial))
    if limit is None or len(ordered) <= limit:
        return ordered
    chosen: list[FailureRecord] = []
    taken: set[int] = set()
    paths: set[tuple[Any, ...]] = set()
    tasks: set[tuple[str, str]] = set()
    tests = (
        lambda r: path_key(r) not in paths and (r.suite, r.task_id) not in tasks,
        lambda r: path_key(r) not in paths,
        lambda r: (r.suite, r.task_id) not in tasks,
        lambda r: True,
    )
    for test in tests:
        for i, r in enumerate(ordered):
            if len(chosen) >= limit:
                return chosen
            if i not in taken and test(r):
                taken.add(i)
                chosen.append(r)
                paths.add(path_key(r))
                tasks.add((r.suite, r.task_id))
    return chosen


def cut(text: Any, limit: int) -> str:
    """`text` as a string of at most about `limit` chars: head and tail kept, the middle marked as cut."""
    s = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    if len(s) <= limit:
        return s
    tail = max(limit // 3, 40)
    head = max(limit - tail, 20)
    return f"{s[:head]}[... {len(s) - head - tail} chars cut ...]{s[-tail:]}"


def _args(arguments: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, (k, v) in enumerate(arguments.items()):
        if i >= 12:
            out["..."] = f"{len(arguments) - 12} more arguments"
            break
        out[str(k)[:60]] = v if isinstance(v, int | float | bool) or v is None else cut(v, MAX_ARG)
    return out


def _call_view(call: Any, detail: Detail) -> dict[str, Any]:
    """One tool call: `result` is what the model was sent (the harness's `model_view` when observed,
    else the environment's output), `result_chars` the length of the environment's output."""
    seen = call.model_view if getattr(call, "model_view", None) is not None else call.result
    view = {"step": call.step, "name": call.name, "arguments": _args(call.arguments), "error": call.error,
            "result": None if seen is None else cut(seen, detail.result),
            "result_chars": None if call.result is None else len(call.result)}
    if getattr(call, "model_view", None) is not None and call.model_view != call.result:
        view["result_is"] = "as the harness sent it to the model (differs from the environment's output)"
    return view


def record_view(record: FailureRecord, detail: Detail = FULL) -> dict[str, Any]:
    """One record as evidence: termination, failed components, tool calls with results, an excerpt."""
    calls = list(record.tool_calls)
    n = detail.tool_calls
    shown = calls if len(calls) <= n else calls[: n // 2] + calls[-(n - n // 2):]
    view: dict[str, Any] = {
        "record": record_key(record),
        "task_id": record.task_id,
        "trial": record.trial,
        "termination_reason": record.termination_reason,
        "failed_components": list(record.failed_components),
        "reward": record.reward,
    }
    if record.termination_reason == "endpoint_format_error" or getattr(record, "endpoint_problem", False):
        view["label"] = ("endpoint_format_error: the endpoint's reply could not be used (not valid tool-call or "
                         "message format); weigh it as an endpoint/robustness problem, not as agent reasoning")
    view["n_tool_calls"] = len(calls)
    view["tool_calls"] = [_call_view(c, detail) for c in shown]
    if len(calls) > len(shown):
        view["tool_calls_omitted"] = f"{len(calls) - len(shown)} calls in the middle omitted"
    if record.first_tool_error:
        view["first_tool_error"] = {k: cut(v, detail.result) if isinstance(v, str) else v
                                    for k, v in record.first_tool_error.items() if k != "arguments"}
        if isinstance(record.first_tool_error.get("arguments"), Mapping):
            view["first_tool_error"]["arguments"] = _args(record.first_tool_error["arguments"])
    if record.pending_tool_call:
        view["pending_tool_call"] = True
    if record.harness_notes:
        notes = record.harness_notes if len(record.harness_notes) <= 6 else (
            record.harness_notes[:3] + record.harness_notes[-3:])
        view["harness_notes"] = [{k: cut(v, 160) if isinstance(v, str) else v for k, v in n.items()}
                                 for n in notes]
    excerpt = list(record.excerpt)
    if len(excerpt) > detail.excerpt:
        excerpt = excerpt[:1] + excerpt[-(detail.excerpt - 1):]
        view["excerpt_note"] = f"{len(record.excerpt) - detail.excerpt} middle messages omitted"
    view["excerpt"] = [_message_view(m, detail.text) for m in excerpt]
    return view


def _message_view(message: Mapping[str, Any], limit: int = MAX_TEXT) -> dict[str, Any]:
    out: dict[str, Any] = {"role": str(message.get("role", "?"))}
    content = message.get("content")
    if content:
        out["content"] = cut(content, limit)
    if message.get("tool_calls"):
        out["tool_calls"] = cut(message["tool_calls"], 240)
    return out


def _group_order(group: PatternGroup, n_records: int) -> tuple[Any, ...]:
    return (not group.cross_task, -len(group.tasks), -n_records, group.signature)


def _path_diverse(records: list[FailureRecord], n: int) -> list[FailureRecord]:
    """Up to `n` representative records: distinct tasks and execution paths first."""
    return select_records(records, n)


def harness_map(harness_dir: Path) -> dict[str, Any]:
    """Files of the harness with their docstring, top-level functions/classes and UPPER_CASE settings.

    Parsed with `ast` (never imported); a file that does not parse is listed with `parse_error`.
    """
    files: list[dict[str, Any]] = []
    rels = harness_files(harness_dir)
    for rel in rels[:MAX_HARNESS_FILES]:
        path = harness_dir / rel
        entry: dict[str, Any] = {"path": rel.as_posix(), "bytes": path.stat().st_size}
        if rel.suffix == ".py":
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
                entry["parse_error"] = str(exc)[:200]
            else:
                doc = ast.get_docstring(tree)
                if doc:
                    entry["doc"] = cut(doc.strip().splitlines()[0], 200)
                entry.update(_module_outline(tree))
        files.append(entry)
    out: dict[str, Any] = {"files": files}
    if len(rels) > MAX_HARNESS_FILES:
        out["files_omitted"] = len(rels) - MAX_HARNESS_FILES
    return out


def _module_outline(tree: ast.Module) -> dict[str, Any]:
    functions: list[str] = []
    settings: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            sig = f"{node.name}({ast.unparse(node.args)})"
            functions.append(cut(sig + (f": {doc.strip().splitlines()[0]}" if doc else ""), 200))
        elif isinstance(node, ast.ClassDef):
            methods = [n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            functions.append(cut(f"class {node.name}: " + ", ".join(methods), 200))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.isupper() and node.value is not None:
                    try:
                        value = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    if isinstance(value, int | float | bool) or (isinstance(value, str) and len(value) <= 80):
                        settings[target.id] = value
    out: dict[str, Any] = {}
    if functions:
        out["functions"] = functions[:20]
    if settings:
        out["settings"] = dict(list(settings.items())[:20])
    return out


def _past_round(item: Any) -> PastRound:
    if isinstance(item, PastRound):
        return item
    if isinstance(item, Mapping):
        return PastRound.model_validate(item)
    return PastRound.model_validate(
        {k: getattr(item, k, None) for k in ("round", "outcome", "score_before", "score_after", "spec")}
    )


def history_view(history: Iterable[Any]) -> list[dict[str, Any]]:
    """Earlier rounds, newest last: outcome, score change and each change's knob, parameters and files."""
    out = []
    for past in [_past_round(h) for h in history][-MAX_HISTORY:]:
        delta = None
        if past.score_before is not None and past.score_after is not None:
            delta = round(past.score_after - past.score_before, 4)
        entry: dict[str, Any] = {"round": past.round, "outcome": past.outcome,
                                 "accepted": past.outcome == "accepted", "score_before": past.score_before,
                                 "score_after": past.score_after, "score_change": delta}
        if past.spec is not None:
            entry["summary"] = cut(past.spec.summary, 300)
            entry["changes"] = [
                {"component": c.component, "files": c.files, "description": cut(c.description, 200),
                 "parameters": c.parameters}
                for c in past.spec.changes[:10]
            ]
        out.append(entry)
    return out


def build_evidence(
    *,
    records: Sequence[FailureRecord],
    groups: Sequence[PatternGroup],
    harness_dir: Path | None,
    history: Iterable[Any] = (),
    solved_tasks: Iterable[str] | Mapping[str, Any] = (),
    limit: int | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    include_harness: bool = True,
    include_history: bool = True,
) -> Evidence:
    """The bounded evidence of one round (see the module docstring for what is kept and dropped).

    Args:
        records: the round's failure records (suspect and infrastructure records are dropped here too).
        groups: their pattern groups (`PatternGroup.records` hold `record_key`s); groups left without a
            usable record are dropped; a record in no group is shown in a group `ungrouped`.
        harness_dir: the incumbent harness, mapped with `harness_map`.
        history: earlier rounds (`PastRound`, or dicts/objects with `round`, `outcome`, `score_before`,
            `score_after`, `spec`).
        solved_tasks: ids of tasks the incumbent solves in every trial; a mapping `{task_id: tools used}`
            is accepted and shown as such.
        limit: `cfg.evidence_limit` (failure-aware selection), None for all.
        max_chars: bound on the JSON text; examples are dropped from the lowest-ranked groups to meet it.
    """
    usable = usable_records(records)
    selected = select_records(usable, limit)
    by_key = {record_key(r): r for r in selected}
    n_excluded = {"suspect": sum(r.suspect for r in records),
                  "infrastructure": sum(r.termination_reason in INFRA_REASONS and not r.suspect for r in records),
                  "endpoint_problem": sum(_kept(r) == "endpoint_problem" for r in records),
                  "user_stop_after_confirmation": sum(_kept(r) == "user_stop_after_confirmation" for r in records)}

    grouped: list[tuple[PatternGroup, list[FailureRecord]]] = []
    seen: set[str] = set()
    for group in groups:
        members = [by_key[k] for k in group.records if k in by_key]
        if not members:
            continue
        seen.update(record_key(m) for m in members)
        tasks = sorted({f"{m.suite}/{m.task_id}" for m in members})
        view = group.model_copy(update={"tasks": tasks, "cross_task": len(tasks) >= 2,
                                        "records": [record_key(m) for m in members]})
        grouped.append((view, members))
    rest = [r for r in selected if record_key(r) not in seen]
    if rest:
        tasks = sorted({f"{r.suite}/{r.task_id}" for r in rest})
        grouped.append((PatternGroup(signature="ungrouped", cross_task=len(tasks) >= 2, tasks=tasks,
                                     records=[record_key(r) for r in rest]), rest))
    grouped.sort(key=lambda gm: _group_order(gm[0], len(gm[1])))

    group_views: list[dict[str, Any]] = []
    for rank, (group, members) in enumerate(grouped, start=1):
        gv: dict[str, Any] = {
            "rank": rank, "signature": group.signature, "cross_task": group.cross_task,
            "n_records": len(members), "n_tasks": len(group.tasks), "tasks": group.tasks[:MAX_TASKS_LISTED],
            "termination_reason": group.termination_reason, "failed_components": group.failed_components,
            "tool": group.tool, "error_class": group.error_class,
        }
        if len(group.tasks) > MAX_TASKS_LISTED:
            gv["tasks_omitted"] = len(group.tasks) - MAX_TASKS_LISTED
        if rank <= MAX_DETAILED_GROUPS:
            gv["examples"] = [record_view(r) for r in _path_diverse(members, MAX_EXAMPLES)]
            gv["_members"] = members
        group_views.append(gv)
    if len(group_views) > MAX_DETAILED_GROUPS + MAX_SUMMARY_GROUPS:
        omitted = len(group_views) - MAX_DETAILED_GROUPS - MAX_SUMMARY_GROUPS
        group_views = group_views[: MAX_DETAILED_GROUPS + MAX_SUMMARY_GROUPS]
    else:
        omitted = 0

    if isinstance(solved_tasks, Mapping):
        solved: Any = {str(k): v for k, v in list(sorted(solved_tasks.items()))[:MAX_SOLVED_LISTED]}
    else:
        solved = sorted({str(t) for t in solved_tasks})[:MAX_SOLVED_LISTED]

    data: dict[str, Any] = {
        "failures": {
            "n_records": len(usable), "n_shown_to_diagnosis": len(selected),
            "n_tasks": len({(r.suite, r.task_id) for r in selected}),
            "selection": "all" if limit is None else f"failure-aware:{limit}",
            "excluded": n_excluded,
        },
        "groups": group_views,
    }
    if omitted:
        data["groups_omitted"] = omitted
    if include_harness and harness_dir is not None:
        data["harness"] = harness_map(Path(harness_dir))
    if include_history:
        data["history"] = history_view(history)
    data["solved_tasks"] = solved
    if _size(data) > max_chars:  # first shrink every example, then drop examples
        for gv in group_views:
            if "_members" in gv:
                gv["examples"] = [record_view(r, COMPACT) for r in _path_diverse(gv["_members"], MAX_EXAMPLES)]
    for gv in group_views:
        gv.pop("_members", None)
    _fit(data, max_chars)
    return Evidence(data=data, records=tuple(selected))


def _size(data: dict[str, Any]) -> int:
    return len(json.dumps(data, ensure_ascii=False, indent=1, default=lambda _: None))


def _fit(data: dict[str, Any], max_chars: int) -> None:
    """Drop examples from the lowest-ranked groups (then summary groups) until the JSON fits `max_chars`."""
    groups = data["groups"]
    while _size(data) > max_chars:
        with_examples = [g for g in groups if g.get("examples")]
        if with_examples:
            victim = with_examples[-1]
            victim["examples"].pop()
            if not victim["examples"]:
                del victim["examples"]
                victim["examples_omitted"] = "dropped to bound the evidence size"
            continue
        if len(groups) > 1:
            groups.pop()
            data["groups_omitted"] = data.get("groups_omitted", 0) + 1
            continue
        break


def parse_evidence(text: str) -> dict[str, Any] | None:
    """The evidence JSON inside a prompt (between the last `<evidence>` and `</evidence>`), or None."""
    start = text.rfind(EVIDENCE_OPEN)
    end = text.rfind(EVIDENCE_CLOSE)
    if start < 0 or end < start:
        return None
    try:
        data = json.loads(text[start + len(EVIDENCE_OPEN):end])
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


# --- The shared transcript as prompt text (the roles' protocol; `sim/roles.py` parses it back) ---------

TURN_RE = re.compile(r'<turn role="(\w+)" pass="(\w+)">\n(.*?)\n</turn>', re.S)


def render_turn(role: str, pass_: int | None, content: str) -> str:
    """One transcript turn as prompt text: `<turn role="critic" pass="1">...</turn>`."""
    return f'<turn role="{role}" pass="{"final" if pass_ is None else pass_}">\n{content.strip()}\n</turn>'


def parse_turns(text: str) -> list[dict[str, Any]]:
    """The turns of a rendered transcript, in order: `[{"role", "pass", "content"}]`."""
    return [{"role": m.group(1), "pass": None if m.group(2) == "final" else int(m.group(2)),
             "content": m.group(3)} for m in TURN_RE.finditer(text)]


def extract_json(text: str) -> Any:
    """The JSON value an answer carries: the whole text, else the last fenced ```json block that parses,
    else the first `{...}` object found by scanning. Returns None when there is none."""
    stripped = text.strip()
    if not stripped:
        return None
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    for block in reversed(re.findall(r"```(?:json)?\s*\n(.*?)```", text, re.S)):
        try:
            return json.loads(block)
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch == "{":
            try:
                value, _ = decoder.raw_decode(text, i)
            except json.JSONDecodeError:
                continue
            return value
    return None
