"""The gate's cost check (ini `ecdysis_gate_max_cost_rise`): the agent's tokens per task against the baseline's.

Tokens per task = the agent's tokens (prompt + completion) of a run over its tasks, the efficiency figure the
evolution's test split reports (`evolve/testsplit.efficiency`). Pure functions over `summary.json` and baseline
dicts; no pytest, no files.
"""

from __future__ import annotations

from typing import Any

__all__ = ["cost_rise", "tokens_per_task"]


def tokens_per_task(summary: dict[str, Any]) -> float | None:
    """The agent's tokens (prompt + completion) of a run over its tasks, None without a task."""
    n_tasks = summary.get("n_tasks") or 0
    total = (summary.get("tokens") or {}).get("total")
    return round(float(total) / n_tasks, 1) if n_tasks and total is not None else None


def cost_rise(
    summary: dict[str, Any], baseline: dict[str, Any], max_rise: float
) -> tuple[dict[str, Any], str | None]:
    """(`{"tokens_per_task", "baseline_tokens_per_task", "rise", "max_rise"}`, the failing reason or None): the
    rise of the agent's tokens per task over the baseline's, as a share (`0.25` = +25 %)."""
    now, then = tokens_per_task(summary), baseline.get("tokens_per_task")
    figures: dict[str, Any] = {
        "tokens_per_task": now,
        "baseline_tokens_per_task": then,
        "rise": None,
        "max_rise": max_rise,
    }
    if then is None:
        return figures, (
            "ecdysis_gate_max_cost_rise: the baseline keeps no tokens per task (saved by an older "
            "version); save a new baseline with --ecdysis-save-baseline"
        )
    if now is None or not then:
        return figures, None
    figures["rise"] = round(now / then - 1, 4)
    if figures["rise"] > max_rise + 1e-9:
        return figures, (
            f"tokens per task {now:,.0f} are {figures['rise']:+.1%} against the baseline's {then:,.0f} "
            f"(allowed at most {max_rise:+.1%}, ecdysis_gate_max_cost_rise)"
        )
    return figures, None
