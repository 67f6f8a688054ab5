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

Rules of the data (docs/diagnosis.md): records of suspect tasks and infrastructure errors never appear;
records that ended with `endpoint_format_error` are labelled as such (the endpoint's reply was unusable);
cross-task groups rank first. `select_records(records, limit)` is the paper's failure-aware data rule
(`--ecdysis-evidence failure-aware:N`): keep at most N records, preferring execution paths (tool-call
sequence, termination reason, failed components) and tasks not yet represented.

The views of one record, the limits per record and the failure-aware rule live in `evidence.views`;
the harness map and the earlier rounds in `evidence.context`; this module ranks the groups, bounds the
whole, and holds the prompt text's protocol (`<evidence>`, the transcript's turns, an answer's JSON).

Harness files are read only through `evidence.context.harness_map` (with `ast`, never importing them); this
module must not import tau2 or suites.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.records import INFRA_REASONS, FailureRecord, PatternGroup
from pytest_ecdysis.evidence.context import harness_map, history_view
from pytest_ecdysis.evidence.views import (
    COMPACT,
    _kept,
    record_key,
    record_view,
    select_records,
    usable_records,
)

MAX_DETAILED_GROUPS = 12
MAX_SUMMARY_GROUPS = 40
MAX_EXAMPLES = 3
MAX_TASKS_LISTED = 20
MAX_SOLVED_LISTED = 300
DEFAULT_MAX_CHARS = 60_000

EVIDENCE_OPEN = "<evidence>"
EVIDENCE_CLOSE = "</evidence>"


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
            "specs and outcomes (an `inconclusive` round's change was neither accepted nor rejected: too few "
            "trials to tell; it may be proposed again). `solved_tasks` are tasks the incumbent harness solves in every trial.\n"
            f"{EVIDENCE_OPEN}\n{json.dumps(self.data, ensure_ascii=False, indent=1)}\n{EVIDENCE_CLOSE}"
        )


def _group_order(group: PatternGroup, n_records: int) -> tuple[Any, ...]:
    return (not group.cross_task, -len(group.tasks), -n_records, group.signature)


def _path_diverse(records: list[FailureRecord], n: int) -> list[FailureRecord]:
    """Up to `n` representative records: distinct tasks and execution paths first."""
    return select_records(records, n)


def build_evidence(
    *,
    records: Sequence[FailureRecord],
    groups: Sequence[PatternGroup],
    harness_dir: Path | None,
    history: Iterable[Any] = (),
    solved_tasks: Iterable[str] | Mapping[str, Any] = (),
    weak_passes: Iterable[Mapping[str, Any]] = (),
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
        weak_passes: the run's weak passes (`{"task", "trial", "reasons"}`, `core.metrics.weak_pass_block`):
            shown as `weak_passes` (`weak_passes_view`), evidence of a harness weakness, never failures.
        limit: `cfg.evidence_limit` (failure-aware selection), None for all.
        max_chars: bound on the JSON text; examples are dropped from the lowest-ranked groups to meet it.
    """
    usable = usable_records(records)
    selected = select_records(usable, limit)
    by_key = {record_key(r): r for r in selected}
    n_excluded = {
        "suspect": sum(r.suspect for r in records),
        "infrastructure": sum(r.termination_reason in INFRA_REASONS and not r.suspect for r in records),
        "endpoint_problem": sum(_kept(r) == "endpoint_problem" for r in records),
        "user_stop_after_confirmation": sum(_kept(r) == "user_stop_after_confirmation" for r in records),
    }
    for why in ("user_abort", "suspect_task"):  # newer reasons: counted when they occur
        if count := sum(_kept(r) == why for r in records):
            n_excluded[why] = count

    grouped: list[tuple[PatternGroup, list[FailureRecord]]] = []
    seen: set[str] = set()
    for group in groups:
        members = [by_key[k] for k in group.records if k in by_key]
        if not members:
            continue
        seen.update(record_key(m) for m in members)
        tasks = sorted({f"{m.suite}/{m.task_id}" for m in members})
        view = group.model_copy(
            update={
                "tasks": tasks,
                "cross_task": len(tasks) >= 2,
                "records": [record_key(m) for m in members],
            }
        )
        grouped.append((view, members))
    rest = [r for r in selected if record_key(r) not in seen]
    if rest:
        tasks = sorted({f"{r.suite}/{r.task_id}" for r in rest})
        grouped.append(
            (
                PatternGroup(
                    signature="ungrouped",
                    cross_task=len(tasks) >= 2,
                    tasks=tasks,
                    records=[record_key(r) for r in rest],
                ),
                rest,
            )
        )
    grouped.sort(key=lambda gm: _group_order(gm[0], len(gm[1])))

    group_views: list[dict[str, Any]] = []
    for rank, (group, members) in enumerate(grouped, start=1):
        gv: dict[str, Any] = {
            "rank": rank,
            "signature": group.signature,
            "cross_task": group.cross_task,
            "n_records": len(members),
            "n_tasks": len(group.tasks),
            "tasks": group.tasks[:MAX_TASKS_LISTED],
            "termination_reason": group.termination_reason,
            "failed_components": group.failed_components,
            "tool": group.tool,
            "error_class": group.error_class,
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
            "n_records": len(usable),
            "n_shown_to_diagnosis": len(selected),
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
    if weak := weak_passes_view(weak_passes):
        data["weak_passes"] = weak
    if _size(data) > max_chars:  # first shrink every example, then drop examples
        for gv in group_views:
            if "_members" in gv:
                gv["examples"] = [
                    record_view(r, COMPACT) for r in _path_diverse(gv["_members"], MAX_EXAMPLES)
                ]
    for gv in group_views:
        gv.pop("_members", None)
    _fit(data, max_chars)
    return Evidence(data=data, records=tuple(selected))


#: weak passes listed in the evidence (the count covers all of them).
MAX_WEAK_LISTED = 20
#: a weak-pass reason's leading words -> its kind (`core.metrics.weak_pass_reasons` writes them).
WEAK_KINDS = (
    ("communicate value", "short_communicate_value"),
    ("no tool call", "no_tool_call"),
    ("write ", "unconfirmed_write"),
    ("gold action", "gold_action_not_matched"),
)


def weak_passes_view(weak_passes: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """`{"meaning", "n_weak_passes", "by_kind", "passes"}` of a run's weak passes, or None when there are
    none. `by_kind` counts reasons by `WEAK_KINDS`; `passes` lists the first `MAX_WEAK_LISTED`."""
    passes = [dict(w) for w in weak_passes if isinstance(w, Mapping)]
    if not passes:
        return None
    by_kind: dict[str, int] = {}
    for w in passes:
        for reason in w.get("reasons") or []:
            kind = next((k for lead, k in WEAK_KINDS if str(reason).startswith(lead)), "other")
            by_kind[kind] = by_kind.get(kind, 0) + 1
    view: dict[str, Any] = {
        "meaning": "passing trials that are not clean: evidence of a harness weakness (a step the policy "
        "requires skipped, a lookup not made, a pass by luck), not failures; a fix must keep them passing",
        "n_weak_passes": len(passes),
        "by_kind": by_kind,
        "passes": passes[:MAX_WEAK_LISTED],
    }
    return view


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
        data = json.loads(text[start + len(EVIDENCE_OPEN) : end])
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


# --- The shared transcript as prompt text (the roles' protocol; `sim/roles/answers.py` parses it back) ---

TURN_RE = re.compile(r'<turn role="(\w+)" pass="(\w+)">\n(.*?)\n</turn>', re.S)


def render_turn(role: str, pass_: int | None, content: str) -> str:
    """One transcript turn as prompt text: `<turn role="critic" pass="1">...</turn>`."""
    return f'<turn role="{role}" pass="{"final" if pass_ is None else pass_}">\n{content.strip()}\n</turn>'


def parse_turns(text: str) -> list[dict[str, Any]]:
    """The turns of a rendered transcript, in order: `[{"role", "pass", "content"}]`."""
    return [
        {
            "role": m.group(1),
            "pass": None if m.group(2) == "final" else int(m.group(2)),
            "content": m.group(3),
        }
        for m in TURN_RE.finditer(text)
    ]


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
