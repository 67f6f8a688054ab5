"""The held-out refusal rule: is a candidate's train gain matched on tasks the editor never saw evidence for?

A candidate that passed the train decision is scored, beside its incumbent, on held-out tasks (the test
split). Per task, d = candidate's mean reward - incumbent's; gain_train = mean of d over the train tasks
(the trials the train decision judged), gain_held = the same over the held-out tasks. Their
difference has variance s²_train / T_train + s²_held / T_held (s²: the sample variance over tasks of d; the
two splits are independent task sets, `gate.noninferiority.train_test_gap`), and the candidate is
**refused** when the one-sided lower bound

    (gain_train - gain_held) - z(1 - level) · SE  >  0

that is, when its train gain exceeds its held-out gain by more than the noise of both. Measured at the
default level (HELDOUT_LEVEL, `benchmarks/bench_heldout.py`, leaderboard world, candidates first accepted by a
paired sign test on train): a real +10 point fix on both splits is refused in 5.0% (airline, 1 train trial a
task) to 1.0% (retail, 3 trials) of its acceptances, a +5 point fix in 15.3% to 2.8% (the winner's curse of
the train decision: docs/evolution.md, held-out check); a memorised train table (+30 train, +0 held out) in
66.0% to 98.8%. Pure functions; no loop import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from pytest_ecdysis.gate.noninferiority import train_test_gap

#: one-sided level of the refusal: the chance, at a true gap of 0 and no selection, that a fix is refused.
HELDOUT_LEVEL = 0.01


@dataclass(frozen=True)
class HeldOutCheck:
    """The refusal rule's verdict on one candidate (gains in rate units, i.e. points / 100)."""

    refused: bool  #: lower > 0
    train_gain: float
    held_gain: float
    gap: float  #: train_gain - held_gain
    se: float  #: the gap's standard error
    lower: float  #: gap - z·SE
    level: float
    n_train: int  #: train tasks scored by both harnesses
    n_held: int  #: held-out tasks scored by both harnesses
    tasks: tuple[str, ...]  #: train tasks whose mean rose by more than the held-out gain, largest rise first

    def line(self) -> str:
        """`held-out check: train gain +0.300 vs held-out gain +0.000 (gap +0.300, SE 0.070, lower bound
        +0.137 at level 0.01): refused, the train gain is not matched on held-out tasks; train tasks: a, b`."""
        verdict = (
            "refused: the train gain is not matched on held-out tasks"
            if self.refused
            else "passed: within the noise of both"
        )
        names = (
            f"; train tasks that carried it: {', '.join(self.tasks[:10])}"
            if self.refused and self.tasks
            else ""
        )
        more = f" (+{len(self.tasks) - 10} more)" if self.refused and len(self.tasks) > 10 else ""
        return (
            f"held-out check over {self.n_train} train / {self.n_held} held-out task(s): train gain "
            f"{self.train_gain:+.3f} vs held-out gain {self.held_gain:+.3f} (gap {self.gap:+.3f}, SE "
            f"{self.se:.3f}, lower bound {self.lower:+.3f} at level {self.level:g}): {verdict}{names}{more}"
        )

    def fields(self) -> dict[str, object]:
        """The verdict as JSON fields (`RoundRecord.heldout`)."""
        return {
            "made": True,
            "refused": self.refused,
            "train_gain": round(self.train_gain, 6),
            "held_gain": round(self.held_gain, 6),
            "gap": round(self.gap, 6),
            "se": round(self.se, 6),
            "lower": round(self.lower, 6),
            "level": self.level,
            "n_train": self.n_train,
            "n_held": self.n_held,
            "tasks": list(self.tasks),
            "line": self.line(),
        }


def heldout_check(
    train_before: Mapping[str, Sequence[float]],
    train_after: Mapping[str, Sequence[float]],
    held_before: Mapping[str, Sequence[float]],
    held_after: Mapping[str, Sequence[float]],
    *,
    level: float = HELDOUT_LEVEL,
) -> HeldOutCheck:
    """The rule on per-task rewards (task -> rewards of its trials) of incumbent (`*_before`) and candidate
    (`*_after`) on train and on the held-out tasks.

    Raises:
        ValueError: fewer than 2 tasks scored by both harnesses in a split, or a level outside (0, 1).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    gap = train_test_gap(train_before, train_after, held_before, held_after, level=level)
    z = NormalDist().inv_cdf(1 - level)
    se = (gap.gap - gap.lower) / z
    n_train = len(set(train_before) & set(train_after))
    n_held = len(set(held_before) & set(held_after))
    return HeldOutCheck(
        refused=gap.lower > 1e-12,
        train_gain=gap.train_gain,
        held_gain=gap.test_gain,
        gap=gap.gap,
        se=se,
        lower=gap.lower,
        level=level,
        n_train=n_train,
        n_held=n_held,
        tasks=gap.tasks,
    )


def heldout_summary(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The held-out checks of an evolution (`summary.json` `heldout`, the verdict; the rounds of `evolution.json`, as `evolve.heldout` records them): `{"refused", "passed",
    "not_made", "checks"}` (counts, and one entry per check: `round`, `step` or `proposal` when inside a round,
    `refused`, `made`, `line`, and when made `train_gain`, `held_gain`, `gap`, `lower`, `level`, `tasks`);
    None when no candidate reached a check."""
    checks: list[dict[str, Any]] = []
    for r in doc.get("rounds") or []:
        subs = [("step", s) for s in r.get("steps") or []] + [
            ("proposal", p) for p in r.get("proposals") or []
        ]
        if isinstance(r.get("heldout"), dict) and not subs:
            checks.append({"round": r.get("round"), **_entry(r["heldout"])})
        for kind, sub in subs:
            if isinstance(sub.get("heldout"), dict):
                n = sub.get(kind, sub.get("index"))
                checks.append({"round": r.get("round"), kind: n, **_entry(sub["heldout"])})
    if not checks:
        return None
    return {
        "refused": sum(bool(c.get("refused")) for c in checks),
        "passed": sum(bool(c.get("made")) and not c.get("refused") for c in checks),
        "not_made": sum(not c.get("made") for c in checks),
        "checks": checks,
    }


def _entry(h: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("made", "refused", "why", "train_gain", "held_gain", "gap", "lower", "level", "tasks", "line")
    return {k: h[k] for k in keys if k in h}
