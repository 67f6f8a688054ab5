"""Which ground-truth entry *caused* a trial's failure, not only which quirks fired.

The agent marks an entry with an `effect` when it damaged the outcome: a wrong value sent in a write
(`wrong_write`), a wrong figure stated (`wrong_figure`), giving up on the task (`gave_up`), closing
before the work was done (`ended_early`), a final answer without the figures (`no_figures`), arguments
the harness never answered (`format_end`). An `unseen_value` whose lookup failed because another entry
bent that lookup points to it (`because`): the root is the cause. A model that never closed the
conversation itself was ended by a limit (the harness's budget, τ²'s step limit): `harness_limit`.

The cause is the first root, in firing order, that is not cured and whose effect a failing check of the
evaluator points at (`CHECKS_OF_EFFECT`: a wrong write fails the database and action checks, missing
figures the communicate check, giving up or ending early any of them). An entry marked cured never is the
cause, nor a cure at the end of a `because` chain: a lookup bent by an entry that was cured later (the harness
repaired it, the user corrected it) still left the value unseen, and the unseen value is the root then.
Without the evaluator's checks (`failing` None) every uncured root qualifies and the first is the cause.
Before this rule a model-origin root won over earlier ones whatever failed: with a forgotten figure
failing the communicate check and a wrong choice in a write the database check passed, the report named
the wrong choice. This is a rule over the agent's recorded effects, cheap enough for every run;
`sim/truth/replay.py` finds the cause by replaying the trial with each fired quirk switched off (a
benchmark step). Pure functions; no I/O.
"""

from __future__ import annotations

from typing import Any

#: Effects of quirks that stay uncured to the end of the trial (settled when the ground truth is read).
LATE_EFFECTS: dict[str, str] = {
    "early_end": "ended_early",
    "forget_communicate": "no_figures",
    "malformed_args": "format_end",
}


#: Effect -> the evaluator's checks it fails (τ²'s reward components: `db`, `action`, `communicate`,
#: `env_assertion`, as the τ² suite's scorer names them). Work not done fails whatever checks the task has.
CHECKS_OF_EFFECT: dict[str, frozenset[str]] = {
    "wrong_write": frozenset({"db", "action", "env_assertion"}),
    "wrong_figure": frozenset({"communicate"}),
    "no_figures": frozenset({"communicate"}),
    "gave_up": frozenset({"db", "action", "communicate", "env_assertion"}),
    "ended_early": frozenset({"db", "action", "communicate", "env_assertion"}),
    "format_end": frozenset({"db", "action", "communicate", "env_assertion"}),
    "omitted_write": frozenset({"db", "action", "env_assertion"}),
    "declined": frozenset({"db", "action", "env_assertion"}),
}


def failing_checks(components: dict[str, float] | None) -> frozenset[str] | None:
    """The checks that failed, from a trial's reward components (`{"db": 0.0, "communicate": 1.0}`): those
    below 1. None when there are none to read (an unscored trial): the cause then ignores the checks."""
    if not components:
        return None
    return frozenset(name for name, value in components.items() if value < 1.0)


def _root(quirks: list[dict[str, Any]], index: int) -> int:
    """The root of entry `index`: along `because` links, as far as the next entry is not cured."""
    seen = {index}
    while True:
        nxt = quirks[index].get("because")
        if not isinstance(nxt, int) or nxt in seen or not 0 <= nxt < len(quirks) or quirks[nxt].get("cured"):
            return index
        index = nxt
        seen.add(index)


def trial_cause(
    quirks: list[dict[str, Any]], *, closed: bool, failing: frozenset[str] | set[str] | None = None
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(cause, causes) of a trial from its ground-truth entries (each `kind`, `origin`, optional `effect`,
    `cured` and `because`), whether the model closed the conversation itself, and the evaluator's failing
    checks (`failing_checks`; None: not known).

    Each cause is `{"kind", "origin", "entry"}` (`entry`: index into `quirks`, None for `harness_limit`).
    `causes` lists every uncured damaging root in firing order (then `harness_limit` when the model never
    closed); `cause` is the first of them a failing check points at (module docstring), else the first;
    None when nothing damaged the trial (a passing trial, or a failure the model cannot explain). Only
    meaningful for a failed trial; the suite adds `failed`.
    """
    roots: list[int] = []
    for i, q in enumerate(quirks):
        if q.get("effect") and not q.get("cured"):
            root = _root(quirks, i)
            if root not in roots:
                roots.append(root)
    causes = [{"kind": quirks[i]["kind"], "origin": quirks[i]["origin"], "entry": i} for i in roots]
    if not closed and not any(quirks[i].get("effect") == "format_end" for i in roots):
        causes.append({"kind": "harness_limit", "origin": "harness", "entry": None})
    if not causes:
        return None, []
    if failing:
        for c in causes:
            if c["entry"] is None:
                return c, causes
            effects = {quirks[j].get("effect") for j in _chain(quirks, c["entry"], roots)}
            if any(failing & CHECKS_OF_EFFECT.get(str(e), frozenset()) for e in effects):
                return c, causes
    return causes[0], causes


def _chain(quirks: list[dict[str, Any]], root: int, roots: list[int]) -> list[int]:
    """The uncured damaging entries whose root is `root` (the root itself included when it has an effect)."""
    return [
        i for i, q in enumerate(quirks) if q.get("effect") and not q.get("cured") and _root(quirks, i) == root
    ]
