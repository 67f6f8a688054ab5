"""Which ground-truth entry *caused* a trial's failure, not only which quirks fired (issue 14, item 6).

The agent marks an entry with an `effect` when it damaged the outcome: a wrong value sent in a write
(`wrong_write`), a wrong figure stated (`wrong_figure`), giving up on the task (`gave_up`), closing
before the work was done (`ended_early`), a final answer without the figures (`no_figures`), arguments
the harness never answered (`format_end`). An `unseen_value` whose lookup failed because another entry
bent that lookup points to it (`because`): the root is the cause. A model that never closed the
conversation itself was ended by a limit (the harness's budget, τ²'s step limit): `harness_limit`.

The cause is the one root the failure rests on: the only root when there is one (the trial replayed
without it would pass, since nothing else damaged it); with several, a model-origin root if any (a
harness change curing the others would still leave the trial failed), else the first. This is a rule
over the agent's recorded effects, cheap enough for every run; `sim/truth/replay.py` finds the cause by
replaying the trial with each fired quirk switched off (a benchmark step). Pure functions; no I/O.
"""

from __future__ import annotations

from typing import Any

#: Effects of quirks that stay uncured to the end of the trial (settled when the ground truth is read).
LATE_EFFECTS: dict[str, str] = {
    "early_end": "ended_early",
    "forget_communicate": "no_figures",
    "malformed_args": "format_end",
}


def _root(quirks: list[dict[str, Any]], index: int) -> int:
    seen = {index}
    while isinstance(quirks[index].get("because"), int) and quirks[index]["because"] not in seen:
        index = quirks[index]["because"]
        seen.add(index)
    return index


def trial_cause(
    quirks: list[dict[str, Any]], *, closed: bool
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(cause, causes) of a trial from its ground-truth entries (each `kind`, `origin`, optional `effect`
    and `because`) and whether the model closed the conversation itself.

    Each cause is `{"kind", "origin", "entry"}` (`entry`: index into `quirks`, None for `harness_limit`).
    `cause` is None when nothing damaged the trial (a passing trial, or a failure the model cannot
    explain). Only meaningful for a failed trial; the suite adds `failed`.
    """
    roots: list[int] = []
    for i, q in enumerate(quirks):
        if q.get("effect"):
            root = _root(quirks, i)
            if root not in roots:
                roots.append(root)
    causes = [{"kind": quirks[i]["kind"], "origin": quirks[i]["origin"], "entry": i} for i in roots]
    if not closed and not any(quirks[i].get("effect") == "format_end" for i in roots):
        causes.append({"kind": "harness_limit", "origin": "harness", "entry": None})
    if not causes:
        return None, []
    model = [c for c in causes if c["origin"] == "model"]
    return (model[0] if model and len(causes) > 1 else causes[0]), causes
