"""Scripted `trials.jsonl` lines for the acceptance rules' tests: per task, the rewards of its trials."""

from __future__ import annotations

from typing import Any


def trial_lines(rewards: dict[str, list[float]], suite: str = "s", **fields: Any) -> list[dict]:
    """A line per trial: `{"suite", "task_id", "trial", "reward", **fields}`, trial i of a task the i-th of
    its rewards, tasks in the order of `rewards`."""
    return [
        {"suite": suite, "task_id": t, "trial": i, "reward": r, **fields}
        for t, rs in rewards.items()
        for i, r in enumerate(rs)
    ]
