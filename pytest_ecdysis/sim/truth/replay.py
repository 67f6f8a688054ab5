"""Causes by replay (issue 14, item 6): the quirk that *caused* a failed trial is the one whose replay
with that quirk switched off passes.

The simulated model is deterministic given (profile, task, trial, nonce), so a failed trial can be run
again: the same harness, task and trial, drawn with the original trial's nonce (its ground truth's
`nonce`) and with one quirk kind switched off for the whole trial. The server does this only for run
ids registered through `SimModel.replay(run_id, nonce=..., off=...)`, a Python call on the server
object, never a request field: harness code cannot switch a quirk off. The suite side (run the trial
under a replay run id, return its reward) is the caller's `replay` callable: this module does no I/O and
imports no suite. `sim/truth/causes.py` keeps the cheaper rule over recorded effects that every run writes;
`benchmarks/bench_sim_causes.py` replays a run's failures and prints where the two disagree.

A replay that switches a quirk off changes what follows it (later draws are keyed by where the model is,
so a different path draws differently): the answer is "this trial, without that quirk, passed", which
is the counterfactual the issue asks for, not a proof that nothing else could have failed it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_ecdysis.sim.profiles import QUIRK_ORIGINS

#: A replay of one failed trial: the quirk kinds to switch off -> the replay's reward (None: no reward,
#: e.g. an infrastructure error).
Replay = Callable[[frozenset[str]], "float | None"]


def fired_kinds(truth: dict[str, Any]) -> list[str]:
    """The profile quirk kinds that fired in a trial (ground truth `quirks`), in order of first firing;
    entries that are no profile quirk (`unseen_value`, `harness_limit`: the harness's doing) excluded."""
    out: list[str] = []
    for q in truth.get("quirks") or []:
        if q["kind"] in QUIRK_ORIGINS and q["kind"] not in out:
            out.append(q["kind"])
    return out


def replay_cause(truth: dict[str, Any], replay: Replay, *, threshold: float = 1.0) -> dict[str, Any]:
    """The cause of one failed trial by replay.

    `truth`: the trial's ground truth (`quirks`, `closed`); `replay(off)`: the trial's reward replayed
    with the kinds `off` switched off; `threshold`: the reward at which a trial passes (τ²: 1.0).

    Returns `{"cause": {"kind", "origin"} | None, "by", "sufficient", "replays", "reproduced"}`:
    `replays` maps each replay tried (`"none"`, a kind, or `"all"`) to its reward; `reproduced` whether
    the replay with nothing off failed as the trial did (if not, nothing else is tried and `by` is
    `not_reproduced`); `sufficient` the kinds whose replay alone passed. `by` says how the cause was
    found: `replay` (the first kind, in order of firing, whose replay passed), `limit` (no single kind:
    the model never closed the conversation, the harness's own limit ended it: `harness_limit`),
    `harness` (no single kind: a value the harness cut, dropped or never obtained: `unseen_value`),
    `joint` (only with every fired kind off did it pass: the first kind is named) or `none`.
    """
    replays: dict[str, float | None] = {"none": replay(frozenset())}
    out: dict[str, Any] = {
        "cause": None,
        "by": "none",
        "sufficient": [],
        "replays": replays,
        "reproduced": True,
    }
    if _passes(replays["none"], threshold):
        out.update(reproduced=False, by="not_reproduced")
        return out
    kinds = fired_kinds(truth)
    for kind in kinds:
        replays[kind] = replay(frozenset({kind}))
    out["sufficient"] = [k for k in kinds if _passes(replays[k], threshold)]
    if out["sufficient"]:
        kind = out["sufficient"][0]
        out.update(cause={"kind": kind, "origin": QUIRK_ORIGINS[kind]}, by="replay")
    elif not truth.get("closed", True):
        out.update(cause={"kind": "harness_limit", "origin": "harness"}, by="limit")
    elif any(q["kind"] == "unseen_value" for q in truth.get("quirks") or []):
        out.update(cause={"kind": "unseen_value", "origin": "harness"}, by="harness")
    elif len(kinds) > 1:
        replays["all"] = replay(frozenset(kinds))
        if _passes(replays["all"], threshold):
            out.update(cause={"kind": kinds[0], "origin": QUIRK_ORIGINS[kinds[0]]}, by="joint")
    return out


def _passes(reward: float | None, threshold: float) -> bool:
    return reward is not None and reward >= threshold
