"""FailureRecord[] -> PatternGroup[]: deterministic failure signatures, no LLM.

A signature is `<termination_reason>|<failed components joined by '+', or 'none'>|<tool or '-'>|<error
class or '-'>`, where the tool is the one of the first tool error (else of a pending tool call, else '-')
and the error class is a coarse class of that error's text (`error_class`). The same records always give
the same groups in the same order: cross-task groups (>= 2 distinct tasks) first, then by record count,
task count and signature. Single-task groups stay in the list as auxiliary evidence; no group is a
mandatory repair target (docs/diagnosis.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pytest_ecdysis.core.records import FailureRecord, PatternGroup
from pytest_ecdysis.evidence.failures import record_key

#: (class, pattern) in priority order; the first match names the class of a tool error text.
ERROR_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx, re.I))
    for name, rx in (
        ("malformed_arguments", r"json|malformed|could not parse|decode"),
        ("missing_argument", r"missing|required (argument|parameter|field)"),
        ("not_found", r"not found|does not exist|no such|unknown (user|order|reservation|flight|product)"),
        ("invalid_argument", r"invalid|must be|expected|wrong (format|type)|validation"),
        ("not_allowed", r"not allowed|cannot|can't|forbidden|permission|not permitted|policy"),
        ("insufficient", r"insufficient|not enough|balance|exceed"),
        ("state_conflict", r"already|not (available|pending|delivered|cancell?able)|status"),
        ("unknown_tool", r"unknown tool|no tool|not a (valid )?tool"),
        ("timeout", r"time ?out|timed out"),
    )
)


def error_class(text: str | None) -> str | None:
    """Coarse class of a tool error text (`not_found`, `invalid_argument`, ...), `other` if none matches."""
    if text is None:
        return None
    for name, rx in ERROR_CLASSES:
        if rx.search(text):
            return name
    return "other"


def signature_parts(record: FailureRecord) -> tuple[str, tuple[str, ...], str | None, str | None]:
    """(termination reason, failed components, tool, error class) of one record."""
    tool = err = None
    if record.first_tool_error:
        tool = record.first_tool_error.get("name")
        err = error_class(str(record.first_tool_error.get("result") or ""))
    elif record.pending_tool_call and record.tool_calls:
        tool, err = record.tool_calls[-1].name, "no_result"
    return record.termination_reason, tuple(record.failed_components), tool, err


def signature(record: FailureRecord) -> str:
    reason, comps, tool, err = signature_parts(record)
    return f"{reason}|{'+'.join(comps) or 'none'}|{tool or '-'}|{err or '-'}"


def group(records: Iterable[FailureRecord]) -> list[PatternGroup]:
    """Group records by `signature`; records that are not evidence (`FailureRecord.is_evidence`: suspect
    tasks, endpoint problems, a user stop right after a confirmation request) are skipped.

    Returns groups with `tasks` (`<suite>/<task_id>`, sorted) and `records` (`<suite>/<task_id>/t<n>`,
    sorted), cross-task groups first.
    """
    buckets: dict[str, list[FailureRecord]] = {}
    for rec in records:
        if not rec.is_evidence():
            continue
        buckets.setdefault(signature(rec), []).append(rec)
    groups = []
    for sig, recs in buckets.items():
        reason, comps, tool, err = signature_parts(recs[0])
        tasks = sorted({f"{r.suite}/{r.task_id}" for r in recs})
        groups.append(
            PatternGroup(
                signature=sig,
                cross_task=len(tasks) >= 2,
                tasks=tasks,
                records=sorted(record_key(r.suite, r.task_id, r.trial) for r in recs),
                termination_reason=reason,
                failed_components=list(comps),
                tool=tool,
                error_class=err,
                endpoint_problem=reason == "endpoint_format_error",
            )
        )
    groups.sort(key=lambda g: (not g.cross_task, -len(g.records), -len(g.tasks), g.signature))
    return groups
