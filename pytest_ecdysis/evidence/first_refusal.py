"""Blame by evidence across trials: the same refusal of every trial's first request is the endpoint's.

    line = reclassify(trials)      # None, or the one line naming it (the trials are changed in place)

A refusal read one trial at a time is the harness's when its words name nothing the server owns (an HTTP
400 or 422 about the request: `endpoint.refusals`, the suite's trial runner). Across trials it can say
more: when the server refused the *first* agent request of every scored trial of a run with the same
words, no trial got a single model reply, so nothing the harness learnt in a conversation was involved;
such a refusal would repeat for any harness that sends the suite's tools and messages (a JSON-schema
keyword of the suite's tools the server rejects, a request parameter it does not take). The rule (no LLM,
no statistics):

- a trial's *first refusal* is its endpoint note `request_refused` (`{"kind", "detail": "HTTP <status>:
  <server's words>", "step", "status"}`, written by the suite's runner for an agent request refused and
  blamed on the harness) when the trial ended `agent_error` on its first agent call (`step` 1);
- when at least `MIN_TRIALS` trials were scored (infrastructure errors aside) and every one of them has a
  first refusal, the same once digits are masked (a token count or an id may differ), those trials become
  `infrastructure_error` with `endpoint_problem` set: out of the score and the evidence, each error opening
  with one line that quotes the server and says what to change;
- a refusal a different request would avoid stays the harness's, however many trials share it: a request
  the server could not parse (`refusals.REQUEST_UNPARSED`: a tool the harness declared without
  `parameters`) and a request too large (HTTP 413).

`MIN_TRIALS` is 3: two trials refused alike are as likely a harness that breaks its first request as a
server that refuses it; three trials of different tasks and none that got further is the least that is
called "every trial". A harness that breaks its first request on every trial is then an infrastructure
error too: a candidate with more infrastructure errors than the incumbent is rejected all the same
(`validate.results`), so no harness gains by it. No pytest, no files here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pytest_ecdysis.core.records import TrialResult
from pytest_ecdysis.endpoint.refusals import REQUEST_UNPARSED

#: the endpoint note a suite's runner writes for an agent request refused and blamed on the harness.
KIND = "request_refused"
#: the fewest scored trials, all refused alike on their first request, that make the refusal the endpoint's.
MIN_TRIALS = 3
#: statuses of a refusal a different request avoids (413: request too large).
AVOIDABLE_STATUSES = frozenset({413})


def first_refusal(trial: TrialResult) -> dict[str, Any] | None:
    """The trial's `request_refused` note when it ended `agent_error` on its first agent call, else None."""
    if trial.termination_reason != "agent_error":
        return None
    notes = [n for n in trial.endpoint_notes if isinstance(n, dict) and n.get("kind") == KIND]
    if len(notes) != 1 or notes[0].get("step") != 1 or not isinstance(notes[0].get("detail"), str):
        return None
    return notes[0]


def _same(detail: str) -> str:
    """A refusal's words with digit runs masked and whitespace folded (what "the same refusal" compares)."""
    return " ".join(re.sub(r"\d+", "#", detail).split()).lower()


def avoidable(note: dict[str, Any]) -> bool:
    """A refusal a different request would avoid: the server could not parse the request, or it was too
    large."""
    return note.get("status") in AVOIDABLE_STATUSES or bool(REQUEST_UNPARSED.search(str(note["detail"])))


def endpoint_refusal(trials: Iterable[TrialResult], min_trials: int = MIN_TRIALS) -> str | None:
    """The one line naming the refusal every scored trial's first request got, or None when the rule of
    the module docstring does not hold (fewer than `min_trials` scored, one trial got further or was refused
    otherwise, a refusal a different request avoids)."""
    scored = [t for t in trials if not t.is_infra_error]
    if len(scored) < min_trials:
        return None
    notes = [first_refusal(t) for t in scored]
    if any(n is None for n in notes):
        return None
    found = [n for n in notes if n is not None]
    if len({_same(n["detail"]) for n in found}) != 1 or avoidable(found[0]):
        return None
    return (
        f"the endpoint refused the first agent request of all {len(scored)} scored trials with the same words "
        f"({found[0]['detail']}), before any model reply: a refusal no trial got past would repeat for any "
        "harness, so these trials are the endpoint's (infrastructure errors, not evidence); change what the "
        "server's words name (a server setting, a request parameter or a tool-schema feature it does not "
        "take), then rerun"
    )


def reclassify(trials: list[TrialResult], min_trials: int = MIN_TRIALS) -> str | None:
    """Apply the rule to a run's trials in place: when `endpoint_refusal` names a refusal, every scored trial
    becomes `infrastructure_error` (reward None, no components, `endpoint_problem`), its error the line
    followed by the trial's own words. Returns the line, or None (nothing changed)."""
    line = endpoint_refusal(trials, min_trials)
    if line is None:
        return None
    for t in trials:
        if t.is_infra_error:
            continue
        t.termination_reason = "infrastructure_error"
        t.reward, t.components, t.endpoint_problem = None, {}, True
        t.error = f"{line}\nthis trial: {t.error}" if t.error else line
    return line
