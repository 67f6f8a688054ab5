"""Which failure records may be evidence, which of them diagnosis sees, and how one record is shown.

    usable_records(records)          # not suspect, not infrastructure, not an endpoint problem, ...
    select_records(usable, limit)    # the failure-aware data rule (`--ecdysis-evidence failure-aware:N`)
    record_view(record, FULL)        # one record as a JSON-safe dict, bounded by a `Detail`

A record's view keeps at most `MAX_TOOL_CALLS` tool calls and `MAX_EXCERPT` messages, every text cut
head-and-tail by `cut` (so the harness's own `… [truncated N chars]` markers at the end of a tool result
stay visible); `COMPACT` is the smaller detail `evidence.build.build_evidence` falls back to when the evidence
is too long. The rules of the data are in `evidence`'s docstring (docs/diagnosis.md). This module must not
import tau2 or suites.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ecdysis.core.records import INFRA_REASONS, FailureRecord

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
    if record.user_abort:
        return "user_abort"
    return "user_stop_after_confirmation" if record.user_stop_after_confirmation else None


def usable_records(records: Iterable[FailureRecord]) -> list[FailureRecord]:
    """Records that may be evidence (`FailureRecord.is_evidence`): not of a suspect task, not an endpoint
    problem, not a user stop right after a confirmation request, not an infrastructure error."""
    return [r for r in records if r.is_evidence()]


def path_key(record: FailureRecord) -> tuple[Any, ...]:
    """The execution path of a record: termination reason, failed components, tool-call sequence."""
    return (
        record.termination_reason,
        tuple(sorted(record.failed_components)),
        tuple(c.name for c in record.tool_calls),
    )


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
    view = {
        "step": call.step,
        "name": call.name,
        "arguments": _args(call.arguments),
        "error": call.error,
        "result": None if seen is None else cut(seen, detail.result),
        "result_chars": None if call.result is None else len(call.result),
    }
    if getattr(call, "model_view", None) is not None and call.model_view != call.result:
        view["result_is"] = "as the harness sent it to the model (differs from the environment's output)"
    return view


def record_view(record: FailureRecord, detail: Detail = FULL) -> dict[str, Any]:
    """One record as evidence: termination, failed components, tool calls with results, an excerpt."""
    calls = list(record.tool_calls)
    n = detail.tool_calls
    shown = calls if len(calls) <= n else calls[: n // 2] + calls[-(n - n // 2) :]
    view: dict[str, Any] = {
        "record": record_key(record),
        "task_id": record.task_id,
        "trial": record.trial,
        "termination_reason": record.termination_reason,
        "failed_components": list(record.failed_components),
        "reward": record.reward,
    }
    if record.termination_reason == "endpoint_format_error" or getattr(record, "endpoint_problem", False):
        view["label"] = (
            "endpoint_format_error: the endpoint's reply could not be used (not valid tool-call or "
            "message format); weigh it as an endpoint/robustness problem, not as agent reasoning"
        )
    view["n_tool_calls"] = len(calls)
    view["tool_calls"] = [_call_view(c, detail) for c in shown]
    if len(calls) > len(shown):
        view["tool_calls_omitted"] = f"{len(calls) - len(shown)} calls in the middle omitted"
    user_calls = list(getattr(record, "user_tool_calls", None) or [])
    if user_calls:  # dual control: what the user did on their own device, never the agent's calls
        shown_user = (
            user_calls if len(user_calls) <= n else user_calls[: n // 2] + user_calls[-(n - n // 2) :]
        )
        view["user_tool_calls"] = [_call_view(c, detail) for c in shown_user]
        view["user_tool_calls_are"] = (
            "the user's own tool calls on their device (the agent asked, the user ran "
            "them; the agent saw only what the user said about them)"
        )
    if record.first_tool_error:
        view["first_tool_error"] = {
            k: cut(v, detail.result) if isinstance(v, str) else v
            for k, v in record.first_tool_error.items()
            if k != "arguments"
        }
        if isinstance(record.first_tool_error.get("arguments"), Mapping):
            view["first_tool_error"]["arguments"] = _args(record.first_tool_error["arguments"])
    if record.pending_tool_call:
        view["pending_tool_call"] = True
    if record.harness_notes:
        notes = (
            record.harness_notes
            if len(record.harness_notes) <= 6
            else (record.harness_notes[:3] + record.harness_notes[-3:])
        )
        view["harness_notes"] = [
            {k: cut(v, 160) if isinstance(v, str) else v for k, v in n.items()} for n in notes
        ]
    excerpt = list(record.excerpt)
    if len(excerpt) > detail.excerpt:
        excerpt = excerpt[:1] + excerpt[-(detail.excerpt - 1) :]
        view["excerpt_note"] = f"{len(record.excerpt) - detail.excerpt} middle messages omitted"
    view["excerpt"] = [_message_view(m, detail.text) for m in excerpt]
    return view


def _message_view(message: Mapping[str, Any], limit: int = MAX_TEXT) -> dict[str, Any]:
    out: dict[str, Any] = {"role": str(message.get("role", "?"))}
    if message.get("actor") == "user":
        out["actor"] = "user"
    content = message.get("content")
    if content:
        out["content"] = cut(content, limit)
    if message.get("tool_calls"):
        out["tool_calls"] = cut(message["tool_calls"], 240)
    return out
