"""The acceptance rule: is the candidate kept? (the paper's rule: the suite score strictly rises).

Single tasks may drop; only the overall suite score decides (Ecdysis paper, §3; docs/evolution.md).
Pure functions over scores, so every rule can be tested on scripted numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Scores closer than this are equal (float sums of rewards over trials).
EPSILON = 1e-12


@dataclass(frozen=True)
class Decision:
    """The verdict on one validated candidate."""

    accepted: bool  #: keep the candidate (it becomes the incumbent)
    reason: str  #: one line for the round's `reason`, e.g. `suite score 0.400 -> 0.500`


def decide_strict(before: float | None, after: float | None) -> Decision:
    """Accept iff `after > before` (strictly); an unknown score (None) is never accepted.

    Args:
        before: the incumbent's suite score in [0, 1] (mean reward over all trials), or None.
        after: the candidate's suite score on the same split and trials, or None.
    """
    line = f"suite score {_fmt(before)} -> {_fmt(after)}"
    if after is not None and before is not None and after > before + EPSILON:
        return Decision(True, line)
    return Decision(False, f"{line}: not strictly higher")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{float(x):.3f}"
