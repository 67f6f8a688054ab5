"""Scores of a run: suite score, pass@k, pass^k, per-task success counts, tokens, wall-clock and cost.

Pure functions over `TrialResult`s (no pytest, no files except the price table). Definitions:

- *suite score*: mean reward over the scored trials (the paper's "average accuracy"); trials that ended
  with an infrastructure error have no reward and are counted apart (`n_infra_errors`), never as 0.
- *success*: reward >= λ (τ² uses reward == 1 within 1e-6, the same as λ = 1.0).
- *pass^k* (τ²-bench, `tau2/metrics/agent_metrics.py::pass_hat_k`, after arXiv:2406.12045): per task
  with n scored trials of which c succeeded, C(c, k) / C(n, k); averaged over tasks. It is the chance
  that k trials drawn without replacement all succeed.
- *pass@k* (the unbiased estimator of Chen et al. 2021, arXiv:2107.03374): per task 1 - C(n-c, k) / C(n, k),
  averaged over tasks: the chance that at least one of k drawn trials succeeds.
- k runs from 1 to the configured trials; like τ²'s `get_metrics_df`, a k larger than the fewest scored
  trials of any task has no value (None), instead of mixing tasks with different n.
- *solved*: every trial of the task succeeded (and it has at least one scored trial).

Cost: tokens x the price table of `core.prices` (litellm's bundled price map, read offline, overridden by
the project's `.ecdysis/prices.json`). An unknown model's cost is None (unknown), never 0; a simulated model
(`sim`, `sim/<profile>`) costs 0 and is labelled "simulated".
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_ecdysis.core.prices import cost_usd, load_prices
from pytest_ecdysis.core.records import TrialResult

__all__ = [
    "EPS",
    "cost_usd",
    "is_success",
    "load_prices",
    "pass_at_k",
    "pass_hat_k",
    "run_cost",
    "score_block",
    "sum_tokens",
    "task_counts",
    "task_key",
    "task_mean_rewards",
]

#: reward >= λ - EPS counts as success (τ²'s `is_successful` tolerance).
EPS = 1e-6


def task_key(trial: TrialResult) -> str:
    """`<suite>/<task_id>`: task ids repeat across suites (airline 3 and retail 3)."""
    return f"{trial.suite}/{trial.task_id}"


def is_success(reward: float | None, threshold: float) -> bool:
    return reward is not None and reward >= threshold - EPS


def pass_hat_k(n: int, c: int, k: int) -> float:
    """τ²'s pass^k for one task: C(c, k) / C(n, k). Raises ValueError when n < k."""
    if n < k:
        raise ValueError(f"number of trials {n} is less than k {k}")
    return math.comb(c, k) / math.comb(n, k)


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k for one task: 1 - C(n - c, k) / C(n, k). Raises ValueError when n < k."""
    if n < k:
        raise ValueError(f"number of trials {n} is less than k {k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class TaskCounts:
    """Per task: scored trials `n`, successes `c`, infrastructure errors."""

    n: int
    c: int
    infra: int

    @property
    def solved(self) -> bool:
        return self.n > 0 and self.c == self.n and self.infra == 0


def task_counts(trials: Iterable[TrialResult], threshold: float) -> dict[str, TaskCounts]:
    """`{"<suite>/<task_id>": TaskCounts}`, sorted by key."""
    n: dict[str, int] = defaultdict(int)
    c: dict[str, int] = defaultdict(int)
    infra: dict[str, int] = defaultdict(int)
    for t in trials:
        key = task_key(t)
        if t.is_infra_error or t.reward is None:
            infra[key] += 1
            n[key] += 0
        else:
            n[key] += 1
            c[key] += is_success(t.reward, threshold)
    return {k: TaskCounts(n[k], c[k], infra[k]) for k in sorted(n, key=_natural)}


def task_mean_rewards(trials: Iterable[TrialResult]) -> dict[str, float]:
    """`{"<suite>/<task_id>": mean reward of its scored trials}` (tasks with none scored are absent); the
    pairs of the paired acceptance test and gate (`acceptance`)."""
    rewards: dict[str, list[float]] = defaultdict(list)
    for t in trials:
        if not t.is_infra_error and t.reward is not None:
            rewards[task_key(t)].append(float(t.reward))
    return {k: sum(v) / len(v) for k, v in rewards.items()}


def _natural(key: str) -> tuple:
    """Sort `tau2-airline/10` after `tau2-airline/9`."""
    suite, _, task = key.rpartition("/")
    return (suite, int(task) if task.isdigit() else math.inf, task)


def pass_k_table(
    counts: dict[str, TaskCounts], trials: int
) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """(pass@k, pass^k) keyed "1".."trials"; None where some task has fewer than k scored trials."""
    at: dict[str, float | None] = {}
    hat: dict[str, float | None] = {}
    scored = [tc for tc in counts.values() if tc.n > 0]
    min_n = min((tc.n for tc in scored), default=0)
    for k in range(1, trials + 1):
        if not scored or k > min_n:
            at[str(k)] = hat[str(k)] = None
            continue
        at[str(k)] = sum(pass_at_k(tc.n, tc.c, k) for tc in scored) / len(scored)
        hat[str(k)] = sum(pass_hat_k(tc.n, tc.c, k) for tc in scored) / len(scored)
    return at, hat


def sum_tokens(trials: Iterable[TrialResult], field: str = "tokens") -> dict[str, int]:
    """Summed `tokens` (the agent's) or `user_tokens` (the user simulator's) of trials."""
    total = {"prompt": 0, "completion": 0, "total": 0}
    for t in trials:
        for key in total:
            total[key] += int(getattr(t, field).get(key, 0))
    return total


def run_cost(
    model: str,
    tokens: dict[str, int],
    user_model: str | None,
    user_tokens: dict[str, int],
    prices: dict[str, dict[str, float]],
) -> tuple[float | None, str]:
    """The cost of a run's agent and user-simulator calls, each priced with its own model (see `cost_usd`).

    Unknown when either part with tokens is unknown; "simulated" only when both parts are.
    """
    cost, note = cost_usd(model, tokens, prices)
    if not user_model or not any(user_tokens.values()):
        return cost, note
    user_cost, user_note = cost_usd(user_model, user_tokens, prices)
    if cost is None:
        return None, note
    if user_cost is None:
        return None, user_note.replace("unknown model", "unknown user model", 1)
    if note == user_note == "simulated":
        return 0.0, "simulated"
    return cost + user_cost, "priced"


def score_block(
    trials: list[TrialResult],
    *,
    threshold: float,
    n_trials_cfg: int,
    model: str,
    prices: dict[str, dict[str, float]],
    user_model: str | None = None,
) -> dict[str, Any]:
    """The figures `summary.json` holds for one suite (or all of them); docs/records.md lists the fields.

    `n_trials_cfg` is the configured trials per task (k runs 1..that). Shape:
    `{n_tasks, n_trials, n_scored, suite_score, pass_at_k, pass_hat_k, n_solved, n_infra_errors,
    tasks: {key: {"n", "successes", "infra_errors", "solved", "mean_reward"}}, tokens, cost_usd, cost_note, trials_wall_s,
    n_weak_passes, weak_passes}`.
    """
    counts = task_counts(trials, threshold)
    means = task_mean_rewards(trials)
    rewards = [t.reward for t in trials if t.reward is not None and not t.is_infra_error]
    at, hat = pass_k_table(counts, n_trials_cfg)
    tokens = sum_tokens(trials)
    user_tokens = sum_tokens(trials, "user_tokens")
    cost, note = run_cost(model, tokens, user_model, user_tokens, prices)
    return {
        "n_tasks": len(counts),
        "n_trials": len(trials),
        "n_scored": len(rewards),
        "suite_score": (sum(rewards) / len(rewards)) if rewards else None,
        "pass_at_k": at,
        "pass_hat_k": hat,
        "n_solved": sum(tc.solved for tc in counts.values()),
        "n_infra_errors": sum(tc.infra for tc in counts.values()),
        "tasks": {
            k: {
                "n": tc.n,
                "successes": tc.c,
                "infra_errors": tc.infra,
                "solved": tc.solved,
                "mean_reward": means.get(k),
            }
            for k, tc in counts.items()
        },
        "tokens": tokens,
        "user_tokens": user_tokens,
        "cost_usd": cost,
        "cost_note": note,
        "trials_wall_s": round(sum(t.wall_s for t in trials), 3),
        **weak_pass_block(trials, threshold),
    }


#: a communicate value shorter than this is found inside other text by chance ("4" in "2024-05-14").
WEAK_VALUE_CHARS = 3


def weak_pass_reasons(trial: TrialResult, threshold: float) -> list[str]:
    """Why a passing trial's success is weak evidence of a solved task (empty: not weak, or not a pass).

    Only for trials whose suite reported its evaluator's checks (`TrialResult.checks`): a communicate
    value under `WEAK_VALUE_CHARS` characters that was met (it matches inside dates, ids, prices), or no
    tool call at all, the agent's or the user's own (the gold has no write and the value happened to be
    said; in τ² telecom the user's device actions are the fix, so a trial with only those is not weak);
    from τ²'s own checks, a write the suite found not preceded by the user's confirmation its policy requires
    (`checks["unconfirmed_writes"]`, τ² #298) and a gold action τ²'s evaluator did not match
    (`checks["actions"]`, τ² #15: the reward's DB and communicate parts do not see a skipped lookup).
    """
    if trial.checks is None or trial.is_infra_error or not is_success(trial.reward, threshold):
        return []
    reasons = [
        f"communicate value {c.get('info')!r} under {WEAK_VALUE_CHARS} characters, matched in "
        f"{c.get('matched')!r}"
        for c in trial.checks.get("communicate") or []
        if c.get("met") and len(str(c.get("info") or "")) < WEAK_VALUE_CHARS
    ]
    if not trial.tool_calls and not trial.user_tool_calls:  # dual control: the user's own calls count too
        reasons.append("no tool call")
    reasons += [
        f"write {name} not preceded by the user's confirmation the policy requires"
        for name in trial.checks.get("unconfirmed_writes") or []
    ]
    reasons += [
        f"gold action {a.get('name')} not matched"
        for a in trial.checks.get("actions") or []
        if isinstance(a, dict) and a.get("match") is False
    ]
    return reasons


def weak_pass_block(trials: list[TrialResult], threshold: float) -> dict[str, Any]:
    """`{"n_weak_passes", "weak_passes": [{"task", "trial", "reasons"}]}` over passing trials."""
    weak = [
        {"task": task_key(t), "trial": t.trial, "reasons": r}
        for t in trials
        if (r := weak_pass_reasons(t, threshold))
    ]
    return {"n_weak_passes": len(weak), "weak_passes": weak}


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of every process it waited for, recursively (a
    sub-run's pytest, its workers, their scorers and harness processes, an editor): `resource.getrusage`
    of `RUSAGE_SELF` plus `RUSAGE_CHILDREN`. A process still running, or killed after its parent ended
    (reaped by init), is not counted. 0.0 where `resource` does not exist (Windows)."""
    try:
        import resource
    except ImportError:
        return 0.0
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
