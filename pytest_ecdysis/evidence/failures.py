"""TrialResult -> FailureRecord: which trials are evidence, and what each record says.

Rules (docs/records.md):

- a trial is a failure when its reward is below λ;
- infrastructure errors (`INFRA_REASONS`: endpoint down, timeout, time budget) are never records: they
  are counted apart;
- `endpoint_format_error` trials, and trials whose agent endpoint wrote tool calls as text or failed to
  parse the model's output, are records that count as failures (an endpoint that cannot call tools is a
  worse endpoint, not an excluded trial), flagged `endpoint_problem` and kept out of the evidence;
- a user simulator that stopped in the very message confirming the agent's yes/no question (the write it
  confirmed never happens) is a benchmark artefact: scored as τ² does, flagged
  `user_stop_after_confirmation`, kept out of the evidence; so is the user simulator's own abort (τ²'s
  `###OUT-OF-SCOPE###`: its scenario did not cover what came up), flagged `user_abort`;
- suspect tasks (gold data known to be inconsistent) are scored and recorded, flagged `suspect`, and kept
  out of the evidence, reported separately. `FailureRecord.kept_out` names the reason.

No LLM, no pytest, no files here.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_ecdysis.core.metrics import is_success
from pytest_ecdysis.core.records import FailureRecord, RewardComponent, ToolCallRecord, TrialResult

#: component names a suite may report, normalised to `records.RewardComponent`.
COMPONENTS: tuple[RewardComponent, ...] = typing.get_args(RewardComponent)
#: messages kept before and after the point where the trial went wrong.
EXCERPT_BEFORE, EXCERPT_AFTER = 4, 2
#: characters kept of each excerpt message's content.
EXCERPT_CHARS = 600


@dataclass
class Triage:
    """The trials of a run sorted into evidence and the rest."""

    records: list[FailureRecord] = field(default_factory=list)  # every failure (suspect ones included)
    infra_errors: list[TrialResult] = field(default_factory=list)
    n_passed: int = 0

    @property
    def evidence(self) -> list[FailureRecord]:
        """Records diagnosis may use (`FailureRecord.is_evidence`): suspect tasks, endpoint problems and user
        stops right after a confirmation request left out."""
        return [r for r in self.records if r.is_evidence()]

    @property
    def suspect(self) -> list[FailureRecord]:
        return [r for r in self.records if r.suspect]


def record_key(suite: str, task_id: str, trial: int) -> str:
    """`<suite>/<task_id>/t<trial>`: how groups name their records."""
    return f"{suite}/{task_id}/t{trial}"


def failed_components(components: dict[str, float]) -> list[RewardComponent]:
    """Names (lower-cased, in `COMPONENTS` order) of the components scoring below 1."""
    low = {str(k).lower(): v for k, v in components.items()}
    return [c for c in COMPONENTS if c in low and low[c] is not None and low[c] < 1.0 - 1e-6]


def first_tool_error(calls: list[ToolCallRecord]) -> dict[str, Any] | None:
    """`{name, arguments, result, step}` of the first call the environment answered with an error."""
    for call in calls:
        if call.error:
            return {"name": call.name, "arguments": call.arguments, "result": call.result, "step": call.step}
    return None


def has_pending_tool_call(trial: TrialResult) -> bool:
    """The trial ended on a tool call that got no result (from the call list or the last message)."""
    if trial.tool_calls and trial.tool_calls[-1].result is None and not trial.tool_calls[-1].error:
        return True
    if trial.messages:
        last = trial.messages[-1]
        return last.get("role") == "assistant" and bool(last.get("tool_calls"))
    return False


def focus_step(trial: TrialResult) -> int:
    """Index of the message where the trial went wrong: first tool error, else the end."""
    err = first_tool_error(trial.tool_calls)
    if err and isinstance(err.get("step"), int) and 0 <= err["step"] < max(len(trial.messages), 1):
        return err["step"]
    return max(len(trial.messages) - 1, 0)


def excerpt(trial: TrialResult) -> list[dict[str, Any]]:
    """At most EXCERPT_BEFORE + 1 + EXCERPT_AFTER messages around `focus_step`, each cut to EXCERPT_CHARS.

    Each item: `{"index", "role", "content", "tool_calls"?, "actor"?}` (`actor` is `user` on the user's own
    tool calls and their results, dual control); cut content ends with `… [cut N chars]`.
    """
    if not trial.messages:
        return []
    at = focus_step(trial)
    lo, hi = max(at - EXCERPT_BEFORE, 0), min(at + EXCERPT_AFTER + 1, len(trial.messages))
    out = []
    for i in range(lo, hi):
        msg = trial.messages[i]
        content = msg.get("content")
        text = content if isinstance(content, str) else ("" if content is None else str(content))
        if len(text) > EXCERPT_CHARS:
            text = text[:EXCERPT_CHARS] + f"… [cut {len(text) - EXCERPT_CHARS} chars]"
        item: dict[str, Any] = {"index": i, "role": msg.get("role", "?"), "content": text}
        if msg.get("requestor") == "user":  # the user's own tool call or its result (dual control)
            item["actor"] = "user"
        if msg.get("tool_calls"):
            item["tool_calls"] = [
                {
                    "name": tc.get("name") or (tc.get("function") or {}).get("name"),
                    "arguments": tc.get("arguments") or (tc.get("function") or {}).get("arguments"),
                }
                for tc in msg["tool_calls"]
                if isinstance(tc, dict)
            ]
        out.append(item)
    return out


def to_record(trial: TrialResult) -> FailureRecord:
    """One failed trial as evidence (the caller has checked it failed and is not an infra error)."""
    return FailureRecord(
        suite=trial.suite,
        task_id=trial.task_id,
        trial=trial.trial,
        reward=trial.reward if trial.reward is not None else 0.0,
        termination_reason=trial.termination_reason,
        failed_components=failed_components(trial.components),
        tool_calls=trial.tool_calls,
        user_tool_calls=trial.user_tool_calls,
        first_tool_error=first_tool_error(trial.tool_calls),
        pending_tool_call=has_pending_tool_call(trial),
        excerpt=excerpt(trial),
        harness_notes=trial.harness_notes,
        suspect=trial.suspect,
        harness_id=trial.harness_id,
        endpoint_problem=trial.termination_reason == "endpoint_format_error" or trial.endpoint_problem,
        user_stop_after_confirmation=trial.user_stop_after_confirmation,
        user_abort=trial.user_abort,
        db_diff=(trial.checks or {}).get("db_diff") or None,
        kept_out=kept_out(trial),
    )


def kept_out(trial: TrialResult) -> str | None:
    """Why a failed trial's record is not evidence (first reason that applies), else None."""
    if trial.suspect:
        return "suspect"
    if trial.termination_reason == "endpoint_format_error" or trial.endpoint_problem:
        return "endpoint_problem"
    if trial.user_stop_after_confirmation:
        return "user_stop_after_confirmation"
    if trial.user_abort:
        return "user_abort"
    return None


def triage(trials: Iterable[TrialResult], threshold: float) -> Triage:
    """Sort trials into failure records (reward < λ), infrastructure errors and passes."""
    out = Triage()
    for t in trials:
        if t.is_infra_error:
            out.infra_errors.append(t)
        elif is_success(t.reward, threshold):
            out.n_passed += 1
        else:
            out.records.append(to_record(t))
    return out
